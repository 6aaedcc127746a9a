//! Sending one request to an origin and reading its response.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Request, StatusCode, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use trove_http::content_length;

use crate::destination::Reach;
use crate::metrics::Metrics;
use crate::origin::error::Failed;
pub use crate::origin::error::OriginError;
use crate::origin::interim::Interim;
use crate::origin::pool::{Pool, PooledConn};
use crate::origin::request_body::OriginRequestBody;
use crate::upstream::{Upstream, Upstreams};

/// An origin's response head, with its body still to read.
pub struct OriginResponse {
    pub status: StatusCode,
    pub version: Version,
    pub headers: HeaderMap,
    pub upstream: Upstream,
    pub request_time: SystemTime,
    pub response_time: SystemTime,
    body: Incoming,
    /// The body length as declared when the head arrived (hyper's size hint shrinks as the
    /// body is read, so it is taken once, here).
    declared_length: Option<u64>,
    conn: Option<PooledConn>,
    pool: Arc<Pool>,
    metrics: Arc<Metrics>,
    body_timeout: Duration,
}

impl std::fmt::Debug for OriginResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OriginResponse")
            .field("status", &self.status)
            .field("upstream", &self.upstream)
            .finish()
    }
}

impl OriginResponse {
    /// The whole body's length as the origin declared it, if it did; the same however much
    /// of the body has been read.
    pub fn content_length(&self) -> Option<u64> {
        self.declared_length
    }

    /// A response read on a connection that is not the pool's (an upgrade the origin
    /// declined, `crate::upgrade`): the connection closes with it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn unpooled(
        parts: http::response::Parts,
        body: Incoming,
        upstream: Upstream,
        request_time: SystemTime,
        pool: &Arc<Pool>,
        metrics: &Arc<Metrics>,
        body_timeout: Duration,
    ) -> OriginResponse {
        let declared_length = http_body::Body::size_hint(&body).exact();
        OriginResponse {
            status: parts.status,
            version: parts.version,
            headers: parts.headers,
            upstream,
            request_time,
            response_time: SystemTime::now(),
            body,
            declared_length,
            conn: None,
            pool: Arc::clone(pool),
            metrics: Arc::clone(metrics),
            body_timeout,
        }
    }

    /// The next body bytes; `Ok(None)` at the end, after which the connection goes back to
    /// the pool.
    pub async fn next_chunk(&mut self) -> Result<Option<Bytes>, OriginError> {
        loop {
            let frame = tokio::time::timeout(self.body_timeout, self.body.frame())
                .await
                .map_err(|_| OriginError::BodyTimeout)?;
            match frame {
                None => {
                    if let Some(conn) = self.conn.take() {
                        self.pool.checkin(conn);
                    }
                    return Ok(None);
                }
                Some(Err(e)) => {
                    self.conn = None;
                    return Err(if e.is_timeout() {
                        OriginError::BodyTimeout
                    } else {
                        OriginError::Closed
                    });
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        if data.is_empty() {
                            continue;
                        }
                        self.metrics
                            .bytes_from_origins
                            .fetch_add(data.len() as u64, Ordering::Relaxed);
                        return Ok(Some(data));
                    }
                    // Trailers: dropped.
                }
            }
        }
    }
}

/// What to send: everything but the body, which comes separately.
pub struct OriginRequest {
    pub head: http::request::Parts,
    pub body: OriginRequestBody,
    /// True when the request can be sent again on a fresh connection if a pooled one turns
    /// out to be dead (idempotent, no streamed body).
    pub retryable: bool,
    /// Where the origin's interim (1xx) responses go, for a client that may get them.
    pub interim: Option<Arc<Interim>>,
}

/// Sends `req` to the first upstream that accepts a connection; `upstreams` are tried in
/// order on connect failures. `reach` says whom the connection is for, if the client chose
/// the upstream (the destination guard checks it then).
pub async fn send(
    pool: &Arc<Pool>,
    metrics: &Arc<Metrics>,
    upstreams: &Upstreams,
    reach: &Reach,
    req: OriginRequest,
    response_timeout: Duration,
    body_timeout: Duration,
) -> Result<OriginResponse, Failed> {
    let OriginRequest {
        head,
        body,
        retryable,
        interim,
    } = req;
    let mut body = Some(body);
    let mut last_err = Failed::from(OriginError::Protocol("no upstream"));
    for upstream in upstreams.iter() {
        let failed = |error| Failed {
            error,
            upstream: Some(upstream.clone()),
        };
        for attempt in 0..2 {
            let mut conn = match pool.checkout(upstream, upstreams.chooser(), reach).await {
                Ok(c) => c,
                Err(
                    e @ (OriginError::Connect(_)
                    | OriginError::Resolve(_)
                    | OriginError::ResolveTimeout
                    | OriginError::ConnectTimeout
                    | OriginError::Tls(_)),
                ) => {
                    last_err = failed(e);
                    break; // next upstream
                }
                Err(e) => return Err(failed(e)),
            };
            let this_body = if retryable {
                OriginRequestBody::empty()
            } else {
                match body.take() {
                    Some(b) => b,
                    None => return Err(last_err),
                }
            };
            let mut request = Request::from_parts(head.clone(), this_body);
            if let Some(interim) = &interim {
                interim.attach(&mut request);
            }
            let request_time = SystemTime::now();
            metrics.origin_requests.fetch_add(1, Ordering::Relaxed);
            let reused = conn.reused;
            let result =
                tokio::time::timeout(response_timeout, conn.sender.send_request(request)).await;
            match result {
                Err(_) => return Err(failed(OriginError::ResponseTimeout)),
                Ok(Err(e)) => {
                    let err = OriginError::from_hyper(e);
                    // A pooled connection may have been closed by the origin just as we
                    // sent: try once more on a fresh one when that is safe.
                    if reused && retryable && attempt == 0 && matches!(err, OriginError::Closed) {
                        continue;
                    }
                    return Err(failed(err));
                }
                Ok(Ok(resp)) => {
                    let (mut parts, incoming) = resp.into_parts();
                    // hyper takes lengths up to 2^64 − 3 and keeps the field as it came
                    // (`3, 3`, `003`): hold it to the proxy's rule, and keep only the value
                    // judged, so a lying origin gets its client a 502, not a wrong framing.
                    if parts.headers.contains_key(header::CONTENT_LENGTH) {
                        match content_length::parse_all(
                            parts.headers.get_all(header::CONTENT_LENGTH),
                        ) {
                            Ok(Some(n)) => {
                                parts
                                    .headers
                                    .insert(header::CONTENT_LENGTH, HeaderValue::from(n));
                            }
                            Ok(None) => {}
                            Err(e) => return Err(failed(OriginError::Protocol(e.as_str()))),
                        }
                    }
                    let declared_length = http_body::Body::size_hint(&incoming).exact();
                    return Ok(OriginResponse {
                        status: parts.status,
                        version: parts.version,
                        headers: parts.headers,
                        upstream: upstream.clone(),
                        request_time,
                        response_time: SystemTime::now(),
                        body: incoming,
                        declared_length,
                        conn: Some(conn),
                        pool: Arc::clone(pool),
                        metrics: Arc::clone(metrics),
                        body_timeout,
                    });
                }
            }
        }
    }
    Err(last_err)
}

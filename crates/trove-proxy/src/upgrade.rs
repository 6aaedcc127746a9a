//! Upgrades (RFC 9110 §7.8): a client asking to switch protocols (WebSocket, above all) is
//! passed to the origin on a connection of its own, and when the origin answers `101
//! Switching Protocols` the two connections become a tunnel, bytes copied both ways with
//! the same idle timeout as a CONNECT tunnel (`crate::tunnel::relay`).
//!
//! The cache takes no part: an upgrade request is neither looked up nor stored. The origin
//! connection is opened for it alone (never the pool's, whose connections stay HTTP; the
//! destination guard checks it like any other a client chose) and handed to hyper with
//! upgrades enabled, so the 101 head is parsed by the same client as every response and any
//! bytes the origin sent after it reach the client. An origin that declines the upgrade
//! answers as to any request: that response is passed on, and its connection closes with it.

use std::sync::Arc;
use std::time::SystemTime;

use http::header::{self, HeaderValue};
use http::{HeaderMap, Request, StatusCode, Version};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use trove_cache::{Conditionals, Outcome};

use crate::cache::target::Target;
use crate::client::head::{Framing, RequestHead};
use crate::client::info::ConnInfo;
use crate::destination::Reach;
use crate::origin::{OriginError, OriginRequestBody, OriginResponse};
use crate::reply::{PassBody, Reply, ReplyBody};
use crate::state::Shared;

/// The protocols `head` asks to switch to, when it is an upgrade this proxy passes on: an
/// HTTP/1.1 request without a body whose `Connection` and `Upgrade` fields ask for one
/// (`trove_http::connection::upgrade_protocols`). Anything else has its `Upgrade` dropped
/// as the connection-specific field it is.
pub fn requested(head: &RequestHead) -> Option<String> {
    if head.version != Version::HTTP_11
        || head.method == http::Method::CONNECT
        || !matches!(head.framing, Framing::None)
    {
        return None;
    }
    trove_http::connection::upgrade_protocols(&head.headers)
}

/// An origin that switched protocols.
pub struct Switched {
    /// The 101's fields, to send to the client.
    pub headers: HeaderMap,
    /// The origin connection, now speaking the new protocol.
    pub io: TokioIo<hyper::upgrade::Upgraded>,
    /// The origin (`host:port`), for the log.
    pub peer: String,
}

/// What came of asking the origin to upgrade.
pub enum Started {
    Switched(Box<Switched>),
    /// The origin declined (its response) or could not be reached (an error): a reply to
    /// write as any other, after which the client connection closes.
    Reply(Box<Reply>),
}

/// Sends the upgrade request `head` (asking for `protocols`) to `target`'s origin and waits
/// for its answer, within the origin connect and response timeouts.
pub async fn start(
    shared: &Arc<Shared>,
    head: &RequestHead,
    target: &Target,
    info: ConnInfo,
    protocols: &str,
) -> Started {
    let class = shared.destinations.class(info.peer.ip());
    let checked = match crate::cache::check_destination(shared, target, class).await {
        Ok(checked) => checked,
        Err(refused) => return Started::Reply(Box::new(refused.closing())),
    };
    let reach = Reach { class, checked };
    match exchange(shared, head, target, info, protocols, &reach).await {
        Ok(Exchange::Switched(s)) => Started::Switched(s),
        Ok(Exchange::Declined(resp)) => Started::Reply(Box::new(declined(shared, *resp))),
        Err((e, upstream)) => {
            tracing::info!(origin = %upstream, error = %e, "upgrade: origin failed");
            let mut reply = Reply::simple(
                e.status(),
                Outcome::Miss,
                &format!("the origin {upstream} could not be reached: {e}"),
            );
            reply.peer = Some(upstream);
            Started::Reply(Box::new(reply.closing()))
        }
    }
}

enum Exchange {
    Switched(Box<Switched>),
    Declined(Box<OriginResponse>),
}

async fn exchange(
    shared: &Arc<Shared>,
    head: &RequestHead,
    target: &Target,
    info: ConnInfo,
    protocols: &str,
    reach: &Reach,
) -> Result<Exchange, (OriginError, String)> {
    let Some(upstream) = target.upstreams.iter().next().cloned() else {
        return Err((OriginError::Protocol("no upstream"), "-".into()));
    };
    let peer = upstream.authority();
    let fail = |e: OriginError| (e, peer.clone());
    let stream = shared
        .pool
        .open_unpooled(&upstream, target.upstreams.chooser(), reach)
        .await
        .map_err(fail)?;
    let (mut sender, conn) = http1::Builder::new()
        .max_buf_size(256 * 1024)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|_| fail(OriginError::Protocol("handshake failed")))?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let host = HeaderValue::from_str(target.url.authority())
        .map_err(|_| fail(OriginError::Protocol("cannot build request")))?;
    let mut fields = crate::cache::headers::to_origin(
        shared.request_via(head.version),
        &head.headers,
        host,
        info.mode,
        crate::cache::headers::Client::of(info),
        Conditionals::Keep,
        None,
    );
    let protocols = HeaderValue::from_str(protocols)
        .map_err(|_| fail(OriginError::Protocol("cannot build request")))?;
    fields.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    fields.insert(header::UPGRADE, protocols);
    let mut builder = Request::builder()
        .method(head.method.clone())
        .uri(target.url.path_and_query())
        .version(Version::HTTP_11);
    if let Some(h) = builder.headers_mut() {
        *h = fields;
    }
    let req = builder
        .body(OriginRequestBody::empty())
        .map_err(|_| fail(OriginError::Protocol("cannot build request")))?;
    let t = &shared.settings.timeouts;
    let request_time = SystemTime::now();
    shared
        .metrics
        .origin_requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let resp = tokio::time::timeout(t.origin_response, sender.send_request(req))
        .await
        .map_err(|_| fail(OriginError::ResponseTimeout))?
        .map_err(|e| fail(OriginError::from_hyper(e)))?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let (parts, body) = resp.into_parts();
        return Ok(Exchange::Declined(Box::new(OriginResponse::unpooled(
            parts,
            body,
            upstream,
            request_time,
            &shared.pool,
            &shared.metrics,
            t.origin_body,
        ))));
    }
    let mut headers = resp.headers().clone();
    let upgrade = headers.get(header::UPGRADE).cloned();
    trove_http::connection::strip_connection_fields(&mut headers);
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    if let Some(u) = upgrade {
        headers.insert(header::UPGRADE, u);
    }
    headers.append(header::VIA, shared.via.clone());
    let upgraded = tokio::time::timeout(t.origin_response, hyper::upgrade::on(resp))
        .await
        .map_err(|_| fail(OriginError::ResponseTimeout))?
        .map_err(|_| fail(OriginError::Closed))?;
    Ok(Exchange::Switched(Box::new(Switched {
        headers,
        io: TokioIo::new(upgraded),
        peer,
    })))
}

/// The origin's answer to an upgrade it did not make, passed on uncached, the client
/// connection closing after it (the origin's does).
fn declined(shared: &Shared, resp: OriginResponse) -> Reply {
    let headers = trove_cache::respond::clean_response_headers(
        &resp.headers,
        &shared.via,
        resp.response_time,
    );
    let peer = Some(resp.upstream.authority());
    let status = resp.status;
    let body = if status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        ReplyBody::Empty {
            content_length: None,
        }
    } else {
        ReplyBody::Origin(Box::new(PassBody {
            resp,
            abort: shared.settings.cache.abort.policy(),
            metrics: Arc::clone(&shared.metrics),
        }))
    };
    Reply {
        status,
        headers,
        wire: None,
        body,
        outcome: Outcome::Miss,
        peer,
        close: true,
    }
}

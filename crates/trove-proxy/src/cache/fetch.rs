//! Going to the origin: building the request, and on the way back either storing the
//! response while streaming it (the Store step) or passing it through.

use std::sync::Arc;
use std::time::SystemTime;

use http::header;
use http::{HeaderMap, Method, Request, StatusCode, Version};
use trove_http::{storability, variant_key, NotStorable, Policy, Vary};
use trove_store::{Body, BodyError, MemoryStore, Object, ObjectHead};

use crate::cache::target::Target;
use crate::cache::{headers, partial, prepare};
use crate::client::head::RequestHead;
use crate::origin::{self, OriginError, OriginRequest, OriginRequestBody, OriginResponse};
use crate::settings::Mode;
use crate::state::Shared;

/// Every this many bytes the store re-reads a growing object's size.
const RECHARGE_EVERY: u64 = 1 << 20;

/// Sends a request for `target` to its origin. With `strip_conditionals` the client's own
/// conditional and range fields are removed; `extra` fields (a cache validation) are added.
#[allow(clippy::too_many_arguments)]
pub async fn send(
    shared: &Shared,
    req: &RequestHead,
    target: &Target,
    mode: Mode,
    client_ip: std::net::IpAddr,
    strip_conditionals: bool,
    extra: Option<HeaderMap>,
    body: OriginRequestBody,
    retryable: bool,
) -> Result<OriginResponse, OriginError> {
    let mut h = headers::to_origin(
        shared,
        &req.headers,
        &target.host,
        mode,
        client_ip,
        strip_conditionals,
    );
    if let Some(extra) = extra {
        for (k, v) in extra.iter() {
            h.insert(k.clone(), v.clone());
        }
    }
    let mut builder = Request::builder()
        .method(req.method.clone())
        .uri(target.path.as_str())
        .version(Version::HTTP_11);
    if let Some(hm) = builder.headers_mut() {
        *hm = h;
    }
    let (head, _) = builder
        .body(())
        .map_err(|_| OriginError::Protocol("cannot build request"))?
        .into_parts();
    let Ok(_slot) = Arc::clone(&shared.origin_slots).try_acquire_owned() else {
        shared
            .metrics
            .shed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return Err(OriginError::PoolExhausted);
    };
    let t = &shared.settings.timeouts;
    let result = origin::send(
        &shared.pool,
        &shared.metrics,
        &target.upstreams,
        OriginRequest {
            head,
            body,
            retryable,
        },
        t.origin_response,
        t.origin_body,
    )
    .await;
    if result.is_err() {
        shared
            .metrics
            .origin_errors
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    result
}

/// Whether (and why not) an origin response to `req` may be stored.
pub fn may_store(
    shared: &Shared,
    policy: &Policy,
    req: &RequestHead,
    resp: &OriginResponse,
) -> Result<(), NotStorable> {
    if req.method != Method::GET {
        return Err(NotStorable::Method);
    }
    storability(
        policy,
        &req.method,
        &req.headers,
        resp.status,
        &resp.headers,
    )?;
    if resp.status == StatusCode::PARTIAL_CONTENT
        && !partial::storable_206(&resp.headers, resp.content_length())
    {
        // Only single ranges of a known total length are kept (RFC 9111 §3.3).
        return Err(NotStorable::Status);
    }
    if resp
        .content_length()
        .is_some_and(|n| n > shared.store.max_object())
    {
        return Err(NotStorable::Status);
    }
    Ok(())
}

/// Starts storing `resp`: the object enters the store now, with a body that a background
/// task fills from the origin, so any number of clients can read it while it arrives.
/// Returns the response back if the store would not take it.
pub fn store(
    shared: &Shared,
    policy: &Policy,
    req: &RequestHead,
    target: &Target,
    mut resp: OriginResponse,
) -> Result<Arc<Object>, Box<OriginResponse>> {
    let headers = headers::from_origin(shared, &resp.headers, resp.response_time);
    let vary = Vary::from_headers(&headers);
    let mut variant = variant_key(&vary, &req.headers);
    if resp.status == StatusCode::PARTIAL_CONTENT {
        variant.push_str(&partial::variant_suffix(&headers));
    }
    // Only the selecting fields of the request are kept (RFC 9111 §4.1 needs nothing else).
    let mut request_headers = HeaderMap::new();
    if let Vary::Fields(names) = &vary {
        for name in names {
            for v in req.headers.get_all(name) {
                request_headers.append(name.clone(), v.clone());
            }
        }
    }
    // A 206's length is that of its range, whatever the origin declares or omits.
    let expected = match partial::stored_range(&headers) {
        Some(r) if resp.status == StatusCode::PARTIAL_CONTENT => Some(r.len()),
        _ => resp.content_length(),
    };
    let body = Body::new(expected);
    let mut head = ObjectHead {
        status: resp.status,
        headers,
        request_headers,
        request_time: resp.request_time,
        response_time: resp.response_time,
        prepared: Default::default(),
    };
    prepare::prepare(policy, &mut head);
    let obj = Object::new(target.key.clone(), variant, head, Arc::clone(&body));
    let Some(obj) = shared.store.insert(obj) else {
        return Err(Box::new(resp));
    };
    let store = Arc::clone(&shared.store);
    let stored = Arc::clone(&obj);
    let read_ahead = shared.settings.cache.read_ahead;
    tokio::spawn(async move {
        fill(&mut resp, &body, &store, &stored, read_ahead).await;
    });
    Ok(obj)
}

/// Copies the origin body into the stored body. Runs to the end even if the client that
/// asked has gone, because the object is being stored; if it outgrows the store it is
/// dropped from the store and from then on read only as fast as its readers (bounded
/// read-ahead), stopping when none is left.
async fn fill(
    resp: &mut OriginResponse,
    body: &Arc<Body>,
    store: &MemoryStore,
    obj: &Arc<Object>,
    read_ahead: u64,
) {
    let max = store.max_object();
    let mut since_recharge = 0u64;
    loop {
        match resp.next_chunk().await {
            Ok(Some(b)) => {
                let n = b.len() as u64;
                if !body.is_bounded() && body.len() + n > max {
                    store.remove_object(obj);
                    body.set_bounded(read_ahead);
                }
                if body.append(b).await.is_err() {
                    body.finish(Err(BodyError::NoReaders));
                    return;
                }
                since_recharge += n;
                if since_recharge >= RECHARGE_EVERY && !body.is_bounded() {
                    since_recharge = 0;
                    if store.holds(obj) {
                        store.recharge(obj);
                    } else {
                        // Purged, evicted or replaced mid-transfer: nobody new can find it,
                        // so read no faster than the clients still reading it.
                        body.set_bounded(read_ahead);
                    }
                }
            }
            Ok(None) => {
                if body.expected_len().is_some_and(|n| n != body.len()) {
                    // Shorter than promised: never keep it as complete.
                    body.finish(Err(BodyError::Incomplete));
                    store.remove_object(obj);
                    return;
                }
                body.finish(Ok(()));
                if !body.is_bounded() {
                    store.recharge(obj);
                }
                return;
            }
            Err(_) => {
                body.finish(Err(BodyError::Incomplete));
                store.remove_object(obj);
                return;
            }
        }
    }
}

/// Reads an origin body to its end and drops it (a 304's, say), so the connection can be
/// reused.
pub async fn discard(mut resp: OriginResponse) {
    let mut n = 0;
    while let Ok(Some(b)) = resp.next_chunk().await {
        n += b.len();
        if n > 64 * 1024 {
            break;
        }
    }
}

/// The time now, the one place the request path reads the wall clock for caching rules.
pub fn now() -> SystemTime {
    SystemTime::now()
}

/// The `Content-Length` an origin declared in `h`, if valid.
pub fn content_length_header(h: &HeaderMap) -> Option<u64> {
    h.get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::client::head::parse_length)
}

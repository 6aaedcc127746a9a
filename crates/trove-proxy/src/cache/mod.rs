//! The request state machine. One function per step, in the order a request meets them:
//!
//! ```text
//! resolve ─► (PURGE) purge
//!         ─► (unsafe / uncacheable method) pass ─► invalidate ─► deliver origin response
//!         ─► (GET / HEAD) lookup ─► Fresh          ─► hit ─────────────► deliver stored
//!                                ─► StaleAllowed   ─► hit (+ background revalidate)
//!                                ─► MustValidate   ─► revalidate ─► 304: freshen ─► deliver stored
//!                                                                ─► 200: store ──► deliver stored
//!                                                                ─► error: stale-if-error or error
//!                                ─► Miss           ─► collapse ─► miss ─► store ─► deliver stored
//!                                                                      ─► uncacheable ─► deliver origin response
//! ```
//!
//! Every path ends in a [`Reply`] whose [`Outcome`] the access log and metrics print.

pub mod collapse;
mod deliver;
mod fetch;
mod headers;
mod lookup;
mod partial;
mod pass_memo;
mod prepare;
mod range;
pub mod target;

use std::net::IpAddr;
use std::sync::Arc;

use http::header::{self, HeaderValue};
use http::{Method, StatusCode, Version};
use tokio::io::AsyncRead;
use trove_http::{stale_if_error_allows, CacheControl, Policy, Reuse, StaleReason, StoredResponse};
use trove_store::Object;

use crate::client::body::RequestBody;
use crate::client::conn::ConnInfo;
use crate::client::head::{Framing, RequestHead};
use crate::origin::{body_channel, OriginError, OriginRequestBody, OriginResponse};
use crate::outcome::Outcome;
use crate::reply::{Reply, ReplyBody};
use crate::settings::Mode;
use crate::state::Shared;
use collapse::{Collapsed, Leader, Role};
use lookup::Lookup;
use target::Target;

/// The URL to print in the access log.
pub fn log_url(req: &RequestHead, mode: Mode) -> String {
    if req.target.scheme().is_some() || mode == Mode::Forward {
        return req.target.to_string();
    }
    let host = req
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("-");
    format!("http://{host}{}", req.target)
}

/// Everything a step needs to know about the request.
struct Ctx<'a> {
    shared: &'a Arc<Shared>,
    req: &'a RequestHead,
    target: Target,
    mode: Mode,
    client_ip: IpAddr,
    policy: &'a Policy,
}

/// Handles one request and returns the reply to write.
pub async fn handle<R: AsyncRead + Unpin>(
    shared: &Arc<Shared>,
    req: &RequestHead,
    info: ConnInfo,
    body: &mut RequestBody<'_, R>,
) -> Reply {
    if headers::is_loop(shared, &req.headers) {
        return Reply::simple(
            StatusCode::LOOP_DETECTED,
            Outcome::None,
            "forwarding loop detected",
        );
    }
    let target = match target::resolve(shared, req, info.mode) {
        Ok(t) => t,
        Err(reply) => return *reply,
    };
    let cx = Ctx {
        shared,
        req,
        target,
        mode: info.mode,
        client_ip: info.peer.ip(),
        policy: shared.policy(info.mode),
    };
    if req.method.as_str() == "PURGE" {
        return purge(&cx);
    }
    if req.method == Method::CONNECT {
        // Tunnels are a forward-proxy service; never pass CONNECT on to an origin.
        return Reply::simple(
            StatusCode::METHOD_NOT_ALLOWED,
            Outcome::None,
            "CONNECT is not served here",
        );
    }
    if (req.method == Method::GET || req.method == Method::HEAD) && body.is_done() {
        return cacheable(&cx).await;
    }
    pass(&cx, body).await
}

/// Lookup, then the step its result calls for.
async fn cacheable(cx: &Ctx<'_>) -> Reply {
    let now = fetch::now();
    let req_cc = CacheControl::from_request(&cx.req.headers);
    let mut found = lookup::lookup(&cx.shared.store, &cx.target.key, cx.req, cx.policy, now);
    if matches!(found, Lookup::VaryMiss)
        && partial::combine(&cx.shared.store, cx.policy, &cx.target.key)
    {
        // Stored pieces were combined (RFC 9111 §3.4): look again.
        found = lookup::lookup(&cx.shared.store, &cx.target.key, cx.req, cx.policy, now);
    }
    match found {
        Lookup::Found(obj, Reuse::Fresh { .. }) => hit(cx, &obj, Outcome::MemHit, "hit"),
        Lookup::Found(obj, Reuse::StaleAllowed { reason, .. }) => {
            if reason == StaleReason::StaleWhileRevalidate {
                background_revalidate(cx, &obj);
            }
            let detail = format!("hit; fwd=stale; detail={}", reason.as_str());
            hit(cx, &obj, Outcome::StaleHit, &detail)
        }
        Lookup::Found(obj, Reuse::MustValidate { reason }) => {
            if req_cc.only_if_cached {
                return only_if_cached_miss();
            }
            revalidate(cx, obj, reason.as_str()).await
        }
        Lookup::Found(_, Reuse::Unusable { .. }) | Lookup::Miss | Lookup::VaryMiss => {
            if req_cc.only_if_cached {
                return only_if_cached_miss();
            }
            miss(cx).await
        }
    }
}

fn only_if_cached_miss() -> Reply {
    // RFC 9111 §5.2.1.7: no stored response satisfies the request.
    Reply::simple(
        StatusCode::GATEWAY_TIMEOUT,
        Outcome::None,
        "not in cache (only-if-cached)",
    )
}

/// Serves a stored response.
fn hit(cx: &Ctx<'_>, obj: &Arc<Object>, outcome: Outcome, detail: &str) -> Reply {
    cx.shared.store.touch(obj);
    deliver::stored(obj, cx.req, fetch::now(), outcome, detail, None)
}

/// A miss: join a fetch already under way for this key, or lead one.
async fn miss(cx: &Ctx<'_>) -> Reply {
    if pass_memo::remembered(cx.shared, &cx.target.key) {
        return miss_uncacheable(cx).await;
    }
    let mut leader: Option<Leader> = None;
    // Only GETs collapse: a HEAD's response is never stored, so it can't feed waiters.
    let role = (cx.req.method == Method::GET).then(|| collapse::join(cx.shared, &cx.target.key));
    match role {
        None => {}
        Some(Role::Leader(l)) => leader = Some(l),
        Some(Role::Follower(f)) => {
            let waited =
                tokio::time::timeout(cx.shared.settings.timeouts.origin_response, f.wait()).await;
            if let Ok(Collapsed::Stored(obj)) = waited {
                let stored = stored_view(&obj);
                let r = trove_http::reuse(
                    cx.policy,
                    &stored,
                    &cx.req.method,
                    &cx.req.headers,
                    fetch::now(),
                );
                if matches!(r, Reuse::Fresh { .. }) {
                    return hit(cx, &obj, Outcome::CollapsedHit, "hit; detail=collapsed");
                }
            }
            // The leader's response can't be shared with this request: fetch our own.
        }
    }
    let resp = fetch_get(cx, true, None).await;
    match resp {
        Ok(resp) => from_origin(cx, resp, leader, Outcome::Miss, "fwd=miss"),
        Err(e) => origin_error(e, Outcome::Miss),
    }
}

/// A miss for a URL whose last response could not be stored: no collapsing, and the
/// client's Range and validators go to the origin, so a resumed download of a file too big
/// to cache fetches only the missing part and a browser's revalidation costs a 304.
async fn miss_uncacheable(cx: &Ctx<'_>) -> Reply {
    let resp = fetch_get(cx, false, None).await;
    match resp {
        Ok(resp) => from_origin(cx, resp, None, Outcome::Miss, "fwd=miss"),
        Err(e) => origin_error(e, Outcome::Miss),
    }
}

/// A bodyless request for the target to its origin; `strip_conditionals` removes the
/// client's own conditional and range fields, `extra` adds a cache validation.
async fn fetch_get(
    cx: &Ctx<'_>,
    strip_conditionals: bool,
    extra: Option<http::HeaderMap>,
) -> Result<OriginResponse, OriginError> {
    fetch::send(
        cx.shared,
        cx.req,
        &cx.target,
        cx.mode,
        cx.client_ip,
        strip_conditionals,
        extra,
        OriginRequestBody::empty(),
        true,
    )
    .await
}

/// The Store-or-pass step for a response fresh from the origin.
fn from_origin(
    cx: &Ctx<'_>,
    resp: OriginResponse,
    leader: Option<Leader>,
    outcome: Outcome,
    fwd: &str,
) -> Reply {
    let peer = Some(resp.upstream.authority());
    match fetch::may_store(cx.shared, cx.policy, cx.req, &resp) {
        Ok(()) => match fetch::store(cx.shared, cx.policy, cx.req, &cx.target, resp) {
            Ok(obj) => {
                pass_memo::forget(cx.shared, &cx.target.key);
                if let Some(l) = leader {
                    l.publish(Collapsed::Stored(Arc::clone(&obj)));
                }
                let detail = format!("{fwd}; fwd-status={}; stored", obj.head.status.as_u16());
                deliver::stored(&obj, cx.req, fetch::now(), outcome, &detail, peer)
            }
            Err(resp) => {
                pass_memo::remember(cx.shared, &cx.target.key);
                pass_through(cx, *resp, outcome, &format!("{fwd}; detail=too-large"))
            }
        },
        Err(why) => {
            drop(leader);
            // A 304 or 206 answering the client's own conditional or range says nothing
            // about whether the whole response could be stored.
            if cx.req.method == Method::GET
                && resp.status != StatusCode::NOT_MODIFIED
                && resp.status != StatusCode::PARTIAL_CONTENT
                && why != trove_http::NotStorable::RequestNoStore
            {
                pass_memo::remember(cx.shared, &cx.target.key);
            }
            pass_through(
                cx,
                resp,
                outcome,
                &format!("{fwd}; detail={}", why.as_str()),
            )
        }
    }
}

/// Sends an origin response on without storing it.
fn pass_through(cx: &Ctx<'_>, resp: OriginResponse, outcome: Outcome, detail: &str) -> Reply {
    let mut headers = headers::from_origin(cx.shared, &resp.headers, resp.response_time);
    let upstream = resp.headers.get(headers::CACHE_STATUS).cloned();
    headers::set_cache_status(&mut headers, detail, upstream.as_ref());
    let peer = Some(resp.upstream.authority());
    let status = resp.status;
    let no_body = cx.req.method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let body = if no_body {
        let content_length = fetch::content_length_header(&resp.headers);
        tokio::spawn(fetch::discard(resp));
        ReplyBody::Empty { content_length }
    } else {
        ReplyBody::Origin(Box::new(resp))
    };
    Reply {
        status,
        headers,
        wire: None,
        body,
        outcome,
        peer,
        close: false,
    }
}

fn origin_error(e: OriginError, outcome: Outcome) -> Reply {
    tracing::debug!(error = %e, "origin request failed");
    let outcome = if outcome == Outcome::RefreshModified {
        Outcome::RefreshFailErr
    } else {
        outcome
    };
    let mut r = Reply::simple(e.status(), outcome, &e.to_string());
    r.headers.insert(
        headers::CACHE_STATUS,
        headers::cache_status(&format!("fwd=miss; detail={}", error_detail(&e))),
    );
    if e.status() == StatusCode::SERVICE_UNAVAILABLE {
        r.headers
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

/// A stored response needed validating and the origin could not be reached: RFC 9111
/// §5.2.2.2 and §4.2.4 ask for a generated error, 504 by preference, instead of the stale one.
fn disconnected(e: OriginError) -> Reply {
    let mut r = origin_error(e, Outcome::RefreshFailErr);
    r.status = StatusCode::GATEWAY_TIMEOUT;
    r
}

fn error_detail(e: &OriginError) -> &'static str {
    match e {
        OriginError::Connect(_) => "connection-refused",
        OriginError::ConnectTimeout => "connection-timeout",
        OriginError::PoolExhausted => "overloaded",
        OriginError::ResponseTimeout | OriginError::BodyTimeout => "timeout",
        OriginError::Closed => "connection-closed",
        OriginError::Protocol(_) => "http-protocol-error",
    }
}

fn stored_view(obj: &Object) -> StoredResponse<'_> {
    StoredResponse {
        method: &Method::GET,
        status: obj.head.status,
        headers: &obj.head.headers,
        request_headers: &obj.head.request_headers,
        request_time: obj.head.request_time,
        response_time: obj.head.response_time,
    }
}

/// Revalidate a stored response with a conditional request (RFC 9111 §4.3).
async fn revalidate(cx: &Ctx<'_>, obj: Arc<Object>, reason: &str) -> Reply {
    let cond = trove_http::validation::conditional_headers(&obj.head.headers);
    let client_forced = matches!(reason, "request-no-cache" | "request-max-age");
    if cond.is_empty() {
        // Nothing to validate with: fetch anew.
        let outcome = if client_forced {
            Outcome::ClientRefreshMiss
        } else {
            Outcome::RefreshModified
        };
        return refetch(cx, Some(obj), outcome).await;
    }
    let resp = fetch_get(cx, true, Some(cond)).await;
    let now = fetch::now();
    match resp {
        Err(e) => {
            if stale_if_error_allows(cx.policy, &stored_view(&obj), &cx.req.headers, now) {
                return hit(
                    cx,
                    &obj,
                    Outcome::RefreshFailOld,
                    "hit; fwd=stale; detail=stale-if-error",
                );
            }
            disconnected(e)
        }
        Ok(resp) if resp.status == StatusCode::NOT_MODIFIED => {
            let peer = Some(resp.upstream.authority());
            if answers(&obj, &resp) {
                let fresh = freshen(cx.shared, cx.policy, &obj, &resp);
                tokio::spawn(fetch::discard(resp));
                let detail = "fwd=stale; fwd-status=304";
                return deliver::stored(
                    &fresh,
                    cx.req,
                    now,
                    Outcome::RefreshUnmodified,
                    detail,
                    peer,
                );
            }
            // The 304 does not match what we hold (§4.3.4): fetch the whole response.
            tokio::spawn(fetch::discard(resp));
            refetch(cx, Some(obj), Outcome::RefreshModified).await
        }
        Ok(resp)
            if resp.status.is_server_error()
                && stale_if_error_allows(cx.policy, &stored_view(&obj), &cx.req.headers, now) =>
        {
            tokio::spawn(fetch::discard(resp));
            hit(
                cx,
                &obj,
                Outcome::RefreshFailOld,
                "hit; fwd=stale; detail=stale-if-error",
            )
        }
        Ok(resp) => {
            let outcome = if client_forced {
                Outcome::ClientRefreshMiss
            } else {
                Outcome::RefreshModified
            };
            from_origin(cx, resp, None, outcome, "fwd=stale")
        }
    }
}

/// Fetches the whole response again (no validators to use).
async fn refetch(cx: &Ctx<'_>, stale: Option<Arc<Object>>, outcome: Outcome) -> Reply {
    let resp = fetch_get(cx, true, None).await;
    let now = fetch::now();
    let stale_ok =
        |obj: &Object| stale_if_error_allows(cx.policy, &stored_view(obj), &cx.req.headers, now);
    match resp {
        Ok(resp) if resp.status.is_server_error() && stale.as_deref().is_some_and(stale_ok) => {
            tokio::spawn(fetch::discard(resp));
            let obj = stale.expect("checked above");
            hit(
                cx,
                &obj,
                Outcome::RefreshFailOld,
                "hit; fwd=stale; detail=stale-if-error",
            )
        }
        Ok(resp) => from_origin(cx, resp, None, outcome, "fwd=stale"),
        Err(e) => {
            if let Some(obj) = stale {
                if stale_if_error_allows(
                    cx.policy,
                    &stored_view(&obj),
                    &cx.req.headers,
                    fetch::now(),
                ) {
                    return hit(
                        cx,
                        &obj,
                        Outcome::RefreshFailOld,
                        "hit; fwd=stale; detail=stale-if-error",
                    );
                }
                return disconnected(e);
            }
            origin_error(e, outcome)
        }
    }
}

/// Whether a 304 to our conditional request applies to `obj`, the one response whose
/// validators we sent: by §4.3.4's selection, or, when the origin's 304 carries no
/// validator at all (common in practice), because the request named only this response.
fn answers(obj: &Object, resp: &OriginResponse) -> bool {
    let has_validator =
        resp.headers.contains_key(header::ETAG) || resp.headers.contains_key(header::LAST_MODIFIED);
    trove_http::validation::selects(&obj.head.headers, &resp.headers) || !has_validator
}

/// Merges a 304's fields into the stored response (RFC 9111 §3.2, §4.3.4) and stores the
/// result, sharing the body.
fn freshen(
    shared: &Shared,
    policy: &Policy,
    obj: &Arc<Object>,
    resp: &OriginResponse,
) -> Arc<Object> {
    let update = headers::from_origin(shared, &resp.headers, resp.response_time);
    let mut merged = trove_http::validation::freshen_headers(&obj.head.headers, &update);
    merged.remove(header::CONTENT_LENGTH);
    let mut head = obj.head.clone();
    head.headers = merged;
    head.request_time = resp.request_time;
    head.response_time = resp.response_time;
    prepare::prepare(policy, &mut head);
    let fresh = Object::new(
        obj.key.clone(),
        obj.variant.clone(),
        head,
        Arc::clone(&obj.body),
    );
    shared
        .store
        .insert(fresh)
        .unwrap_or_else(|| Arc::clone(obj))
}

/// stale-while-revalidate: the stale response was served; refresh it in the background,
/// once per key at a time.
fn background_revalidate(cx: &Ctx<'_>, obj: &Arc<Object>) {
    let key = format!("revalidate {}", cx.target.key);
    let Role::Leader(busy) = collapse::join(cx.shared, &key) else {
        return; // already being revalidated
    };
    let shared = Arc::clone(cx.shared);
    let obj = Arc::clone(obj);
    let req = RequestHead {
        method: Method::GET,
        target: cx.req.target.clone(),
        version: Version::HTTP_11,
        headers: cx.req.headers.clone(),
        framing: Framing::None,
        keep_alive: true,
        expect_continue: false,
    };
    let mode = cx.mode;
    let client_ip = cx.client_ip;
    let target = Target {
        key: cx.target.key.clone(),
        upstreams: cx.target.upstreams.clone(),
        host: cx.target.host.clone(),
        path: cx.target.path.clone(),
    };
    tokio::spawn(async move {
        let _busy = busy;
        let cond = trove_http::validation::conditional_headers(&obj.head.headers);
        let Ok(resp) = fetch::send(
            &shared,
            &req,
            &target,
            mode,
            client_ip,
            true,
            Some(cond),
            OriginRequestBody::empty(),
            true,
        )
        .await
        else {
            return;
        };
        if resp.status == StatusCode::NOT_MODIFIED {
            if answers(&obj, &resp) {
                freshen(&shared, shared.policy(mode), &obj, &resp);
            }
            fetch::discard(resp).await;
            return;
        }
        let policy = shared.policy(mode);
        if fetch::may_store(&shared, policy, &req, &resp).is_ok() {
            let _ = fetch::store(&shared, policy, &req, &target, resp);
        } else {
            fetch::discard(resp).await;
        }
    });
}

/// Requests the cache does not answer (unsafe or uncacheable methods): sent on with their
/// body streamed, and stored responses they may have changed invalidated (RFC 9111 §4.4).
async fn pass<R: AsyncRead + Unpin>(cx: &Ctx<'_>, body: &mut RequestBody<'_, R>) -> Reply {
    let len = match cx.req.framing {
        Framing::None => Some(0),
        Framing::Length(n) => Some(n),
        Framing::Chunked => None,
    };
    let (mut tx, origin_body) = if len == Some(0) {
        (None, OriginRequestBody::empty())
    } else {
        let (tx, b) = body_channel(len);
        (Some(tx), b)
    };
    let idempotent = matches!(
        cx.req.method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    );
    let send = fetch::send(
        cx.shared,
        cx.req,
        &cx.target,
        cx.mode,
        cx.client_ip,
        false,
        None,
        origin_body,
        idempotent && tx.is_none(),
    );
    // The pump owns its own sender and drops it when the body ends, which ends the body
    // sent to the origin; `tx` stays here to abort that body if the client's fails.
    let pump_tx = tx.clone();
    let pump = async move {
        let Some(pump_tx) = pump_tx else {
            return Ok(());
        };
        loop {
            match body.next().await {
                Ok(Some(b)) => {
                    if pump_tx.send(Ok(b)).await.is_err() {
                        return Ok(());
                    }
                }
                Ok(None) => {
                    drop(pump_tx);
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
    };
    tokio::pin!(send);
    tokio::pin!(pump);
    // The origin may answer (or fail) before the client has sent the whole body: then stop
    // reading the client rather than wait on it.
    let mut pumped = None;
    let resp = loop {
        tokio::select! {
            r = &mut send => break r,
            p = &mut pump, if pumped.is_none() => {
                match p {
                    Err(e) => {
                        if let Some(tx) = &tx {
                            let _ = tx.try_send(Err(std::io::Error::other(e)));
                        }
                    }
                    // The whole body is on its way: let the channel close.
                    Ok(()) => drop(tx.take()),
                }
                pumped = Some(p);
            }
        }
    };
    if let Some(Err(e)) = pumped {
        cx.shared
            .metrics
            .bad_requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return Reply::simple(StatusCode::BAD_REQUEST, Outcome::None, &e.to_string()).closing();
    }
    let unfinished = pumped.is_none() && tx.is_some();
    if unfinished {
        // Make sure the origin never takes a cut-short body for a complete one.
        if let Some(tx) = &tx {
            let _ = tx.try_send(Err(std::io::Error::other("client body abandoned")));
        }
    }
    let reply = match resp {
        Err(e) => origin_error(e, Outcome::Miss),
        Ok(resp) => {
            invalidate(cx, &resp);
            pass_through(cx, resp, Outcome::Miss, "fwd=method")
        }
    };
    if unfinished {
        reply.closing()
    } else {
        reply
    }
}

/// RFC 9111 §4.4: after a successful unsafe request, drop what is stored for the target
/// and for same-origin Location / Content-Location.
fn invalidate(cx: &Ctx<'_>, resp: &OriginResponse) {
    let Ok(uri) = cx.target.key.parse::<http::Uri>() else {
        return;
    };
    for target in trove_http::invalidate::invalidation_targets(
        &cx.req.method,
        resp.status,
        &uri,
        &resp.headers,
    ) {
        cx.shared.store.remove(&trove_http::key::cache_key(&target));
    }
}

/// `PURGE`: removes every stored variant of the URL, for clients the purge ACL allows.
fn purge(cx: &Ctx<'_>) -> Reply {
    if !cx.shared.purge_acl.allows(cx.client_ip) {
        return Reply::simple(
            StatusCode::FORBIDDEN,
            Outcome::Denied,
            "PURGE not allowed from this address",
        );
    }
    let removed = cx.shared.store.remove(&cx.target.key);
    let (status, text) = if removed > 0 {
        (
            StatusCode::OK,
            format!("purged {removed} stored response(s)"),
        )
    } else {
        (
            StatusCode::NOT_FOUND,
            "nothing stored for this URL".to_string(),
        )
    };
    Reply::simple(status, Outcome::Purge, &text)
}

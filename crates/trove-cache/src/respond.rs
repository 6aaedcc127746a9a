//! The response side of the state machine: once the origin answers (or fails), what to
//! store, what to freshen, what to invalidate, and what the client gets.

use std::sync::Arc;
use std::time::SystemTime;

use http::header;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use trove_http::connection::strip_connection_fields;
use trove_http::policy::{effective_response_directives, EffectiveCacheControl};
use trove_http::{
    disconnected_allows, stale_if_error_allows, storability_parsed, variant_key, NotStorable, Vary,
};
use trove_store::{Body, Object, ObjectHead, Refused};

use crate::cookie::StoreCookies;
use crate::decide::{Fetch, Rules};
use crate::outcome::Outcome;
use crate::request::{Request, ResponseHead};
use crate::status::{CacheStatus, Detail, Fwd, OriginFailure};
use crate::{partial, prepare, stored_view};

/// The header fields of an origin response as stored and sent on: connection-specific
/// fields and framing removed (the front end frames the body itself), `Proxy-Authenticate`
/// removed, `Via` added, `Date` ensured (RFC 9110 §6.6.1, §7.6).
pub fn clean_response_headers(
    origin: &HeaderMap,
    via: &HeaderValue,
    response_time: SystemTime,
) -> HeaderMap {
    let mut h = origin.clone();
    clean_response_headers_in_place(&mut h, via, response_time);
    h
}

/// [`clean_response_headers`] on a head the caller owns, saving a copy (the simulator's
/// driver, which owns each answer, cleans it so on every miss).
pub fn clean_response_headers_in_place(
    h: &mut HeaderMap,
    via: &HeaderValue,
    response_time: SystemTime,
) {
    strip_connection_fields(h);
    // Nearly every answer has a `Date` and neither of the others: one pass over the names
    // it has (a handful) rather than a hashed probe for each of the three.
    let (mut length, mut authenticate, mut date) = (false, false, false);
    for name in h.keys() {
        length |= name == header::CONTENT_LENGTH;
        authenticate |= name == header::PROXY_AUTHENTICATE;
        date |= name == header::DATE;
    }
    if length {
        h.remove(header::CONTENT_LENGTH);
    }
    if authenticate {
        h.remove(header::PROXY_AUTHENTICATE);
    }
    h.append(header::VIA, via.clone());
    if !date {
        trove_http::freshness::ensure_date(h, response_time);
    }
}

/// What to do with an origin's response to a fetch.
#[derive(Debug)]
pub enum OnResponse {
    /// Insert `object` (its body arrives as the origin sends it). The fetching client alone
    /// also gets `leader_fields` (the `Set-Cookie` the cookie policy kept out of the store).
    Store {
        /// Just built: nothing else holds it (see [`trove_store::Storage::insert_shared`]).
        object: Arc<Object>,
        leader_fields: HeaderMap,
        status: CacheStatus,
    },
    /// Send it on without storing. With `remember`, the URL is remembered as uncacheable.
    Pass { status: CacheStatus, remember: bool },
}

/// Whether (and why not) an origin response to `req` may be stored; when it may, the
/// directives that govern it and its `Vary` (read once, for storing it too).
pub fn may_store(
    req: Request<'_>,
    resp: &ResponseHead<'_>,
    rules: Rules<'_>,
    max_object: u64,
) -> Result<(EffectiveCacheControl, Vary), Detail> {
    if *req.method != Method::GET {
        return Err(Detail::NotStorable(NotStorable::Method));
    }
    if resp.status.is_informational() || resp.status == StatusCode::NOT_MODIFIED {
        return Err(Detail::NotStorable(NotStorable::Status));
    }
    let directives = effective_response_directives(rules.policy, resp.headers);
    let vary = Vary::from_headers(resp.headers);
    storability_parsed(
        rules.policy,
        req.method,
        req.headers,
        resp.status,
        resp.headers,
        &directives,
        &vary,
    )
    .map_err(Detail::NotStorable)?;
    if resp.status == StatusCode::PARTIAL_CONTENT
        && !partial::storable_206(resp.headers, resp.content_length)
    {
        // Only single ranges of a known total length are kept (RFC 9111 §3.3).
        return Err(Detail::NotStorable(NotStorable::Status));
    }
    // Only a 206's `Content-Range` is read (looked for on no other answer).
    let range_len = (resp.status == StatusCode::PARTIAL_CONTENT)
        .then(|| partial::stored_range(resp.headers))
        .flatten()
        .map(|r| r.len());
    if resp
        .content_length
        .or(range_len)
        .is_some_and(|n| n > max_object)
    {
        return Err(Detail::TooLarge);
    }
    // The content type matters only to a request the cookie policy would send past the
    // cache (`bypasses` with no type is the policy and the request's `Cookie` alone).
    if rules.cookies.bypasses(req.headers, None) {
        let content_type = resp
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if rules.cookies.bypasses(req.headers, Some(content_type)) {
            return Err(Detail::RequestCookie);
        }
    }
    Ok((directives, vary))
}

/// The Store-or-pass step for a response to `fetch`.
pub fn after_fetch(
    req: Request<'_>,
    key: &str,
    resp: &ResponseHead<'_>,
    rules: Rules<'_>,
    fetch_fwd: Fwd,
    max_object: u64,
) -> OnResponse {
    match judge_fetch(req, resp, rules, fetch_fwd, max_object) {
        Ok(storable) => to_store(req, key, resp, resp.headers.clone(), rules, storable),
        Err(pass) => pass,
    }
}

/// A response [`judge_fetch`] found storable, and what its cookies come to.
#[derive(Debug)]
pub struct Storable {
    base: CacheStatus,
    /// `Set-Cookie` values kept out of the store, for the fetching client only.
    strip: Option<Vec<HeaderValue>>,
    /// The response's directives and `Vary`, as judged (its stored head's freshness and
    /// variant are worked out from them: `Set-Cookie` is all [`to_store`] may take out of
    /// its fields).
    directives: EffectiveCacheControl,
    vary: Vary,
}

/// The Store-or-pass step's judgement of a response to `fetch`: storable, or the pass.
/// [`to_store`] then builds the object ([`after_fetch`] is the two).
pub fn judge_fetch(
    req: Request<'_>,
    resp: &ResponseHead<'_>,
    rules: Rules<'_>,
    fetch_fwd: Fwd,
    max_object: u64,
) -> Result<Storable, OnResponse> {
    let base = CacheStatus::forward(fetch_fwd).with_fwd_status(resp.status.as_u16());
    let (directives, vary) = match may_store(req, resp, rules, max_object) {
        Ok(judged) => judged,
        Err(detail) => {
            // A 304 or 206 answering the client's own conditional or range says nothing about
            // whether the whole response could be stored; nor does a bypass or request no-store.
            let remember = *req.method == Method::GET
                && resp.status != StatusCode::NOT_MODIFIED
                && resp.status != StatusCode::PARTIAL_CONTENT
                && !matches!(
                    detail,
                    Detail::NotStorable(NotStorable::RequestNoStore) | Detail::RequestCookie
                );
            return Err(OnResponse::Pass {
                status: base.with_detail(detail),
                remember,
            });
        }
    };
    let strip = match rules.cookies.on_store(resp.headers) {
        StoreCookies::AsIs => None,
        StoreCookies::Refuse => {
            return Err(OnResponse::Pass {
                status: base.with_detail(Detail::SetCookie),
                remember: true,
            })
        }
        StoreCookies::Strip(values) => Some(values),
    };
    Ok(Storable {
        base,
        strip,
        directives,
        vary,
    })
}

/// The object to store for a response [`judge_fetch`] found storable: `headers` are its
/// fields (`resp`'s, or `resp`'s taken by a caller that needs them no more; `resp.headers`
/// is not read).
pub fn to_store(
    req: Request<'_>,
    key: &str,
    resp: &ResponseHead<'_>,
    mut headers: HeaderMap,
    rules: Rules<'_>,
    storable: Storable,
) -> OnResponse {
    let Storable {
        base,
        strip,
        directives,
        vary,
    } = storable;
    let leader_fields = match strip {
        None => HeaderMap::new(),
        Some(values) => {
            headers.remove(header::SET_COOKIE);
            let mut leader = HeaderMap::new();
            for v in values {
                leader.append(header::SET_COOKIE, v);
            }
            leader
        }
    };
    let mut variant = variant_key(&vary, req.headers);
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
    let range = (resp.status == StatusCode::PARTIAL_CONTENT)
        .then(|| partial::stored_range(&headers))
        .flatten();
    let expected = match range {
        Some(r) => Some(r.len()),
        None => resp.content_length,
    };
    let mut head = ObjectHead {
        status: resp.status,
        headers,
        request_headers,
        request_time: resp.request_time,
        response_time: resp.response_time,
        prepared: Default::default(),
        labels: Default::default(),
    };
    let facts = prepare::Facts {
        directives: &directives,
        vary: &vary,
    };
    prepare::prepare_judged(rules.policy, &mut head, rules.wire, facts);
    OnResponse::Store {
        object: Arc::new(Object::new(
            key.to_string(),
            variant,
            head,
            Body::new(expected),
        )),
        leader_fields,
        status: CacheStatus {
            stored: true,
            ..base
        },
    }
}

/// The response to a request the cache passed on (an unsafe method, after its
/// [`invalidations`]): stored as the target's GET response when it may be — a POST's answer
/// with explicit freshness whose `Content-Location` is the target itself (RFC 9110 §9.3.3,
/// RFC 9111 §4), which a later GET may then reuse — else sent on.
pub fn after_pass(
    req: Request<'_>,
    key: &str,
    resp: &ResponseHead<'_>,
    rules: Rules<'_>,
    max_object: u64,
) -> OnResponse {
    let status = CacheStatus::forward(Fwd::Method).with_fwd_status(resp.status.as_u16());
    let pass = OnResponse::Pass {
        status,
        remember: false,
    };
    if *req.method != Method::POST {
        return pass;
    }
    let Ok(target) = trove_http::Target::parse(key) else {
        return pass;
    };
    let reusable = trove_http::post_reusable_for_get(
        rules.policy,
        &target,
        req.headers,
        resp.status,
        resp.headers,
    );
    if reusable.is_err() {
        return pass;
    }
    let as_get = Request::new(&Method::GET, req.headers);
    match after_fetch(as_get, key, resp, rules, Fwd::Method, max_object) {
        store @ OnResponse::Store { .. } => store,
        OnResponse::Pass { status, .. } => OnResponse::Pass {
            status,
            remember: false,
        },
    }
}

/// The store refused an object [`after_fetch`] wanted stored: it is passed instead.
pub fn refused(status: CacheStatus, why: Refused) -> CacheStatus {
    CacheStatus {
        stored: false,
        ..status
    }
    .with_detail(match why {
        Refused::TooLarge => Detail::TooLarge,
        Refused::NotAdmitted => Detail::NotAdmitted,
    })
}

/// What to do with the origin's answer to a validation.
#[derive(Debug)]
pub enum OnValidation {
    /// 304 for the stored response: store `head` in its place (same body) and serve it;
    /// the revalidating client alone also gets `leader_fields` (the 304's `Set-Cookie`,
    /// which the cookie policy keeps out of the stored head).
    Freshen {
        head: Box<ObjectHead>,
        status: CacheStatus,
        leader_fields: HeaderMap,
    },
    /// A 304 that does not match what is stored (§4.3.4): fetch the whole response.
    Refetch,
    /// A server error, and stale-if-error allows the stored response.
    ServeStale { status: CacheStatus },
    /// A new response: store or pass it like any fetched one.
    Replace,
}

/// Whether a 304 to our conditional request applies to `obj`, the one response whose
/// validators we sent: by §4.3.4's selection, or, when the origin's 304 carries no
/// validator at all (common in practice), because the request named only this response.
pub fn answers(obj: &Object, not_modified: &HeaderMap) -> bool {
    let has_validator =
        not_modified.contains_key(header::ETAG) || not_modified.contains_key(header::LAST_MODIFIED);
    trove_http::validation::selects(&obj.head.headers, not_modified) || !has_validator
}

/// The head of `obj` updated with a 304's (already cleaned) fields (RFC 9111 §3.2, §4.3.4).
pub fn freshened_head(obj: &Object, resp: &ResponseHead<'_>, rules: Rules<'_>) -> ObjectHead {
    let mut merged = trove_http::validation::freshen_headers(&obj.head.headers, resp.headers);
    merged.remove(header::CONTENT_LENGTH);
    if rules.cookies.set_cookie != crate::cookie::SetCookiePolicy::Rfc {
        // A 304's cookies are this client's, never the stored response's.
        merged.remove(header::SET_COOKIE);
    }
    let mut head = obj.head.clone();
    head.headers = merged;
    head.request_time = resp.request_time;
    head.response_time = resp.response_time;
    prepare::prepare_head(rules.policy, &mut head, rules.wire);
    head
}

/// The Revalidate step's verdict on the origin's answer.
pub fn after_validation(
    obj: &Object,
    req: Request<'_>,
    resp: &ResponseHead<'_>,
    rules: Rules<'_>,
    fwd: Fwd,
    now: SystemTime,
) -> OnValidation {
    if resp.status == StatusCode::NOT_MODIFIED {
        if !answers(obj, resp.headers) {
            return OnValidation::Refetch;
        }
        let mut leader_fields = HeaderMap::new();
        if rules.cookies.set_cookie != crate::cookie::SetCookiePolicy::Rfc {
            for v in resp.headers.get_all(header::SET_COOKIE) {
                leader_fields.append(header::SET_COOKIE, v.clone());
            }
        }
        return OnValidation::Freshen {
            head: Box::new(freshened_head(obj, resp, rules)),
            status: CacheStatus::forward(fwd).with_fwd_status(304),
            leader_fields,
        };
    }
    if resp.status.is_server_error()
        && stale_if_error_allows(rules.policy, &stored_view(obj), req.headers, now)
    {
        return OnValidation::ServeStale {
            status: stale_if_error(fwd).with_fwd_status(resp.status.as_u16()),
        };
    }
    OnValidation::Replace
}

fn stale_if_error(fwd: Fwd) -> CacheStatus {
    CacheStatus {
        hit: true,
        fwd: Some(fwd),
        ..CacheStatus::default()
    }
    .with_detail(Detail::StaleIfError)
}

/// A refetch of a stale response (no validators) answered with a server error: serve the
/// stale one if stale-if-error allows.
pub fn stale_on_server_error(
    fetch: &Fetch,
    req: Request<'_>,
    resp_status: StatusCode,
    rules: Rules<'_>,
    now: SystemTime,
) -> Option<(Arc<Object>, CacheStatus)> {
    let stale = fetch.stale.as_ref()?;
    (resp_status.is_server_error()
        && stale_if_error_allows(rules.policy, &stored_view(stale), req.headers, now))
    .then(|| {
        (
            Arc::clone(stale),
            stale_if_error(fetch.fwd).with_fwd_status(resp_status.as_u16()),
        )
    })
}

/// What the client gets when the origin could not be reached.
#[derive(Debug)]
pub enum OnFailure {
    /// Serve the stale stored response (stale-if-error, or disconnected within
    /// `max_stale`).
    ServeStale {
        obj: Arc<Object>,
        status: CacheStatus,
    },
    /// A generated error.
    Error {
        status: StatusCode,
        outcome: Outcome,
        cache_status: CacheStatus,
    },
}

/// The status a client gets for an origin failure: 504 for timeouts, 503 when shedding
/// load, 502 otherwise (what Squid and nginx answer).
pub fn failure_status(f: OriginFailure) -> StatusCode {
    match f {
        // RFC 9209's recommended codes: 504 for every timeout, 502 for the rest (a name that
        // does not resolve included, as nginx answers it).
        OriginFailure::ConnectionTimeout | OriginFailure::Timeout | OriginFailure::DnsTimeout => {
            StatusCode::GATEWAY_TIMEOUT
        }
        OriginFailure::Overloaded(_) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_GATEWAY,
    }
}

/// The origin failed. `stale` is the stored response being validated or refetched, if any.
pub fn after_failure(
    stale: Option<&Arc<Object>>,
    req: Request<'_>,
    rules: Rules<'_>,
    fwd: Fwd,
    outcome: Outcome,
    failure: OriginFailure,
    now: SystemTime,
) -> OnFailure {
    let status = CacheStatus::forward(fwd).with_detail(Detail::Origin(failure));
    // Shed: the origin was never asked, so this is no failure of it; a quick 503 the client
    // may retry, unless stale-if-error lets the stored response stand in.
    let shed = OnFailure::Error {
        status: StatusCode::SERVICE_UNAVAILABLE,
        outcome: Outcome::Shed,
        cache_status: status,
    };
    let overloaded = matches!(failure, OriginFailure::Overloaded(_));
    let Some(obj) = stale else {
        if overloaded {
            return shed;
        }
        return OnFailure::Error {
            status: failure_status(failure),
            outcome: if outcome == Outcome::RefreshModified {
                Outcome::RefreshFailErr
            } else {
                outcome
            },
            cache_status: status,
        };
    };
    if stale_if_error_allows(rules.policy, &stored_view(obj), req.headers, now) {
        return OnFailure::ServeStale {
            obj: Arc::clone(obj),
            status: stale_if_error(fwd),
        };
    }
    // Disconnected (RFC 9111 §4.2.4): the origin could not be reached at all, so a stale
    // response within `max_stale` is better than an error, unless a directive forbids it.
    if failure.is_disconnected()
        && disconnected_allows(rules.policy, &stored_view(obj), req.headers, now)
    {
        return OnFailure::ServeStale {
            obj: Arc::clone(obj),
            status: CacheStatus {
                hit: true,
                fwd: Some(fwd),
                ..CacheStatus::default()
            }
            .with_detail(Detail::StaleDisconnected),
        };
    }
    if overloaded {
        return shed;
    }
    // A stored response needed validating, the origin could not be reached and a directive
    // (or the bound) forbids the stale one: RFC 9111 §5.2.2.2 and §4.2.4 ask for a
    // generated error, 504 by preference.
    OnFailure::Error {
        status: StatusCode::GATEWAY_TIMEOUT,
        outcome: Outcome::RefreshFailErr,
        cache_status: status,
    }
}

/// RFC 9111 §4.4: the keys to invalidate after a response to an unsafe request for `key`.
pub fn invalidations(
    method: &Method,
    key: &str,
    status: StatusCode,
    resp: &HeaderMap,
) -> Vec<String> {
    let Ok(target) = trove_http::Target::parse(key) else {
        return Vec::new();
    };
    trove_http::invalidate::invalidation_targets(method, status, &target, resp)
        .into_iter()
        .map(trove_http::Target::into_key)
        .collect()
}

/// RFC 9111 §4.3.5: a HEAD response freshens the stored GET responses it selects. Only
/// responses that could have been chosen for this request (its `Vary` fields match, §4.1)
/// are candidates; a strong `ETag` selects those with the same strong tag, any other
/// validator (weak tag, `Last-Modified`) only a single candidate. A HEAD response that could
/// not itself be stored for a GET (private, no-store, Authorization, a cookie bypass) updates
/// nothing, and lengths that are both known must agree. Returns each object with its new head.
pub fn head_updates(
    stored: &[Arc<Object>],
    req: Request<'_>,
    resp: &ResponseHead<'_>,
    rules: Rules<'_>,
) -> Vec<(Arc<Object>, ObjectHead)> {
    if resp.status != StatusCode::OK {
        return Vec::new();
    }
    let as_get = Request::new(&Method::GET, req.headers);
    let get_head = ResponseHead {
        content_length: None,
        ..*resp
    };
    if may_store(as_get, &get_head, rules, u64::MAX).is_err() {
        return Vec::new();
    }
    let strong = trove_http::etag::response_etag(resp.headers).filter(|t| !t.weak);
    let candidates: Vec<&Arc<Object>> = stored
        .iter()
        .filter(|o| o.head.status == StatusCode::OK)
        .filter(|o| {
            let vary = Vary::from_headers(&o.head.headers);
            trove_http::vary_matches(&vary, &o.head.request_headers, req.headers)
        })
        .filter(|o| {
            let lengths_agree = match (resp.content_length, o.body.expected_len()) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            };
            lengths_agree && trove_http::validation::selects(&o.head.headers, resp.headers)
        })
        .collect();
    let chosen: Vec<&Arc<Object>> = match &strong {
        Some(tag) => candidates
            .into_iter()
            .filter(|o| {
                trove_http::etag::response_etag(&o.head.headers).is_some_and(|t| t.strong_eq(tag))
            })
            .collect(),
        None if candidates.len() == 1 && has_validator(resp.headers) => candidates,
        None => Vec::new(),
    };
    chosen
        .into_iter()
        .map(|o| (Arc::clone(o), freshened_head(o, resp, rules)))
        .collect()
}

fn has_validator(h: &HeaderMap) -> bool {
    h.contains_key(header::ETAG) || h.contains_key(header::LAST_MODIFIED)
}

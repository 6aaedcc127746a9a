//! May a stored response answer this request, and how? (RFC 9111 §4, §4.2.4,
//! §5.2, RFC 5861.) This is the proxy's entry point on a cache hit.
//!
//! Order of the checks: method and `Vary` (can this response answer the
//! request at all), then `no-cache` in the response and the request, then
//! the request's `max-age` and `min-fresh`, then freshness, then the ways a
//! stale response may still be served (`max-stale`, `stale-while-revalidate`)
//! unless `must-revalidate`, `proxy-revalidate` or `s-maxage` forbid it.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, Method, StatusCode};

use crate::cache_control::CacheControl;
use crate::freshness::{current_age, freshness_lifetime_received};
use crate::policy::{effective_response_cc, Policy};
use crate::vary::{vary_matches, Vary};

/// A stored response as the reuse rules need to see it.
#[derive(Clone, Copy, Debug)]
pub struct StoredResponse<'a> {
    /// Method of the request that produced it (GET, or HEAD for a
    /// header-only entry).
    pub method: &'a Method,
    /// Its status.
    pub status: StatusCode,
    /// Its header fields, as stored (after any freshening).
    pub headers: &'a HeaderMap,
    /// Header fields of the request that produced it (for `Vary`).
    pub request_headers: &'a HeaderMap,
    /// When the cache sent that request (§4.2.3 `request_time`).
    pub request_time: SystemTime,
    /// When the response arrived (§4.2.3 `response_time`).
    pub response_time: SystemTime,
}

/// Why a stale response may be served without validating first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StaleReason {
    /// The client accepts it with `max-stale` (§5.2.1.2).
    MaxStale,
    /// Within the `stale-while-revalidate` window (RFC 5861 §3): serve it,
    /// and revalidate in the background.
    StaleWhileRevalidate,
}

/// Why the response must be validated with the origin before use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValidateReason {
    /// It is stale and nothing allows serving it stale (§4.2.4).
    Stale,
    /// `no-cache` in the response (§5.2.2.4).
    ResponseNoCache,
    /// `no-cache` in the request, or `Pragma: no-cache` (§5.2.1.4, §5.4).
    RequestNoCache,
    /// It is older than the request's `max-age` (§5.2.1.1), or that is 0.
    RequestMaxAge,
    /// It will not stay fresh for the request's `min-fresh` (§5.2.1.3).
    MinFresh,
    /// It is stale, and `must-revalidate`, or in a shared cache
    /// `proxy-revalidate` or `s-maxage`, forbid serving it stale even though
    /// the client would accept that (§5.2.2.2, §5.2.2.8, §5.2.2.10).
    MustRevalidate,
}

/// Why the stored response cannot answer this request even after validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unusable {
    /// The request method is not GET or HEAD, or a HEAD-only entry was asked
    /// for a GET.
    Method,
    /// The selecting header fields do not match (§4.1), or `Vary: *`.
    Vary,
}

/// What to do with a stored response for a new request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reuse {
    /// Serve it; it is fresh. `age` goes in the `Age` header.
    Fresh {
        /// Current age (§4.2.3).
        age: Duration,
    },
    /// Serve it although it is stale.
    StaleAllowed {
        /// Current age.
        age: Duration,
        /// How far past its freshness lifetime it is.
        staleness: Duration,
        /// Why that is allowed; `StaleWhileRevalidate` asks for a background
        /// revalidation.
        reason: StaleReason,
    },
    /// Send a conditional request to the origin first (§4.3).
    MustValidate {
        /// Why.
        reason: ValidateReason,
    },
    /// This stored response does not answer this request: look for another
    /// variant or forward the request.
    Unusable {
        /// Why.
        reason: Unusable,
    },
}

impl StaleReason {
    /// A short stable name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            StaleReason::MaxStale => "max-stale",
            StaleReason::StaleWhileRevalidate => "stale-while-revalidate",
        }
    }
}

impl ValidateReason {
    /// A short stable name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            ValidateReason::Stale => "stale",
            ValidateReason::ResponseNoCache => "response-no-cache",
            ValidateReason::RequestNoCache => "request-no-cache",
            ValidateReason::RequestMaxAge => "request-max-age",
            ValidateReason::MinFresh => "min-fresh",
            ValidateReason::MustRevalidate => "must-revalidate",
        }
    }
}

impl Unusable {
    /// A short stable name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Unusable::Method => "method",
            Unusable::Vary => "vary",
        }
    }
}

impl Reuse {
    /// A short stable name for logs and metrics: `fresh`, the stale reason,
    /// the validate reason, or `unusable-` plus its reason.
    pub fn as_str(&self) -> &'static str {
        match self {
            Reuse::Fresh { .. } => "fresh",
            Reuse::StaleAllowed { reason, .. } => reason.as_str(),
            Reuse::MustValidate { reason } => reason.as_str(),
            Reuse::Unusable {
                reason: Unusable::Method,
            } => "unusable-method",
            Reuse::Unusable {
                reason: Unusable::Vary,
            } => "unusable-vary",
        }
    }

    /// True for `Fresh` and `StaleAllowed`: the stored response can be sent now.
    pub fn can_serve(&self) -> bool {
        matches!(self, Reuse::Fresh { .. } | Reuse::StaleAllowed { .. })
    }
}

/// The age, freshness lifetime and staleness of a stored response at `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Staleness {
    /// Current age (§4.2.3).
    pub age: Duration,
    /// Freshness lifetime (§4.2.1).
    pub lifetime: Duration,
}

impl Staleness {
    /// Computes both for `stored` at `now`.
    pub fn of(policy: &Policy, stored: &StoredResponse<'_>, now: SystemTime) -> Staleness {
        Staleness {
            age: current_age(
                stored.headers,
                stored.request_time,
                stored.response_time,
                now,
            ),
            lifetime: freshness_lifetime_received(
                policy,
                stored.status,
                stored.headers,
                stored.response_time,
            )
            .duration,
        }
    }

    /// Fresh when the lifetime exceeds the age (§4.2).
    pub fn is_fresh(&self) -> bool {
        self.lifetime > self.age
    }

    /// How far past the lifetime the age is (zero while fresh).
    pub fn staleness(&self) -> Duration {
        self.age.saturating_sub(self.lifetime)
    }
}

/// Decides how `stored` may answer a request with `method` and `req_headers`
/// at `now`. `only-if-cached` is for the proxy to act on (reply 504 instead
/// of contacting the origin): read it from [`CacheControl::from_request`].
pub fn reuse(
    policy: &Policy,
    stored: &StoredResponse<'_>,
    method: &Method,
    req_headers: &HeaderMap,
    now: SystemTime,
) -> Reuse {
    let method_ok =
        *method == Method::HEAD || (*method == Method::GET && *stored.method == Method::GET);
    if !method_ok {
        return Reuse::Unusable {
            reason: Unusable::Method,
        };
    }
    if !vary_matches(
        &Vary::from_headers(stored.headers),
        stored.request_headers,
        req_headers,
    ) {
        return Reuse::Unusable {
            reason: Unusable::Vary,
        };
    }
    let must_validate = |reason| Reuse::MustValidate { reason };
    let resp_cc = effective_response_cc(policy, stored.headers);
    let req_cc = CacheControl::from_request(req_headers);
    // A qualified no-cache is treated like the unqualified form: serving the
    // response without the named fields is allowed but not required (§5.2.2.4).
    if resp_cc.no_cache.is_present() {
        return must_validate(ValidateReason::ResponseNoCache);
    }
    if req_cc.no_cache.is_present() {
        return must_validate(ValidateReason::RequestNoCache);
    }
    let s = Staleness::of(policy, stored, now);
    if let Some(max_age) = req_cc.max_age {
        // max-age=0 is how clients ask for validation; treat it as such even
        // when the stored response is less than a second old.
        if max_age == 0 || s.age > Duration::from_secs(max_age) {
            return must_validate(ValidateReason::RequestMaxAge);
        }
    }
    if s.is_fresh() {
        if let Some(min_fresh) = req_cc.min_fresh {
            if s.lifetime.saturating_sub(s.age) < Duration::from_secs(min_fresh) {
                return must_validate(ValidateReason::MinFresh);
            }
        }
        return Reuse::Fresh { age: s.age };
    }
    let staleness = s.staleness();
    let client_accepts = match req_cc.max_stale {
        Some(None) => true,
        Some(Some(limit)) => staleness <= Duration::from_secs(limit),
        None => false,
    };
    let swr = resp_cc
        .stale_while_revalidate
        .is_some_and(|w| staleness <= Duration::from_secs(w));
    if !(client_accepts || swr) {
        return must_validate(ValidateReason::Stale);
    }
    if resp_cc.forbids_stale(policy.shared) {
        return must_validate(ValidateReason::MustRevalidate);
    }
    if req_cc.min_fresh.is_some_and(|m| m > 0) {
        return must_validate(ValidateReason::MinFresh);
    }
    let reason = if client_accepts {
        StaleReason::MaxStale
    } else {
        StaleReason::StaleWhileRevalidate
    };
    Reuse::StaleAllowed {
        age: s.age,
        staleness,
        reason,
    }
}

/// When the origin cannot be reached or answers with an error (500, 502,
/// 503, 504), may `stored` be served instead? (RFC 5861 §4, RFC 9111 §4.2.4.)
///
/// True while fresh, or when stale within `stale-if-error` from the response
/// or the request, or within the request's `max-stale`. Never when the
/// response forbids stale service (`no-cache`, `must-revalidate`, and in a
/// shared cache `proxy-revalidate` or `s-maxage`).
pub fn stale_if_error_allows(
    policy: &Policy,
    stored: &StoredResponse<'_>,
    req_headers: &HeaderMap,
    now: SystemTime,
) -> bool {
    let resp_cc = effective_response_cc(policy, stored.headers);
    if resp_cc.no_cache.is_present() || resp_cc.forbids_stale(policy.shared) {
        return false;
    }
    let s = Staleness::of(policy, stored, now);
    if s.is_fresh() {
        return true;
    }
    let staleness = s.staleness();
    let within = |limit: Option<u64>| limit.is_some_and(|l| staleness <= Duration::from_secs(l));
    let req_cc = CacheControl::from_request(req_headers);
    within(resp_cc.stale_if_error)
        || within(req_cc.stale_if_error)
        || match req_cc.max_stale {
            Some(None) => true,
            Some(Some(l)) => within(Some(l)),
            None => false,
        }
}

/// When the origin cannot be reached at all (connection refused, reset,
/// closed, timed out), may `stored` be served stale? RFC 9111 §4.2.4 lets a
/// disconnected cache do so, within the operator's bound
/// (`policy.max_stale`, Squid's `max_stale`).
///
/// Never when the response forbids stale service (`no-cache`,
/// `must-revalidate`, and in a shared cache `proxy-revalidate` or
/// `s-maxage`, §4.2.4 and §5.2.2), nor when the request's own directives
/// ask for something a stale response can't be: `no-cache` (or `Pragma:
/// no-cache`, §5.4), a `max-age` it is older than, or `min-fresh`
/// (§5.2.1). A client's `max-stale` bound, if smaller, applies too.
pub fn disconnected_allows(
    policy: &Policy,
    stored: &StoredResponse<'_>,
    req_headers: &HeaderMap,
    now: SystemTime,
) -> bool {
    if policy.max_stale.is_zero() {
        return false;
    }
    let resp_cc = effective_response_cc(policy, stored.headers);
    if resp_cc.no_cache.is_present() || resp_cc.forbids_stale(policy.shared) {
        return false;
    }
    let req_cc = CacheControl::from_request(req_headers);
    if req_cc.no_cache.is_present() || req_cc.min_fresh.is_some_and(|m| m > 0) {
        return false;
    }
    let s = Staleness::of(policy, stored, now);
    if req_cc
        .max_age
        .is_some_and(|m| m == 0 || s.age > Duration::from_secs(m))
    {
        return false;
    }
    let staleness = s.staleness();
    let client_limit = match req_cc.max_stale {
        Some(Some(l)) => Duration::from_secs(l),
        _ => Duration::MAX,
    };
    staleness <= policy.max_stale.min(client_limit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field::format_http_date;
    use http::{header, HeaderName, HeaderValue};

    const T0: u64 = 1_700_000_000;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn h(pairs: &[(HeaderName, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (n, v) in pairs {
            m.append(n, HeaderValue::from_str(v).expect("value"));
        }
        m
    }

    /// A response with `cc` stored at T0 (Date T0, no delay), checked at T0+`after`.
    fn decide(cc: &str, req: &HeaderMap, after: u64) -> Reuse {
        let resp = h(&[
            (header::DATE, &format_http_date(at(T0))),
            (header::CACHE_CONTROL, cc),
        ]);
        decide_with(&resp, &HeaderMap::new(), req, after)
    }

    fn decide_with(resp: &HeaderMap, stored_req: &HeaderMap, req: &HeaderMap, after: u64) -> Reuse {
        let stored = StoredResponse {
            method: &Method::GET,
            status: StatusCode::OK,
            headers: resp,
            request_headers: stored_req,
            request_time: at(T0),
            response_time: at(T0),
        };
        reuse(
            &Policy::default(),
            &stored,
            &Method::GET,
            req,
            at(T0 + after),
        )
    }

    fn req(cc: &str) -> HeaderMap {
        h(&[(header::CACHE_CONTROL, cc)])
    }

    fn validate(reason: ValidateReason) -> Reuse {
        Reuse::MustValidate { reason }
    }

    #[test]
    fn fresh_response_is_served_with_its_age_9111_4_2() {
        assert_eq!(
            decide("max-age=100", &HeaderMap::new(), 10),
            Reuse::Fresh {
                age: Duration::from_secs(10)
            }
        );
    }

    #[test]
    fn stale_response_must_be_validated_9111_4_2_4() {
        assert_eq!(
            decide("max-age=100", &HeaderMap::new(), 100),
            validate(ValidateReason::Stale)
        );
        assert_eq!(
            decide("max-age=100", &HeaderMap::new(), 101),
            validate(ValidateReason::Stale)
        );
    }

    #[test]
    fn no_cache_response_must_be_validated_even_when_fresh_9111_5_2_2_4() {
        assert_eq!(
            decide("max-age=100, no-cache", &HeaderMap::new(), 0),
            validate(ValidateReason::ResponseNoCache)
        );
        assert_eq!(
            decide("max-age=100, no-cache=\"set-cookie\"", &HeaderMap::new(), 0),
            validate(ValidateReason::ResponseNoCache)
        );
    }

    #[test]
    fn request_no_cache_forces_validation_9111_5_2_1_4() {
        assert_eq!(
            decide("max-age=100", &req("no-cache"), 0),
            validate(ValidateReason::RequestNoCache)
        );
        let pragma = h(&[(header::PRAGMA, "no-cache")]);
        assert_eq!(
            decide("max-age=100", &pragma, 0),
            validate(ValidateReason::RequestNoCache)
        );
    }

    #[test]
    fn request_max_age_limits_acceptable_age_9111_5_2_1_1() {
        assert_eq!(
            decide("max-age=100", &req("max-age=0"), 0),
            validate(ValidateReason::RequestMaxAge)
        );
        assert_eq!(
            decide("max-age=100", &req("max-age=5"), 10),
            validate(ValidateReason::RequestMaxAge)
        );
        assert!(matches!(
            decide("max-age=100", &req("max-age=50"), 10),
            Reuse::Fresh { .. }
        ));
        // A malformed request max-age reads as 0.
        assert_eq!(
            decide("max-age=100", &req("max-age=x"), 1),
            validate(ValidateReason::RequestMaxAge)
        );
    }

    #[test]
    fn min_fresh_requires_remaining_freshness_9111_5_2_1_3() {
        assert_eq!(
            decide("max-age=100", &req("min-fresh=95"), 10),
            validate(ValidateReason::MinFresh)
        );
        assert!(matches!(
            decide("max-age=100", &req("min-fresh=90"), 10),
            Reuse::Fresh { .. }
        ));
    }

    #[test]
    fn max_stale_allows_stale_within_limit_9111_5_2_1_2() {
        assert_eq!(
            decide("max-age=100", &req("max-stale=20"), 110),
            Reuse::StaleAllowed {
                age: Duration::from_secs(110),
                staleness: Duration::from_secs(10),
                reason: StaleReason::MaxStale
            }
        );
        assert_eq!(
            decide("max-age=100", &req("max-stale=5"), 110),
            validate(ValidateReason::Stale)
        );
        assert!(matches!(
            decide("max-age=100", &req("max-stale"), 1_000_000),
            Reuse::StaleAllowed {
                reason: StaleReason::MaxStale,
                ..
            }
        ));
    }

    #[test]
    fn must_revalidate_forbids_serving_stale_9111_5_2_2_2() {
        assert_eq!(
            decide("max-age=100, must-revalidate", &req("max-stale"), 110),
            validate(ValidateReason::MustRevalidate)
        );
        // While fresh it is served normally.
        assert!(matches!(
            decide("max-age=100, must-revalidate", &HeaderMap::new(), 10),
            Reuse::Fresh { .. }
        ));
    }

    #[test]
    fn proxy_revalidate_forbids_stale_in_shared_cache_9111_5_2_2_8() {
        assert_eq!(
            decide("max-age=100, proxy-revalidate", &req("max-stale"), 110),
            validate(ValidateReason::MustRevalidate)
        );
    }

    #[test]
    fn s_maxage_implies_proxy_revalidate_9111_5_2_2_10() {
        assert_eq!(
            decide(
                "s-maxage=100, stale-while-revalidate=60",
                &HeaderMap::new(),
                110
            ),
            validate(ValidateReason::MustRevalidate)
        );
    }

    #[test]
    fn stale_while_revalidate_window_serves_stale_5861_3() {
        assert_eq!(
            decide(
                "max-age=100, stale-while-revalidate=30",
                &HeaderMap::new(),
                120
            ),
            Reuse::StaleAllowed {
                age: Duration::from_secs(120),
                staleness: Duration::from_secs(20),
                reason: StaleReason::StaleWhileRevalidate
            }
        );
        assert_eq!(
            decide(
                "max-age=100, stale-while-revalidate=30",
                &HeaderMap::new(),
                131
            ),
            validate(ValidateReason::Stale)
        );
        // The client's explicit request for validation still wins.
        assert_eq!(
            decide(
                "max-age=100, stale-while-revalidate=30",
                &req("no-cache"),
                120
            ),
            validate(ValidateReason::RequestNoCache)
        );
    }

    #[test]
    fn min_fresh_refuses_stale_responses_9111_5_2_1_3() {
        assert_eq!(
            decide("max-age=100", &req("max-stale, min-fresh=5"), 110),
            validate(ValidateReason::MinFresh)
        );
    }

    #[test]
    fn vary_mismatch_makes_the_response_unusable_9111_4_1() {
        let resp = h(&[
            (header::DATE, &format_http_date(at(T0))),
            (header::CACHE_CONTROL, "max-age=100"),
            (header::VARY, "accept-encoding"),
        ]);
        let gzip = h(&[(header::ACCEPT_ENCODING, "gzip")]);
        let br = h(&[(header::ACCEPT_ENCODING, "br")]);
        assert!(matches!(
            decide_with(&resp, &gzip, &gzip, 1),
            Reuse::Fresh { .. }
        ));
        assert_eq!(
            decide_with(&resp, &gzip, &br, 1),
            Reuse::Unusable {
                reason: Unusable::Vary
            }
        );
    }

    #[test]
    fn head_entry_cannot_answer_get_but_get_entry_answers_head_9110_9_3_2() {
        let resp = h(&[(header::CACHE_CONTROL, "max-age=100")]);
        let empty = HeaderMap::new();
        let stored = |method| StoredResponse {
            method,
            status: StatusCode::OK,
            headers: &resp,
            request_headers: &empty,
            request_time: at(T0),
            response_time: at(T0),
        };
        let p = Policy::default();
        assert!(reuse(&p, &stored(&Method::GET), &Method::HEAD, &empty, at(T0)).can_serve());
        assert!(reuse(&p, &stored(&Method::HEAD), &Method::HEAD, &empty, at(T0)).can_serve());
        assert_eq!(
            reuse(&p, &stored(&Method::HEAD), &Method::GET, &empty, at(T0)).as_str(),
            "unusable-method"
        );
        assert_eq!(
            reuse(&p, &stored(&Method::GET), &Method::POST, &empty, at(T0)).as_str(),
            "unusable-method"
        );
    }

    #[test]
    fn heuristic_freshness_is_used_for_reuse_9111_4_2_2() {
        let resp = h(&[
            (header::DATE, &format_http_date(at(T0))),
            (header::LAST_MODIFIED, &format_http_date(at(T0 - 1000))),
        ]);
        let empty = HeaderMap::new();
        assert!(matches!(
            decide_with(&resp, &empty, &empty, 50),
            Reuse::Fresh { .. }
        ));
        assert_eq!(
            decide_with(&resp, &empty, &empty, 150),
            validate(ValidateReason::Stale)
        );
    }

    fn sie(cc: &str, request: &HeaderMap, after: u64) -> bool {
        let resp = h(&[
            (header::DATE, &format_http_date(at(T0))),
            (header::CACHE_CONTROL, cc),
        ]);
        let empty = HeaderMap::new();
        let stored = StoredResponse {
            method: &Method::GET,
            status: StatusCode::OK,
            headers: &resp,
            request_headers: &empty,
            request_time: at(T0),
            response_time: at(T0),
        };
        stale_if_error_allows(&Policy::default(), &stored, request, at(T0 + after))
    }

    fn disconnected(cc: &str, request: &HeaderMap, after: u64, max_stale: u64) -> bool {
        let resp = h(&[
            (header::DATE, &format_http_date(at(T0))),
            (header::CACHE_CONTROL, cc),
        ]);
        let empty = HeaderMap::new();
        let stored = StoredResponse {
            method: &Method::GET,
            status: StatusCode::OK,
            headers: &resp,
            request_headers: &empty,
            request_time: at(T0),
            response_time: at(T0),
        };
        let policy = Policy {
            max_stale: Duration::from_secs(max_stale),
            ..Policy::default()
        };
        disconnected_allows(&policy, &stored, request, at(T0 + after))
    }

    #[test]
    fn disconnected_cache_may_serve_stale_within_its_bound_9111_4_2_4() {
        let none = HeaderMap::new();
        assert!(disconnected("max-age=10", &none, 100, 3600));
        assert!(disconnected("max-age=10", &none, 3610, 3600));
        assert!(!disconnected("max-age=10", &none, 3611, 3600));
        assert!(
            !disconnected("max-age=10", &none, 100, 0),
            "zero turns it off"
        );
        // The client's own max-stale bound, when smaller, holds too.
        assert!(!disconnected("max-age=10", &req("max-stale=5"), 100, 3600));
        assert!(disconnected("max-age=10", &req("max-stale=500"), 100, 3600));
    }

    #[test]
    fn disconnected_never_overrides_explicit_directives_9111_4_2_4() {
        let none = HeaderMap::new();
        for cc in [
            "max-age=10, must-revalidate",
            "max-age=10, proxy-revalidate",
            "s-maxage=10",
            "max-age=10, no-cache",
        ] {
            assert!(!disconnected(cc, &none, 20, 3600), "{cc}");
        }
        for r in ["no-cache", "max-age=0", "max-age=15", "min-fresh=1"] {
            assert!(!disconnected("max-age=10", &req(r), 20, 3600), "{r}");
        }
        assert!(disconnected("max-age=10", &req("max-age=60"), 20, 3600));
    }

    #[test]
    fn stale_if_error_window_in_response_5861_4() {
        let none = HeaderMap::new();
        assert!(sie("max-age=10, stale-if-error=60", &none, 70));
        assert!(!sie("max-age=10, stale-if-error=60", &none, 71));
        assert!(!sie("max-age=10", &none, 20));
        assert!(sie("max-age=10", &none, 5));
    }

    #[test]
    fn stale_if_error_in_request_5861_4() {
        assert!(sie("max-age=10", &req("stale-if-error=30"), 30));
        assert!(!sie("max-age=10", &req("stale-if-error=30"), 50));
        assert!(sie("max-age=10", &req("max-stale"), 5000));
    }

    #[test]
    fn stale_if_error_never_overrides_must_revalidate_9111_4_2_4() {
        let none = HeaderMap::new();
        for cc in [
            "max-age=10, stale-if-error=60, must-revalidate",
            "max-age=10, stale-if-error=60, proxy-revalidate",
            "s-maxage=10, stale-if-error=60",
            "max-age=10, stale-if-error=60, no-cache",
        ] {
            assert!(!sie(cc, &none, 20), "{cc}");
        }
    }

    #[test]
    fn reasons_have_stable_names() {
        assert_eq!(
            Reuse::Fresh {
                age: Duration::ZERO
            }
            .as_str(),
            "fresh"
        );
        assert_eq!(
            StaleReason::StaleWhileRevalidate.as_str(),
            "stale-while-revalidate"
        );
        assert_eq!(ValidateReason::MustRevalidate.as_str(), "must-revalidate");
        assert_eq!(
            validate(ValidateReason::RequestNoCache).as_str(),
            "request-no-cache"
        );
    }
}

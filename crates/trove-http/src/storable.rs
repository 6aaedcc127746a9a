//! May this response be stored at all? (RFC 9111 §3, §3.5.)
//!
//! HEAD: RFC 9110 §9.3.2 makes a HEAD response cacheable, so it passes this
//! check. The proxy must store it as a header-only entry that can answer
//! later HEAD requests and never a GET ([`crate::reuse`] enforces that from
//! the stored method), and may use it to freshen a stored GET response
//! (RFC 9111 §4.3.5) with [`crate::validation::freshen_headers`].

use http::{header, HeaderMap, Method, StatusCode};

use crate::cache_control::CacheControl;
use crate::freshness::is_heuristically_cacheable;
use crate::policy::{effective_response_directives, EffectiveCacheControl, Policy};
use crate::vary::Vary;

/// Why a response may not be stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotStorable {
    /// The request method is not GET or HEAD.
    Method,
    /// The status is not final, is 304, or is not one this cache understands
    /// while `must-understand` is present.
    Status,
    /// `no-store` in the response (§5.2.2.5).
    NoStore,
    /// `no-store` in the request (§5.2.1.5).
    RequestNoStore,
    /// `private` in a shared cache (§5.2.2.7).
    Private,
    /// The request carried `Authorization` and the response does not allow
    /// a shared cache to store it (§3.5).
    Authorization,
    /// `Vary: *`: a stored response could never be reused (§4.1).
    VaryStar,
    /// No explicit expiration, no `public`, and the status is not
    /// heuristically cacheable (§3).
    NoFreshness,
}

impl NotStorable {
    /// A short stable name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            NotStorable::Method => "method",
            NotStorable::Status => "status",
            NotStorable::NoStore => "no-store",
            NotStorable::RequestNoStore => "request-no-store",
            NotStorable::Private => "private",
            NotStorable::Authorization => "authorization",
            NotStorable::VaryStar => "vary-star",
            NotStorable::NoFreshness => "no-freshness",
        }
    }
}

impl std::fmt::Display for NotStorable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// True for the methods whose responses this cache stores: GET and HEAD.
pub fn is_cacheable_method(method: &Method) -> bool {
    *method == Method::GET || *method == Method::HEAD
}

/// Status codes whose caching requirements this cache implements, for
/// `must-understand` (§5.2.2.3): the final codes defined by RFC 9110 §15,
/// except 304, which updates a stored response and is never stored itself.
pub fn understands_status(status: StatusCode) -> bool {
    matches!(
        status.as_u16(),
        200..=206
            | 300..=303
            | 305
            | 307
            | 308
            | 400..=418
            | 421
            | 422
            | 426
            | 500..=505
    )
}

/// True when the request says no part of it or its response may be stored
/// (`Cache-Control: no-store`, §5.2.1.5). It does not stop the proxy from
/// answering from an already stored response.
pub fn request_forbids_storing(req_headers: &HeaderMap) -> bool {
    // `Pragma`, the fallback `CacheControl::from_request` reads without `Cache-Control`,
    // never says `no-store` (§5.4): only `Cache-Control` is read.
    req_headers.contains_key(header::CACHE_CONTROL)
        && CacheControl::from_headers(req_headers, &header::CACHE_CONTROL).no_store
}

/// Decides whether a response may be stored (RFC 9111 §3).
///
/// `no-cache` responses are storable: they must be validated before each
/// reuse. A 206 is storable (§3.4): the proxy stores it as a partial object.
pub fn storability(
    policy: &Policy,
    method: &Method,
    req_headers: &HeaderMap,
    status: StatusCode,
    resp_headers: &HeaderMap,
) -> Result<(), NotStorable> {
    // Checked before the directives are parsed: most responses it refuses carry some.
    method_and_status(method, status)?;
    let directives = effective_response_directives(policy, resp_headers);
    let vary = Vary::from_headers(resp_headers);
    storability_parsed(
        policy,
        method,
        req_headers,
        status,
        resp_headers,
        &directives,
        &vary,
    )
}

/// The request method and response status a stored response needs (RFC 9111 §3: a
/// cacheable method; a final status, not a `304`).
fn method_and_status(method: &Method, status: StatusCode) -> Result<(), NotStorable> {
    if !is_cacheable_method(method) {
        return Err(NotStorable::Method);
    }
    if status.is_informational() || status == StatusCode::NOT_MODIFIED {
        return Err(NotStorable::Status);
    }
    Ok(())
}

/// [`storability`] with the response's directives and `Vary` already parsed (`directives`:
/// [`effective_response_directives`] of `resp_headers` under `policy`; `vary`:
/// [`Vary::from_headers`] of them), for a caller that reads them for other rules too.
pub fn storability_parsed(
    policy: &Policy,
    method: &Method,
    req_headers: &HeaderMap,
    status: StatusCode,
    resp_headers: &HeaderMap,
    directives: &EffectiveCacheControl,
    vary: &Vary,
) -> Result<(), NotStorable> {
    method_and_status(method, status)?;
    let cc = &directives.cc;
    let understood = understands_status(status);
    if cc.must_understand && !understood {
        return Err(NotStorable::Status);
    }
    if request_forbids_storing(req_headers) {
        return Err(NotStorable::RequestNoStore);
    }
    // §5.2.2.3: a cache that understands the status ignores no-store when
    // must-understand is present.
    if cc.no_store && !(cc.must_understand && understood) {
        return Err(NotStorable::NoStore);
    }
    if policy.shared && cc.private.is_present() {
        return Err(NotStorable::Private);
    }
    if policy.shared
        && req_headers.contains_key(header::AUTHORIZATION)
        && !(cc.must_revalidate || cc.public || cc.s_maxage.is_some())
    {
        return Err(NotStorable::Authorization);
    }
    if *vary == Vary::Star {
        return Err(NotStorable::VaryStar);
    }
    let expires =
        directives.targeted.is_none() && crate::field::has_field(resp_headers, &header::EXPIRES);
    let has_freshness = expires
        || cc.has_explicit_lifetime(policy.shared)
        || cc.public
        || (!policy.shared && cc.private.is_present())
        || is_heuristically_cacheable(status);
    if !has_freshness {
        return Err(NotStorable::NoFreshness);
    }
    Ok(())
}

/// May a response to a POST of `target` be stored as the response to a GET of it? (RFC
/// 9110 §9.3.3: a POST response is cacheable "only" with explicit freshness and a
/// `Content-Location` equal to the POST's target URI; RFC 9111 §4 then lets it answer a
/// later GET.) The one `Content-Location` is resolved against the target and normalised like
/// every target before the comparison; a 200 or 203 with explicit freshness is required (no
/// heuristic, no `public` alone), and then every rule for storing a GET response applies.
pub fn post_reusable_for_get(
    policy: &Policy,
    target: &crate::Target,
    req_headers: &HeaderMap,
    status: StatusCode,
    resp_headers: &HeaderMap,
) -> Result<(), NotStorable> {
    if !matches!(status.as_u16(), 200 | 203) {
        return Err(NotStorable::Status);
    }
    let mut values = resp_headers.get_all(header::CONTENT_LOCATION).iter();
    let names_target = match (values.next(), values.next()) {
        (Some(v), None) => target
            .key()
            .parse::<http::Uri>()
            .ok()
            .zip(v.to_str().ok())
            .and_then(|(base, v)| crate::invalidate::resolve_reference(&base, v))
            .and_then(|u| crate::Target::from_absolute(&u).ok())
            .is_some_and(|t| t == *target),
        _ => false,
    };
    if !names_target {
        return Err(NotStorable::Method);
    }
    let directives = effective_response_directives(policy, resp_headers);
    let expires = directives.targeted.is_none() && resp_headers.contains_key(header::EXPIRES);
    if !(expires || directives.cc.has_explicit_lifetime(policy.shared)) {
        return Err(NotStorable::NoFreshness);
    }
    storability(policy, &Method::GET, req_headers, status, resp_headers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::CDN_CACHE_CONTROL;
    use http::{HeaderName, HeaderValue};

    fn h(pairs: &[(HeaderName, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (n, v) in pairs {
            m.append(n, HeaderValue::from_static(v));
        }
        m
    }

    #[test]
    fn post_with_content_location_of_its_target_9110_9_3_3() {
        let target = crate::Target::parse("http://example.com/a/doc?x=1").expect("target");
        let post = |cl: &'static str, cc: &'static str| {
            let resp = h(&[(header::CONTENT_LOCATION, cl), (header::CACHE_CONTROL, cc)]);
            post_reusable_for_get(
                &Policy::default(),
                &target,
                &HeaderMap::new(),
                StatusCode::OK,
                &resp,
            )
        };
        for same in [
            "http://example.com/a/doc?x=1",
            "HTTP://EXAMPLE.com:80/a/./doc?x=1",
            "/a/doc?x=1",
            "doc?x=1",
        ] {
            assert_eq!(post(same, "max-age=60"), Ok(()), "{same}");
        }
        assert_eq!(post("/a/doc", "max-age=60"), Err(NotStorable::Method));
        assert_eq!(
            post("http://other.example/a/doc?x=1", "max-age=60"),
            Err(NotStorable::Method)
        );
        assert_eq!(post("/a/doc?x=1", "public"), Err(NotStorable::NoFreshness));
        assert_eq!(
            post("/a/doc?x=1", "max-age=60, private"),
            Err(NotStorable::Private)
        );
        assert_eq!(
            post("/a/doc?x=1", "max-age=60, no-store"),
            Err(NotStorable::NoStore)
        );
        let no_cl = h(&[(header::CACHE_CONTROL, "max-age=60")]);
        let p = Policy::default();
        let empty = HeaderMap::new();
        assert_eq!(
            post_reusable_for_get(&p, &target, &empty, StatusCode::OK, &no_cl),
            Err(NotStorable::Method)
        );
        let created = h(&[
            (header::CONTENT_LOCATION, "/a/doc?x=1"),
            (header::CACHE_CONTROL, "max-age=60"),
        ]);
        assert_eq!(
            post_reusable_for_get(&p, &target, &empty, StatusCode::CREATED, &created),
            Err(NotStorable::Status)
        );
    }

    fn check(req: &HeaderMap, status: u16, resp: &HeaderMap) -> Result<(), NotStorable> {
        let status = StatusCode::from_u16(status).expect("status");
        storability(&Policy::default(), &Method::GET, req, status, resp)
    }

    #[test]
    fn plain_200_is_heuristically_storable_9111_3() {
        assert_eq!(check(&h(&[]), 200, &h(&[])), Ok(()));
    }

    #[test]
    fn only_get_and_head_are_understood_methods_9111_3() {
        let ok = h(&[(header::CACHE_CONTROL, "max-age=60")]);
        for m in [Method::GET, Method::HEAD] {
            assert_eq!(
                storability(&Policy::default(), &m, &h(&[]), StatusCode::OK, &ok),
                Ok(())
            );
        }
        for m in [Method::POST, Method::PUT, Method::DELETE, Method::OPTIONS] {
            assert_eq!(
                storability(&Policy::default(), &m, &h(&[]), StatusCode::OK, &ok),
                Err(NotStorable::Method)
            );
        }
    }

    #[test]
    fn non_final_and_304_statuses_are_not_stored_9111_3() {
        let ok = h(&[(header::CACHE_CONTROL, "max-age=60")]);
        assert_eq!(check(&h(&[]), 100, &ok), Err(NotStorable::Status));
        assert_eq!(check(&h(&[]), 103, &ok), Err(NotStorable::Status));
        assert_eq!(check(&h(&[]), 304, &ok), Err(NotStorable::Status));
    }

    #[test]
    fn partial_content_is_storable_9111_3_4() {
        assert_eq!(check(&h(&[]), 206, &h(&[])), Ok(()));
    }

    #[test]
    fn no_store_response_is_not_stored_9111_5_2_2_5() {
        let resp = h(&[(header::CACHE_CONTROL, "max-age=60, no-store")]);
        assert_eq!(check(&h(&[]), 200, &resp), Err(NotStorable::NoStore));
    }

    #[test]
    fn no_store_request_forbids_storing_9111_5_2_1_5() {
        let req = h(&[(header::CACHE_CONTROL, "no-store")]);
        assert!(request_forbids_storing(&req));
        assert_eq!(check(&req, 200, &h(&[])), Err(NotStorable::RequestNoStore));
    }

    #[test]
    fn must_understand_overrides_no_store_for_understood_status_9111_5_2_2_3() {
        let resp = h(&[(
            header::CACHE_CONTROL,
            "must-understand, no-store, max-age=60",
        )]);
        assert_eq!(check(&h(&[]), 200, &resp), Ok(()));
        assert_eq!(check(&h(&[]), 299, &resp), Err(NotStorable::Status));
        assert_eq!(check(&h(&[]), 599, &resp), Err(NotStorable::Status));
    }

    #[test]
    fn private_response_not_stored_in_shared_cache_9111_5_2_2_7() {
        let resp = h(&[(header::CACHE_CONTROL, "private, max-age=60")]);
        assert_eq!(check(&h(&[]), 200, &resp), Err(NotStorable::Private));
        let qualified = h(&[(header::CACHE_CONTROL, "private=\"x-user\", max-age=60")]);
        assert_eq!(check(&h(&[]), 200, &qualified), Err(NotStorable::Private));
        let private_cache = Policy {
            shared: false,
            ..Policy::default()
        };
        assert_eq!(
            storability(
                &private_cache,
                &Method::GET,
                &h(&[]),
                StatusCode::FOUND,
                &resp
            ),
            Ok(())
        );
    }

    #[test]
    fn authorization_response_not_stored_without_public_9111_3_5() {
        let req = h(&[(header::AUTHORIZATION, "Basic Zm9vOmJhcg==")]);
        let plain = h(&[(header::CACHE_CONTROL, "max-age=60")]);
        assert_eq!(check(&req, 200, &plain), Err(NotStorable::Authorization));
        for allowing in ["public", "must-revalidate, max-age=60", "s-maxage=60"] {
            let resp = h(&[(header::CACHE_CONTROL, allowing)]);
            assert_eq!(check(&req, 200, &resp), Ok(()), "{allowing}");
        }
        let private_cache = Policy {
            shared: false,
            ..Policy::default()
        };
        assert_eq!(
            storability(&private_cache, &Method::GET, &req, StatusCode::OK, &plain),
            Ok(())
        );
    }

    #[test]
    fn vary_star_is_not_stored_9111_4_1() {
        let resp = h(&[
            (header::VARY, "accept-encoding, *"),
            (header::CACHE_CONTROL, "max-age=60"),
        ]);
        assert_eq!(check(&h(&[]), 200, &resp), Err(NotStorable::VaryStar));
    }

    #[test]
    fn response_without_freshness_information_is_not_stored_9111_3() {
        assert_eq!(check(&h(&[]), 302, &h(&[])), Err(NotStorable::NoFreshness));
        assert_eq!(check(&h(&[]), 500, &h(&[])), Err(NotStorable::NoFreshness));
        assert_eq!(check(&h(&[]), 201, &h(&[])), Err(NotStorable::NoFreshness));
        for allowing in [
            (header::CACHE_CONTROL, "max-age=10"),
            (header::CACHE_CONTROL, "s-maxage=10"),
            (header::CACHE_CONTROL, "public"),
            (header::EXPIRES, "Thu, 01 Jan 2099 00:00:00 GMT"),
            (header::EXPIRES, "0"),
        ] {
            assert_eq!(
                check(&h(&[]), 302, &h(std::slice::from_ref(&allowing))),
                Ok(()),
                "{allowing:?}"
            );
        }
    }

    #[test]
    fn no_cache_response_is_storable_9111_5_2_2_4() {
        let resp = h(&[(header::CACHE_CONTROL, "no-cache")]);
        assert_eq!(check(&h(&[]), 200, &resp), Ok(()));
    }

    #[test]
    fn cdn_cache_control_decides_storage_in_reverse_mode_9213_2_1() {
        let resp = h(&[
            (header::CACHE_CONTROL, "no-store"),
            (CDN_CACHE_CONTROL, "max-age=60"),
        ]);
        let p = Policy::reverse_proxy();
        assert_eq!(
            storability(&p, &Method::GET, &h(&[]), StatusCode::OK, &resp),
            Ok(())
        );
        let resp2 = h(&[
            (header::CACHE_CONTROL, "max-age=60"),
            (CDN_CACHE_CONTROL, "no-store"),
        ]);
        assert_eq!(
            storability(&p, &Method::GET, &h(&[]), StatusCode::OK, &resp2),
            Err(NotStorable::NoStore)
        );
        // Expires does not count once a targeted field applies.
        let resp3 = h(&[
            (header::EXPIRES, "Thu, 01 Jan 2099 00:00:00 GMT"),
            (CDN_CACHE_CONTROL, "none"),
        ]);
        assert_eq!(
            storability(&p, &Method::GET, &h(&[]), StatusCode::FOUND, &resp3),
            Err(NotStorable::NoFreshness)
        );
    }

    #[test]
    fn reasons_have_stable_names() {
        assert_eq!(NotStorable::NoStore.as_str(), "no-store");
        assert_eq!(NotStorable::Authorization.to_string(), "authorization");
        assert_eq!(NotStorable::VaryStar.as_str(), "vary-star");
        assert_eq!(NotStorable::NoFreshness.as_str(), "no-freshness");
    }
}

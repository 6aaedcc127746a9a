//! Every caching rule over hostile request and response fields: Cache-Control (plain and
//! targeted), freshness and age, storability, reuse, Vary, validators, preconditions, ranges
//! and invalidation must never panic. Input: lines, each `[field][side][value…]`: the first
//! byte picks a field name, the second whether it goes in the request or the response.
#![no_main]

use std::time::{Duration, SystemTime};

use http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use libfuzzer_sys::fuzz_target;
use trove_http::cache_control::CacheControl;
use trove_http::policy::Policy;
use trove_http::{
    freshness, invalidate, preconditions, range, reuse, storable, validation, vary, Target,
};

fn fields() -> [HeaderName; 24] {
    [
        header::CACHE_CONTROL,
        header::PRAGMA,
        header::EXPIRES,
        header::DATE,
        header::AGE,
        header::LAST_MODIFIED,
        header::ETAG,
        header::VARY,
        header::RANGE,
        header::IF_RANGE,
        header::IF_MATCH,
        header::IF_NONE_MATCH,
        header::IF_MODIFIED_SINCE,
        header::IF_UNMODIFIED_SINCE,
        header::CONTENT_RANGE,
        header::LOCATION,
        header::CONTENT_LOCATION,
        header::ACCEPT_ENCODING,
        header::AUTHORIZATION,
        header::CONNECTION,
        header::CONTENT_LENGTH,
        header::SET_COOKIE,
        trove_http::CDN_CACHE_CONTROL,
        trove_http::TROVE_CACHE_CONTROL,
    ]
}

fuzz_target!(|data: &[u8]| {
    let mut req = HeaderMap::new();
    let mut resp = HeaderMap::new();
    let mut status = StatusCode::OK;
    let fields = fields();
    for line in data.split(|&b| b == b'\n') {
        let [field, side, value @ ..] = line else {
            continue;
        };
        if let Ok(text) = std::str::from_utf8(value) {
            let _ = CacheControl::parse(text);
            let _ = CacheControl::parse_targeted(text);
        }
        if *side == b'S' {
            let code = u16::from(*field) * 4 % 500 + 100;
            status = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
            continue;
        }
        let name = fields[usize::from(*field) % fields.len()].clone();
        if let Ok(v) = HeaderValue::from_bytes(value) {
            if side % 2 == 0 { &mut req } else { &mut resp }.append(name, v);
        }
    }
    let epoch = SystemTime::UNIX_EPOCH;
    let (t1, t2, t3) = (
        epoch + Duration::from_secs(1_700_000_000),
        epoch + Duration::from_secs(1_700_000_001),
        epoch + Duration::from_secs(1_700_000_100),
    );
    let _ = CacheControl::from_request(&req);
    for policy in [Policy::default(), Policy::reverse_proxy()] {
        let _ = storable::storability(&policy, &Method::GET, &req, status, &resp);
        let _ = freshness::freshness_lifetime(&policy, status, &resp);
        let stored = reuse::StoredResponse {
            method: &Method::GET,
            status,
            headers: &resp,
            request_headers: &req,
            request_time: t1,
            response_time: t2,
        };
        let _ = reuse::reuse(&policy, &stored, &Method::GET, &req, t3);
        let _ = reuse::stale_if_error_allows(&policy, &stored, &req, t3);
    }
    let _ = freshness::current_age(&resp, t1, t2, t3);
    let mut dated = resp.clone();
    freshness::ensure_date(&mut dated, t3);
    let v = vary::Vary::from_headers(&resp);
    let _ = vary::vary_matches(&v, &req, &resp);
    let _ = vary::variant_key(&v, &req);
    let _ = validation::conditional_headers(&resp);
    let _ = validation::freshen_headers(&resp, &req);
    let _ = validation::selects(&resp, &req);
    let _ = preconditions::evaluate(&Method::GET, &req, status, &resp);
    let _ = preconditions::not_modified_headers(&resp);
    for total in [0, 1, 1000] {
        let _ = range::range_outcome(&Method::GET, &req, &resp, total);
    }
    let _ = range::combinable(&resp, &req);
    if let Ok(t) = Target::parse("http://example.com/a/b?q") {
        for m in [Method::POST, Method::DELETE] {
            for k in invalidate::invalidation_targets(&m, status, &t, &resp) {
                // Only the target's own origin is ever invalidated.
                assert_eq!(k.origin(), t.origin());
            }
        }
    }
});

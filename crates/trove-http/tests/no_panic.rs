//! Every entry point accepts hostile field values without panicking.
//! Inputs are generated from a fixed seed so failures reproduce.

use std::time::{Duration, SystemTime};

use http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use trove_http::{
    cache_control::CacheControl, freshness, invalidate, key, policy::Policy, preconditions, range,
    reuse, storable, validation, vary,
};

const PIECES: &[&str] = &[
    "max-age",
    "s-maxage",
    "=",
    "\"",
    ",",
    ";",
    " ",
    "\t",
    "-",
    "0",
    "1",
    "99999999999999999999999",
    "no-cache",
    "private",
    "*",
    "W/",
    "bytes",
    "/",
    ":",
    "?",
    "#",
    "(",
    ")",
    "\\",
    "%",
    "%zz",
    "Sun, 06 Nov 1994 08:49:37 GMT",
    "stale-while-revalidate",
    "max-stale",
    "\u{e9}",
    "\u{ff}",
    "..",
    "//",
    "[::1]",
    "@",
    "no-store",
    "must-understand",
    "gzip",
    "etag",
    "\"v1\"",
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn string(&mut self) -> String {
        let n = self.next() % 8;
        (0..n)
            .map(|_| PIECES[(self.next() % PIECES.len() as u64) as usize])
            .collect()
    }
}

const FIELDS: &[HeaderName] = &[
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
];

fn headers(rng: &mut Rng) -> HeaderMap {
    let mut h = HeaderMap::new();
    for _ in 0..(rng.next() % 6) {
        let name = FIELDS[(rng.next() % FIELDS.len() as u64) as usize].clone();
        let mut bytes = rng.string().into_bytes();
        bytes.retain(|b| *b >= 0x20 || *b == b'\t');
        if let Ok(v) = HeaderValue::from_bytes(&bytes) {
            h.append(name, v);
        }
    }
    for name in [
        trove_http::CDN_CACHE_CONTROL,
        trove_http::TROVE_CACHE_CONTROL,
    ] {
        if rng.next().is_multiple_of(3) {
            if let Ok(v) = HeaderValue::from_str(&rng.string()) {
                h.append(name, v);
            }
        }
    }
    h
}

#[test]
fn hostile_inputs_never_panic() {
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let policies = [Policy::default(), Policy::reverse_proxy()];
    let base: Uri = "http://example.com/a/b?q".parse().expect("uri");
    let times = [
        SystemTime::UNIX_EPOCH,
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        SystemTime::UNIX_EPOCH + Duration::from_secs(u32::MAX as u64 * 100),
    ];
    for i in 0..20_000 {
        let req = headers(&mut rng);
        let resp = headers(&mut rng);
        let text = rng.string();
        let policy = &policies[i % 2];
        let status = StatusCode::from_u16(100 + (rng.next() % 500) as u16).expect("status");
        let t = |r: &mut Rng| times[(r.next() % 3) as usize];
        let (t1, t2, t3) = (t(&mut rng), t(&mut rng), t(&mut rng));

        let _ = CacheControl::parse(&text);
        let _ = CacheControl::parse_targeted(&text);
        let _ = CacheControl::from_request(&req);
        let _ = storable::storability(policy, &Method::GET, &req, status, &resp);
        let _ = freshness::freshness_lifetime(policy, status, &resp);
        let _ = freshness::current_age(&resp, t1, t2, t3);
        let mut dated = resp.clone();
        freshness::ensure_date(&mut dated, t3);
        let stored = reuse::StoredResponse {
            method: &Method::GET,
            status,
            headers: &resp,
            request_headers: &req,
            request_time: t1,
            response_time: t2,
        };
        let _ = reuse::reuse(policy, &stored, &Method::GET, &req, t3);
        let _ = reuse::stale_if_error_allows(policy, &stored, &req, t3);
        let v = vary::Vary::from_headers(&resp);
        let _ = vary::vary_matches(&v, &req, &resp);
        let _ = vary::variant_key(&v, &req);
        let _ = validation::conditional_headers(&resp);
        let _ = validation::freshen_headers(&resp, &req);
        let _ = validation::selects(&resp, &req);
        let _ = preconditions::evaluate(&Method::GET, &req, status, &resp);
        let _ = preconditions::not_modified_headers(&resp);
        let total = rng.next() % 3 * (rng.next() % 1000);
        let _ = range::parse_range(&text, total);
        let _ = range::range_outcome(&Method::GET, &req, &resp, total);
        let _ = range::parse_content_range(&text);
        let _ = range::combinable(&resp, &req);
        let _ = invalidate::resolve_reference(&base, &text);
        if let Ok(t) = trove_http::Target::from_absolute(&base) {
            let _ = invalidate::invalidation_targets(&Method::POST, status, &t, &resp);
        }
        if let Ok(v) = HeaderValue::from_str(&text) {
            let mut h = http::HeaderMap::new();
            h.insert(http::header::HOST, v);
            for target in ["/x", "*", "http://a/b"] {
                let _ = trove_http::Target::from_request(
                    &target.parse().expect("uri"),
                    &h,
                    http::Version::HTTP_11,
                );
            }
        }
        if let Ok(u) = text.parse::<Uri>() {
            let _ = key::cache_key(&u);
            if let Ok(t) = trove_http::Target::from_absolute(&u) {
                // The normal form is a fixed point: normalising it again changes nothing.
                let again = trove_http::Target::parse(t.key()).expect("a key parses");
                assert_eq!(again.key(), t.key());
            }
        }
    }
}

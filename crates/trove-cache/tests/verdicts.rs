//! The core's verdicts as a table: for a stored response of a given age (or none), a
//! request, and what the origin answers, the result code and status the client gets, the
//! `Cache-Status` it carries, how many requests reached the origin (and whether they were
//! conditional), and what a plain GET right after finds. One line a case, read like
//! Varnish's `.vtc` files; every expectation is the RFC's (RFC 9111 sections in the
//! names), worked out by hand, not recorded from a run.
//!
//! Columns, separated by `|`:
//! - **name** of the case;
//! - **stored**: the response headers the origin gave a first GET (stored if storable),
//!   `name: value` pairs separated by `;`, or `-` for nothing asked before;
//! - **age**: seconds from that first GET to the request under test;
//! - **request**: method, then header fields, separated by `;`;
//! - **answer**: what the origin answers the request under test (and any background
//!   revalidation it causes): status then fields, `fail` (connection refused), `timeout`,
//!   or `-` when it must not be asked (asking then fails the request, which the result
//!   column catches);
//! - **result**: Squid's `RESULT/status`;
//! - **cache-status**: the `Cache-Status` member after `trove; `;
//! - **asked**: origin requests for the request under test, `c` when each was
//!   conditional (`1c`);
//! - **then**: `RESULT/status` of a plain GET right after (the origin, if asked, answers
//!   200 with `max-age=60`), or `-`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{IF_MODIFIED_SINCE, IF_NONE_MATCH};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use trove_cache::engine::{Engine, Forward, Origin, OriginAnswer};
use trove_cache::{CookiePolicy, OriginFailure};
use trove_http::Policy;
use trove_store::{EvictionKind, MemoryStore};

const TABLE: &str = r#"
# misses and what is stored (RFC 9111 §3)
miss, stored                 | - | 0 | GET | 200; cache-control: max-age=60 | TCP_MISS/200 | fwd=uri-miss; fwd-status=200; stored | 1 | TCP_MEM_HIT/200
miss, no-store §5.2.2.5      | - | 0 | GET | 200; cache-control: no-store | TCP_MISS/200 | fwd=uri-miss; fwd-status=200; detail=no-store | 1 | TCP_MISS/200
miss, private §5.2.2.7       | - | 0 | GET | 200; cache-control: private, max-age=60 | TCP_MISS/200 | fwd=uri-miss; fwd-status=200; detail=private | 1 | TCP_MISS/200
miss, request no-store §5.2.1.5 | - | 0 | GET; cache-control: no-store | 200; cache-control: max-age=60 | TCP_MISS/200 | fwd=uri-miss; fwd-status=200; detail=request-no-store | 1 | TCP_MISS/200
miss, vary star §4.1         | - | 0 | GET | 200; cache-control: max-age=60; vary: * | TCP_MISS/200 | fwd=uri-miss; fwd-status=200; detail=vary-star | 1 | TCP_MISS/200
miss, authorization §3.5     | - | 0 | GET; authorization: Basic eDp5 | 200; cache-control: max-age=60 | TCP_MISS/200 | fwd=uri-miss; fwd-status=200; detail=authorization | 1 | TCP_MISS/200
miss, authorization public §3.5 | - | 0 | GET; authorization: Basic eDp5 | 200; cache-control: public, max-age=60 | TCP_MISS/200 | fwd=uri-miss; fwd-status=200; stored | 1 | TCP_MEM_HIT/200
miss, s-maxage stores §3.5   | - | 0 | GET; authorization: Basic eDp5 | 200; cache-control: s-maxage=60 | TCP_MISS/200 | fwd=uri-miss; fwd-status=200; stored | 1 | TCP_MEM_HIT/200
miss, 500 not heuristic §4.2.2 | - | 0 | GET | 500 | TCP_MISS/500 | fwd=uri-miss; fwd-status=500; detail=no-freshness | 1 | TCP_MISS/200
miss, 404 heuristic §4.2.2   | - | 0 | GET | 404; last-modified: Fri, 01 Dec 2023 00:00:00 GMT | TCP_MISS/404 | fwd=uri-miss; fwd-status=404; stored | 1 | TCP_NEGATIVE_HIT/404
miss, 200 max-age=0 stored   | - | 0 | GET | 200; cache-control: max-age=0; etag: "a" | TCP_MISS/200 | fwd=uri-miss; fwd-status=200; stored | 1 | TCP_REFRESH_MODIFIED/200
miss, HEAD stores nothing    | - | 0 | HEAD | 200; cache-control: max-age=60 | TCP_MISS/200 | fwd=uri-miss; fwd-status=200; detail=method | 1 | TCP_MISS/200
miss, origin refused         | - | 0 | GET | fail | TCP_MISS/502 | fwd=uri-miss; detail=connection-refused | 1 | TCP_MISS/200
miss, origin timed out       | - | 0 | GET | timeout | TCP_MISS/504 | fwd=uri-miss; detail=timeout | 1 | TCP_MISS/200
miss, only-if-cached §5.2.1.7 | - | 0 | GET; cache-control: only-if-cached | - | NONE_NONE/504 | fwd=miss; detail=only-if-cached | 0 | TCP_MISS/200
miss, after uncachable answer | cache-control: no-store | 0 | GET | 200; cache-control: max-age=60 | TCP_MISS/200 | fwd=miss; fwd-status=200; stored | 1 | TCP_MEM_HIT/200

# status codes (RFC 9110 §15.1: heuristically cacheable ones; RFC 9111 §3)
301 heuristic                | - | 0 | GET | 301; location: /b; last-modified: Fri, 01 Dec 2023 00:00:00 GMT | TCP_MISS/301 | fwd=uri-miss; fwd-status=301; stored | 1 | TCP_MEM_HIT/301
308 heuristic                | - | 0 | GET | 308; location: /b; last-modified: Fri, 01 Dec 2023 00:00:00 GMT | TCP_MISS/308 | fwd=uri-miss; fwd-status=308; stored | 1 | TCP_MEM_HIT/308
302 not heuristic            | - | 0 | GET | 302; location: /b; last-modified: Fri, 01 Dec 2023 00:00:00 GMT | TCP_MISS/302 | fwd=uri-miss; fwd-status=302; detail=no-freshness | 1 | TCP_MISS/200
302 with max-age             | - | 0 | GET | 302; location: /b; cache-control: max-age=60 | TCP_MISS/302 | fwd=uri-miss; fwd-status=302; stored | 1 | TCP_MEM_HIT/302
410 heuristic                | - | 0 | GET | 410; last-modified: Fri, 01 Dec 2023 00:00:00 GMT | TCP_MISS/410 | fwd=uri-miss; fwd-status=410; stored | 1 | TCP_NEGATIVE_HIT/410
503 with max-age             | - | 0 | GET | 503; cache-control: max-age=60 | TCP_MISS/503 | fwd=uri-miss; fwd-status=503; stored | 1 | TCP_NEGATIVE_HIT/503

# freshness lifetimes (RFC 9111 §4.2.1, §5.2.2.1, §5.3)
Expires in the past          | date: Mon, 01 Jan 2024 00:00:00 GMT; expires: Sun, 31 Dec 2023 00:00:00 GMT | 10 | GET | 200; cache-control: max-age=60 | TCP_MISS/200 | fwd=stale; fwd-status=200; stored | 1 | TCP_MEM_HIT/200
invalid Expires is past §5.3 | expires: 0 | 10 | GET | 200; cache-control: max-age=60 | TCP_MISS/200 | fwd=stale; fwd-status=200; stored | 1 | TCP_MEM_HIT/200
max-age over Expires §5.3    | cache-control: max-age=60; expires: Sun, 31 Dec 2023 00:00:00 GMT | 10 | GET | - | TCP_MEM_HIT/200 | hit | 0 | TCP_MEM_HIT/200
malformed max-age is stale §4.2.1 | cache-control: max-age=soon | 10 | GET | 200; cache-control: max-age=60 | TCP_MISS/200 | fwd=stale; fwd-status=200; stored | 1 | TCP_MEM_HIT/200
conflicting max-age is stale §4.2.1 | cache-control: max-age=60, max-age=10 | 5 | GET | 200; cache-control: max-age=60 | TCP_MISS/200 | fwd=stale; fwd-status=200; stored | 1 | TCP_MEM_HIT/200
s-maxage=0 in a shared cache | cache-control: s-maxage=0, max-age=60 | 10 | GET | 200; cache-control: max-age=60 | TCP_MISS/200 | fwd=stale; fwd-status=200; stored | 1 | TCP_MEM_HIT/200

# fresh hits (RFC 9111 §4.2)
hit, max-age                 | cache-control: max-age=60 | 10 | GET | - | TCP_MEM_HIT/200 | hit | 0 | TCP_MEM_HIT/200
hit, HEAD                    | cache-control: max-age=60 | 10 | HEAD | - | TCP_MEM_HIT/200 | hit | 0 | TCP_MEM_HIT/200
hit, s-maxage over max-age §5.2.2.10 | cache-control: max-age=0, s-maxage=60 | 10 | GET | - | TCP_MEM_HIT/200 | hit | 0 | TCP_MEM_HIT/200
hit, Expires §5.3            | date: Mon, 01 Jan 2024 00:00:00 GMT; expires: Mon, 01 Jan 2024 01:00:00 GMT | 10 | GET | - | TCP_MEM_HIT/200 | hit | 0 | TCP_MEM_HIT/200
hit, heuristic §4.2.2        | last-modified: Fri, 01 Dec 2023 00:00:00 GMT | 60 | GET | - | TCP_MEM_HIT/200 | hit | 0 | TCP_MEM_HIT/200
stale, origin's Age counts §4.2.3 | cache-control: max-age=60; age: 55 | 10 | GET | 200; cache-control: max-age=60 | TCP_MISS/200 | fwd=stale; fwd-status=200; stored | 1 | TCP_MEM_HIT/200
hit, set-cookie stripped     | cache-control: max-age=60; set-cookie: a=1 | 10 | GET | - | TCP_MEM_HIT/200 | hit | 0 | TCP_MEM_HIT/200
hit, only-if-cached          | cache-control: max-age=60 | 10 | GET; cache-control: only-if-cached | - | TCP_MEM_HIT/200 | hit | 0 | TCP_MEM_HIT/200
hit, If-None-Match matches   | cache-control: max-age=60; etag: "a" | 10 | GET; if-none-match: "a" | - | TCP_IMS_HIT/304 | hit | 0 | TCP_MEM_HIT/200
hit, If-None-Match differs   | cache-control: max-age=60; etag: "a" | 10 | GET; if-none-match: "b" | - | TCP_MEM_HIT/200 | hit | 0 | TCP_MEM_HIT/200
hit, Range                   | cache-control: max-age=60 | 10 | GET; range: bytes=0-0 | - | TCP_MEM_HIT/206 | hit | 0 | TCP_MEM_HIT/200
hit, If-Modified-Since §13.1.3 | cache-control: max-age=60; last-modified: Fri, 01 Dec 2023 00:00:00 GMT | 10 | GET; if-modified-since: Mon, 01 Jan 2024 00:00:00 GMT | - | TCP_IMS_HIT/304 | hit | 0 | TCP_MEM_HIT/200
hit, If-Match fails §13.1.1  | cache-control: max-age=60; etag: "a" | 10 | GET; if-match: "b" | - | TCP_MEM_HIT/412 | hit | 0 | TCP_MEM_HIT/200
hit, Range not satisfiable §14.1.1 | cache-control: max-age=60 | 10 | GET; range: bytes=100-200 | - | TCP_MEM_HIT/416 | hit | 0 | TCP_MEM_HIT/200
hit, request no-store still reads §5.2.1.5 | cache-control: max-age=60 | 10 | GET; cache-control: no-store | - | TCP_MEM_HIT/200 | hit | 0 | TCP_MEM_HIT/200
hit, vary matches §4.1       | cache-control: max-age=60; vary: accept-language | 10 | GET | - | TCP_MEM_HIT/200 | hit | 0 | TCP_MEM_HIT/200

# Vary (RFC 9111 §4.1)
vary miss, other language    | cache-control: max-age=60; vary: accept-language | 10 | GET; accept-language: fr | 200; cache-control: max-age=60; vary: accept-language | TCP_MISS/200 | fwd=vary-miss; fwd-status=200; stored | 1 | TCP_MEM_HIT/200

# stale: revalidate, or serve stale where allowed (RFC 9111 §4.2.4, §4.3; RFC 5861)
stale, 304 freshens §4.3.4   | cache-control: max-age=60; etag: "a" | 61 | GET | 304; etag: "a"; cache-control: max-age=60 | TCP_REFRESH_UNMODIFIED/200 | fwd=stale; fwd-status=304 | 1c | TCP_MEM_HIT/200
stale, 304 by Last-Modified  | cache-control: max-age=60; last-modified: Mon, 01 Jan 2024 00:00:00 GMT | 61 | GET | 304; cache-control: max-age=60 | TCP_REFRESH_UNMODIFIED/200 | fwd=stale; fwd-status=304 | 1c | TCP_MEM_HIT/200
stale, 304 other validator §4.3.4 | cache-control: max-age=60; etag: "a" | 61 | GET | 304; etag: "b"; cache-control: max-age=60 | TCP_REFRESH_MODIFIED/200 | fwd=stale; fwd-status=200; stored | 2 | TCP_MEM_HIT/200
stale, 200 replaces          | cache-control: max-age=60; etag: "a" | 61 | GET | 200; etag: "b"; cache-control: max-age=60 | TCP_REFRESH_MODIFIED/200 | fwd=stale; fwd-status=200; stored | 1c | TCP_MEM_HIT/200
stale, no validator refetches | cache-control: max-age=60 | 61 | GET | 200; cache-control: max-age=60 | TCP_MISS/200 | fwd=stale; fwd-status=200; stored | 1 | TCP_MEM_HIT/200
stale, origin down, served §4.2.4 | cache-control: max-age=60; etag: "a" | 61 | GET | fail | TCP_REFRESH_FAIL_OLD/200 | hit; fwd=stale; detail=stale-disconnected | 1c | TCP_REFRESH_MODIFIED/200
stale, origin down, must-revalidate §5.2.2.2 | cache-control: max-age=60, must-revalidate; etag: "a" | 61 | GET | fail | TCP_REFRESH_FAIL_ERR/504 | fwd=stale; detail=connection-refused | 1c | TCP_REFRESH_MODIFIED/200
stale, 500 served with stale-if-error | cache-control: max-age=60, stale-if-error=300; etag: "a" | 61 | GET | 500 | TCP_REFRESH_FAIL_OLD/200 | hit; fwd=stale; fwd-status=500; detail=stale-if-error | 1c | TCP_REFRESH_MODIFIED/200
stale, 500 without stale-if-error | cache-control: max-age=60; etag: "a" | 61 | GET | 500 | TCP_REFRESH_MODIFIED/500 | fwd=stale; fwd-status=500; detail=no-freshness | 1c | TCP_REFRESH_MODIFIED/200
stale, 500 past stale-if-error | cache-control: max-age=60, stale-if-error=5; etag: "a" | 120 | GET | 500 | TCP_REFRESH_MODIFIED/500 | fwd=stale; fwd-status=500; detail=no-freshness | 1c | TCP_REFRESH_MODIFIED/200
stale-while-revalidate       | cache-control: max-age=60, stale-while-revalidate=30; etag: "a" | 70 | GET | 304; etag: "a"; cache-control: max-age=60 | TCP_STALE_HIT/200 | hit; fwd=stale; detail=stale-while-revalidate | 1c | TCP_MEM_HIT/200
stale-while-revalidate, past the window | cache-control: max-age=60, stale-while-revalidate=5; etag: "a" | 70 | GET | 304; etag: "a"; cache-control: max-age=60 | TCP_REFRESH_UNMODIFIED/200 | fwd=stale; fwd-status=304 | 1c | TCP_MEM_HIT/200
max-stale serves stale §5.2.1.2 | cache-control: max-age=60; etag: "a" | 70 | GET; cache-control: max-stale=20 | - | TCP_STALE_HIT/200 | hit; fwd=stale; detail=max-stale | 0 | TCP_REFRESH_MODIFIED/200
max-stale too small          | cache-control: max-age=60; etag: "a" | 90 | GET; cache-control: max-stale=20 | 304; etag: "a"; cache-control: max-age=60 | TCP_REFRESH_UNMODIFIED/200 | fwd=stale; fwd-status=304 | 1c | TCP_MEM_HIT/200
max-stale, must-revalidate wins §5.2.2.2 | cache-control: max-age=60, must-revalidate; etag: "a" | 70 | GET; cache-control: max-stale | 304; etag: "a"; cache-control: max-age=60 | TCP_REFRESH_UNMODIFIED/200 | fwd=stale; fwd-status=304 | 1c | TCP_MEM_HIT/200
stale, only-if-cached §5.2.1.7 | cache-control: max-age=60; etag: "a" | 61 | GET; cache-control: only-if-cached | - | NONE_NONE/504 | fwd=miss; detail=only-if-cached | 0 | TCP_REFRESH_MODIFIED/200
no-cache response validates §5.2.2.4 | cache-control: no-cache, max-age=60; etag: "a" | 1 | GET | 304; etag: "a" | TCP_REFRESH_UNMODIFIED/200 | fwd=stale; fwd-status=304 | 1c | TCP_REFRESH_MODIFIED/200

# the client asks for validation (RFC 9111 §5.2.1)
request no-cache §5.2.1.4    | cache-control: max-age=60; etag: "a" | 10 | GET; cache-control: no-cache | 304; etag: "a"; cache-control: max-age=60 | TCP_REFRESH_UNMODIFIED/200 | fwd=request; fwd-status=304 | 1c | TCP_MEM_HIT/200
request Pragma no-cache §5.4 | cache-control: max-age=60; etag: "a" | 10 | GET; pragma: no-cache | 200; etag: "b"; cache-control: max-age=60 | TCP_CLIENT_REFRESH_MISS/200 | fwd=request; fwd-status=200; stored | 1c | TCP_MEM_HIT/200
request max-age=5 §5.2.1.1   | cache-control: max-age=60; etag: "a" | 10 | GET; cache-control: max-age=5 | 304; etag: "a"; cache-control: max-age=60 | TCP_REFRESH_UNMODIFIED/200 | fwd=request; fwd-status=304 | 1c | TCP_MEM_HIT/200
request max-age=30 §5.2.1.1  | cache-control: max-age=60; etag: "a" | 10 | GET; cache-control: max-age=30 | - | TCP_MEM_HIT/200 | hit | 0 | TCP_MEM_HIT/200
request min-fresh §5.2.1.3   | cache-control: max-age=60; etag: "a" | 10 | GET; cache-control: min-fresh=55 | 304; etag: "a"; cache-control: max-age=60 | TCP_REFRESH_UNMODIFIED/200 | fwd=request; fwd-status=304 | 1c | TCP_MEM_HIT/200
request min-fresh met        | cache-control: max-age=60; etag: "a" | 10 | GET; cache-control: min-fresh=40 | - | TCP_MEM_HIT/200 | hit | 0 | TCP_MEM_HIT/200
request no-cache, no validator | cache-control: max-age=60 | 10 | GET; cache-control: no-cache | 200; cache-control: max-age=60 | TCP_CLIENT_REFRESH_MISS/200 | fwd=request; fwd-status=200; stored | 1 | TCP_MEM_HIT/200

# unsafe methods and PURGE (RFC 9111 §4.4)
POST invalidates §4.4        | cache-control: max-age=60 | 10 | POST | 200 | TCP_MISS/200 | fwd=method; fwd-status=200 | 1 | TCP_MISS/200
POST error keeps §4.4        | cache-control: max-age=60 | 10 | POST | 500 | TCP_MISS/500 | fwd=method; fwd-status=500 | 1 | TCP_MEM_HIT/200
DELETE invalidates §4.4      | cache-control: max-age=60 | 10 | DELETE | 204 | TCP_MISS/204 | fwd=method; fwd-status=204 | 1 | TCP_MISS/200
PURGE of a stored URL        | cache-control: max-age=60 | 10 | PURGE | - | TCP_PURGE/200 | - | 0 | TCP_MISS/200
PURGE of nothing             | - | 0 | PURGE | - | TCP_PURGE/404 | - | 0 | TCP_MISS/200
"#;

/// The origin's answers to the request under test, counted.
struct Scripted {
    answers: Vec<Answer>,
    asked: usize,
    conditional: usize,
}

#[derive(Clone)]
enum Answer {
    Response(StatusCode, HeaderMap),
    Fail(OriginFailure),
}

impl Origin for Scripted {
    fn fetch(&mut self, req: &Forward<'_>) -> Result<OriginAnswer, OriginFailure> {
        self.asked += 1;
        if req.headers.contains_key(IF_NONE_MATCH) || req.headers.contains_key(IF_MODIFIED_SINCE) {
            self.conditional += 1;
        }
        // The last answer repeats (a validation that is refetched asks twice).
        let answer = if self.answers.len() > 1 {
            self.answers.remove(0)
        } else {
            self.answers
                .first()
                .cloned()
                .ok_or(OriginFailure::ConnectionRefused)?
        };
        match answer {
            Answer::Fail(f) => Err(f),
            Answer::Response(status, headers) => Ok(OriginAnswer {
                status,
                headers,
                body: if status == StatusCode::NOT_MODIFIED || status == StatusCode::NO_CONTENT {
                    Bytes::new().into()
                } else {
                    Bytes::from_static(b"stored-body").into()
                },
            }),
        }
    }
}

fn fields(parts: &[&str]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for p in parts.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        let (name, value) = p.split_once(':').unwrap_or_else(|| panic!("field {p:?}"));
        h.append(
            HeaderName::from_bytes(name.trim().as_bytes()).unwrap(),
            HeaderValue::from_str(value.trim()).unwrap(),
        );
    }
    h
}

fn answer(col: &str) -> Vec<Answer> {
    match col.trim() {
        "-" => Vec::new(),
        "fail" => vec![Answer::Fail(OriginFailure::ConnectionRefused)],
        "timeout" => vec![Answer::Fail(OriginFailure::Timeout)],
        s => {
            let parts: Vec<&str> = s.split(';').collect();
            let status: u16 = parts[0].trim().parse().expect("status");
            let resp = Answer::Response(StatusCode::from_u16(status).unwrap(), fields(&parts[1..]));
            // A 304 that does not answer the stored response is followed by a whole fetch.
            if status == 304 {
                vec![
                    resp,
                    Answer::Response(StatusCode::OK, fields(&["cache-control: max-age=60"])),
                ]
            } else {
                vec![resp]
            }
        }
    }
}

fn result(s: &trove_cache::engine::Served) -> String {
    format!("{}/{}", s.outcome.as_str(), s.status.as_u16())
}

#[test]
fn every_verdict_in_the_table() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_704_067_200); // 2024-01-01
    let key = "http://example.test/a";
    let mut failures = Vec::new();
    let mut cases = 0;
    for line in TABLE.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        cases += 1;
        let cols: Vec<&str> = line.split('|').map(str::trim).collect();
        assert_eq!(cols.len(), 9, "nine columns: {line}");
        let [name, stored, age, request, answered, want, want_status, want_asked, then] = cols[..]
        else {
            unreachable!()
        };
        let store = Arc::new(MemoryStore::new(8 << 20, 4, 1 << 20, EvictionKind::Lru));
        let mut engine = Engine::new(store, Policy::default(), CookiePolicy::default());
        let plain = HeaderMap::new();
        if stored != "-" {
            let mut prime = Scripted {
                answers: vec![Answer::Response(
                    StatusCode::OK,
                    fields(&stored.split(';').collect::<Vec<_>>()),
                )],
                asked: 0,
                conditional: 0,
            };
            engine.handle(&Method::GET, key, &plain, t0, &mut prime);
        }
        let now = t0 + Duration::from_secs(age.parse().expect("age"));
        let mut parts = request.split(';');
        let method = Method::from_bytes(parts.next().unwrap().trim().as_bytes()).unwrap();
        let headers = fields(&parts.collect::<Vec<_>>());
        let mut origin = Scripted {
            answers: answer(answered),
            asked: 0,
            conditional: 0,
        };
        let served = engine.handle(&method, key, &headers, now, &mut origin);
        let got_status = match served.cache_status.render().strip_prefix("trove; ") {
            Some(s) => s.to_string(),
            None => "-".to_string(),
        };
        let got_asked = format!(
            "{}{}",
            origin.asked,
            if origin.asked > 0 && origin.conditional == origin.asked {
                "c"
            } else {
                ""
            }
        );
        let mut after = Scripted {
            answers: answer("200; cache-control: max-age=60"),
            asked: 0,
            conditional: 0,
        };
        let got_then = if then == "-" {
            "-".to_string()
        } else {
            result(&engine.handle(&Method::GET, key, &plain, now, &mut after))
        };
        let got = [result(&served), got_status, got_asked, got_then];
        let wanted = [want, want_status, want_asked, then];
        if got.iter().zip(wanted).any(|(g, w)| g != w) {
            failures.push(format!(
                "{name}\n    want {}\n    got  {}",
                wanted.join(" | "),
                got.join(" | ")
            ));
        }
    }
    assert!(cases >= 50, "the table has {cases} cases");
    assert!(
        failures.is_empty(),
        "{} of {cases} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

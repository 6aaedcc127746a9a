//! The core's decisions on their own, for the cases a review found the drivers got wrong.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use trove_cache::engine::{Engine, Forward, Origin, OriginAnswer};
use trove_cache::{
    respond, Action, CookiePolicy, Lookup, Memo, OriginFailure, Request, RequestCookiePolicy,
    ResponseHead, Rules,
};
use trove_http::Policy;
use trove_store::{EvictionKind, MemoryStore, Storage};

fn h(fields: &[(&str, &str)]) -> HeaderMap {
    let mut m = HeaderMap::new();
    for (k, v) in fields {
        m.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    m
}

/// Answers every request with the next scripted response.
struct Script(Vec<(u16, HeaderMap, &'static str)>);

impl Origin for Script {
    fn fetch(&mut self, _req: &Forward<'_>) -> Result<OriginAnswer, OriginFailure> {
        if self.0.is_empty() {
            return Err(OriginFailure::ConnectionRefused);
        }
        let (status, headers, body) = self.0.remove(0);
        Ok(OriginAnswer {
            status: StatusCode::from_u16(status).unwrap(),
            headers,
            body: bytes::Bytes::from_static(body.as_bytes()).into(),
        })
    }
}

/// RFC 9111 §4.3.5 limits a HEAD's update to the stored responses that could have been
/// chosen for its request: a HEAD for `br` must not relabel the gzip and identity variants.
#[test]
fn a_head_response_updates_only_the_variants_its_request_selects() {
    let store = Arc::new(MemoryStore::new(8 << 20, 4, 1 << 20, EvictionKind::Lru));
    let mut engine = Engine::new(store.clone(), Policy::default(), CookiePolicy::default());
    let lm = "Mon, 01 Jan 2024 00:00:00 GMT";
    let vary = |enc: &'static str| {
        h(&[
            ("cache-control", "max-age=0"),
            ("vary", "accept-encoding"),
            ("last-modified", lm),
            ("content-encoding", enc),
        ])
    };
    let mut origin = Script(vec![
        (200, vary("gzip"), "gz"),
        (200, vary("br"), ""),
        (200, vary("identity"), "id"),
        (200, vary("identity"), ""),
    ]);
    let key = "http://example.com/v";
    let t = SystemTime::now();
    engine.handle(
        &Method::GET,
        key,
        &h(&[("accept-encoding", "gzip")]),
        t,
        &mut origin,
    );
    // One stored variant, and a HEAD whose request it does not match.
    engine.handle(
        &Method::HEAD,
        key,
        &h(&[("accept-encoding", "br")]),
        t,
        &mut origin,
    );
    let gz = &store.lookup(key)[0];
    assert_eq!(
        gz.head.headers["content-encoding"], "gzip",
        "not relabelled"
    );
    engine.handle(&Method::GET, key, &h(&[]), t, &mut origin);
    assert_eq!(store.lookup(key).len(), 2);
    // A HEAD that matches only the identity variant updates it (the Last-Modified alone
    // selects when one candidate is left).
    let s = engine.handle(&Method::HEAD, key, &h(&[]), t, &mut origin);
    assert!(s.steps.contains(&trove_cache::Step::Freshen), "{s:?}");
    let mut encodings: Vec<String> = store
        .lookup(key)
        .iter()
        .map(|o| {
            o.head.headers["content-encoding"]
                .to_str()
                .unwrap()
                .to_string()
        })
        .collect();
    encodings.sort();
    assert_eq!(encodings, ["gzip", "identity"], "no variant relabelled");
}

/// A HEAD response that could not be stored for a GET (here `private`) updates nothing.
#[test]
fn a_private_head_response_updates_nothing() {
    let store = Arc::new(MemoryStore::new(8 << 20, 4, 1 << 20, EvictionKind::Lru));
    let mut engine = Engine::new(store.clone(), Policy::default(), CookiePolicy::default());
    let mut origin = Script(vec![
        (
            200,
            h(&[("cache-control", "max-age=0"), ("etag", "\"x\"")]),
            "xx",
        ),
        (
            200,
            h(&[
                ("cache-control", "private, max-age=600"),
                ("etag", "\"x\""),
                ("x-user", "alice"),
            ]),
            "",
        ),
    ]);
    let key = "http://example.com/p";
    let t = SystemTime::now();
    engine.handle(&Method::GET, key, &h(&[]), t, &mut origin);
    engine.handle(&Method::HEAD, key, &h(&[]), t, &mut origin);
    let stored = store.lookup(key);
    assert!(!stored[0].head.headers.contains_key("x-user"));
}

/// only-if-cached wins over a cookie bypass: 504, never a request forward (RFC 9111
/// §5.2.1.7).
#[test]
fn only_if_cached_comes_before_a_cookie_bypass() {
    let cookies = CookiePolicy {
        request_cookie: RequestCookiePolicy::Bypass,
        ..Default::default()
    };
    let policy = Policy::default();
    let rules = Rules {
        policy: &policy,
        cookies: &cookies,
        wire: true,
    };
    let headers = h(&[("cookie", "s=1"), ("cache-control", "only-if-cached")]);
    let req = Request::new(&Method::GET, &headers);
    assert!(matches!(
        trove_cache::decide::after_lookup(req, Lookup::Miss, rules, Memo::Unknown),
        Action::OnlyIfCached
    ));
}

/// A 206 whose range is larger than the object limit is not stored, whatever it declares.
#[test]
fn a_partial_larger_than_the_limit_is_not_stored() {
    let policy = Policy::default();
    let cookies = CookiePolicy::default();
    let rules = Rules {
        policy: &policy,
        cookies: &cookies,
        wire: true,
    };
    let resp = h(&[
        ("cache-control", "max-age=60"),
        (
            "content-range",
            "bytes 0-18446744073709551613/18446744073709551614",
        ),
    ]);
    let head = ResponseHead {
        status: StatusCode::PARTIAL_CONTENT,
        headers: &resp,
        content_length: None,
        request_time: SystemTime::UNIX_EPOCH + Duration::from_secs(1),
        response_time: SystemTime::UNIX_EPOCH + Duration::from_secs(1),
    };
    let empty = HeaderMap::new();
    assert!(respond::may_store(Request::new(&Method::GET, &empty), &head, rules, 1 << 20).is_err());
}

/// Fails every request with one failure.
struct Failing(OriginFailure);

impl Origin for Failing {
    fn fetch(&mut self, _req: &Forward<'_>) -> Result<OriginAnswer, OriginFailure> {
        Err(self.0)
    }
}

/// A shed request is its own outcome (`TCP_SHED`), a 503 whose `Cache-Status` names why,
/// also when a stale stored response needed validating (the origin was never asked, so the
/// 504 of a failed validation would misreport it); stale-if-error still stands in for it.
#[test]
fn a_shed_request_is_a_503_of_its_own_outcome() {
    use trove_cache::{Outcome, ShedReason};
    let store = Arc::new(MemoryStore::new(8 << 20, 4, 1 << 20, EvictionKind::Lru));
    let mut engine = Engine::new(store.clone(), Policy::default(), CookiePolicy::default());
    let t = SystemTime::now();
    let shed = OriginFailure::Overloaded(ShedReason::QueueWait);
    let s = engine.handle(&Method::GET, "http://e/new", &h(&[]), t, &mut Failing(shed));
    assert_eq!(s.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(s.outcome, Outcome::Shed);
    assert_eq!(s.outcome.as_str(), "TCP_SHED");
    assert!(!s.outcome.is_hit());
    assert_eq!(
        s.cache_status.render(),
        "trove; fwd=uri-miss; detail=shed-queue-wait"
    );

    // Stored, then stale: without stale-if-error a shed validation is still a 503.
    let mut origin = Script(vec![(200, h(&[("cache-control", "max-age=1")]), "a")]);
    let key = "http://e/stale";
    engine.handle(&Method::GET, key, &h(&[]), t, &mut origin);
    let later = t + Duration::from_secs(10);
    let s = engine.handle(&Method::GET, key, &h(&[]), later, &mut Failing(shed));
    assert_eq!(s.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(s.outcome, Outcome::Shed);

    // With stale-if-error the stored response is served instead.
    let mut origin = Script(vec![(
        200,
        h(&[("cache-control", "max-age=1, stale-if-error=60")]),
        "b",
    )]);
    let key = "http://e/sie";
    engine.handle(&Method::GET, key, &h(&[]), t, &mut origin);
    let s = engine.handle(&Method::GET, key, &h(&[]), later, &mut Failing(shed));
    assert_eq!(s.status, StatusCode::OK);
    assert_eq!(s.outcome, Outcome::RefreshFailOld);
}

/// A driver that puts no head on a wire (`Engine::wire` off, as the simulator over memory
/// alone) is served and charged exactly as one that does, under eviction, `Set-Cookie`
/// stripping, `Vary`, passes and revalidation: only the wire form is left empty and the
/// answer's fields moved rather than copied.
#[test]
fn a_driver_without_a_wire_decides_as_one_with() {
    let answers = || {
        let mut v = Vec::new();
        for i in 0..40u32 {
            let fields = match i % 5 {
                0 => h(&[("cache-control", "max-age=60"), ("etag", "\"a\"")]),
                1 => h(&[("cache-control", "max-age=60"), ("set-cookie", "s=1")]),
                2 => h(&[("cache-control", "max-age=60"), ("vary", "accept")]),
                3 => h(&[("cache-control", "no-store")]),
                _ => h(&[("cache-control", "max-age=0"), ("etag", "\"b\"")]),
            };
            v.push((200, fields, "0123456789abcdef0123456789abcdef"));
        }
        v
    };
    let run = |wire: bool| {
        // Small enough that objects are evicted.
        let store = Arc::new(MemoryStore::new(4 << 10, 4, 1 << 20, EvictionKind::Lru));
        let mut engine = Engine::new(store.clone(), Policy::default(), CookiePolicy::default());
        engine.wire = wire;
        let mut origin = Script(answers());
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut out = Vec::new();
        for i in 0..120u64 {
            let key = format!("http://o.test/{}", i % 13);
            let now = t0 + Duration::from_secs(i);
            let s = engine.handle(&Method::GET, &key, &HeaderMap::new(), now, &mut origin);
            let stored: Vec<_> = store
                .lookup(&key)
                .iter()
                .map(|o| (o.charge(), o.head.prepared.wire.is_empty()))
                .collect();
            out.push((s, stored));
        }
        (out, store.stats().bytes, store.stats().evictions)
    };
    let (with, without) = (run(true), run(false));
    assert!(with.2 > 0, "the test should evict");
    assert_eq!(with.1, without.1);
    assert_eq!(with.2, without.2);
    for (i, ((a, sa), (b, sb))) in with.0.iter().zip(&without.0).enumerate() {
        assert_eq!(a, b, "request {i}");
        let charges = |s: &Vec<(u64, bool)>| s.iter().map(|x| x.0).collect::<Vec<_>>();
        assert_eq!(charges(sa), charges(sb), "request {i}");
        assert!(sa.iter().all(|x| !x.1), "with a wire: a wire form");
        assert!(sb.iter().all(|x| x.1), "without: none");
    }
}

//! The property the simulator relies on: the cache core driven alone (no sockets, a virtual
//! clock, the memory store, `trove_cache::engine`) and `trove serve` over loopback give the
//! same outcome, status and `Cache-Status` for the same script of requests and origin
//! answers, step by step, and ask the origin the same number of times.

mod kit;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use kit::{Action, Trove};
use trove_cache::engine::{self, Engine, Forward, OriginAnswer};
use trove_cache::{CookiePolicy, OriginFailure};
use trove_http::Policy;
use trove_store::{EvictionKind, MemoryStore};

/// What the origin does for one request that reaches it.
#[derive(Clone)]
enum Answer {
    Respond(u16, Vec<(&'static str, &'static str)>, &'static str),
}

/// One client request of the script.
struct Step {
    method: &'static str,
    path: &'static str,
    headers: Vec<(&'static str, &'static str)>,
}

fn step(
    method: &'static str,
    path: &'static str,
    headers: &[(&'static str, &'static str)],
) -> Step {
    Step {
        method,
        path,
        headers: headers.to_vec(),
    }
}

fn ok(headers: &[(&'static str, &'static str)], body: &'static str) -> Answer {
    Answer::Respond(200, headers.to_vec(), body)
}

/// The script: requests, and the origin's answers in the order it is asked.
fn script() -> (Vec<Step>, Vec<Answer>) {
    let steps = vec![
        // Fresh hit, conditional hit.
        step("GET", "/a", &[]),
        step("GET", "/a", &[]),
        step("GET", "/a", &[("if-none-match", "\"a1\"")]),
        // no-cache: revalidated every time; 304, then a new response.
        step("GET", "/b", &[]),
        step("GET", "/b", &[]),
        step("GET", "/b", &[]),
        // private: passed, then remembered as uncacheable.
        step("GET", "/c", &[]),
        step("GET", "/c", &[]),
        // A stored 404 is a negative hit.
        step("GET", "/d", &[]),
        step("GET", "/d", &[]),
        // stale-while-revalidate: a stale hit, refreshed behind it, then a fresh hit.
        step("GET", "/e", &[]),
        step("GET", "/e", &[]),
        step("GET", "/e", &[]),
        // An unsafe method invalidates.
        step("POST", "/a", &[]),
        step("GET", "/a", &[]),
        // only-if-cached with nothing stored.
        step("GET", "/f", &[("cache-control", "only-if-cached")]),
        // stale-if-error on a 503 during revalidation.
        step("GET", "/g", &[]),
        step("GET", "/g", &[]),
        // Vary: two variants side by side.
        step("GET", "/h", &[("accept-encoding", "gzip")]),
        step("GET", "/h", &[("accept-encoding", "br")]),
        step("GET", "/h", &[("accept-encoding", "gzip")]),
        // PURGE, then a miss.
        step("PURGE", "/h", &[]),
        step("GET", "/h", &[("accept-encoding", "gzip")]),
        // HEAD is not stored.
        step("HEAD", "/i", &[]),
        // The client forces a revalidation.
        step("GET", "/j", &[]),
        step("GET", "/j", &[("cache-control", "no-cache")]),
        // Set-Cookie under the default policy: stored without it, then a hit.
        step("GET", "/k", &[]),
        step("GET", "/k", &[]),
        // A stale response without validators is fetched anew: a miss.
        step("GET", "/l", &[]),
        step("GET", "/l", &[]),
        // A HEAD answered in full freshens the stored GET it selects (RFC 9111 §4.3.5).
        step("GET", "/m", &[]),
        step("HEAD", "/m", &[]),
        step("GET", "/m", &[]),
        // Ranges answered from a stored response: 206, and 416 past its end.
        step("GET", "/a", &[("range", "bytes=0-0")]),
        step("GET", "/a", &[("range", "bytes=100-200")]),
        // A POST answered with its own target as Content-Location is stored for GETs
        // (RFC 9110 §9.3.3).
        step("POST", "/n", &[]),
        step("GET", "/n", &[]),
        // A stored partial completed with the missing range only (RFC 9111 §3.4).
        step("GET", "/p", &[("range", "bytes=0-4")]),
        step("GET", "/p", &[]),
        step("GET", "/p", &[]),
    ];
    let answers = vec![
        ok(&[("cache-control", "max-age=60"), ("etag", "\"a1\"")], "a1"),
        ok(&[("cache-control", "no-cache"), ("etag", "\"b1\"")], "b1"),
        Answer::Respond(304, vec![("etag", "\"b1\"")], ""),
        ok(&[("cache-control", "no-cache"), ("etag", "\"b2\"")], "b2"),
        ok(&[("cache-control", "private, max-age=60")], "c"),
        ok(&[("cache-control", "private, max-age=60")], "c"),
        Answer::Respond(404, vec![("cache-control", "max-age=60")], "nope"),
        ok(
            &[
                ("cache-control", "max-age=1, stale-while-revalidate=600"),
                ("age", "10"),
                ("etag", "\"e1\""),
            ],
            "e1",
        ),
        ok(&[("cache-control", "max-age=60"), ("etag", "\"e2\"")], "e2"),
        ok(&[("cache-control", "no-store")], "posted"),
        ok(&[("cache-control", "max-age=60"), ("etag", "\"a2\"")], "a2"),
        ok(
            &[
                ("cache-control", "max-age=0, stale-if-error=600"),
                ("etag", "\"g1\""),
            ],
            "g1",
        ),
        Answer::Respond(503, vec![], "down"),
        ok(
            &[("cache-control", "max-age=60"), ("vary", "accept-encoding")],
            "h-gzip",
        ),
        ok(
            &[("cache-control", "max-age=60"), ("vary", "accept-encoding")],
            "h-br",
        ),
        ok(
            &[("cache-control", "max-age=60"), ("vary", "accept-encoding")],
            "h-gzip-2",
        ),
        ok(&[("cache-control", "max-age=60")], ""),
        ok(&[("cache-control", "max-age=60"), ("etag", "\"j1\"")], "j1"),
        Answer::Respond(304, vec![("etag", "\"j1\"")], ""),
        ok(
            &[("cache-control", "max-age=60"), ("set-cookie", "s=1")],
            "k",
        ),
        ok(&[("cache-control", "max-age=0")], "l1"),
        ok(&[("cache-control", "max-age=0")], "l2"),
        ok(&[("cache-control", "max-age=0"), ("etag", "\"m1\"")], "m1"),
        ok(
            &[
                ("cache-control", "max-age=600"),
                ("etag", "\"m1\""),
                ("content-length", "2"),
            ],
            "",
        ),
        ok(
            &[("cache-control", "max-age=60"), ("content-location", "/n")],
            "n-posted",
        ),
        Answer::Respond(
            206,
            vec![
                ("cache-control", "max-age=60"),
                ("etag", "\"p\""),
                ("content-range", "bytes 0-4/10"),
            ],
            "01234",
        ),
        Answer::Respond(
            206,
            vec![
                ("cache-control", "max-age=60"),
                ("etag", "\"p\""),
                ("content-range", "bytes 5-9/10"),
            ],
            "56789",
        ),
    ];
    (steps, answers)
}

/// What one step produced, as both drivers report it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    result: String,
    cache_status: String,
}

fn header_map(fields: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in fields {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

struct ScriptedOrigin {
    answers: VecDeque<Answer>,
    asked: usize,
}

impl engine::Origin for ScriptedOrigin {
    fn fetch(&mut self, _req: &Forward<'_>) -> Result<OriginAnswer, OriginFailure> {
        self.asked += 1;
        let Some(Answer::Respond(status, headers, body)) = self.answers.pop_front() else {
            return Err(OriginFailure::ConnectionRefused);
        };
        Ok(OriginAnswer {
            status: StatusCode::from_u16(status).unwrap(),
            headers: header_map(&headers),
            body: bytes::Bytes::from_static(body.as_bytes()).into(),
        })
    }
}

/// The core alone: the engine over the memory store, in virtual time. Returns what each
/// step produced and how many origin requests had been made after it.
fn run_core(origin_base: &str) -> Vec<(Seen, usize)> {
    let (steps, answers) = script();
    let store = Arc::new(MemoryStore::new(
        64 << 20,
        16,
        8 << 20,
        EvictionKind::S3Fifo,
    ));
    let mut engine = Engine::new(store, Policy::default(), CookiePolicy::default());
    let mut origin = ScriptedOrigin {
        answers: answers.into(),
        asked: 0,
    };
    let mut now = SystemTime::now();
    let mut out = Vec::new();
    for s in steps {
        now += Duration::from_millis(5);
        let url = format!("{origin_base}{}", s.path);
        let key = trove_http::key::cache_key(&url.parse().unwrap()).expect("a valid URL");
        let method = Method::from_bytes(s.method.as_bytes()).unwrap();
        let served = engine.handle(&method, &key, &header_map(&s.headers), now, &mut origin);
        out.push((
            Seen {
                result: format!("{}/{:03}", served.outcome.as_str(), served.status.as_u16()),
                cache_status: served.cache_status.render(),
            },
            origin.asked,
        ));
    }
    out
}

#[tokio::test]
async fn the_core_alone_and_trove_serve_agree_step_by_step() {
    let (steps, answers) = script();
    let answers = Arc::new(Mutex::new(VecDeque::from(answers)));
    let origin = {
        let answers = Arc::clone(&answers);
        kit::Origin::start(move |_, _| match answers.lock().unwrap().pop_front() {
            Some(Answer::Respond(status, headers, body)) => {
                kit::respond(status, &headers, body.as_bytes())
            }
            None => Action::Reset,
        })
        .await
    };
    let base = format!("http://{}", origin.addr);
    let expected = run_core(&base);
    let trove = Trove::forward(|_| {}).await;
    for (i, s) in steps.iter().enumerate() {
        let url = format!("{base}{}", s.path);
        let mut c = trove.client().await;
        let resp = c.request(s.method, &url, &s.headers).await;
        let (want, asked) = &expected[i];
        // A background revalidation may still be on its way to the origin: wait for it
        // before the next step, as the engine ran it at once.
        assert!(
            kit::eventually(|| origin.hits() >= *asked).await,
            "step {i} ({} {}): the origin was asked {} times, the core asked {asked}",
            s.method,
            s.path,
            origin.hits()
        );
        let got = Seen {
            result: trove.result(i).await,
            cache_status: resp
                .header("cache-status")
                .map(|v| v.split(", ").next().unwrap_or("").to_string())
                .unwrap_or_default(),
        };
        let got = Seen {
            // The PURGE and the 504 carry no member of ours: compare what the core says.
            cache_status: if got.cache_status.is_empty() {
                want.cache_status.clone()
            } else {
                got.cache_status
            },
            ..got
        };
        assert_eq!(&got, want, "step {i}: {} {}", s.method, s.path);
        assert_eq!(origin.hits(), *asked, "step {i}: origin requests");
    }
    // And the script says what it means to: spot-check the core's own verdicts.
    let results: Vec<&str> = expected.iter().map(|(s, _)| s.result.as_str()).collect();
    assert_eq!(
        results,
        [
            "TCP_MISS/200",
            "TCP_MEM_HIT/200",
            "TCP_IMS_HIT/304",
            "TCP_MISS/200",
            "TCP_REFRESH_UNMODIFIED/200",
            "TCP_REFRESH_MODIFIED/200",
            "TCP_MISS/200",
            "TCP_MISS/200",
            "TCP_MISS/404",
            "TCP_NEGATIVE_HIT/404",
            "TCP_MISS/200",
            "TCP_STALE_HIT/200",
            "TCP_MEM_HIT/200",
            "TCP_MISS/200",
            "TCP_MISS/200",
            "NONE_NONE/504",
            "TCP_MISS/200",
            "TCP_REFRESH_FAIL_OLD/200",
            "TCP_MISS/200",
            "TCP_MISS/200",
            "TCP_MEM_HIT/200",
            "TCP_PURGE/200",
            "TCP_MISS/200",
            "TCP_MISS/200",
            "TCP_MISS/200",
            "TCP_REFRESH_UNMODIFIED/200",
            "TCP_MISS/200",
            "TCP_MEM_HIT/200",
            "TCP_MISS/200",
            "TCP_MISS/200",
            "TCP_MISS/200",
            "TCP_REFRESH_MODIFIED/200",
            "TCP_MEM_HIT/200",
            "TCP_MEM_HIT/206",
            "TCP_MEM_HIT/416",
            "TCP_MISS/200",
            "TCP_MEM_HIT/200",
            "TCP_MISS/206",
            "TCP_MISS/200",
            "TCP_MEM_HIT/200",
        ]
    );
}

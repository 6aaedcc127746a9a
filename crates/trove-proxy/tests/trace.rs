//! The replayable trace (`[log] trace`, issue 21): what `trove serve` writes for a miss, a
//! hit, a hit answered 304 from the store, a revalidation the origin answered 304, a
//! `PURGE` and an admin-API invalidation; secrets masked; nothing written when it is off.

mod kit;

use std::time::{Duration, Instant, SystemTime};

use kit::{respond, Trove};
use serde_json::Value;

/// Every record, once `n` of them are requests' or invalidations' (the others, a stored
/// body's end and the sweeper's passes, come as they happen).
async fn records(path: &std::path::Path, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = kit::read_complete_lines(path);
        let all: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("each line is JSON"))
            .collect();
        if all.iter().filter(|r| exchange(r)).count() >= n || Instant::now() > deadline {
            return all;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A request's record or an invalidation's.
fn exchange(r: &Value) -> bool {
    r["kind"] == "request" || r["kind"] == "invalidation"
}

fn field<'a>(fields: &'a Value, name: &str) -> Option<&'a str> {
    fields
        .as_array()?
        .iter()
        .find(|f| f[0] == name)
        .and_then(|f| f[1].as_str())
}

#[tokio::test]
async fn a_miss_a_hit_a_304_a_revalidation_and_a_purge_are_traced() {
    let origin = kit::Origin::start(|req, _| {
        if req.header("if-none-match") == Some("\"v1\"") {
            return respond(
                304,
                &[("etag", "\"v1\""), ("cache-control", "max-age=2")],
                b"",
            );
        }
        respond(
            200,
            &[
                // Fresh for 1 to 2 s: the Date trove adds is in whole seconds, so a
                // response that came at 0.99 s past a second was 0.99 s old on arrival, and
                // with max-age=1 stale 10 ms later (the hit below was a revalidation).
                ("cache-control", "max-age=2"),
                ("etag", "\"v1\""),
                ("set-cookie", "secret=hunter2"),
            ],
            b"hello",
        )
    })
    .await;
    let dir = kit::TempDir::new();
    let path = dir.0.join("trace.jsonl");
    let p = path.to_string_lossy().to_string();
    let trove = Trove::forward(move |s| s.log.trace = p).await;
    let url = origin.url("/a");
    let mut c = trove.client().await;
    let before = SystemTime::now();
    assert_eq!(c.get(&url, &[("cookie", "session=abc")]).await.status, 200);
    assert_eq!(c.get(&url, &[]).await.status, 200);
    assert_eq!(
        c.get(&url, &[("if-none-match", "\"v1\"")]).await.status,
        304
    );
    // Stale by now (2 s at most after its arrival).
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(c.get(&url, &[]).await.status, 200);
    assert_eq!(c.request("PURGE", &url, &[]).await.status, 200);
    let call = trove_api::Invalidate {
        url: Some(url.clone()),
        ..Default::default()
    };
    trove_proxy::manage::invalidate(&trove.running.shared, &call, SystemTime::now()).unwrap();

    let all = records(&path, 6).await;
    for x in &all {
        assert_eq!(x["v"], 1);
    }
    let r: Vec<&Value> = all.iter().filter(|x| exchange(x)).collect();
    assert_eq!(r.len(), 6, "{r:?}");
    // The miss's body stored: its end, once (the revalidation's 304 had none).
    let filled: Vec<&Value> = all.iter().filter(|x| x["kind"] == "filled").collect();
    assert_eq!(filled.len(), 1, "{filled:?}");
    assert_eq!(filled[0]["ok"], true);
    assert!(filled[0]["at_us"].as_u64() >= r[0]["origin"][0]["received_us"].as_u64());
    // No disk tier: no writer's progress.
    assert!(r[0].get("lower_jobs").is_none());
    let micros = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64
    };

    // The miss: the request's fields (the cookie masked, as long as it was), the time
    // it was looked up, and the origin's answer with every field (its cookie masked).
    let miss = &r[0];
    assert_eq!(miss["kind"], "request");
    assert_eq!(miss["method"], "GET");
    assert_eq!(miss["url"], url);
    assert_eq!(miss["result"], "TCP_MISS");
    assert_eq!(miss["status"], 200);
    let at = miss["at_us"].as_u64().unwrap();
    let start = miss["start_us"].as_u64().unwrap();
    let done = miss["done_us"].as_u64().unwrap();
    assert!(
        micros(before) <= start && start <= at && at <= done,
        "{miss}"
    );
    let cookie = field(&miss["request"], "cookie").unwrap();
    assert_eq!(cookie.len(), "session=abc".len());
    assert_ne!(cookie, "session=abc");
    assert_eq!(miss["origin"].as_array().unwrap().len(), 1);
    let answer = &miss["origin"][0];
    assert_eq!(answer["status"], 200);
    assert_eq!(answer["length"], 5);
    assert_eq!(field(&answer["fields"], "cache-control"), Some("max-age=2"));
    assert_eq!(field(&answer["fields"], "etag"), Some("\"v1\""));
    assert!(
        field(&answer["fields"], "date").is_some(),
        "a Date, given or added"
    );
    let set_cookie = field(&answer["fields"], "set-cookie").unwrap();
    assert!(!set_cookie.contains("hunter2"));
    assert!(miss["bytes"].as_u64().unwrap() > 5);

    // The hit: no origin answer.
    assert_eq!(r[1]["result"], "TCP_MEM_HIT");
    assert!(r[1]["origin"].as_array().unwrap().is_empty());
    // The client's conditional answered from the store.
    assert_eq!(r[2]["result"], "TCP_IMS_HIT");
    assert_eq!(r[2]["status"], 304);
    assert_eq!(field(&r[2]["request"], "if-none-match"), Some("\"v1\""));
    // Stale: revalidated, the origin's 304 recorded.
    assert_eq!(r[3]["result"], "TCP_REFRESH_UNMODIFIED");
    assert_eq!(r[3]["origin"][0]["status"], 304);
    // The PURGE, with the invalidation it made.
    assert_eq!(r[4]["method"], "PURGE");
    assert_eq!(r[4]["status"], 200);
    let inv = &r[4]["invalidations"][0];
    assert_eq!(inv["selects"], "url");
    assert_eq!(inv["value"], url);
    assert_eq!(inv["soft"], false);
    // The admin API's invalidation, a record of its own.
    assert_eq!(r[5]["kind"], "invalidation");
    assert_eq!(r[5]["selects"], "url");
    assert_eq!(r[5]["value"], url);
    assert!(r[5]["seq"].as_u64().unwrap() > inv["seq"].as_u64().unwrap());
}

#[tokio::test]
async fn no_trace_is_written_when_it_is_off() {
    let origin =
        kit::Origin::start(|_, _| respond(200, &[("cache-control", "max-age=60")], b"x")).await;
    let trove = Trove::forward(|_| {}).await;
    assert!(!trove.running.shared.trace.enabled());
    let mut c = trove.client().await;
    assert_eq!(c.get(&origin.url("/a"), &[]).await.status, 200);
    assert_eq!(
        trove.log_lines(1).await.len(),
        1,
        "the access log is written"
    );
}

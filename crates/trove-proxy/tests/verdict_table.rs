//! The core's table of verdicts (`trove-cache/tests/verdict_table/cases.table`) run
//! through `trove serve` over loopback (a forward proxy, and a reverse proxy for the
//! table's `@policy reverse` cases): the same result codes, `Cache-Status`, origin
//! requests and follow-up results the engine gives in virtual time, so the proxy's driver
//! takes no decision of its own on these paths.
//!
//! A stored response `age` seconds old is made by its origin dating it `age` seconds in
//! the past (RFC 9111 §4.2.3: its apparent age). Left out: cases whose stored response
//! names its own `Date` (the dating needs the field) or `Age` (which a dated response's
//! apparent age does not add to, §4.2.3, where time spent stored does), and origin failures (the table's
//! `fail` is a refused connection, which an origin that is listening cannot give per URL).

mod kit;

#[path = "../../trove-cache/tests/verdict_table/mod.rs"]
mod verdict_table;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use kit::{Action, Trove};
use verdict_table::{Answer, Case};

/// What the origin does for each path, in turn, and what it saw.
#[derive(Default)]
struct Script {
    /// Per path: the answers in turn, with the `Date` to give them.
    answers: HashMap<String, VecDeque<(Answer, Option<SystemTime>)>>,
    /// Per path: each request's conditional flag.
    seen: HashMap<String, Vec<bool>>,
}

fn action(answer: &Answer, date: Option<SystemTime>) -> Action {
    match answer {
        Answer::Respond(status, pairs) => {
            let mut headers: Vec<(&str, String)> =
                pairs.iter().map(|(n, v)| (*n, v.to_string())).collect();
            if let Some(d) = date {
                headers.push(("date", trove_http::field::format_http_date(d)));
            }
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let body: &[u8] = if *status == 304 || *status == 204 {
                b""
            } else {
                b"stored-body"
            };
            kit::respond(*status, &headers, body)
        }
        _ => Action::Reset,
    }
}

/// The result code of the `k`-th access log line for `path` (waits for it, 5 s at most).
async fn result_for(trove: &Trove, path: &str, k: usize) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let lines: Vec<String> = trove
            .log_lines(0)
            .await
            .into_iter()
            .filter(|l| {
                l.split_whitespace()
                    .nth(6)
                    .is_some_and(|u| u.ends_with(path))
            })
            .collect();
        if let Some(l) = lines.get(k) {
            return l.split_whitespace().nth(3).unwrap_or("<none>").to_string();
        }
        if tokio::time::Instant::now() > deadline {
            return "<none>".to_string();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn runs_over_sockets(case: &Case) -> bool {
    !matches!(case.answer, Answer::Fail | Answer::Timeout)
        && !case.stored.is_some_and(|s| {
            let s = s.to_ascii_lowercase();
            s.contains("date:") || s.contains("; age:")
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trove_serve_gives_every_verdict_in_the_table() {
    let script = Arc::new(Mutex::new(Script::default()));
    let origin = {
        let script = Arc::clone(&script);
        kit::Origin::start(move |req, _| {
            let mut s = script.lock().unwrap();
            let conditional = req.headers.iter().any(|(n, _)| {
                n.eq_ignore_ascii_case("if-none-match")
                    || n.eq_ignore_ascii_case("if-modified-since")
            });
            s.seen
                .entry(req.path.clone())
                .or_default()
                .push(conditional);
            let queue = s.answers.entry(req.path.clone()).or_default();
            // The last answer repeats; a path with none left resets.
            let next = match queue.len() {
                0 => None,
                1 => queue.front().cloned(),
                _ => queue.pop_front(),
            };
            next.map_or(Action::Reset, |(a, date)| action(&a, date))
        })
        .await
    };
    let forward = Trove::forward(|_| {}).await;
    let reverse = Trove::reverse(&origin, |_| {}).await;
    let base = format!("http://{}", origin.addr);
    let cases: Vec<(usize, Case)> = verdict_table::cases()
        .into_iter()
        .enumerate()
        .filter(|(_, c)| runs_over_sockets(c))
        .collect();
    let mut failures = Vec::new();
    let seen = |path: &str| {
        script
            .lock()
            .unwrap()
            .seen
            .get(path)
            .cloned()
            .unwrap_or_default()
    };
    for (i, case) in &cases {
        let path = format!("/v{i}");
        // A forward proxy is asked for the origin's URL, a reverse proxy for its path.
        let (trove, url) = if case.reverse {
            (&reverse, path.clone())
        } else {
            (&forward, format!("{base}{path}"))
        };
        // Access log lines for this URL so far.
        let mut lines = 0;
        if let Some(stored) = case.stored {
            let prime = Answer::Respond(200, verdict_table::pairs(stored.split(';')));
            let dated = SystemTime::now() - Duration::from_secs(case.age);
            let a = (prime, Some(dated));
            script
                .lock()
                .unwrap()
                .answers
                .insert(path.clone(), VecDeque::from([a]));
            trove.client().await.request("GET", &url, &[]).await;
            // Lines are written as responses complete: wait for this one before the next
            // request, so the log's order is the requests' order.
            result_for(trove, &path, lines).await;
            lines += 1;
        }
        let before = seen(&path).len();
        let answers: VecDeque<(Answer, Option<SystemTime>)> = case
            .answer
            .sequence()
            .into_iter()
            .map(|a| (a, None))
            .collect();
        script.lock().unwrap().answers.insert(path.clone(), answers);
        let sent = SystemTime::now();
        let resp = trove
            .client()
            .await
            .request(case.method, &url, &case.request)
            .await;
        // A background revalidation may still be on its way: wait for what the table says.
        let want_asked: usize = case.asked.trim_end_matches('c').parse().unwrap();
        kit::eventually(|| seen(&path).len() - before >= want_asked).await;
        if case.result.starts_with("TCP_STALE_HIT") && want_asked > 0 {
            // The origin has answered the background revalidation: wait until trove has
            // stored what it says (a head received after this request was sent) before the
            // next request looks. (A fixed pause could end before a loaded host got there,
            // and the next request found the stale response.)
            let key = if case.reverse {
                format!("http://test.local{path}")
            } else {
                url.clone()
            };
            let store = &trove.running.shared.store;
            kit::eventually(|| {
                store
                    .lookup(&key)
                    .iter()
                    .any(|o| o.head.response_time >= sent)
            })
            .await;
        }
        let during: Vec<bool> = seen(&path)[before..].to_vec();
        let result = result_for(trove, &path, lines).await;
        lines += 1;
        let cache_status = resp
            .header("cache-status")
            .map(|v| v.split(", ").next().unwrap_or("").to_string())
            .unwrap_or_default();
        let then = match case.then {
            None => "-".to_string(),
            Some(_) => {
                let plain = (Answer::parse(verdict_table::PLAIN_ANSWER), None);
                script
                    .lock()
                    .unwrap()
                    .answers
                    .insert(path.clone(), VecDeque::from([plain]));
                trove.client().await.request("GET", &url, &[]).await;
                result_for(trove, &path, lines).await
            }
        };
        let got = verdict_table::Got {
            result,
            cache_status,
            asked: during.len(),
            conditional: during.iter().filter(|c| **c).count(),
            then,
        };
        failures.extend(verdict_table::differs(case, &got));
    }
    assert!(cases.len() >= 75, "{} cases run over sockets", cases.len());
    verdict_table::assert_none_differ(&failures, cases.len());
}

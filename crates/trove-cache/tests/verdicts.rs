//! The core's verdicts as a table (`verdict_table/cases.table`, its columns described in
//! `verdict_table/mod.rs`): for a stored response of a given age (or none), a request,
//! and what the origin answers, the result code and status the client gets, the
//! `Cache-Status` it carries, how many requests reached the origin (and whether they were
//! conditional), and what a plain GET right after finds. One line a case, read like
//! Varnish's `.vtc` files; every expectation is the RFC's (RFC 9111 sections in the
//! names), worked out by hand, not recorded from a run. Here the engine runs it in
//! virtual time; trove-proxy's `tests/verdict_table.rs` runs it through `trove serve`.

mod verdict_table;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{IF_MODIFIED_SINCE, IF_NONE_MATCH};
use http::{HeaderMap, Method, StatusCode};
use trove_cache::engine::{Engine, Forward, Origin, OriginAnswer, Served};
use trove_cache::{CookiePolicy, OriginFailure};
use trove_http::Policy;
use trove_store::{EvictionKind, MemoryStore};
use verdict_table::{fields, Answer};

/// The origin's answers in turn, counted; the last one repeats.
struct Scripted {
    answers: Vec<Answer>,
    asked: usize,
    conditional: usize,
}

impl Scripted {
    fn new(answers: Vec<Answer>) -> Scripted {
        Scripted {
            answers,
            asked: 0,
            conditional: 0,
        }
    }
}

impl Origin for Scripted {
    fn fetch(&mut self, req: &Forward<'_>) -> Result<OriginAnswer, OriginFailure> {
        self.asked += 1;
        if req.headers.contains_key(IF_NONE_MATCH) || req.headers.contains_key(IF_MODIFIED_SINCE) {
            self.conditional += 1;
        }
        let answer = if self.answers.len() > 1 {
            self.answers.remove(0)
        } else {
            self.answers.first().cloned().unwrap_or(Answer::Fail)
        };
        match answer {
            Answer::Nothing | Answer::Fail => Err(OriginFailure::ConnectionRefused),
            Answer::Timeout => Err(OriginFailure::Timeout),
            Answer::Respond(status, pairs) => {
                let status = StatusCode::from_u16(status).unwrap();
                let empty = status == StatusCode::NOT_MODIFIED || status == StatusCode::NO_CONTENT;
                Ok(OriginAnswer {
                    status,
                    headers: fields(&pairs),
                    body: if empty {
                        Bytes::new()
                    } else {
                        Bytes::from_static(b"stored-body")
                    }
                    .into(),
                })
            }
        }
    }
}

fn result(s: &Served) -> String {
    format!("{}/{}", s.outcome.as_str(), s.status.as_u16())
}

#[test]
fn every_verdict_in_the_table() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_704_067_200); // 2024-01-01
    let key = "http://example.test/a";
    let cases = verdict_table::cases();
    let mut failures = Vec::new();
    for case in &cases {
        let store = Arc::new(MemoryStore::new(8 << 20, 4, 1 << 20, EvictionKind::Lru));
        let policy = if case.reverse {
            Policy::reverse_proxy()
        } else {
            Policy::default()
        };
        let mut engine = Engine::new(store, policy, CookiePolicy::default());
        let plain = HeaderMap::new();
        if let Some(stored) = case.stored {
            let prime = Answer::Respond(200, verdict_table::pairs(stored.split(';')));
            engine.handle(
                &Method::GET,
                key,
                &plain,
                t0,
                &mut Scripted::new(vec![prime]),
            );
        }
        let now = t0 + Duration::from_secs(case.age);
        let method = Method::from_bytes(case.method.as_bytes()).unwrap();
        let mut origin = Scripted::new(case.answer.sequence());
        let served = engine.handle(&method, key, &fields(&case.request), now, &mut origin);
        let cache_status = served.cache_status.render();
        let then = case.then.map_or("-".to_string(), |_| {
            let mut after = Scripted::new(vec![Answer::parse(verdict_table::PLAIN_ANSWER)]);
            result(&engine.handle(&Method::GET, key, &plain, now, &mut after))
        });
        let got = verdict_table::Got {
            result: result(&served),
            cache_status,
            asked: origin.asked,
            conditional: origin.conditional,
            then,
        };
        failures.extend(verdict_table::differs(case, &got));
    }
    assert!(cases.len() >= 80, "the table has {} cases", cases.len());
    verdict_table::assert_none_differ(&failures, cases.len());
}

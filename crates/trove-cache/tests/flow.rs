//! The request flow's transitions as data: `tests/flow_table/transitions.table` names, for
//! each state the machine defines, the events it answers and the commands each one makes
//! it emit. Each line drives one [`Flow`] from its start through a script of events, over
//! a real [`MemoryStore`] (what the commands change is changed, so a later lookup sees it);
//! no sockets, no driver.
//!
//! A line is `name | request | stored | age | script`:
//! - request: `METHOD; field: value; …`, or `BG GET; …` for a background revalidation of
//!   the stored response, or `UG METHOD; …` for a flow without guards (`Flow::unguarded`,
//!   the simulator's);
//! - stored: `-`, or the origin's answer to an earlier GET (`status; field: value; …`),
//!   prefixed with that GET's own fields and `>` when it needs some (a Vary, a Range);
//! - age: how many seconds before the request it was stored;
//! - script: steps separated by ` / `, each `event => commands`. Effects are answered with
//!   `Done` as a driver answers them, and listed; an end is written `serve:OUTCOME`,
//!   `forward:OUTCOME`, `respond:STATUS` or `fail:STATUS`. A script may stop at a question
//!   whose answers other lines cover.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use trove_cache::decide::BodyState;
use trove_cache::engine::{AnswerBody, Engine, Forward as Sent, Origin, OriginAnswer};
use trove_cache::flow::{Answer, Command, Env, Event, Fields, Flow, Unlabelled};
use trove_cache::purge::{PurgeRefused, Purged};
use trove_cache::{partial, CookiePolicy, OriginFailure, Outcome, Request, Rules, Tier};
use trove_http::Policy;
use trove_store::invalidation::{Mode, Selector};
use trove_store::{EvictionKind, MemoryStore, Object, ObjectHead, Refused, Storage};

const TABLE: &str = include_str!("flow_table/transitions.table");
const KEY: &str = "http://example.com/x";

fn fields(parts: &[&str]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for p in parts.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        let (n, v) = p.split_once(':').unwrap_or_else(|| panic!("field {p:?}"));
        h.append(
            HeaderName::from_bytes(n.trim().as_bytes()).unwrap(),
            HeaderValue::from_str(v.trim()).unwrap(),
        );
    }
    h
}

/// `status; fields…` as a status and its fields.
fn status_and_fields(s: &str) -> (StatusCode, HeaderMap) {
    let parts: Vec<&str> = s.split(';').collect();
    let status = parts[0].trim().parse::<u16>().expect("a status");
    (StatusCode::from_u16(status).unwrap(), fields(&parts[1..]))
}

/// The body length an answer's fields imply: its `Content-Range`'s span, else 10 bytes.
fn body_len(h: &HeaderMap) -> u64 {
    h.get("content-range")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes "))
        .and_then(|v| v.split('/').next())
        .and_then(|r| r.split_once('-'))
        .and_then(|(a, b)| Some(b.parse::<u64>().ok()? - a.parse::<u64>().ok()? + 1))
        .unwrap_or(10)
}

struct Once(Option<OriginAnswer>);

impl Origin for Once {
    fn fetch(&mut self, _: &Sent<'_>) -> Result<OriginAnswer, OriginFailure> {
        self.0.take().ok_or(OriginFailure::ConnectionRefused)
    }
}

/// Stores `stored` (see the module docs) `age` seconds before `now`.
fn setup(store: &Arc<MemoryStore>, stored: &str, age: u64, now: SystemTime) {
    if stored == "-" {
        return;
    }
    let (req_fields, answer) = match stored.split_once('>') {
        Some((r, a)) => (fields(&r.split(';').collect::<Vec<_>>()), a),
        None => (HeaderMap::new(), stored),
    };
    let (status, headers) = status_and_fields(answer);
    let len = body_len(&headers);
    let body = AnswerBody::Bytes(Bytes::from(vec![b'x'; len as usize]));
    let mut engine = Engine::new(
        store.clone() as Arc<dyn Storage>,
        Policy::default(),
        CookiePolicy::default(),
    );
    let mut origin = Once(Some(OriginAnswer {
        status,
        headers,
        body,
    }));
    let at = now - Duration::from_secs(age);
    engine.handle(&Method::GET, KEY, &req_fields, at, &mut origin);
    assert!(
        !store.lookup(KEY).is_empty(),
        "setup stored nothing: {stored}"
    );
}

fn hard_rule(store: &MemoryStore, now: SystemTime) {
    let inv = store.invalidations().expect("the memory tier keeps rules");
    inv.add(
        Selector::Key(trove_store::hash::key_hash(KEY)),
        Mode::Hard,
        now,
    );
}

/// A fresh or stale object the leader of a collapsed fetch stored.
fn leaders(store: &MemoryStore, max_age: u64, now: SystemTime) -> Arc<Object> {
    let headers = fields(&[&format!("cache-control: max-age={max_age}")]);
    let mut head = ObjectHead {
        status: StatusCode::OK,
        headers,
        request_headers: HeaderMap::new(),
        request_time: now,
        response_time: now,
        prepared: Default::default(),
        labels: Default::default(),
    };
    head.labels = head
        .labels
        .reborn(store.invalidations().map_or(0, |i| i.current()));
    trove_cache::prepare::prepare(&Policy::default(), &mut head);
    Arc::new(Object::new(
        KEY.into(),
        String::new(),
        head,
        trove_store::Body::complete(Bytes::from_static(b"0123456789")),
    ))
}

fn fill(store: &MemoryStore, obj: &Object, len: u64) {
    let _ = obj.body.append_now(Bytes::from(vec![b'y'; len as usize]));
    obj.body.finish(Ok(()));
    store.recharge(obj);
}

fn describe(c: &Command) -> String {
    match c {
        // A hit's touch rides on its serve; the table names it as the step it is.
        Command::Serve(s) if s.touch => format!("touch serve:{}", s.outcome.as_str()),
        Command::Serve(s) => format!("serve:{}", s.outcome.as_str()),
        Command::Forward(f) => format!("forward:{}", f.outcome.as_str()),
        Command::Respond(r) => format!("respond:{}", r.status.as_u16()),
        Command::Fail { status, .. } => format!("fail:{}", status.as_u16()),
        other => other.name().to_string(),
    }
}

/// Runs one line, noting each (state, event) pair it drives; `Err` says how it differed.
fn run(
    line: &str,
    seen: &mut std::collections::BTreeSet<(&'static str, String)>,
) -> Result<(), String> {
    let cols: Vec<&str> = line.split('|').map(str::trim).collect();
    assert_eq!(cols.len(), 5, "five columns: {line}");
    let (request, stored, age, script) = (cols[1], cols[2], cols[3], cols[4]);
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_704_067_200);
    let store = Arc::new(MemoryStore::new(8 << 20, 4, 1 << 20, EvictionKind::Lru));
    setup(&store, stored, age.parse().expect("an age"), now);

    let parts: Vec<&str> = request.split(';').collect();
    let (background, method) = match parts[0].trim().strip_prefix("BG ") {
        Some(m) => (true, m),
        None => (false, parts[0].trim()),
    };
    let (unguarded, method) = match method.strip_prefix("UG ") {
        Some(m) => (true, m),
        None => (false, method),
    };
    // `OWN`: the key's owner is another node of the cluster (`Flow::owned_elsewhere`).
    let (elsewhere, method) = match method.strip_prefix("OWN ") {
        Some(m) => (true, m),
        None => (false, method),
    };
    // `BYP`: the cache may not be used (`Flow::bypassed`: a cluster node not caught up).
    let (bypassed, method) = match method.strip_prefix("BYP ") {
        Some(m) => (true, m),
        None => (false, method),
    };
    let method = Method::from_bytes(method.as_bytes()).unwrap();
    let req_fields = fields(&parts[1..]);
    let req = Request::new(&method, &req_fields);
    let body = if method == Method::POST || method == Method::PUT {
        BodyState::Present
    } else {
        BodyState::Empty
    };
    let mut flow = if background {
        let obj = store
            .lookup(KEY)
            .pop()
            .expect("a stored response to revalidate");
        Flow::background(req, KEY, obj)
    } else {
        let flow = Flow::new(req, KEY, body);
        let flow = if elsewhere {
            flow.owned_elsewhere()
        } else {
            flow
        };
        let flow = if bypassed { flow.bypassed() } else { flow };
        if unguarded {
            flow.unguarded()
        } else {
            flow
        }
    };
    let (policy, cookies, via) = (
        Policy::default(),
        CookiePolicy::default(),
        HeaderValue::from_static("1.1 t"),
    );
    let env = Env {
        rules: Rules {
            policy: &policy,
            cookies: &cookies,
            wire: true,
        },
        store: &*store,
        now,
        via: &via,
        labeler: &Unlabelled,
    };
    // What the last question handed over, for the event that answers it.
    let mut pending_insert: Option<Arc<Object>> = None;
    let mut pending_update: Option<(Arc<Object>, Box<ObjectHead>)> = None;
    let mut pending_part: Option<Arc<Object>> = None;
    let mut answer_len = 10;
    let mut ended = false;
    for step in script.split(" / ") {
        let (event, expected) = step
            .split_once("=>")
            .ok_or_else(|| format!("step {step:?} lacks =>"))?;
        let (event, expected) = (event.trim(), expected.trim());
        if ended {
            return Err(format!("a step after the flow ended: {step:?}"));
        }
        let mut variants = Vec::new();
        let answer_fields;
        let (name, arg) = event.split_once(' ').unwrap_or((event, ""));
        let ev = match name {
            "!invalidate" => {
                hard_rule(&store, now);
                if !expected.is_empty() {
                    return Err(format!("{event} makes no event: expect nothing"));
                }
                continue;
            }
            "start" => Event::Start,
            "found" => {
                store.lookup_into(KEY, &mut variants);
                // What a promotion read in came from the disk.
                let tier = if flow.state() == "promoting" {
                    Tier::Disk
                } else {
                    Tier::Memory
                };
                Event::Found(&variants, tier)
            }
            "lower" => Event::Lower,
            "file" => match arg {
                "fresh" => Event::FileFound(Some(leaders(&store, 60, now))),
                "stale" => Event::FileFound(Some(leaders(&store, 0, now))),
                _ => Event::FileFound(None),
            },
            "memo" => Event::Memo(arg == "yes"),
            "leading" => Event::Leading,
            "allowed" => Event::Allowed,
            "joined" => match arg {
                "fresh" => Event::Joined(Some(leaders(&store, 60, now))),
                "stale" => Event::Joined(Some(leaders(&store, 0, now))),
                "dead" => {
                    let obj = leaders(&store, 60, now);
                    hard_rule(&store, now);
                    Event::Joined(Some(obj))
                }
                _ => Event::Joined(None),
            },
            "answer" => {
                let (status, h) = status_and_fields(arg);
                answer_len = body_len(&h);
                answer_fields = h;
                Event::Answer(Answer {
                    status,
                    headers: Fields::Lent(&answer_fields),
                    content_length: Some(answer_len),
                    request_time: now,
                    response_time: now,
                })
            }
            "failed" => Event::Failed(OriginFailure::ConnectionRefused),
            "timeout" => Event::Failed(OriginFailure::Timeout),
            "inserted" => {
                let obj = pending_insert.take().ok_or("inserted without an insert")?;
                Event::Inserted(store.insert_shared(obj))
            }
            "refused" => Event::Inserted(Err(Refused::NotAdmitted)),
            "updated" => {
                let (obj, head) = pending_update.take().ok_or("updated without an update")?;
                Event::Updated(store.update_meta(&obj, *head))
            }
            "gone" => Event::Updated(None),
            "arrived" => {
                let part = pending_part.take().ok_or("arrived without a part")?;
                fill(&store, &part, answer_len);
                Event::Arrived(true)
            }
            "torn" => Event::Arrived(false),
            // `combined yes`: as if something new was stored, whatever the store holds.
            "combined" => Event::Combined(partial::combine(&*store, &policy, KEY) || arg == "yes"),
            "uncombined" => Event::Combined(false),
            "purged" => Event::Purged(Ok(Purged {
                seq: 1,
                removed: Some(arg.parse().map_err(|_| "purged N")?),
                rules: 1,
            })),
            "done" => Event::Done,
            "purge-refused" => Event::Purged(Err(PurgeRefused {
                status: StatusCode::SERVICE_UNAVAILABLE,
                text: "not durable".into(),
            })),
            other => return Err(format!("unknown event {other:?}")),
        };
        seen.insert((flow.state(), name.to_string()));
        let mut got = Vec::new();
        let mut cmd = flow.next(&env, ev);
        loop {
            got.push(describe(&cmd));
            if !cmd.is_effect() {
                break;
            }
            match &cmd {
                Command::Remove(o, why) => {
                    store.remove_object(o, *why);
                }
                Command::Freshen(o, h) => {
                    store.update_meta(o, (**h).clone());
                }
                Command::Fill(o) => fill(&store, o, answer_len),
                _ => {}
            }
            cmd = flow.next(&env, Event::Done);
        }
        ended = cmd.ends();
        match cmd {
            Command::Insert(obj, _) => pending_insert = Some(obj),
            Command::Update(obj, head) => pending_update = Some((obj, head)),
            Command::FillAndWait(part) => pending_part = Some(part),
            Command::Serve(s) if s.touch => store.touch(&s.obj),
            Command::Serve(s) if s.fill => fill(&store, &s.obj, answer_len),
            _ => {}
        }
        let got = got.join(" ");
        if got != expected {
            return Err(format!(
                "after {event:?}: expected {expected:?}, got {got:?}"
            ));
        }
    }
    Ok(())
}

#[test]
fn every_transition_in_the_table() {
    let mut ran = 0;
    let mut failures = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for line in TABLE.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        ran += 1;
        let name = line.split('|').next().unwrap_or_default().trim();
        if let Err(why) = run(line, &mut seen) {
            failures.push(format!("{name}: {why}"));
        }
    }
    assert!(ran >= 40, "only {ran} lines");
    // Every state the machine defines answers at least one event in the table ("over"
    // answers none: an event after the end is a driver's mistake, tested as such).
    for state in Flow::STATES {
        let answered = seen.iter().any(|(s, _)| *s == state);
        assert!(
            answered || state == "over",
            "no line drives the {state} state"
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {ran} lines differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Each of the [`Outcome`]s a served flow can end with is named somewhere in the table, so
/// no way through the machine goes untested.
#[test]
fn the_table_reaches_every_end() {
    for end in [
        "serve:TCP_MEM_HIT",
        "serve:TCP_HIT",
        "serve:TCP_CF_HIT",
        "serve:TCP_MISS",
        "serve:TCP_REFRESH_UNMODIFIED",
        "serve:TCP_REFRESH_MODIFIED",
        "serve:TCP_REFRESH_FAIL_OLD",
        "forward:TCP_MISS",
        "respond:504",
        "respond:405",
        "respond:404",
        "respond:500",
        "fail:502",
        "finish",
    ] {
        assert!(TABLE.contains(end), "no line ends in {end}");
    }
    let _ = Outcome::MemHit;
}

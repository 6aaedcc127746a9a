//! The synchronous driver: carries out the [`Flow`]'s commands against a [`Storage`] and
//! an [`Origin`] that answers at once, in virtual time. The simulator (`trove sim`) replays
//! traces through it, and the agreement tests check that it and `trove serve` agree
//! request by request.
//!
//! It decides nothing: it is the proxy's driver without sockets. A fetch's body is whole
//! when the origin answers, a background revalidation (stale-while-revalidate) runs right
//! after the response it follows, and a request always leads its fetch (requests do not
//! overlap).

use std::sync::Arc;
use std::time::SystemTime;

use http::{HeaderMap, HeaderValue, Method, StatusCode};
use trove_http::Policy;
use trove_store::{Lower, Object, Probe, Storage};

use crate::cookie::CookiePolicy;
use crate::decide::{self, BodyState, Rules};
use crate::deliver;
use crate::flow::{Answer, Command, Env, Event, Fields, Flow, Unlabelled};
use crate::memo::PassMemo;
use crate::outcome::{Outcome, Tier};
use crate::partial;
use crate::purge;
use crate::request::Request;
use crate::status::CacheStatus;
use crate::step::Steps;

mod origin;
use origin::body;
pub use origin::{fill, AnswerBody, Forward, Origin, OriginAnswer};

/// How one request was served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub outcome: Outcome,
    pub status: StatusCode,
    pub cache_status: CacheStatus,
    pub steps: Steps,
}

/// The driver and the state it keeps between requests.
pub struct Engine {
    pub store: Arc<dyn Storage>,
    pub policy: Policy,
    pub cookies: CookiePolicy,
    /// What the cache adds to `Via` on stored responses.
    pub via: HeaderValue,
    memo: PassMemo,
    /// The lower tier's `sendfile` threshold (`[cache.disk] sendfile_min`): a disk hit on a
    /// body at least this large is answered from the tier's file, not promoted, as `trove
    /// serve` does. `None`: every disk hit is promoted.
    pub file_min: Option<u64>,
    /// Stores bodies as bytes (zeros) rather than lengths only: a lower tier writes what it
    /// is given, so a size-only body would reach it empty.
    pub real_bodies: bool,
    /// Gives stored heads their wire form ([`Rules::wire`]): true by default; a driver
    /// that never sends a stored head nor writes one to a lower tier may turn it off.
    pub wire: bool,
    /// The list a lookup copies a key's variants into, kept so a request allocates none.
    variants: Vec<Arc<Object>>,
}

impl Engine {
    pub fn new(store: Arc<dyn Storage>, policy: Policy, cookies: CookiePolicy) -> Engine {
        Engine {
            store,
            policy,
            cookies,
            via: HeaderValue::from_static("1.1 trove"),
            memo: PassMemo::default(),
            file_min: None,
            real_bodies: false,
            wire: true,
            variants: Vec::new(),
        }
    }

    /// Serves one request for `key` at `now`.
    pub fn handle(
        &mut self,
        method: &Method,
        key: &str,
        headers: &HeaderMap,
        now: SystemTime,
        origin: &mut dyn Origin,
    ) -> Served {
        let req = Request::new(method, headers);
        let mut revalidate = None;
        let mut flow = Flow::new(req, key, BodyState::Empty).unguarded();
        let served = self.run(&mut flow, now, origin, &mut revalidate);
        // stale-while-revalidate: the stale response was served; refresh it now.
        if let Some(obj) = revalidate {
            let get = Method::GET;
            let mut flow = Flow::background(Request::new(&get, headers), key, obj);
            self.run(&mut flow, now, origin, &mut None);
        }
        served
    }

    /// Carries out `flow`'s commands until it ends.
    fn run(
        &mut self,
        flow: &mut Flow<'_>,
        now: SystemTime,
        origin: &mut dyn Origin,
        revalidate: &mut Option<Arc<Object>>,
    ) -> Served {
        let Engine {
            store,
            policy,
            cookies,
            via,
            memo,
            file_min,
            real_bodies,
            wire,
            variants,
        } = self;
        let real = *real_bodies;
        let store = &**store;
        let mut env = Env {
            rules: Rules {
                policy,
                cookies,
                wire: *wire,
            },
            store,
            now,
            via,
            labeler: &Unlabelled,
        };
        let (req, key) = (flow.request(), flow.key());
        let mut lower: Option<Box<dyn Lower>> = None;
        // The origin's answer in hand.
        let mut held: Option<OriginAnswer> = None;
        let mut command = flow.next(&env, Event::Start);
        loop {
            let ev = match command {
                // The store-only effects, carried out as for every driver.
                c @ (Command::Remove(..) | Command::Invalidate(_) | Command::Freshen(..)) => {
                    let _ = c.on_store(store);
                    Event::Done
                }
                // An unguarded flow asks none; every request the simulator replays passed.
                Command::Guard(_) => Event::Allowed,
                Command::Lookup => match store.probe(key) {
                    Probe::Lower(l) => {
                        lower = Some(l);
                        Event::Lower
                    }
                    Probe::Upper => {
                        variants.clear();
                        store.lookup_into(key, variants);
                        Event::Found(variants, Tier::Memory)
                    }
                },
                // Opened as the proxy opens it (the simulator sends nothing from it).
                Command::OpenFile => {
                    let hit = match (*file_min, &lower) {
                        (Some(min), Some(l)) => {
                            origin.before_lower();
                            l.open_file(min, None)
                        }
                        _ => None,
                    };
                    env.now = origin.after_lower().unwrap_or(env.now);
                    Event::FileFound(hit.map(|h| h.into_object(key).0))
                }
                Command::Promote => {
                    if lower.is_some() {
                        origin.before_lower();
                    }
                    for fill in lower.take().map(|l| l.load(None)).unwrap_or_default() {
                        fill.run();
                    }
                    env.now = origin.after_lower().unwrap_or(env.now);
                    variants.clear();
                    store.lookup_into(key, variants);
                    Event::Found(variants, Tier::Disk)
                }
                Command::Memo => Event::Memo(memo.remembered(key, now)),
                Command::Join => Event::Leading,
                Command::Send(s) => {
                    let headers = decide::forward_fields(
                        req.headers.clone(),
                        s.conditionals,
                        s.extra.as_ref(),
                    );
                    let fwd = Forward {
                        method: req.method,
                        key,
                        headers,
                    };
                    match origin.fetch(&fwd) {
                        Ok(a) => {
                            let a = held.insert(a);
                            Event::Answer(Answer {
                                status: a.status,
                                // Only the answer's status and body are read hereafter.
                                headers: Fields::Given(&mut a.headers),
                                content_length: Some(a.body.len()),
                                request_time: now,
                                response_time: now,
                            })
                        }
                        Err(e) => Event::Failed(e),
                    }
                }
                Command::Insert(obj, _) => Event::Inserted(store.insert_shared(obj)),
                Command::Update(obj, head) => Event::Updated(store.update_meta(&obj, *head)),
                Command::FillAndWait(obj) => {
                    fill(store, &obj, body(held.take(), real));
                    Event::Arrived(matches!(obj.body.outcome(), Some(Ok(()))))
                }
                Command::Combine => Event::Combined(partial::combine(store, policy, key)),
                Command::Purge(p) => Event::Purged(Ok(purge::apply(store, key, &p, now))),
                Command::Remember => {
                    memo.remember(key, now);
                    Event::Done
                }
                Command::Forget => {
                    memo.forget(key);
                    Event::Done
                }
                Command::Discard => {
                    held = None;
                    Event::Done
                }
                Command::Fill(obj) => {
                    origin.store_body(store, obj, body(held.take(), real));
                    Event::Done
                }
                Command::Revalidate(obj) => {
                    *revalidate = Some(obj);
                    Event::Done
                }
                Command::Serve(s) => {
                    if s.touch {
                        store.touch(&s.obj);
                    }
                    if s.fill {
                        let obj = Arc::clone(&s.obj);
                        origin.store_body(store, obj, body(held.take(), real));
                    }
                    let (get, no_fields);
                    let view = if s.as_get {
                        (get, no_fields) = (Method::GET, HeaderMap::new());
                        Request::new(&get, &no_fields)
                    } else {
                        req
                    };
                    let d = deliver::delivery(&s.obj, view);
                    let outcome = deliver::outcome(s.outcome, d, s.obj.head.status);
                    let status = deliver::status(d, &s.obj, view);
                    return served(outcome, status, s.status, flow);
                }
                Command::Forward(f) => {
                    let status = held.map_or(StatusCode::BAD_GATEWAY, |a| a.status);
                    return served(f.outcome, status, f.status, flow);
                }
                Command::Respond(r) => {
                    let cs = r.cache_status.unwrap_or_default();
                    return served(r.outcome, r.status, cs, flow);
                }
                Command::Fail {
                    status,
                    outcome,
                    cache_status,
                } => return served(outcome, status, cache_status, flow),
                Command::Finish => {
                    let none = CacheStatus::default();
                    return served(Outcome::None, StatusCode::OK, none, flow);
                }
            };
            command = flow.next(&env, ev);
        }
    }
}

fn served(outcome: Outcome, status: StatusCode, cs: CacheStatus, flow: &mut Flow<'_>) -> Served {
    Served {
        outcome,
        status,
        cache_status: cs,
        steps: flow.take_steps(),
    }
}

//! The request flow, written once: a per-request state machine that takes [`Event`]s and
//! emits [`Command`]s. Every verdict lives here — lookup, collapse, fetch, revalidate,
//! freshen, store or pass, serve stale, the checks against invalidations that raced the
//! request, PURGE — and the drivers only carry the commands out: `trove serve` with
//! sockets and tasks, `trove sim` ([`crate::engine`]) with a virtual clock.
//!
//! The design is sans-I/O, after `quinn-proto`, `rustls` and `h2`'s codec, with one
//! state a step as in Varnish's `cache_req_fsm.c`. A driver runs one loop:
//!
//! ```text
//! let mut flow = Flow::new(request, key, body);
//! let mut event = Event::Start;
//! loop {
//!     let command = flow.next(&env, event);
//!     if command.ends() { break /* serve, forward, respond or fail */ }
//!     event = carry_out(command);   // an effect answers Event::Done
//! }
//! ```
//!
//! Effects (remove, remember, discard, fill, background revalidation…) are queued
//! before the question that follows them, so a driver answers each with [`Event::Done`] and
//! the machine never waits on them. The machine reads the store only through [`Env`]
//! (its size limit, its invalidation log, a key's variants in memory); every change to the
//! store is a command.
//!
//! ```text
//!  Start ─► Guard ─► Allowed ─┬─ PURGE ─► Purge ─► Purged ─► Respond
//!                             ├─ owner elsewhere (cluster) ─► Send(to owner) ─► Answer ─► Forward
//!                             │                                              └► Failed ─► Lookup (served here) …
//!                             ├─ pass ──► Send(body) ─► Answer ─► Invalidate, after_pass ─► Insert ─► Serve
//!                             │                                                           └─► Forward
//!                             └─ GET/HEAD ─► Lookup ─► Found ─► (Combine) ─► (Memo) ─► after_lookup
//!                                               └► Lower ─► OpenFile ─► FileFound ─► Serve (from the file)
//!                                                        └► Promote ─► Found ─► …
//!                                  Serve (+ Revalidate in the background) │ only-if-cached ─► Respond 504
//!                                  Revalidate: Send(conditional) ─► Answer ─► Update ─► Serve (304)
//!                                                                       ├─► Discard, Send (304 not ours)
//!                                                                       └─► store or pass (200)
//!                                  Fetch: (complete a partial: Send(range) ─► Insert ─► FillAndWait ─► Combine)
//!                                         Join ─► Leading ─► Send ─► Answer ─► after_fetch ─► Insert ─► Serve
//!                                              └► Joined(obj) ─► Serve (collapsed hit), or Send of its own
//!                                  Failed ─► after_failure ─► Serve stale, or Fail
//! ```

mod io;

use std::sync::Arc;

use http::{header, HeaderMap, Method, StatusCode};
use smallvec::SmallVec;
use trove_store::{Labels, Object, ObjectHead, Removal, Verdict};

pub use io::{
    Answer, Command, Env, Event, Fields, Forward, Guard, Labeler, Respond, Send, Serve, Unlabelled,
};

use crate::decide::{self, Action, BodyState, Collapse, Conditionals, Entry, Fetch, Memo};
use crate::lookup::{self, Lookup};
use crate::outcome::{Outcome, Tier};
use crate::partial::{self, Completion, OnCompletion};
use crate::purge::{self, Purge};
use crate::request::{Request, ResponseHead};
use crate::respond::{self, OnFailure, OnResponse, OnValidation};
use crate::status::{CacheStatus, Detail, Fwd, OriginFailure};
use crate::step::{Step, Steps};

/// One request's way through the cache.
pub struct Flow<'r> {
    req: Request<'r>,
    key: &'r str,
    state: State,
    /// Commands emitted and not yet handed out: effects, then one question or end.
    /// Whether the front end's guards are asked ([`Flow::unguarded`]).
    guarded: bool,
    queue: SmallVec<[Command; 3]>,
    steps: Steps,
    /// The invalidation sequence number when the last request to the origin was sent.
    born: u64,
    /// Partial responses were combined at this lookup already.
    combined: bool,
    /// The cache is not to be used for this request ([`Flow::bypassed`]), and whether a
    /// lookup was turned into a pass for it (its `Cache-Status` says `fwd=bypass`).
    bypass: bool,
    bypassing: bool,
    /// The origin's answer in hand, cleaned.
    held: Option<Box<Held>>,
}

/// Where the flow is: what the next event answers.
enum State {
    Start(Entry),
    Guarding(Entry),
    Looking,
    OpeningFile,
    Promoting,
    Combining(Lookup, Tier),
    Memo(Lookup, Tier),
    Joining(Fetch),
    Fetching {
        f: Fetch,
        leader: bool,
    },
    Validating {
        obj: Arc<Object>,
        outcome: Outcome,
        fwd: Fwd,
    },
    Updating(Box<Updating>),
    Inserting(Box<Inserting>),
    Completing(Box<(Completion, Fetch)>),
    InsertingPart(Fetch),
    Arriving(Fetch),
    CombiningPart(Fetch),
    Rechecking(Fetch),
    Passing,
    /// Waiting on the key's owner (another node of the cluster).
    AskingOwner,
    Purging(Purge),
    BackgroundValidating(Arc<Object>),
    BackgroundInserting,
    Over,
}

struct Updating {
    obj: Arc<Object>,
    head: ObjectHead,
    status: CacheStatus,
    leader_fields: HeaderMap,
}

struct Inserting {
    status: CacheStatus,
    leader_fields: HeaderMap,
    outcome: Outcome,
    leader: bool,
    /// A POST's stored answer (see [`Serve::as_get`]).
    as_get: bool,
}

/// The origin's answer in hand: its cleaned fields and when it came.
struct Held {
    status: StatusCode,
    headers: HeaderMap,
    content_length: Option<u64>,
    /// The length the origin declared (a HEAD's answer declares the GET's).
    declared: Option<u64>,
    request_time: std::time::SystemTime,
    response_time: std::time::SystemTime,
    labels: Labels,
    tags: Vec<String>,
}

impl Held {
    fn head(&self) -> ResponseHead<'_> {
        ResponseHead {
            status: self.status,
            headers: &self.headers,
            content_length: self.content_length,
            request_time: self.request_time,
            response_time: self.response_time,
        }
    }
}

impl<'r> Flow<'r> {
    /// A client's request for `key` (the front end resolved it), with or without a body.
    pub fn new(req: Request<'r>, key: &'r str, body: BodyState) -> Flow<'r> {
        Flow::at(req, key, State::Start(decide::entry(req.method, body)))
    }

    /// A background revalidation of `obj` (stale-while-revalidate), on behalf of a client
    /// whose request was `req` (a bodyless GET with the client's fields).
    pub fn background(req: Request<'r>, key: &'r str, obj: Arc<Object>) -> Flow<'r> {
        Flow::at(req, key, State::BackgroundValidating(obj))
    }

    /// The key's owner is another node of the cluster (shard mode): a GET or HEAD is asked
    /// of it instead of looked up here ([`Entry::Owner`]); anything else is unchanged (a
    /// pass goes to the origin from here, a PURGE is this node's).
    pub fn owned_elsewhere(mut self) -> Flow<'r> {
        if matches!(self.state, State::Start(Entry::Lookup)) {
            self.state = State::Start(Entry::Owner);
        }
        self
    }

    /// The cache may not be used for this request: a node of a cluster that has not read
    /// the cluster's invalidations up to date since it started can't tell which of its
    /// objects another node purged meanwhile. A GET or HEAD then goes to the origin like a
    /// pass: nothing is served from the store or stored, and `Cache-Status` says
    /// `fwd=bypass`. Anything else is unchanged.
    /// A request asked of the key's owner ([`Flow::owned_elsewhere`]) still is; if the owner
    /// fails, the local lookup it falls back to is bypassed too.
    pub fn bypassed(mut self) -> Flow<'r> {
        self.bypass = true;
        self
    }

    /// For a driver with no front end to guard (the simulator, whose every request was
    /// let through when it was logged): the guards are taken as passed, not asked, a round
    /// trip fewer per request. A proxy never calls it.
    pub fn unguarded(mut self) -> Flow<'r> {
        self.guarded = false;
        self
    }

    fn at(req: Request<'r>, key: &'r str, state: State) -> Flow<'r> {
        Flow {
            req,
            key,
            state,
            guarded: true,
            queue: SmallVec::new(),
            steps: Steps::new(),
            born: 0,
            combined: false,
            bypass: false,
            bypassing: false,
            held: None,
        }
    }

    /// The request it serves.
    pub fn request(&self) -> Request<'r> {
        self.req
    }

    /// The cache key.
    pub fn key(&self) -> &'r str {
        self.key
    }

    /// The state's name: what the next event answers (for traces and the table-driven
    /// tests, which check that every state is reached).
    pub fn state(&self) -> &'static str {
        match self.state {
            State::Start(_) => "start",
            State::Guarding(_) => "guarding",
            State::Looking => "looking",
            State::OpeningFile => "opening-file",
            State::Promoting => "promoting",
            State::Combining(..) => "combining",
            State::Memo(..) => "memo",
            State::Joining(_) => "joining",
            State::Fetching { .. } => "fetching",
            State::Validating { .. } => "validating",
            State::Updating(_) => "updating",
            State::Inserting(_) => "inserting",
            State::Completing(_) => "completing",
            State::InsertingPart(_) => "inserting-part",
            State::Arriving(_) => "arriving",
            State::CombiningPart(_) => "combining-part",
            State::Rechecking(_) => "rechecking",
            State::Passing => "passing",
            State::AskingOwner => "asking-owner",
            State::Purging(_) => "purging",
            State::BackgroundValidating(_) => "background-validating",
            State::BackgroundInserting => "background-inserting",
            State::Over => "over",
        }
    }

    /// Every state [`Flow::state`] names.
    pub const STATES: [&'static str; 22] = [
        "start",
        "guarding",
        "looking",
        "opening-file",
        "promoting",
        "combining",
        "memo",
        "joining",
        "fetching",
        "validating",
        "updating",
        "inserting",
        "completing",
        "inserting-part",
        "arriving",
        "combining-part",
        "rechecking",
        "passing",
        "purging",
        "background-validating",
        "background-inserting",
        "over",
    ];

    /// The steps taken so far.
    pub fn steps(&self) -> &Steps {
        &self.steps
    }

    /// The steps taken, taken out of a flow that is over (left empty).
    pub fn take_steps(&mut self) -> Steps {
        std::mem::take(&mut self.steps)
    }

    /// The next command, given the event that answers the last one.
    pub fn next(&mut self, env: &Env<'_>, ev: Event<'_>) -> Command {
        // A plain hit's transitions, taken without the general match (whose every
        // transition is inlined into one large function) and without the queue: the same
        // commands, in the same order, as [`Flow::on`] emits for them.
        if self.queue.is_empty() {
            match (&self.state, &ev) {
                (State::Start(Entry::Lookup), Event::Start) if self.guarded => {
                    self.state = State::Guarding(Entry::Lookup);
                    return Command::Guard(Guard::Origin);
                }
                (State::Start(Entry::Lookup), Event::Start) if !self.bypass => {
                    self.steps.push(Step::Lookup);
                    self.state = State::Looking;
                    return Command::Lookup;
                }
                (State::Guarding(Entry::Lookup), Event::Allowed) if !self.bypass => {
                    self.steps.push(Step::Lookup);
                    self.state = State::Looking;
                    return Command::Lookup;
                }
                (State::Looking, Event::Found(variants, tier)) => {
                    if let Some(serve) = self.plain_hit(env, variants, *tier) {
                        return serve;
                    }
                }
                _ => {}
            }
        }
        match ev {
            Event::Done if !self.queue.is_empty() => {}
            ev => self.on(env, ev),
        }
        if self.queue.is_empty() {
            // A driver answered a question with `Done`, or went on after an end: a bug in
            // the driver, never the network's doing. Fail the request rather than panic.
            return Command::Respond(Respond {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                outcome: Outcome::None,
                cache_status: None,
                text: "the request flow went wrong".into(),
            });
        }
        if self.queue.len() == 1 {
            // One command (the common case): taken without moving the rest down.
            if let Some(c) = self.queue.pop() {
                return c;
            }
        }
        self.queue.remove(0)
    }

    /// A lookup answered with one variant fresh by its age alone, for a plain request, and
    /// no cookie policy to consult: the serve (which touches). What
    /// [`Flow::found`], [`Flow::judged`] and [`Flow::decide`] come to for such a lookup
    /// (a [`Lookup::Found`] with [`trove_http::Reuse::Fresh`], an [`Action::Serve`] of a
    /// memory hit), without building either; `None` for anything else, which they decide.
    #[inline]
    fn plain_hit(
        &mut self,
        env: &Env<'_>,
        variants: &[Arc<Object>],
        tier: Tier,
    ) -> Option<Command> {
        if env.rules.cookies.request_cookie == crate::RequestCookiePolicy::Bypass {
            return None;
        }
        let inv = env.store.invalidations().map(|i| &**i);
        let obj = lookup::plain_fresh(inv, variants, self.req, env.rules.policy, env.now)?;
        self.steps.push(Step::Hit);
        // A large object kept on disk (read from its fragments) is a disk hit wherever the
        // lookup found it (as in `decide`).
        let tier = if obj.body.reads_from_disk() {
            Tier::Disk
        } else {
            tier
        };
        let (outcome, status) = by_tier(tier, Outcome::MemHit, CacheStatus::HIT);
        self.state = State::Over;
        self.steps.push(Step::Deliver);
        Some(Command::Serve(Serve::stored(
            Arc::clone(obj),
            outcome,
            status,
            Some(tier),
        )))
    }

    fn emit(&mut self, c: Command) {
        self.queue.push(c);
    }

    // Out of line: every transition is inlined into it (a large frame), and [`Flow::next`]'s
    // plain-hit transitions should not pay for it.
    #[inline(never)]
    fn on(&mut self, env: &Env<'_>, ev: Event<'_>) {
        let state = std::mem::replace(&mut self.state, State::Over);
        match (state, ev) {
            (State::Start(entry), Event::Start) if !self.guarded => self.start(env, entry),
            (State::Start(entry), Event::Start) => self.guard(entry),
            (State::Guarding(entry), Event::Allowed) => self.start(env, entry),
            (State::BackgroundValidating(obj), Event::Start) => {
                self.born = born(env);
                let cond = trove_http::validation::conditional_headers(&obj.head.headers);
                self.state = State::BackgroundValidating(obj);
                self.send(Conditionals::Strip, Some(cond));
            }
            (State::Looking, Event::Found(variants, tier)) => self.found(env, variants, tier),
            (State::Looking, Event::Lower) => {
                // A plain GET may be answered from the lower tier's file without loading
                // the object into memory; anything else loads it first.
                let plain_get = *self.req.method == Method::GET
                    && !self.req.headers.contains_key(header::RANGE);
                if plain_get {
                    self.state = State::OpeningFile;
                    self.emit(Command::OpenFile);
                } else {
                    self.state = State::Promoting;
                    self.emit(Command::Promote);
                }
            }
            (State::OpeningFile, Event::FileFound(Some(obj))) => self.file_found(env, obj),
            (State::OpeningFile, Event::FileFound(None)) => {
                self.state = State::Promoting;
                self.emit(Command::Promote);
            }
            (State::Promoting, Event::Found(variants, tier)) => self.found(env, variants, tier),
            (State::Combining(found, tier), Event::Combined(added)) => {
                if added {
                    self.state = State::Looking;
                    self.emit(Command::Lookup);
                } else {
                    self.judged(env, found, tier);
                }
            }
            (State::Memo(found, tier), Event::Memo(remembered)) => {
                let memo = if remembered {
                    Memo::Uncacheable
                } else {
                    Memo::Unknown
                };
                self.decide(env, found, tier, memo);
            }
            (State::Joining(f), Event::Leading) => self.fetch(env, f, true),
            (State::Joining(f), Event::Joined(Some(obj))) => {
                // The leader's request may predate an invalidation made since.
                if dead(env, &obj) {
                    return self.fetch(env, f, false);
                }
                match decide::after_collapse(self.req, obj, env.rules, env.now) {
                    Some(Action::Serve {
                        obj,
                        outcome,
                        status,
                        ..
                    }) => self.serve(obj, outcome, status, None),
                    _ => self.fetch(env, f, false),
                }
            }
            (State::Joining(f), Event::Joined(None)) => self.fetch(env, f, false),
            (State::Fetching { f, .. }, Event::Failed(e)) => {
                self.failed(env, f.stale.as_ref(), f.fwd, f.outcome, e)
            }
            (State::Fetching { mut f, leader }, Event::Answer(a)) => {
                // A stale copy invalidated meanwhile is no fallback.
                if f.stale.as_ref().is_some_and(|o| dead(env, o)) {
                    f.stale = None;
                }
                match respond::stale_on_server_error(&f, self.req, a.status, env.rules, env.now) {
                    Some((obj, status)) => {
                        self.emit(Command::Discard);
                        self.serve(obj, Outcome::RefreshFailOld, status, None);
                    }
                    None => {
                        self.hold(env, a);
                        self.store_or_pass(env, leader, f.fwd, f.outcome);
                    }
                }
            }
            (State::Validating { obj, outcome, fwd }, Event::Failed(e)) => {
                self.failed(env, Some(&obj), fwd, outcome, e)
            }
            (State::Validating { obj, outcome, fwd }, Event::Answer(a)) => {
                self.validated(env, obj, outcome, fwd, a)
            }
            (State::Updating(u), Event::Updated(fresh)) => {
                let u = *u;
                // Served the new head even if the object has left the store meanwhile.
                let fresh = fresh.unwrap_or_else(|| {
                    Arc::new(Object::new(
                        u.obj.key.clone(),
                        u.obj.variant.clone(),
                        u.head,
                        Arc::clone(&u.obj.body),
                    ))
                });
                self.end_serve(Serve {
                    obj: fresh,
                    outcome: Outcome::RefreshUnmodified,
                    status: u.status,
                    as_get: false,
                    leader_fields: boxed(u.leader_fields),
                    from_origin: true,
                    fill: false,
                    publish: false,
                    tier: None,
                    file: false,
                    touch: false,
                });
            }
            (State::Inserting(i), Event::Inserted(Ok(obj))) => {
                self.steps.push(Step::Store);
                // Invalidated between this request's send and now (the rule was there when
                // it was stored, or is seen here): gone from the store; its own client,
                // whose request came first, is still served.
                if dead(env, &obj) {
                    self.emit(Command::Remove(Arc::clone(&obj), Removal::Purged));
                }
                self.emit(Command::Forget);
                self.end_serve(Serve {
                    obj,
                    outcome: i.outcome,
                    status: i.status,
                    as_get: i.as_get,
                    leader_fields: boxed(i.leader_fields),
                    from_origin: true,
                    fill: true,
                    publish: i.leader,
                    tier: None,
                    file: false,
                    touch: false,
                });
            }
            (State::Inserting(i), Event::Inserted(Err(why))) => {
                // The memo of uncacheable URLs is about GETs: a POST's answer says nothing.
                if !i.as_get {
                    self.emit(Command::Remember);
                }
                self.forward(i.outcome, respond::refused(i.status, why));
            }
            (State::Completing(b), Event::Failed(e)) => {
                let (_, f) = *b;
                let _ = f;
                self.failed(env, None, Fwd::Partial, Outcome::Miss, e)
            }
            (State::Completing(b), Event::Answer(a)) => {
                let (c, f) = *b;
                self.completion_answered(env, &c, f, a)
            }
            (State::InsertingPart(f), Event::Inserted(Ok(part))) => {
                self.steps.push(Step::Store);
                self.state = State::Arriving(f);
                self.emit(Command::FillAndWait(part));
            }
            (State::InsertingPart(f), Event::Inserted(Err(_))) => {
                self.emit(Command::Discard);
                self.join(env, f);
            }
            (State::Arriving(f), Event::Arrived(true)) => {
                self.state = State::CombiningPart(f);
                self.emit(Command::Combine);
            }
            (State::Arriving(f), Event::Arrived(false)) => self.join(env, f),
            (State::CombiningPart(f), Event::Combined(_)) => {
                self.state = State::Rechecking(f);
                self.emit(Command::Lookup);
            }
            (State::Rechecking(f), Event::Found(variants, _)) => {
                let found = self.judge(env, variants);
                match found {
                    Lookup::Found(obj, r) if !matches!(r, trove_http::Reuse::Unusable { .. }) => {
                        self.serve(obj, Outcome::Miss, partial::completed_status(), None)
                    }
                    // Not usable after all (not storable, cut short): an ordinary miss.
                    _ => self.join(env, f),
                }
            }
            (State::AskingOwner, Event::Answer(a)) => {
                // Passed on as the owner gave it (its `Cache-Status` member says whether it
                // hit); stored only there, so the cluster holds one copy.
                let fwd_status = a.status.as_u16();
                self.hold(env, a);
                let status = CacheStatus::forward(Fwd::Miss)
                    .with_fwd_status(fwd_status)
                    .with_detail(Detail::Peer);
                self.forward(Outcome::Miss, status);
            }
            // The owner could not be reached or failed before its answer: this node serves
            // the request itself, as the owner would (the driver counts the failure against
            // the owner's health, so the next requests go to the next node in order).
            (State::AskingOwner, Event::Failed(_)) => self.start(env, Entry::Lookup),
            (State::Passing, Event::Failed(e)) => {
                let fwd = if self.bypassing {
                    Fwd::Bypass
                } else {
                    Fwd::Method
                };
                self.failed(env, None, fwd, Outcome::Miss, e)
            }
            (State::Passing, Event::Answer(a)) => {
                let fwd_status = a.status.as_u16();
                let keys =
                    respond::invalidations(self.req.method, self.key, a.status, a.headers.get());
                if !keys.is_empty() {
                    self.steps.push(Step::Invalidate);
                    self.emit(Command::Invalidate(keys));
                }
                self.hold(env, a);
                self.label(env);
                let held = self.held.as_deref().map(Held::head);
                let verdict = match held {
                    Some(_) if self.bypassing => OnResponse::Pass {
                        status: CacheStatus::forward(Fwd::Bypass).with_fwd_status(fwd_status),
                        remember: false,
                    },
                    Some(head) => respond::after_pass(
                        self.req,
                        self.key,
                        &head,
                        env.rules,
                        env.store.max_object(),
                    ),
                    None => return self.internal(),
                };
                self.carry_out(verdict, false, Outcome::Miss);
            }
            (State::Purging(p), Event::Purged(result)) => {
                self.steps.push(Step::Deliver);
                self.emit(Command::Respond(told(purge::answer(&p, result))));
            }
            (State::BackgroundValidating(_), Event::Failed(_)) => self.emit(Command::Finish),
            (State::BackgroundValidating(obj), Event::Answer(a)) => {
                self.background_answered(env, obj, a)
            }
            (State::BackgroundInserting, Event::Inserted(Ok(obj))) => {
                if dead(env, &obj) {
                    self.emit(Command::Remove(Arc::clone(&obj), Removal::Purged));
                }
                self.emit(Command::Fill(obj));
                self.emit(Command::Finish);
            }
            (State::BackgroundInserting, Event::Inserted(Err(_))) => {
                self.emit(Command::Discard);
                self.emit(Command::Finish);
            }
            (_, _) => self.internal(),
        }
    }

    /// An event the state has no answer for: a driver's mistake.
    fn internal(&mut self) {
        self.emit(Command::Respond(Respond {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            outcome: Outcome::None,
            cache_status: None,
            text: "the request flow went wrong".into(),
        }));
    }

    /// The front end's guards come first: nothing is looked up, sent or purged for a
    /// client that may not have it.
    fn guard(&mut self, entry: Entry) {
        let guard = match entry {
            Entry::Lookup | Entry::Pass | Entry::Owner => Guard::Origin,
            Entry::Purge => Guard::Purge,
            // Nothing is reached: refused below.
            Entry::RefuseConnect => {
                self.state = State::Guarding(entry);
                return self.refuse_connect();
            }
        };
        self.state = State::Guarding(entry);
        self.emit(Command::Guard(guard));
    }

    fn refuse_connect(&mut self) {
        self.state = State::Over;
        self.steps.push(Step::Deliver);
        self.emit(Command::Respond(Respond {
            status: StatusCode::METHOD_NOT_ALLOWED,
            outcome: Outcome::None,
            cache_status: None,
            text: "CONNECT is not served here".into(),
        }));
    }

    fn start(&mut self, env: &Env<'_>, entry: Entry) {
        let entry = match entry {
            Entry::Lookup if self.bypass => {
                self.bypassing = true;
                Entry::Pass
            }
            e => e,
        };
        match entry {
            Entry::Purge => {
                self.steps.push(Step::Purge);
                match purge::parse(self.req.headers) {
                    Ok(p) => {
                        self.emit(Command::Purge(p.clone()));
                        self.state = State::Purging(p);
                    }
                    Err(t) => self.emit(Command::Respond(told(t))),
                }
            }
            // Tunnels are a forward-proxy service; never pass CONNECT on to an origin.
            Entry::RefuseConnect => self.refuse_connect(),
            Entry::Pass => {
                self.steps.push(Step::Pass);
                self.born = born(env);
                self.state = State::Passing;
                self.emit(Command::Send(Box::new(Send {
                    conditionals: Conditionals::Keep,
                    extra: None,
                    with_body: true,
                    to_owner: false,
                })));
            }
            Entry::Lookup => {
                self.steps.push(Step::Lookup);
                self.state = State::Looking;
                self.emit(Command::Lookup);
            }
            Entry::Owner => {
                // The client's own conditionals and range go on: the owner answers them.
                self.steps.push(Step::Pass);
                self.state = State::AskingOwner;
                self.emit(Command::Send(Box::new(Send {
                    conditionals: Conditionals::Keep,
                    extra: None,
                    with_body: false,
                    to_owner: true,
                })));
            }
        }
    }

    /// The object lies in the lower tier's file: a fresh hit is served from there (the
    /// driver sends the file); anything else (stale, to revalidate, …) loads it first.
    fn file_found(&mut self, env: &Env<'_>, obj: Arc<Object>) {
        let inv = env.store.invalidations().map(|i| &**i);
        // Not in the store: nothing to remove if it fails judgement.
        let judged = lookup::judge_variants(
            inv,
            std::slice::from_ref(&obj),
            self.req,
            env.rules.policy,
            env.now,
            &mut |_, _| {},
        );
        match decide::after_lookup(self.req, judged, env.rules, Memo::Unknown) {
            Action::Serve {
                obj,
                outcome: Outcome::MemHit,
                status,
                revalidate: false,
            } => {
                self.steps.push(Step::Hit);
                let (outcome, status) = by_tier(Tier::Disk, Outcome::MemHit, status);
                // Opened where it lies: the lower tier keeps its own order, memory's is
                // not fed.
                self.end_serve(Serve {
                    file: true,
                    touch: false,
                    ..Serve::stored(obj, outcome, status, Some(Tier::Disk))
                });
            }
            _ => {
                self.state = State::Promoting;
                self.emit(Command::Promote);
            }
        }
    }

    /// Judges the variants, queueing the removal of any that failed or were invalidated.
    fn judge(&mut self, env: &Env<'_>, variants: &[Arc<Object>]) -> Lookup {
        let inv = env.store.invalidations().map(|i| &**i);
        let queue = &mut self.queue;
        lookup::judge_variants(
            inv,
            variants,
            self.req,
            env.rules.policy,
            env.now,
            &mut |obj, why| queue.push(Command::Remove(Arc::clone(obj), why)),
        )
    }

    fn found(&mut self, env: &Env<'_>, variants: &[Arc<Object>], tier: Tier) {
        let found = self.judge(env, variants);
        // Only pieces of the response are stored (or other variants): combine the partial
        // responses that fit together (RFC 9111 §3.4) and look again.
        if matches!(found, Lookup::VaryMiss) && !self.combined {
            self.combined = true;
            self.state = State::Combining(found, tier);
            self.emit(Command::Combine);
            return;
        }
        self.judged(env, found, tier);
    }

    fn judged(&mut self, env: &Env<'_>, found: Lookup, tier: Tier) {
        // Only a miss consults the memo: keep its lock off every other path.
        if found.is_miss() {
            self.state = State::Memo(found, tier);
            self.emit(Command::Memo);
        } else {
            self.decide(env, found, tier, Memo::Unknown);
        }
    }

    fn decide(&mut self, env: &Env<'_>, found: Lookup, tier: Tier, memo: Memo) {
        let action = decide::after_lookup(self.req, found, env.rules, memo);
        self.steps.push(action.step());
        match action {
            Action::Serve {
                obj,
                outcome,
                status,
                revalidate,
            } => {
                if revalidate {
                    self.emit(Command::Revalidate(Arc::clone(&obj)));
                }
                // A large object kept on disk (read from its fragments) is a disk hit
                // wherever the lookup found it.
                let tier = if obj.body.reads_from_disk() {
                    Tier::Disk
                } else {
                    tier
                };
                let (outcome, status) = by_tier(tier, outcome, status);
                self.serve(obj, outcome, status, Some(tier));
            }
            // RFC 9111 §5.2.1.7: no stored response satisfies the request.
            Action::OnlyIfCached => self.emit(Command::Respond(Respond {
                status: StatusCode::GATEWAY_TIMEOUT,
                outcome: Outcome::None,
                cache_status: Some(
                    CacheStatus::forward(Fwd::Miss).with_detail(Detail::OnlyIfCached),
                ),
                text: "not in cache (only-if-cached)".into(),
            })),
            Action::Revalidate {
                obj,
                conditional,
                outcome,
                fwd,
            } => {
                self.born = born(env);
                self.state = State::Validating { obj, outcome, fwd };
                self.send(Conditionals::Strip, Some(conditional));
            }
            Action::Fetch(f) => self.miss(env, f),
        }
    }

    /// A miss: complete a stored partial response with the range it lacks, or join a
    /// fetch already under way for this key, or lead one.
    fn miss(&mut self, env: &Env<'_>, f: Fetch) {
        if f.fwd == Fwd::VaryMiss {
            let stored = env.store.lookup(self.key);
            if let Some(c) = partial::completion(&stored, self.req) {
                self.born = born(env);
                let fields = c.fields.clone();
                self.state = State::Completing(Box::new((c, f)));
                self.send(Conditionals::Strip, Some(fields));
                return;
            }
        }
        self.join(env, f);
    }

    fn join(&mut self, env: &Env<'_>, f: Fetch) {
        if f.collapse == Collapse::Allowed {
            self.state = State::Joining(f);
            self.emit(Command::Join);
        } else {
            self.fetch(env, f, false);
        }
    }

    fn fetch(&mut self, env: &Env<'_>, f: Fetch, leader: bool) {
        self.born = born(env);
        let conditionals = f.conditionals;
        self.state = State::Fetching { f, leader };
        self.send(conditionals, None);
    }

    fn send(&mut self, conditionals: Conditionals, extra: Option<HeaderMap>) {
        self.emit(Command::Send(Box::new(Send {
            conditionals,
            extra,
            with_body: false,
            to_owner: false,
        })));
    }

    /// Takes the origin's answer in hand, its fields cleaned for storing and sending on
    /// (copied if lent, kept as they are if given).
    fn hold(&mut self, env: &Env<'_>, a: Answer<'_>) {
        let declared = (*self.req.method == Method::HEAD)
            .then(|| {
                let fields = a.headers.get().get_all(header::CONTENT_LENGTH);
                trove_http::content_length::parse_all(fields).ok().flatten()
            })
            .flatten();
        let headers = match a.headers {
            Fields::Lent(h) => respond::clean_response_headers(h, env.via, a.response_time),
            Fields::Given(h) => {
                let mut h = std::mem::take(h);
                respond::clean_response_headers_in_place(&mut h, env.via, a.response_time);
                h
            }
        };
        self.held = Some(Box::new(Held {
            status: a.status,
            headers,
            content_length: a.content_length,
            declared,
            request_time: a.request_time,
            response_time: a.response_time,
            labels: Labels::default(),
            tags: Vec::new(),
        }));
    }

    /// Labels the answer in hand for storing (the driver's tags may strip fields from it).
    fn label(&mut self, env: &Env<'_>) {
        if let Some(h) = self.held.as_mut() {
            (h.labels, h.tags) = env.labeler.label(&mut h.headers, self.born);
        }
    }

    /// The Store-or-pass step for a response fresh from the origin.
    fn store_or_pass(&mut self, env: &Env<'_>, leader: bool, fwd: Fwd, outcome: Outcome) {
        self.label(env);
        let Some(held) = self.held.as_ref() else {
            return self.internal();
        };
        let head = held.head();
        if *self.req.method == Method::HEAD {
            // RFC 9111 §4.3.5: a HEAD response freshens the stored GET responses it
            // selects. Its body is empty; the length it declares is the GET's.
            let declared = ResponseHead {
                content_length: held.declared,
                ..head
            };
            let stored = env.store.lookup(self.key);
            for (obj, h) in respond::head_updates(&stored, self.req, &declared, env.rules) {
                self.steps.push(Step::Freshen);
                self.queue.push(Command::Freshen(obj, Box::new(h)));
            }
        }
        let max = env.store.max_object();
        let verdict = match respond::judge_fetch(self.req, &head, env.rules, fwd, max) {
            Err(pass) => pass,
            Ok(storable) => {
                // Not read by `to_store` (an empty map allocates nothing).
                let none = HeaderMap::new();
                let received = ResponseHead {
                    headers: &none,
                    ..head
                };
                let Some(held) = self.held.as_mut() else {
                    return self.internal();
                };
                // A driver that puts no head on a wire ([`crate::Rules::wire`]: the
                // simulator) has the answer's fields moved into the object rather than
                // copied: nothing sends them on, even if the store refuses it.
                let fields = if env.rules.wire {
                    held.headers.clone()
                } else {
                    std::mem::take(&mut held.headers)
                };
                respond::to_store(self.req, self.key, &received, fields, env.rules, storable)
            }
        };
        self.carry_out(verdict, leader, outcome);
    }

    /// Carries out the store-or-pass verdict on the answer in hand.
    fn carry_out(&mut self, verdict: OnResponse, leader: bool, outcome: Outcome) {
        let as_get = *self.req.method == Method::POST;
        match verdict {
            OnResponse::Store {
                mut object,
                leader_fields,
                status,
            } => {
                let tags = match self.held.as_mut() {
                    Some(h) => {
                        object = labelled(object, std::mem::take(&mut h.labels));
                        std::mem::take(&mut h.tags)
                    }
                    None => Vec::new(),
                };
                self.state = State::Inserting(Box::new(Inserting {
                    status,
                    leader_fields,
                    outcome,
                    leader,
                    as_get,
                }));
                self.emit(Command::Insert(object, tags));
            }
            OnResponse::Pass { status, remember } => {
                if remember && !as_get {
                    self.emit(Command::Remember);
                }
                self.forward(outcome, status);
            }
        }
    }

    fn forward(&mut self, outcome: Outcome, status: CacheStatus) {
        let headers = self.held.take().map(|h| h.headers).unwrap_or_default();
        self.steps.push(Step::Deliver);
        self.emit(Command::Forward(Box::new(Forward {
            headers,
            outcome,
            status,
        })));
    }

    /// Serves a stored response it found (a hit, a collapsed hit, a stale one).
    fn serve(
        &mut self,
        obj: Arc<Object>,
        outcome: Outcome,
        status: CacheStatus,
        tier: Option<Tier>,
    ) {
        self.end_serve(Serve::stored(obj, outcome, status, tier));
    }

    fn end_serve(&mut self, s: Serve) {
        self.steps.push(Step::Deliver);
        self.emit(Command::Serve(s));
    }

    /// The origin could not be reached: stale-if-error, or a generated error.
    fn failed(
        &mut self,
        env: &Env<'_>,
        stale: Option<&Arc<Object>>,
        fwd: Fwd,
        outcome: Outcome,
        e: OriginFailure,
    ) {
        // A stale copy invalidated meanwhile is no fallback (a soft invalidation's is).
        let stale = stale.filter(|o| !dead(env, o));
        match respond::after_failure(stale, self.req, env.rules, fwd, outcome, e, env.now) {
            OnFailure::ServeStale { obj, status } => {
                self.serve(obj, Outcome::RefreshFailOld, status, None)
            }
            OnFailure::Error {
                status,
                outcome,
                cache_status,
            } => {
                self.steps.push(Step::Deliver);
                self.emit(Command::Fail {
                    status,
                    outcome,
                    cache_status,
                });
            }
        }
    }

    /// The origin answered a validation (RFC 9111 §4.3).
    fn validated(
        &mut self,
        env: &Env<'_>,
        obj: Arc<Object>,
        outcome: Outcome,
        fwd: Fwd,
        a: Answer<'_>,
    ) {
        self.hold(env, a);
        let Some(held) = self.held.as_ref() else {
            return self.internal();
        };
        let head = held.head();
        let verdict = respond::after_validation(&obj, self.req, &head, env.rules, fwd, env.now);
        // A 304 to a request sent before an invalidation of this object confirms nothing
        // that may still be served: fetch the whole response instead.
        let verdict = match verdict {
            OnValidation::Freshen { .. } | OnValidation::ServeStale { .. } if dead(env, &obj) => {
                OnValidation::Refetch
            }
            v => v,
        };
        match verdict {
            OnValidation::Freshen {
                mut head,
                status,
                leader_fields,
            } => {
                self.steps.push(Step::Freshen);
                head.labels = obj.head.labels.reborn(self.born);
                self.emit(Command::Discard);
                self.state = State::Updating(Box::new(Updating {
                    obj: Arc::clone(&obj),
                    head: (*head).clone(),
                    status,
                    leader_fields,
                }));
                self.emit(Command::Update(obj, head));
            }
            OnValidation::Refetch => {
                // The 304 does not match what we hold (§4.3.4): fetch the whole response.
                self.emit(Command::Discard);
                let stale = (!dead(env, &obj)).then_some(obj);
                let f = Fetch {
                    fwd,
                    collapse: Collapse::No,
                    conditionals: Conditionals::Strip,
                    stale,
                    outcome: Outcome::RefreshModified,
                };
                self.fetch(env, f, false);
            }
            OnValidation::ServeStale { status } => {
                self.emit(Command::Discard);
                self.serve(obj, Outcome::RefreshFailOld, status, None);
            }
            OnValidation::Replace => self.store_or_pass(env, false, fwd, outcome),
        }
    }

    /// The origin answered a request for the range a stored partial lacks: store that
    /// part, combine, serve the result; another answer is handled like any fetch's.
    fn completion_answered(&mut self, env: &Env<'_>, c: &Completion, f: Fetch, a: Answer<'_>) {
        let completion = partial::after_completion(c, a.status, a.headers.get());
        self.hold(env, a);
        match completion {
            // The representation changed (If-Range did not match), the origin sent
            // something else: its answer is handled like any fetch's.
            OnCompletion::Other => {
                return self.store_or_pass(env, false, Fwd::Partial, Outcome::Miss)
            }
            OnCompletion::Part => {}
        }
        self.label(env);
        let Some(held) = self.held.as_mut() else {
            return self.internal();
        };
        let max = env.store.max_object();
        let head = held.head();
        let verdict = respond::after_fetch(self.req, self.key, &head, env.rules, Fwd::Partial, max);
        match verdict {
            OnResponse::Store { object, .. } => {
                let object = labelled(object, std::mem::take(&mut held.labels));
                let tags = std::mem::take(&mut held.tags);
                self.state = State::InsertingPart(f);
                self.emit(Command::Insert(object, tags));
            }
            OnResponse::Pass { .. } => {
                self.emit(Command::Discard);
                self.join(env, f);
            }
        }
    }

    /// stale-while-revalidate: the origin answered the background validation.
    fn background_answered(&mut self, env: &Env<'_>, obj: Arc<Object>, a: Answer<'_>) {
        let status = a.status;
        self.hold(env, a);
        if status == StatusCode::NOT_MODIFIED {
            let Some(held) = self.held.as_ref() else {
                return self.internal();
            };
            // Not if the object was invalidated since the request went out.
            if respond::answers(&obj, &held.headers) && !dead(env, &obj) {
                let mut fresh = respond::freshened_head(&obj, &held.head(), env.rules);
                fresh.labels = obj.head.labels.reborn(self.born);
                self.emit(Command::Freshen(obj, Box::new(fresh)));
            }
            self.emit(Command::Discard);
            self.emit(Command::Finish);
            return;
        }
        self.label(env);
        let Some(held) = self.held.as_mut() else {
            return self.internal();
        };
        let max = env.store.max_object();
        let head = held.head();
        match respond::after_fetch(self.req, self.key, &head, env.rules, Fwd::Stale, max) {
            OnResponse::Store { object, .. } => {
                let object = labelled(object, std::mem::take(&mut held.labels));
                let tags = std::mem::take(&mut held.tags);
                self.state = State::BackgroundInserting;
                self.emit(Command::Insert(object, tags));
            }
            OnResponse::Pass { .. } => {
                self.emit(Command::Discard);
                self.emit(Command::Finish);
            }
        }
    }
}

/// Fields only the leader gets, boxed when there are any.
/// `object` (just built, so nothing else holds it) with `labels`.
fn labelled(mut object: Arc<Object>, labels: Labels) -> Arc<Object> {
    match Arc::get_mut(&mut object) {
        Some(o) => {
            o.head.labels = labels;
            object
        }
        None => {
            let mut copy = object.unstored_copy();
            copy.head.labels = labels;
            Arc::new(copy)
        }
    }
}

fn boxed(h: HeaderMap) -> Option<Box<HeaderMap>> {
    (!h.is_empty()).then(|| Box::new(h))
}

/// A PURGE's answer as the flow's end.
fn told(t: purge::Told) -> Respond {
    Respond {
        status: t.status,
        outcome: Outcome::Purge,
        cache_status: None,
        text: t.text,
    }
}

/// The invalidation sequence number now, to stamp a request about to be sent with: its
/// response is older than any rule made after this (`trove_store::invalidation`).
fn born(env: &Env<'_>) -> u64 {
    env.store.invalidations().map_or(0, |i| i.current())
}

/// True when a rule made since `obj` was fetched invalidated it hard.
fn dead(env: &Env<'_>, obj: &Object) -> bool {
    lookup::verdict(env.store.invalidations().map(|i| &**i), obj) == Verdict::Dead
}

/// How a hit is logged by the tier it came from: a fresh hit read from disk is Squid's
/// `TCP_HIT` with `detail=disk` in `Cache-Status`, a memory one `TCP_MEM_HIT`; other kinds
/// of hit (stale, 304, negative) keep their codes whatever the tier.
pub fn by_tier(tier: Tier, outcome: Outcome, status: CacheStatus) -> (Outcome, CacheStatus) {
    match (tier, outcome) {
        (Tier::Disk, Outcome::MemHit) => (Outcome::DiskHit, status.with_detail(Detail::Disk)),
        _ => (outcome, status),
    }
}

//! The exact replay of trove's replayable trace (`trace::replayable`, issue 21): every
//! request goes through `trove_cache::engine` at the time trove looked it up, with the
//! fields its client sent, and the simulated origin answers with what trove's origin
//! answered — nothing is assumed. So the replay, at trove's memory size and eviction
//! policy, gives back trove's result codes request by request, and at other sizes or
//! policies says what trove would have done with the same traffic.
//!
//! The origin's answers: the ones recorded for the request, in order; when the replay
//! asks more often than trove did (it evicted something trove kept), the latest answer
//! recorded for the URL, as a validator would have it (a `304` to a request whose
//! validator matches the answer's, else the answer). A request trove refused before the
//! cache (`TCP_DENIED`) touches nothing.
//!
//! Invalidations are applied as trove applied them: a rule in the store's rule log (which
//! judges what was fetched before it, soft or hard, and the fetches in flight when it
//! came), and, when hard, a URL's variants removed at once, as trove removes them (a
//! prefix's: every URL the trace has named under it). They are applied at their time; one
//! that landed while a request was waiting for its origin's answer (trove looked the
//! request up before it, and received the answer after it) is applied just before the
//! replay hands that answer over, so a revalidation or fetch it raced finds it as trove's
//! did. Bans are applied from their pattern. Those by tag or named cache select by labels
//! only trove keeps: they are counted (`unsupported_invalidations`), not applied.
//!
//! With a disk tier (`--disk`), the disk's writer is waited for after each request (see
//! `crate::disk`).

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::sync::Arc;
use std::time::SystemTime;

use http::header::{ETAG, IF_NONE_MATCH};
use http::{HeaderMap, Method, StatusCode};
use serde::Serialize;
use trove_cache::engine::{AnswerBody, Engine, Forward, Origin, OriginAnswer};
use trove_cache::{OriginFailure, Outcome, ShedReason};
use trove_store::hash::key_hash;
use trove_store::invalidation::{Ban, Mode, Selector};
use trove_store::{Object, Removal, Storage};

use crate::disk::DiskTier;
use crate::intern::FastMap;
use crate::replay::Config;
use crate::trace::replayable::{
    Answer, Event, Invalidation, ReplayableReader, Request, Selects, REORDER,
};
use crate::trace::Skipped;

/// How one configuration replayed the trace.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigResult {
    pub cache_size: Option<u64>,
    pub policy: &'static str,
    pub requests: u64,
    pub hits: u64,
    pub hit_ratio: f64,
    pub origin_requests: u64,
    /// Requests whose replayed `RESULT/status` is not the one the trace recorded.
    pub differing: u64,
    /// The first few of them: line order, URL, recorded, replayed.
    pub examples: Vec<(u64, String, String, String)>,
    pub outcomes: BTreeMap<&'static str, u64>,
    pub evictions: u64,
    /// Requests at whose lookup the replay's memory tier did not hold what trove's did
    /// (objects, bytes, evictions so far: the trace's `memory`), and the first of them
    /// (request, trove's, the replay's): where the two memory tiers part.
    pub memory_mismatches: u64,
    pub first_memory_mismatch: Option<(u64, [u64; 3], [u64; 3])>,
    /// The disk tier's counts, with `--disk`.
    pub disk: Option<DiskCounts>,
}

/// What a replay's disk tier did (trove's `trove_disk_*` metrics of the same names).
#[derive(Debug, Clone, Serialize)]
pub struct DiskCounts {
    pub objects: u64,
    pub writes: u64,
    pub writes_dropped: u64,
    pub regions_reclaimed: u64,
    pub reinserted: u64,
    pub hits: u64,
    /// Requests at whose lookup the replay's writer had been given a different number of
    /// jobs than trove's had (the trace's `lower_queued`), and the first of them: where
    /// the two disks' histories part.
    pub queue_mismatches: u64,
    pub first_queue_mismatch: Option<(u64, u64, u64)>,
}

/// What the exact replay did.
#[derive(Debug, Clone, Serialize)]
pub struct ExactReport {
    pub trace: String,
    pub requests: u64,
    /// Requests compared with the trace's result codes (all but those the client left
    /// before its reply, whose recorded status is 0).
    pub compared: u64,
    pub invalidations: u64,
    pub unsupported_invalidations: u64,
    /// Passes of trove's invalidation sweeper, made where trove made them.
    pub sweeps: u64,
    /// Origin requests the replay made beyond the trace's, answered with the URL's latest.
    pub answers_reused: u64,
    /// Origin requests nothing recorded could answer (answered 502).
    pub answers_missing: u64,
    pub skipped: Skipped,
    pub results: Vec<ConfigResult>,
}

struct Sim {
    engine: Engine,
    disk: Option<DiskTier>,
    result: ConfigResult,
    /// Bodies whose heads are stored, waiting for the trace to say where trove's ended
    /// (its `filled` records), in order.
    arriving: VecDeque<Arriving>,
    /// Requests whose lookup found the replay's writer queue not where trove's was, and
    /// the first (request, trove's count, the replay's).
    queue_mismatches: u64,
    first_queue_mismatch: Option<(u64, u64, u64)>,
}

/// A body the replay stores where trove's ended.
struct Arriving {
    url: String,
    obj: Arc<Object>,
    body: Option<AnswerBody>,
    /// Stored then if no `filled` record came (a trace that has none).
    deadline: SystemTime,
}

impl Sim {
    /// Puts the disk's writer where trove's was (see `crate::disk`).
    fn settle(&mut self, index: u64, r: &Request) {
        if let Some((o, b, e)) = r.memory {
            let s = self.engine.store.stats();
            let (theirs, ours) = ([o, b, e], [s.objects, s.bytes, s.evictions]);
            if theirs != ours {
                self.result.memory_mismatches += 1;
                self.result
                    .first_memory_mismatch
                    .get_or_insert((index, theirs, ours));
            }
        }
        let queued = r.lower_queued;
        if let Some(d) = &self.disk {
            d.reach(queued);
            d.settle(r.lower_jobs, r.lower_reclaims);
            let ours = d.store.disk().progress().queued;
            if let Some(q) = queued.filter(|q| *q != ours) {
                self.queue_mismatches += 1;
                self.first_queue_mismatch.get_or_insert((index, q, ours));
            }
        }
    }

    /// Stores the body of the first arriving object of `url` (or fails it): trove's ended.
    fn filled(&mut self, url: &str, ok: bool) {
        let Some(i) = self.arriving.iter().position(|a| a.url == url) else {
            return;
        };
        if let Some(a) = self.arriving.remove(i) {
            self.end(a, ok);
        }
    }

    /// Stores what is still arriving and should have ended by `now`.
    fn overdue(&mut self, now: SystemTime) {
        while self.arriving.front().is_some_and(|a| a.deadline < now) {
            if let Some(a) = self.arriving.pop_front() {
                self.end(a, true);
            }
        }
    }

    fn end(&mut self, a: Arriving, ok: bool) {
        let store = &*self.engine.store;
        if ok {
            trove_cache::engine::fill(store, &a.obj, a.body);
        } else {
            a.obj.body.finish(Err(trove_store::BodyError::Incomplete));
            store.remove_object(&a.obj, Removal::Failed);
        }
    }
}

/// The replay in progress.
pub struct Exact {
    sims: Vec<Sim>,
    /// The latest whole answer recorded for each URL.
    latest: FastMap<String, Answer>,
    outcomes: Option<Box<dyn Write>>,
    report: ExactReport,
    index: u64,
}

/// Most differing requests a report lists.
const EXAMPLES: usize = 10;

impl Exact {
    /// The replay of `configs`; an error if a disk tier can't be opened.
    pub fn new(configs: Vec<Config>, trace: &str) -> anyhow::Result<Exact> {
        let sims = configs
            .into_iter()
            .map(|cfg| {
                let (engine, disk) = crate::replay::engine_for(&cfg, true)?;
                let result = ConfigResult {
                    cache_size: cfg.cache_size,
                    policy: cfg.policy.as_str(),
                    requests: 0,
                    hits: 0,
                    hit_ratio: 0.0,
                    origin_requests: 0,
                    differing: 0,
                    examples: Vec::new(),
                    outcomes: BTreeMap::new(),
                    evictions: 0,
                    memory_mismatches: 0,
                    first_memory_mismatch: None,
                    disk: None,
                };
                Ok(Sim {
                    engine,
                    disk,
                    result,
                    arriving: VecDeque::new(),
                    queue_mismatches: 0,
                    first_queue_mismatch: None,
                })
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Exact {
            sims,
            latest: FastMap::default(),
            outcomes: None,
            report: ExactReport {
                trace: trace.to_string(),
                requests: 0,
                compared: 0,
                invalidations: 0,
                unsupported_invalidations: 0,
                sweeps: 0,
                answers_reused: 0,
                answers_missing: 0,
                skipped: Skipped::default(),
                results: Vec::new(),
            },
            index: 0,
        })
    }

    /// Writes the first configuration's `RESULT/status` for every request to `w`.
    pub fn with_outcomes(mut self, w: Box<dyn Write>) -> Exact {
        self.outcomes = Some(w);
        self
    }

    /// Replays one record, with the invalidations that landed while it waited for its
    /// origin (`racing`: see the module docs).
    pub fn feed(
        &mut self,
        event: &Event,
        racing: &[(SystemTime, Invalidation)],
    ) -> std::io::Result<()> {
        for sim in &mut self.sims {
            sim.overdue(event.at());
            // A body's end or a sweep queued its jobs after those trove had queued before
            // it: a pass's removals among them.
            if let (Some(d), Some(q)) = (&sim.disk, event.lower_queued()) {
                d.reach(Some(q));
            }
        }
        match event {
            Event::Filled { url, ok, .. } => {
                for sim in &mut self.sims {
                    sim.filled(url, *ok);
                }
                Ok(())
            }
            Event::Invalidation(at, inv) => {
                self.count(inv);
                for sim in &self.sims {
                    apply(&*sim.engine.store, inv, *at);
                }
                Ok(())
            }
            Event::Request(r) => self.request(r, racing),
            Event::Sweep(sweep) => {
                self.report.sweeps += 1;
                for sim in &self.sims {
                    if let Some(d) = &sim.disk {
                        if sweep.whole {
                            d.store.pass_on_next_scan();
                        }
                    }
                    let store = &*sim.engine.store;
                    if let Some(rules) = store.invalidations() {
                        rules.sweep(store, sweep.retire_before);
                    }
                    // A pass told and not made (this sweep scanned nothing) is not made
                    // at a later one: trove's wasn't.
                    if let Some(d) = &sim.disk {
                        d.store.forget_told_pass();
                    }
                }
                Ok(())
            }
        }
    }

    /// Counts an invalidation, and whether the replay can apply it.
    fn count(&mut self, inv: &Invalidation) {
        self.report.invalidations += 1;
        if !applicable(inv) {
            self.report.unsupported_invalidations += 1;
        }
    }

    fn request(
        &mut self,
        r: &Request,
        racing: &[(SystemTime, Invalidation)],
    ) -> std::io::Result<()> {
        self.report.requests += 1;
        self.index += 1;
        let recorded = r.code();
        let compared = r.status != 0;
        if compared {
            self.report.compared += 1;
        }
        // A `PURGE` that invalidated something other than its URL (tags, a prefix) did
        // exactly that, answered 200.
        let purge_by_rule = r.method.as_str() == "PURGE"
            && r.invalidations
                .iter()
                .any(|i| i.selects != Selects::Url || i.soft);
        if purge_by_rule {
            for inv in &r.invalidations {
                self.count(inv);
            }
        }
        for (_, inv) in racing {
            self.count(inv);
        }
        for i in 0..self.sims.len() {
            let store = Arc::clone(&self.sims[i].engine.store);
            let replayed = if r.result == Outcome::Denied.as_str() {
                format!("{}/{:03}", Outcome::Denied.as_str(), r.status)
            } else if purge_by_rule {
                if r.lower_jobs.is_some() {
                    self.sims[i].settle(self.index, r);
                }
                for inv in &r.invalidations {
                    apply(&*store, inv, r.at);
                }
                format!("{}/200", Outcome::Purge.as_str())
            } else {
                let sim = &mut self.sims[i];
                sim.settle(self.index, r);
                let Sim {
                    engine,
                    disk,
                    arriving,
                    result,
                    ..
                } = sim;
                let mut origin = Recorded {
                    request: r,
                    disk: disk.as_ref(),
                    reads: 0,
                    afters: 0,
                    next: 0,
                    latest: self.latest.get(&r.url),
                    asked: 0,
                    reused: 0,
                    missing: 0,
                    racing,
                    applied: 0,
                    store: &*store,
                    arriving: Vec::new(),
                    last_reused: false,
                };
                let served = engine.handle(&r.method, &r.url, &r.headers, r.at, &mut origin);
                // Those that landed after its last answer's head arrived, after it.
                for (at, inv) in &racing[origin.applied..] {
                    apply(&*store, inv, *at);
                }
                let deadline = r.done + REORDER;
                for (obj, body) in origin.arriving {
                    arriving.push_back(Arriving {
                        url: r.url.clone(),
                        obj,
                        body,
                        deadline,
                    });
                }

                let res = result;
                res.requests += 1;
                res.origin_requests += origin.asked;
                if served.outcome.is_hit() {
                    res.hits += 1;
                }
                *res.outcomes.entry(served.outcome.as_str()).or_default() += 1;
                if i == 0 {
                    self.report.answers_reused += origin.reused;
                    self.report.answers_missing += origin.missing;
                }
                format!("{}/{:03}", served.outcome.as_str(), served.status.as_u16())
            };
            if r.result == Outcome::Denied.as_str() || purge_by_rule {
                for (at, inv) in racing {
                    apply(&*store, inv, *at);
                }
            }
            let res = &mut self.sims[i].result;
            if compared && replayed != recorded {
                res.differing += 1;
                if res.examples.len() < EXAMPLES {
                    res.examples.push((
                        self.index,
                        format!("{} {}", r.method, r.url),
                        recorded.clone(),
                        replayed.clone(),
                    ));
                }
            }
            if i == 0 {
                if let Some(w) = &mut self.outcomes {
                    writeln!(w, "{replayed}")?;
                }
            }
        }
        // What later requests may need when the replay asks more than trove did.
        if let Some(a) = r
            .answers
            .iter()
            .rev()
            .find(|a| matches!(a.status, Ok(s) if s != StatusCode::NOT_MODIFIED))
        {
            self.latest.insert(r.url.clone(), a.clone());
        }
        Ok(())
    }

    /// The report so far.
    pub fn report(&mut self, skipped: &Skipped) -> ExactReport {
        if let Some(w) = &mut self.outcomes {
            let _ = w.flush();
        }
        let mut report = self.report.clone();
        report.skipped = skipped.clone();
        report.results = self
            .sims
            .iter()
            .map(|s| {
                let mut r = s.result.clone();
                r.hit_ratio = if r.requests == 0 {
                    0.0
                } else {
                    r.hits as f64 / r.requests as f64
                };
                r.evictions = s.engine.store.stats().evictions;
                r.disk = s.disk.as_ref().map(|d| {
                    let st = d.store.disk().stats();
                    DiskCounts {
                        objects: st.objects,
                        writes: st.writes,
                        writes_dropped: st.writes_dropped,
                        regions_reclaimed: st.regions_reclaimed,
                        reinserted: st.reinserted,
                        hits: st.hits,
                        queue_mismatches: s.queue_mismatches,
                        first_queue_mismatch: s.first_queue_mismatch,
                    }
                });
                r
            })
            .collect();
        report
    }
}

/// Replays a whole trace.
pub fn run<R: std::io::BufRead>(input: R, mut exact: Exact) -> anyhow::Result<ExactReport> {
    let mut reader = ReplayableReader::new(input);
    while let Some(e) = reader.next_event() {
        // What trove's disk writer had been given before this request's lookup.
        if let Event::Request(r) = &e {
            if let Some(q) = r.lower_queued {
                for early in reader.take_queued_before(q) {
                    exact.feed(&early, &[])?;
                }
            }
        }
        // What landed while its origin's answers were on their way.
        let racing = match &e {
            Event::Request(r) => match r.answers.iter().map(|a| a.received).max() {
                Some(until) => {
                    let seq = r.answers.iter().filter_map(|a| a.rules_seq).max();
                    reader.take_racing(until, seq)
                }
                None => Vec::new(),
            },
            _ => Vec::new(),
        };
        exact.feed(&e, &racing)?;
    }
    if let Some(e) = reader.error() {
        anyhow::bail!("reading the trace: {e}");
    }
    // Bodies the trace never said the end of, and a pass's removals it did not reach.
    for sim in &mut exact.sims {
        while let Some(a) = sim.arriving.pop_front() {
            sim.end(a, true);
        }
        if let Some(d) = &sim.disk {
            d.reach(None);
        }
    }
    Ok(exact.report(reader.skipped()))
}

/// The origin of one replayed request: its recorded answers, then the URL's latest.
struct Recorded<'a> {
    request: &'a Request,
    /// The disk tier, to put its writer where trove's was at each read of it.
    disk: Option<&'a DiskTier>,
    /// Reads of the disk so far, and clocks read after them.
    reads: usize,
    afters: usize,
    next: usize,
    latest: Option<&'a Answer>,
    asked: u64,
    reused: u64,
    missing: u64,
    /// Invalidations that landed while the request waited for its origin, in order, and
    /// how many of them are applied.
    racing: &'a [(SystemTime, Invalidation)],
    applied: usize,
    store: &'a dyn Storage,
    /// Bodies to store where trove's ended.
    arriving: Vec<(Arc<Object>, Option<AnswerBody>)>,
    /// The last answer handed over was not trove's (the replay asked more than it did):
    /// no record will say where its body ended.
    last_reused: bool,
}

impl Recorded<'_> {
    /// Applies the racing invalidations trove had made when it judged an answer: those up
    /// to `seq` when the trace says (made before it handed the answer to its flow), else
    /// those made at `until` (its head's arrival) or before.
    fn apply_until(&mut self, until: SystemTime, seq: Option<u64>) {
        while let Some((at, inv)) = self.racing.get(self.applied) {
            let seen = match seq {
                Some(s) => inv.seq <= s,
                None => *at <= until,
            };
            if !seen {
                break;
            }
            apply(self.store, inv, *at);
            self.applied += 1;
        }
    }
}

impl Origin for Recorded<'_> {
    /// Kept, to be stored where trove's body ended (see [`Sim::filled`]); stored at once
    /// if trove never fetched it.
    fn store_body(&mut self, store: &dyn Storage, obj: Arc<Object>, body: Option<AnswerBody>) {
        if self.last_reused {
            trove_cache::engine::fill(store, &obj, body);
        } else {
            self.arriving.push((obj, body));
        }
    }

    /// Trove judged a disk copy's freshness once it had read it: at the clock it read
    /// after this open or promotion (the first one's, in an older trace).
    fn after_lower(&mut self) -> Option<SystemTime> {
        let at = self.request.lower_ats.get(self.afters).copied();
        self.afters += 1;
        at.or(self.request.lower_at)
    }

    /// Trove's writer may have gone on between the lookup and the read.
    fn before_lower(&mut self) {
        let at = self.request.lower_reads.get(self.reads).copied();
        self.reads += 1;
        if let (Some(d), Some((jobs, reclaims))) = (self.disk, at) {
            d.settle(Some(jobs), Some(reclaims));
        }
    }

    fn fetch(&mut self, req: &Forward<'_>) -> Result<OriginAnswer, OriginFailure> {
        self.asked += 1;
        let recorded = self.request.answers.get(self.next);
        self.next += 1;
        self.last_reused = recorded.is_none();
        // What trove applied before this answer's head arrived, the replay applies before
        // handing it over (the request was sent before them: they judge what it brings).
        if let Some(a) = recorded {
            self.apply_until(a.received, a.rules_seq);
        }
        let a = match (recorded, self.request.answers.last(), self.latest) {
            (Some(a), _, _) => a,
            // Asked once more than trove asked: the latest whole answer known.
            (None, last, latest) => {
                let whole =
                    |a: &&Answer| matches!(a.status, Ok(s) if s != StatusCode::NOT_MODIFIED);
                match last.filter(whole).or(latest) {
                    Some(a) => {
                        self.reused += 1;
                        return Ok(revalidated(a, req));
                    }
                    None => {
                        self.missing += 1;
                        return Err(OriginFailure::ProtocolError);
                    }
                }
            }
        };
        let status = match &a.status {
            Ok(s) => *s,
            Err(f) => return Err(failure(f)),
        };
        Ok(OriginAnswer {
            status,
            headers: a.headers.clone(),
            body: AnswerBody::Sized(body_length(a, status, req.method)),
        })
    }
}

/// A whole answer reused for a request it was not recorded for: `304` when the request's
/// validator is the answer's (as an origin would say).
fn revalidated(a: &Answer, req: &Forward<'_>) -> OriginAnswer {
    let status = a.status.clone().unwrap_or(StatusCode::OK);
    let matches = match (req.headers.get(IF_NONE_MATCH), a.headers.get(ETAG)) {
        (Some(inm), Some(etag)) => inm
            .as_bytes()
            .split(|b| *b == b',')
            .any(|t| t.trim_ascii() == etag.as_bytes() || t.trim_ascii() == b"*"),
        _ => false,
    };
    let mut headers: HeaderMap = a.headers.clone();
    if matches {
        headers.remove(http::header::CONTENT_LENGTH);
        return OriginAnswer {
            status: StatusCode::NOT_MODIFIED,
            headers,
            body: AnswerBody::Sized(0),
        };
    }
    OriginAnswer {
        status,
        headers,
        body: AnswerBody::Sized(body_length(a, status, req.method)),
    }
}

/// The body the answer carried: none for a `HEAD`, a 1xx, 204 or 304.
fn body_length(a: &Answer, status: StatusCode, method: &Method) -> u64 {
    if *method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return 0;
    }
    a.length.unwrap_or(0)
}

/// True for an invalidation the replay can apply (see the module docs).
fn applicable(inv: &Invalidation) -> bool {
    match inv.selects {
        Selects::Url | Selects::Prefix => true,
        Selects::Ban => ban(&inv.value).is_some(),
        Selects::Tag | Selects::Cache => false,
    }
}

/// A ban as the trace writes it: `subject op value`.
fn ban(value: &str) -> Option<Ban> {
    let mut parts = value.splitn(3, ' ');
    let (subject, op, pattern) = (parts.next()?, parts.next()?, parts.next()?);
    Ban::parse(subject, op, pattern).ok()
}

/// Applies `inv`, made at `at`, to `store` as trove applied it (see the module docs);
/// what it can't apply is left alone (and was counted).
fn apply(store: &dyn Storage, inv: &Invalidation, at: SystemTime) {
    let Some(rules) = store.invalidations() else {
        return;
    };
    let mode = if inv.soft { Mode::Soft } else { Mode::Hard };
    match inv.selects {
        Selects::Url => {
            rules.add(Selector::Key(key_hash(&inv.value)), mode, at);
            if !inv.soft {
                store.remove(&inv.value, Removal::Purged);
            }
        }
        // Removed by the sweeps that follow, as in trove.
        Selects::Prefix => {
            rules.add(Selector::Prefix(inv.value.clone()), mode, at);
        }
        Selects::Ban => {
            if let Some(b) = ban(&inv.value) {
                let _ = rules.add_ban(b, mode, at);
            }
        }
        Selects::Tag | Selects::Cache => {}
    }
}

fn failure(name: &str) -> OriginFailure {
    match name {
        "dns-error" => OriginFailure::DnsError,
        "dns-timeout" => OriginFailure::DnsTimeout,
        "connection-refused" => OriginFailure::ConnectionRefused,
        "connection-timeout" => OriginFailure::ConnectionTimeout,
        "overloaded" => OriginFailure::Overloaded(ShedReason::PendingLimit),
        "timeout" => OriginFailure::Timeout,
        "connection-closed" => OriginFailure::ConnectionClosed,
        "tls-certificate" => OriginFailure::TlsCertificate,
        "tls-protocol" => OriginFailure::TlsProtocol,
        _ => OriginFailure::ProtocolError,
    }
}

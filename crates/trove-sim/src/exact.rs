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
//! Invalidations are applied where trove applied them, by time: a URL's at once (trove
//! removes its variants at once too), a prefix's to every URL the trace has named under
//! it. Soft invalidations and those by tag, named cache or ban select what only trove's
//! labels know: they are counted (`unsupported_invalidations`), not applied.

use std::collections::BTreeMap;
use std::io::Write;

use http::header::{ETAG, IF_NONE_MATCH};
use http::{HeaderMap, Method, StatusCode};
use serde::Serialize;
use trove_cache::engine::{AnswerBody, Engine, Forward, Origin, OriginAnswer};
use trove_cache::{OriginFailure, Outcome, ShedReason};
use trove_store::Removal;

use crate::intern::{FastMap, FastSet};
use crate::replay::Config;
use crate::trace::replayable::{Answer, Event, Invalidation, ReplayableReader, Request, Selects};
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
    /// Origin requests the replay made beyond the trace's, answered with the URL's latest.
    pub answers_reused: u64,
    /// Origin requests nothing recorded could answer (answered 502).
    pub answers_missing: u64,
    pub skipped: Skipped,
    pub results: Vec<ConfigResult>,
}

struct Sim {
    engine: Engine,
    result: ConfigResult,
}

/// The replay in progress.
pub struct Exact {
    sims: Vec<Sim>,
    /// The latest whole answer recorded for each URL.
    latest: FastMap<String, Answer>,
    /// Every URL the trace named (for prefix invalidations).
    urls: FastSet<String>,
    outcomes: Option<Box<dyn Write>>,
    report: ExactReport,
    index: u64,
}

/// Most differing requests a report lists.
const EXAMPLES: usize = 10;

impl Exact {
    pub fn new(configs: Vec<Config>, trace: &str) -> Exact {
        let sims = configs
            .into_iter()
            .map(|cfg| {
                let engine = crate::replay::engine_for(&cfg);
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
                };
                Sim { engine, result }
            })
            .collect();
        Exact {
            sims,
            latest: FastMap::default(),
            urls: FastSet::default(),
            outcomes: None,
            report: ExactReport {
                trace: trace.to_string(),
                requests: 0,
                compared: 0,
                invalidations: 0,
                unsupported_invalidations: 0,
                answers_reused: 0,
                answers_missing: 0,
                skipped: Skipped::default(),
                results: Vec::new(),
            },
            index: 0,
        }
    }

    /// Writes the first configuration's `RESULT/status` for every request to `w`.
    pub fn with_outcomes(mut self, w: Box<dyn Write>) -> Exact {
        self.outcomes = Some(w);
        self
    }

    /// Replays one record.
    pub fn feed(&mut self, event: &Event) -> std::io::Result<()> {
        match event {
            Event::Invalidation(_, inv) => {
                self.invalidate(inv);
                Ok(())
            }
            Event::Request(r) => self.request(r),
        }
    }

    fn invalidate(&mut self, inv: &Invalidation) {
        self.report.invalidations += 1;
        if inv.soft {
            self.report.unsupported_invalidations += 1;
            return;
        }
        let keys: Vec<&String> = match inv.selects {
            Selects::Url => vec![&inv.value],
            Selects::Prefix => self
                .urls
                .iter()
                .filter(|u| u.starts_with(&inv.value))
                .collect(),
            Selects::Tag | Selects::Cache | Selects::Ban => {
                self.report.unsupported_invalidations += 1;
                return;
            }
        };
        for sim in &mut self.sims {
            for k in &keys {
                sim.engine.store.remove(k, Removal::Purged);
            }
        }
    }

    fn request(&mut self, r: &Request) -> std::io::Result<()> {
        self.report.requests += 1;
        self.index += 1;
        if !self.urls.contains(&r.url) {
            self.urls.insert(r.url.clone());
        }
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
        for i in 0..self.sims.len() {
            let replayed = if r.result == Outcome::Denied.as_str() {
                format!("{}/{:03}", Outcome::Denied.as_str(), r.status)
            } else if purge_by_rule {
                for inv in &r.invalidations {
                    if i == 0 {
                        self.invalidate(inv);
                    }
                }
                format!("{}/200", Outcome::Purge.as_str())
            } else {
                let mut origin = Recorded {
                    request: r,
                    next: 0,
                    latest: self.latest.get(&r.url),
                    asked: 0,
                    reused: 0,
                    missing: 0,
                };
                let sim = &mut self.sims[i];
                let served = sim
                    .engine
                    .handle(&r.method, &r.url, &r.headers, r.at, &mut origin);
                let res = &mut sim.result;
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
        exact.feed(&e)?;
    }
    if let Some(e) = reader.error() {
        anyhow::bail!("reading the trace: {e}");
    }
    Ok(exact.report(reader.skipped()))
}

/// The origin of one replayed request: its recorded answers, then the URL's latest.
struct Recorded<'a> {
    request: &'a Request,
    next: usize,
    latest: Option<&'a Answer>,
    asked: u64,
    reused: u64,
    missing: u64,
}

impl Origin for Recorded<'_> {
    fn fetch(&mut self, req: &Forward<'_>) -> Result<OriginAnswer, OriginFailure> {
        self.asked += 1;
        let recorded = self.request.answers.get(self.next);
        self.next += 1;
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

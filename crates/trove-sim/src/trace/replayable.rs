//! trove's replayable trace (`[log] trace` of `trove serve`; docs/trace-format.md): JSON
//! lines, one per request (its fields, the time the cache looked it up, the origin's
//! answers with their fields, what it invalidated) and one per invalidation made outside
//! a request. `crate::exact` replays it through the core with the recorded answers; as a
//! plain [`TraceReader`] it also feeds the ordinary sweep.
//!
//! Order: `trove serve` writes a record when its exchange completes, but the cache saw
//! requests in the order it looked them up (`at_us`), and a replay must follow that order
//! (a long miss completes after the hits that came behind it). The reader holds records
//! back in a heap and hands them out by `at_us`, once the trace has moved [`REORDER`]
//! past them (or [`MAX_PENDING`] are held): a request in flight longer than that is
//! replayed late.
//!
//! Every byte of a trace is hostile input: a line that is not JSON, of another version, with
//! a time past [`super::MAX_TIME`], a size past [`super::MAX_OBJECT_SIZE`], a method, field
//! name or value HTTP would refuse, is counted bad and skipped, never fatal.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::io::BufRead;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use serde::Deserialize;

use super::{is_blank, Lines, Record, Skipped, TraceReader};

/// The format version this reader knows.
pub const VERSION: u32 = 1;

/// How far past a record (in `at_us`) the trace must have moved before it is handed out.
pub const REORDER: Duration = Duration::from_secs(10);

/// Most records held back for reordering.
pub const MAX_PENDING: usize = 100_000;

/// Most fields one request or answer may carry.
const MAX_FIELDS: usize = 256;

/// A line as written.
#[derive(Debug, Deserialize)]
struct Line {
    v: u32,
    kind: String,
    at_us: u64,
    #[serde(default)]
    start_us: u64,
    #[serde(default)]
    done_us: u64,
    #[serde(default)]
    client: String,
    #[serde(default)]
    method: String,
    #[serde(default)]
    url: String,
    #[serde(default)]
    request: Vec<(String, String)>,
    #[serde(default)]
    status: u16,
    #[serde(default)]
    result: String,
    #[serde(default)]
    aborted: bool,
    #[serde(default)]
    bytes: u64,
    #[serde(default)]
    lower_jobs: Option<u64>,
    #[serde(default)]
    lower_begun: Option<u64>,
    #[serde(default)]
    lower_at_us: Option<u64>,
    #[serde(default)]
    lower_ats_us: Vec<u64>,
    #[serde(default)]
    lower_reclaims: Option<u64>,
    #[serde(default)]
    lower_queued_after: Option<u64>,
    #[serde(default)]
    lower_queued: Option<u64>,
    #[serde(default)]
    lower_reads: Vec<(u64, u64)>,
    #[serde(default)]
    memory: Option<(u64, u64, u64)>,
    #[serde(default)]
    origin: Vec<AnswerLine>,
    #[serde(default)]
    invalidations: Vec<InvalidationLine>,
    // A standalone invalidation's.
    #[serde(default)]
    selects: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    soft: bool,
    #[serde(default)]
    seq: u64,
    // A filled body's.
    #[serde(default)]
    ok: bool,
    // A sweep's.
    #[serde(default)]
    retire_before_us: u64,
    #[serde(default)]
    whole: bool,
}

#[derive(Debug, Deserialize)]
struct AnswerLine {
    status: u16,
    #[serde(default)]
    sent_us: u64,
    #[serde(default)]
    received_us: u64,
    #[serde(default)]
    fields: Vec<(String, String)>,
    length: Option<u64>,
    failed: Option<String>,
    #[serde(default)]
    rules_seq: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct InvalidationLine {
    selects: String,
    value: String,
    #[serde(default)]
    soft: bool,
    #[serde(default)]
    seq: u64,
}

/// What an invalidation selected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selects {
    Url,
    Tag,
    Cache,
    Prefix,
    Ban,
}

/// One invalidation trove applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalidation {
    pub selects: Selects,
    /// The URL (a cache key), tag, cache name, prefix or ban.
    pub value: String,
    pub soft: bool,
    pub seq: u64,
}

/// The origin's answer, as trove received it.
#[derive(Debug, Clone)]
pub struct Answer {
    /// `Err`: the origin failed, and how (`timeout`, `connection-refused` …).
    pub status: Result<StatusCode, String>,
    pub headers: HeaderMap,
    /// Its declared body length.
    pub length: Option<u64>,
    pub sent: SystemTime,
    pub received: SystemTime,
    /// The last invalidation rule trove had made when it judged the answer.
    pub rules_seq: Option<u64>,
}

/// One request as trove handled it.
#[derive(Debug, Clone)]
pub struct Request {
    /// When trove looked it up.
    pub at: SystemTime,
    pub start: SystemTime,
    pub done: SystemTime,
    pub client: String,
    pub method: Method,
    /// The cache key.
    pub url: String,
    pub headers: HeaderMap,
    /// The status the client got.
    pub status: u16,
    /// Squid's result code as the access log writes it (without `_ABORTED`).
    pub result: String,
    pub aborted: bool,
    pub bytes: u64,
    /// Where trove's disk writer was at the lookup (jobs done), with a disk tier.
    pub lower_jobs: Option<u64>,
    /// How many it had begun (one more than `lower_jobs` while a job was under way).
    pub lower_begun: Option<u64>,
    /// How many regions it had reclaimed.
    pub lower_reclaims: Option<u64>,
    /// When the disk's copy had been opened or promoted (its freshness judged then).
    pub lower_at: Option<SystemTime>,
    /// Each time trove read its clock after an open or promotion of the disk's copy.
    pub lower_ats: Vec<SystemTime>,
    /// How many jobs had been queued for it then, done or not.
    pub lower_queued: Option<u64>,
    /// Where trove's disk writer was (jobs done, regions reclaimed) at each read of the
    /// disk's copy after the lookup (an open, a promotion), in order.
    pub lower_reads: Vec<(u64, u64)>,
    /// trove's memory tier at the lookup: objects, bytes, evictions so far (a diagnostic:
    /// the replay reports where its own first differs).
    pub memory: Option<(u64, u64, u64)>,
    pub answers: Vec<Answer>,
    pub invalidations: Vec<Invalidation>,
}

impl Request {
    /// `RESULT/status`, as `--outcomes` writes a replayed one.
    pub fn code(&self) -> String {
        format!("{}/{:03}", self.result, self.status)
    }
}

/// A record of the trace.
#[derive(Debug, Clone)]
pub enum Event {
    Request(Box<Request>),
    /// An invalidation made outside any request (the admin API), at its time.
    Invalidation(SystemTime, Invalidation),
    /// A pass of trove's invalidation sweeper (see docs/trace-format.md).
    Sweep(Sweep),
    /// A stored body ended: whole (`ok`), or failed and left the store.
    Filled {
        at: SystemTime,
        url: String,
        ok: bool,
        /// Jobs queued for trove's disk writer just before the end queued its own, and
        /// just after.
        lower_queued: Option<(u64, u64)>,
    },
}

/// A pass of trove's invalidation sweeper: the objects its rules kill removed (their
/// memory returned), rules older than `retire_before` retired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sweep {
    pub at: SystemTime,
    pub retire_before: SystemTime,
    /// It covered the whole store: with a disk tier, it passed over the disk too.
    pub whole: bool,
    /// Jobs queued for trove's disk writer when it began, and when it ended.
    pub lower_queued: Option<(u64, u64)>,
}

impl Event {
    /// When the cache saw it.
    pub fn at(&self) -> SystemTime {
        match self {
            Event::Request(r) => r.at,
            Event::Invalidation(t, _) => *t,
            Event::Sweep(s) => s.at,
            Event::Filled { at, .. } => *at,
        }
    }

    /// For a body's end or a sweep that queued jobs for trove's disk writer: how many had
    /// been queued before its first.
    pub fn lower_queued(&self) -> Option<u64> {
        let q = match self {
            Event::Filled { lower_queued, .. } => *lower_queued,
            Event::Sweep(s) => s.lower_queued,
            Event::Request(_) | Event::Invalidation(..) => None,
        };
        q.filter(|(before, after)| after > before).map(|(b, _)| b)
    }
}

/// Parses one line; `None` if it is not a record this reader can trust.
pub fn parse(line: &[u8]) -> Option<Event> {
    let l: Line = serde_json::from_slice(line).ok()?;
    if l.v != VERSION {
        return None;
    }
    let at = time(l.at_us)?;
    match l.kind.as_str() {
        "invalidation" => {
            let inv = invalidation(&l.selects, l.value, l.soft, l.seq)?;
            Some(Event::Invalidation(at, inv))
        }
        "filled" if !l.url.is_empty() => Some(Event::Filled {
            at,
            url: l.url,
            ok: l.ok,
            lower_queued: l.lower_queued.zip(l.lower_queued_after),
        }),
        "sweep" => Some(Event::Sweep(Sweep {
            at,
            retire_before: time(l.retire_before_us)?,
            whole: l.whole,
            lower_queued: l.lower_queued.zip(l.lower_queued_after),
        })),
        "request" => {
            let method = Method::from_bytes(l.method.as_bytes()).ok()?;
            let status = sane_status(l.status)?;
            let result = l.result;
            let printable = result.bytes().all(|b| b.is_ascii_graphic());
            if result.is_empty() || result.len() > 64 || !printable || l.url.is_empty() {
                return None;
            }
            let answers = l
                .origin
                .into_iter()
                .map(answer)
                .collect::<Option<Vec<_>>>()?;
            let invalidations = l
                .invalidations
                .into_iter()
                .map(|i| invalidation(&i.selects, i.value, i.soft, i.seq))
                .collect::<Option<Vec<_>>>()?;
            Some(Event::Request(Box::new(Request {
                at,
                start: time(l.start_us)?,
                done: time(l.done_us)?,
                client: l.client,
                method,
                url: l.url,
                headers: headers(l.request)?,
                status,
                result,
                aborted: l.aborted,
                bytes: super::sane_size(l.bytes)?,
                lower_jobs: l.lower_jobs,
                lower_begun: l.lower_begun,
                lower_reclaims: l.lower_reclaims,
                lower_ats: l
                    .lower_ats_us
                    .iter()
                    .map(|us| time(*us))
                    .collect::<Option<Vec<_>>>()?,
                lower_at: match l.lower_at_us {
                    Some(us) => Some(time(us)?),
                    None => None,
                },
                lower_queued: l.lower_queued,
                lower_reads: l.lower_reads,
                memory: l.memory,
                answers,
                invalidations,
            })))
        }
        _ => None,
    }
}

fn invalidation(kind: &str, value: String, soft: bool, seq: u64) -> Option<Invalidation> {
    let selects = match kind {
        "url" => Selects::Url,
        "tag" => Selects::Tag,
        "cache" => Selects::Cache,
        "prefix" => Selects::Prefix,
        "ban" => Selects::Ban,
        _ => return None,
    };
    Some(Invalidation {
        selects,
        value,
        soft,
        seq,
    })
}

fn answer(a: AnswerLine) -> Option<Answer> {
    let status = match a.failed {
        Some(f) => Err(f),
        None => Ok(StatusCode::from_u16(a.status).ok()?),
    };
    let length = match a.length {
        Some(n) => Some(super::sane_size(n)?),
        None => None,
    };
    Some(Answer {
        status,
        headers: headers(a.fields)?,
        length,
        sent: time(a.sent_us)?,
        received: time(a.received_us)?,
        rules_seq: a.rules_seq,
    })
}

fn headers(fields: Vec<(String, String)>) -> Option<HeaderMap> {
    if fields.len() > MAX_FIELDS {
        return None;
    }
    let mut h = HeaderMap::with_capacity(fields.len());
    for (n, v) in fields {
        let name = HeaderName::from_bytes(n.as_bytes()).ok()?;
        let value = HeaderValue::from_str(&v).ok()?;
        h.append(name, value);
    }
    Some(h)
}

fn sane_status(s: u16) -> Option<u16> {
    (s == 0 || (100..=999).contains(&s)).then_some(s)
}

fn time(us: u64) -> Option<SystemTime> {
    let secs = us as f64 / 1e6;
    super::sane_time(secs)?;
    UNIX_EPOCH.checked_add(Duration::from_micros(us))
}

/// A held-back record, ordered by when the cache saw it, then by its line.
struct Pending {
    at: SystemTime,
    line: u64,
    event: Event,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.line) == (o.at, o.line)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.line).cmp(&(o.at, o.line))
    }
}

/// Reads a replayable trace, in the order the cache saw its records (see the module docs).
pub struct ReplayableReader<R> {
    lines: Lines<R>,
    skipped: Skipped,
    pending: BinaryHeap<Reverse<Pending>>,
    /// Standalone invalidations held back, apart from the requests so that a request's
    /// replay can take those that landed while its origin answer was on its way
    /// ([`ReplayableReader::take_invalidations`]).
    invalidations: BTreeMap<(SystemTime, u64), Invalidation>,
    /// Bodies' ends and sweeps that gave trove's disk writer jobs, by how many it had been
    /// given before theirs, then line: held until the first request trove looked up after
    /// that takes them ([`ReplayableReader::take_queued_before`]), whatever their times
    /// say (a record's time is read a moment before or after the queueing it stands
    /// for), or the trace ends.
    queued: BTreeMap<(u64, u64), Event>,
    /// The latest time the trace has reached (a record's completion).
    reached: SystemTime,
    ended: bool,
    /// The record [`TraceReader::next_record`] lends out.
    current: Option<Event>,
}

impl<R: BufRead> ReplayableReader<R> {
    pub fn new(input: R) -> Self {
        ReplayableReader {
            lines: Lines::new(input),
            skipped: Skipped::default(),
            pending: BinaryHeap::new(),
            invalidations: BTreeMap::new(),
            queued: BTreeMap::new(),
            reached: UNIX_EPOCH,
            ended: false,
            current: None,
        }
    }

    /// The next record in the order the cache saw them, or `None` at the end.
    pub fn next_event(&mut self) -> Option<Event> {
        loop {
            let request = self.pending.peek().map(|Reverse(p)| (p.at, p.line));
            let invalidation = self.invalidations.keys().next().copied();
            // The earlier of the two held back, by time then line.
            let first = match (request, invalidation) {
                (Some(r), Some(i)) => Some((r.min(i), i < r)),
                (Some(r), None) => Some((r, false)),
                (None, Some(i)) => Some((i, true)),
                (None, None) => None,
            };
            if let Some(((at, _), is_invalidation)) = first {
                let settled = at.checked_add(REORDER).is_some_and(|t| t <= self.reached);
                let held = self.pending.len() + self.invalidations.len() + self.queued.len();
                if self.ended || settled || held > MAX_PENDING {
                    // A held body's end or sweep goes before a later record that may
                    // queue disk jobs without saying where the queue was (an invalidation,
                    // a `PURGE`), by time, as nothing better places them. Before a request
                    // that says, the queue decides (`take_queued_before`); a body's end or
                    // sweep that queued nothing says nothing about the held ones.
                    let releases = is_invalidation
                        || self.pending.peek().is_some_and(|Reverse(p)| {
                            matches!(&p.event, Event::Request(r) if r.lower_queued.is_none())
                        });
                    if releases {
                        if let Some(e) = self.take_held_before(at) {
                            return Some(e);
                        }
                    }
                    if is_invalidation {
                        return self
                            .invalidations
                            .pop_first()
                            .map(|((t, _), inv)| Event::Invalidation(t, inv));
                    }
                    return self.pending.pop().map(|Reverse(p)| p.event);
                }
            } else if self.ended {
                return self.queued.pop_first().map(|(_, e)| e);
            }
            if !self.lines.advance(&mut self.skipped) {
                self.ended = true;
                continue;
            }
            if is_blank(&self.lines.buf) {
                continue;
            }
            match parse(&self.lines.buf) {
                Some(Event::Invalidation(t, inv)) => {
                    self.reached = self.reached.max(t);
                    self.invalidations.insert((t, self.lines.line_no), inv);
                }
                Some(event) => {
                    let done = match &event {
                        Event::Request(r) => r.done.max(r.at),
                        Event::Invalidation(t, _) => *t,
                        Event::Sweep(s) => s.at,
                        Event::Filled { at, .. } => *at,
                    };
                    self.reached = self.reached.max(done);
                    let (at, line) = (event.at(), self.lines.line_no);
                    match event.lower_queued() {
                        Some(q) => {
                            self.queued.insert((q, line), event);
                        }
                        None => self.pending.push(Reverse(Pending { at, line, event })),
                    }
                }
                None => self.skipped.bad(self.lines.line_no, &self.lines.buf),
            }
        }
    }

    /// Takes the standalone invalidations held back that trove made at `until` or
    /// before, in order: those that landed while the request just handed out (which trove
    /// looked up before them) was waiting for its origin's answer.
    pub fn take_invalidations(&mut self, until: SystemTime) -> Vec<(SystemTime, Invalidation)> {
        self.take_racing(until, None)
    }

    /// As [`ReplayableReader::take_invalidations`], and also those of sequence numbers up
    /// to `seq` made later (trove judged the answer after them: see `Answer::rules_seq`).
    pub fn take_racing(
        &mut self,
        until: SystemTime,
        seq: Option<u64>,
    ) -> Vec<(SystemTime, Invalidation)> {
        let keys: Vec<(SystemTime, u64)> = self
            .invalidations
            .iter()
            .filter(|((t, _), inv)| *t <= until || seq.is_some_and(|s| inv.seq <= s))
            .map(|(k, _)| *k)
            .collect();
        keys.into_iter()
            .filter_map(|k| self.invalidations.remove(&k).map(|inv| (k.0, inv)))
            .collect()
    }

    /// Takes the bodies' ends and sweeps held back that began with fewer than `queued`
    /// jobs given to trove's disk writer, in that order: they queued theirs before a
    /// request that found `queued` was looked up, so its replay must find them done,
    /// whatever the times say (a record's time is read a moment before or after the
    /// queueing it stands for).
    pub fn take_queued_before(&mut self, queued: u64) -> Vec<Event> {
        let mut out = Vec::new();
        while let Some(entry) = self.queued.first_entry() {
            if entry.key().0 >= queued {
                break;
            }
            out.push(entry.remove());
        }
        out
    }

    /// Takes the earliest held body's end or sweep (see `queued`) from before `at`.
    fn take_held_before(&mut self, at: SystemTime) -> Option<Event> {
        let key = self
            .queued
            .iter()
            .filter(|(_, e)| e.at() < at)
            .min_by_key(|((_, line), e)| (e.at(), *line))
            .map(|(k, _)| *k)?;
        self.queued.remove(&key)
    }

    pub fn skipped(&self) -> &Skipped {
        &self.skipped
    }

    pub fn position(&self) -> u64 {
        self.lines.position
    }

    pub fn error(&self) -> Option<&std::io::Error> {
        self.lines.error.as_ref()
    }
}

/// As a plain trace (for the sweep, `convert`): its requests, by the time the cache looked
/// them up; invalidations are left out.
impl<R: BufRead> TraceReader for ReplayableReader<R> {
    fn next_record(&mut self) -> Option<Record<'_>> {
        loop {
            match self.next_event()? {
                Event::Request(r) => {
                    self.current = Some(Event::Request(r));
                    break;
                }
                Event::Invalidation(..) | Event::Sweep(_) | Event::Filled { .. } => continue,
            }
        }
        let Some(Event::Request(r)) = &self.current else {
            return None;
        };
        let time =
            r.at.duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
        let object_size = r
            .answers
            .iter()
            .rev()
            .find(|a| matches!(a.status, Ok(StatusCode::OK)))
            .and_then(|a| a.length);
        Some(Record {
            time,
            client: &r.client,
            method: r.method.as_str(),
            url: &r.url,
            status: r.status,
            result: &r.result,
            bytes: r.bytes,
            object_size,
            content_type: "",
            id: None,
        })
    }

    fn skipped(&self) -> &Skipped {
        &self.skipped
    }

    fn position(&self) -> u64 {
        self.lines.position
    }

    fn error(&self) -> Option<&std::io::Error> {
        self.lines.error.as_ref()
    }
}

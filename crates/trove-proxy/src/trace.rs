//! The replayable trace (`[log] trace`, issue 21): one JSON line per request with what a
//! Squid log lacks but the cache's decisions depend on — the request's fields, the time
//! the cache looked it up, the origin's answers with their fields, the invalidations it
//! caused — so `trove sim` can replay it through the core and give back `trove serve`'s
//! result codes request by request (`trove_sim::trace::replayable`; the format is in
//! docs/trace-format.md).
//!
//! Why JSON lines: every value is typed and escaped (header values carry any byte a
//! client sends, which a space-separated line would have to invent an escape for); a
//! record can grow a field without breaking older readers (`"v"` says which version wrote
//! it); and `jq` reads it. The cost, a few hundred bytes a request, is what a trace meant
//! for replay, not for keeping, can afford.
//!
//! How it is gathered without the request path knowing: the connection runs the cache's
//! state machine inside a task-local [`Capture`] ([`scope`]); the three places that see
//! what the trace needs note it there — `cache::fetch::now` the first reading of the clock
//! (the lookup's time, which freshness was judged at), `cache::fetch::send` each answer
//! of the origin, `manage::invalidate` each invalidation a `PURGE` made. An invalidation
//! made outside a request (the admin API) is a record of its own ([`TraceLog::invalidation`]).
//! Work spawned off the request (a background revalidation, a fill) is outside the scope
//! and noted nowhere. Lines go through the access log's writer thread
//! ([`AccessLog::append`]), so a request costs no system call.
//!
//! Privacy: `Cookie`, `Authorization`, `Proxy-Authorization` and `Set-Cookie` values are
//! replaced by a hash of the same length ([`mask`]): equal values stay equal (a `Vary:
//! Cookie` still tells variants apart) and a stored head is charged the same, but no
//! secret reaches the trace.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use parking_lot::Mutex;
use serde::Serialize;
use trove_cache::{OriginFailure, Outcome};

use crate::access_log::AccessLog;
use crate::origin::OriginResponse;

/// The format's version, written in every record as `"v"`.
pub const VERSION: u32 = 1;

/// Most bytes of request fields one record keeps (names and values); fields past it are
/// left out and the record says `"truncated": true`.
pub const MAX_REQUEST_FIELDS: usize = 16 << 10;

/// Most bytes of one origin answer's fields a record keeps.
pub const MAX_ORIGIN_FIELDS: usize = 64 << 10;

/// Request fields never written: they frame or route the message on one hop and no cache
/// decision reads them.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

/// Fields whose values are secrets: written masked ([`mask`]).
const SECRET: &[&str] = &[
    "cookie",
    "authorization",
    "proxy-authorization",
    "set-cookie",
];

/// What one request's run through the cache noted (see the module docs).
#[derive(Debug, Default)]
pub struct Capture {
    /// The first reading of the request path's clock: the lookup's `now`.
    pub looked_up: Option<SystemTime>,
    /// The clock once a lower tier's copy was opened or promoted ([`note_lower_now`]):
    /// the first time, and every time.
    pub lower_now: Option<SystemTime>,
    pub lower_nows: Vec<SystemTime>,
    /// Where the lower tier's writer was at the first lookup ([`note_lower`]).
    pub lower: Option<trove_store::LowerProgress>,
    /// The memory tier at the first lookup: objects, bytes and evictions so far
    /// ([`note_memory`]).
    pub memory: Option<[u64; 3]>,
    /// Where it was at each read of the lower tier's copy that followed ([`note_lower_read`]).
    pub lower_reads: Vec<trove_store::LowerProgress>,
    pub origin: Vec<OriginRecord>,
    pub invalidations: Vec<InvalidationRecord>,
}

/// A capture shared between the connection and the state machine it runs.
pub type Slot = Arc<Mutex<Capture>>;

tokio::task_local! {
    static CAPTURE: Option<Slot>;
}

/// Runs the future `make` builds (the cache's handling of one request) with `capture` as
/// the place the request path notes what the trace needs; with `None` (no trace), the
/// future runs as it is, and notes go nowhere.
///
/// The future is built inside, in whichever arm runs: taken as a value, it would be held
/// beside the scoped one that runs it, twice its size (several KiB) in every request's
/// boxed future, and copied with it.
pub async fn scope<F: std::future::Future>(
    capture: Option<Slot>,
    make: impl FnOnce() -> F,
) -> F::Output {
    match capture {
        Some(c) => CAPTURE.scope(Some(c), make()).await,
        None => make().await,
    }
}

fn with(f: impl FnOnce(&mut Capture)) -> bool {
    CAPTURE
        .try_with(|c| match c {
            Some(c) => {
                f(&mut c.lock());
                true
            }
            None => false,
        })
        .unwrap_or(false)
}

/// Notes a reading of the request path's clock: the first is the lookup's.
pub fn note_now(now: SystemTime) {
    with(|c| {
        c.looked_up.get_or_insert(now);
    });
}

/// Notes where the lower tier's writer was when the request was looked up (the first
/// lookup's; see `trove_store::Storage::lower_progress`).
/// `progress` is asked only when a request is being traced: an untraced lookup pays nothing.
pub fn note_lower(progress: impl FnOnce() -> Option<trove_store::LowerProgress>) {
    with(|c| {
        if c.lower.is_none() {
            c.lower = progress();
        }
    });
}

/// Notes the memory tier's objects, bytes and evictions so far when the request was looked
/// up (the first lookup's): where a replay's memory tier first parts from trove's shows.
/// `stats` is asked only when a request is being traced.
pub fn note_memory(stats: impl FnOnce() -> trove_store::StoreStats) {
    with(|c| {
        if c.memory.is_none() {
            let s = stats();
            c.memory = Some([s.objects, s.bytes, s.evictions]);
        }
    });
}

/// Notes where the lower tier's writer was just before the request read the lower tier's
/// copy (opened it, or promoted it): later than the lookup, on the blocking pool, so the
/// writer may have moved meanwhile, and what the read finds depends on where it was then.
pub fn note_lower_read(progress: Option<trove_store::LowerProgress>) {
    if let Some(p) = progress {
        with(|c| c.lower_reads.push(p));
    }
}

/// Notes the clock read once a lower tier's copy was opened or promoted (the first time):
/// its freshness is judged then, not at the lookup.
pub fn note_lower_now(now: SystemTime) {
    with(|c| {
        c.lower_now.get_or_insert(now);
        c.lower_nows.push(now);
    });
}

/// Notes the origin's answer to a request sent for the request being handled, and the
/// last invalidation rule made by then (`rules`, asked only when tracing).
pub fn note_origin(
    result: Result<&OriginResponse, OriginFailure>,
    rules: impl FnOnce() -> Option<u64>,
) {
    with(|c| {
        let mut record = match result {
            Ok(resp) => OriginRecord::of(resp),
            Err(f) => OriginRecord {
                failed: Some(failure_name(f)),
                ..OriginRecord::default()
            },
        };
        record.rules_seq = rules();
        c.origin.push(record)
    });
}

/// Notes an invalidation; false when no request is being handled here (the caller then
/// writes it as a record of its own).
pub fn note_invalidation(inv: &InvalidationRecord) -> bool {
    with(|c| c.invalidations.push(inv.clone()))
}

/// One answer of the origin, as the cache received it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OriginRecord {
    /// Its status, or 0 when it failed.
    pub status: u16,
    /// When the request was sent and the answer's head arrived, µs since the epoch.
    pub sent_us: u64,
    pub received_us: u64,
    /// Every field as received, in order (secrets masked); a `Date` the origin did not
    /// send is written as the one the cache gave it (its arrival, as trove stores it).
    pub fields: Vec<(String, String)>,
    /// Its body length as declared (`Content-Length`), if it declared one.
    pub length: Option<u64>,
    /// Why there was no answer (`timeout`, `connection-refused` …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<&'static str>,
    /// The sequence number of the last invalidation rule made when the answer was handed
    /// to the cache's flow, which judges what it brings against the rules then: a rule
    /// made after its head arrived may still be one it saw.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rules_seq: Option<u64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

impl OriginRecord {
    fn of(resp: &OriginResponse) -> OriginRecord {
        let (mut fields, truncated) = fields(&resp.headers, &[], MAX_ORIGIN_FIELDS);
        if !resp.headers.contains_key(http::header::DATE) {
            fields.push((
                "date".into(),
                trove_http::field::format_http_date(resp.response_time),
            ));
        }
        OriginRecord {
            status: resp.status.as_u16(),
            sent_us: micros(resp.request_time),
            received_us: micros(resp.response_time),
            fields,
            length: resp.content_length(),
            failed: None,
            truncated,
            rules_seq: None,
        }
    }
}

/// An invalidation trove applied: what it selected, hard or soft.
#[derive(Debug, Clone, Default, Serialize)]
pub struct InvalidationRecord {
    /// `url`, `tag`, `cache`, `prefix` or `ban`.
    #[serde(rename = "selects")]
    pub kind: &'static str,
    /// The normalised URL (a cache key), the tag, the cache's name, the prefix, or the
    /// ban's `subject op value`.
    pub value: String,
    pub soft: bool,
    /// The rule's sequence number.
    pub seq: u64,
}

/// What a request record says (see docs/trace-format.md).
#[derive(Debug, Serialize)]
pub struct RequestRecord<'a> {
    pub v: u32,
    pub kind: &'static str,
    /// When the cache looked the request up (the time its freshness was judged at; the
    /// order a replay must follow), µs since the epoch.
    pub at_us: u64,
    /// When the request's head had arrived, and when the exchange completed.
    pub start_us: u64,
    pub done_us: u64,
    pub client: String,
    pub method: &'a str,
    /// The normalised URL: the cache key.
    pub url: &'a str,
    pub request: Vec<(String, String)>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// The status the client got (0: it went away before its reply).
    pub status: u16,
    /// Squid's result code, as the access log writes it (without `_ABORTED`).
    pub result: &'static str,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub aborted: bool,
    /// Bytes sent to the client, head and body.
    pub bytes: u64,
    /// Where the disk tier's writer was at the lookup (jobs done): a replay puts its own
    /// there. Absent without a disk tier.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lower_jobs: Option<u64>,
    /// How many it had begun (one more than `lower_jobs` while a job was under way).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lower_begun: Option<u64>,
    /// How many regions it had reclaimed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lower_reclaims: Option<u64>,
    /// When a lower tier's copy had been opened or promoted (its freshness judged then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lower_at_us: Option<u64>,
    /// Each time the clock was read after an open or a promotion of the disk's copy, in
    /// order (an open that found no file, then the promotion, read it twice): the
    /// copy's freshness is judged at the last.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lower_ats_us: Vec<u64>,
    /// How many jobs had been queued for it then, done or not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lower_queued: Option<u64>,
    /// Where it was at each read of the disk's copy that followed the lookup (an open,
    /// a promotion), in order: `[jobs done, regions reclaimed]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lower_reads: Vec<[u64; 2]>,
    /// The memory tier at the lookup: `[objects, bytes, evictions so far]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<[u64; 3]>,
    /// The origin's answers, in the order they came (none for a hit).
    pub origin: Vec<OriginRecord>,
    /// Invalidations the request made (a `PURGE`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub invalidations: Vec<InvalidationRecord>,
}

/// A record of an invalidation made outside a request (the admin API).
#[derive(Debug, Serialize)]
struct StandaloneInvalidation<'a> {
    v: u32,
    kind: &'static str,
    at_us: u64,
    selects: &'static str,
    value: &'a str,
    soft: bool,
    seq: u64,
}

/// A record of a stored body's end.
#[derive(Debug, Serialize)]
struct FilledRecord<'a> {
    v: u32,
    kind: &'static str,
    at_us: u64,
    url: &'a str,
    ok: bool,
    /// Jobs queued for the disk's writer just before the body's end queued its own, and
    /// just after.
    #[serde(skip_serializing_if = "Option::is_none")]
    lower_queued: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lower_queued_after: Option<u64>,
}

/// A record of a pass of the invalidation sweeper.
#[derive(Debug, Serialize)]
struct SweepRecord {
    v: u32,
    kind: &'static str,
    at_us: u64,
    retire_before_us: u64,
    whole: bool,
    /// Jobs queued for the disk's writer when it began, and when it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    lower_queued: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lower_queued_after: Option<u64>,
}

/// What one request was, for [`TraceLog::request`].
#[derive(Debug)]
pub struct Exchange<'a> {
    pub start: SystemTime,
    pub done: SystemTime,
    pub client: std::net::IpAddr,
    pub method: &'a str,
    pub url: &'a str,
    pub headers: &'a HeaderMap,
    pub status: u16,
    pub outcome: Outcome,
    pub aborted: bool,
    pub bytes: u64,
}

/// The trace's writer: the access log's ([`AccessLog`]) with JSON lines.
#[derive(Debug)]
pub struct TraceLog(AccessLog);

impl TraceLog {
    /// `""`: nowhere; `"-"`: standard output; otherwise a file appended to.
    pub fn open(target: &str) -> std::io::Result<TraceLog> {
        AccessLog::open_as(target, "log.trace").map(TraceLog)
    }

    pub fn enabled(&self) -> bool {
        self.0.enabled()
    }

    pub fn target(&self) -> &str {
        self.0.target()
    }

    /// A capture for a request about to be handled, when tracing.
    pub fn capture(&self) -> Option<Slot> {
        self.enabled().then(Slot::default)
    }

    /// Writes the record of a request handled with `capture`.
    pub fn request(&self, x: &Exchange<'_>, capture: Capture) {
        if !self.enabled() {
            return;
        }
        let r = request_record(x, capture);
        self.0.append(|buf| write_json(buf, &r));
    }

    /// Writes the record of an invalidation made outside any request, at `now`; one made
    /// while handling a request is noted in that request's record instead.
    pub fn invalidation(&self, inv: &InvalidationRecord, now: SystemTime) {
        if !self.enabled() || note_invalidation(inv) {
            return;
        }
        let r = StandaloneInvalidation {
            v: VERSION,
            kind: "invalidation",
            at_us: micros(now),
            selects: inv.kind,
            value: &inv.value,
            soft: inv.soft,
            seq: inv.seq,
        };
        self.0.append(|buf| write_json(buf, &r));
    }

    /// Writes the record of a stored body's end: whole (`ok`), or failed (and removed),
    /// at `at`; `queued`: how many jobs the disk's writer had been given just before the
    /// end gave it its own, and just after (a replay ends the body before any request
    /// trove looked up after it had).
    pub fn filled(&self, url: &str, ok: bool, at: SystemTime, queued: Option<(u64, u64)>) {
        if !self.enabled() {
            return;
        }
        let r = FilledRecord {
            v: VERSION,
            kind: "filled",
            at_us: micros(at),
            url,
            ok,
            lower_queued: queued.map(|q| q.0),
            lower_queued_after: queued.map(|q| q.1),
        };
        self.0.append(|buf| write_json(buf, &r));
    }

    /// Writes the record of a pass of the invalidation sweeper begun at `at` (see
    /// [`crate::manage::spawn_sweeper`]): it removed what the rules kill, and retired the
    /// rules made before `retire_before`; `whole` when it covered the whole store (with a
    /// disk tier: when it passed over the disk too, which it does at most every minute);
    /// `queued`: how many jobs the disk's writer had been given when it began and ended.
    pub fn sweep(
        &self,
        at: SystemTime,
        retire_before: SystemTime,
        whole: bool,
        queued: Option<(u64, u64)>,
    ) {
        if !self.enabled() {
            return;
        }
        let r = SweepRecord {
            v: VERSION,
            kind: "sweep",
            at_us: micros(at),
            retire_before_us: micros(retire_before),
            whole,
            lower_queued: queued.map(|q| q.0),
            lower_queued_after: queued.map(|q| q.1),
        };
        self.0.append(|buf| write_json(buf, &r));
    }

    pub fn reopen(&self) {
        self.0.reopen();
    }

    pub fn close(&self) {
        self.0.close();
    }

    pub fn dropped(&self) -> u64 {
        self.0.dropped()
    }
}

/// The record [`TraceLog::request`] writes (exposed for tests and `trove sim`'s).
pub fn request_record<'a>(x: &Exchange<'a>, capture: Capture) -> RequestRecord<'a> {
    let (request, truncated) = fields(x.headers, HOP_BY_HOP, MAX_REQUEST_FIELDS);
    RequestRecord {
        v: VERSION,
        kind: "request",
        at_us: micros(capture.looked_up.unwrap_or(x.start)),
        start_us: micros(x.start),
        done_us: micros(x.done),
        client: x.client.to_string(),
        method: x.method,
        url: x.url,
        request,
        truncated,
        status: x.status,
        result: x.outcome.as_str(),
        aborted: x.aborted,
        bytes: x.bytes,
        lower_jobs: capture.lower.map(|l| l.done),
        lower_begun: capture.lower.map(|l| l.begun),
        lower_reclaims: capture.lower.map(|l| l.reclaims),
        lower_at_us: capture.lower_now.map(micros),
        lower_ats_us: capture.lower_nows.iter().map(|t| micros(*t)).collect(),
        lower_queued: capture.lower.map(|l| l.queued),
        lower_reads: capture
            .lower_reads
            .iter()
            .map(|l| [l.done, l.reclaims])
            .collect(),
        memory: capture.memory,
        origin: capture.origin,
        invalidations: capture.invalidations,
    }
}

/// One JSON line (without its newline) for `r`.
pub fn to_line<T: Serialize>(r: &T) -> String {
    let mut s = String::new();
    write_json(&mut s, r);
    s
}

fn write_json<T: Serialize>(buf: &mut String, r: &T) {
    // A record holds strings, numbers and flags only: serialising it does not fail.
    match serde_json::to_string(r) {
        Ok(s) => buf.push_str(&s),
        Err(e) => tracing::error!("log.trace: a record did not serialise: {e}"),
    }
}

/// The fields of `h` but those in `skip`, secrets masked, up to `max` bytes; whether any
/// were left out.
fn fields(h: &HeaderMap, skip: &[&str], max: usize) -> (Vec<(String, String)>, bool) {
    let mut out = Vec::with_capacity(h.len());
    let mut total = 0;
    let mut truncated = false;
    for (name, value) in h {
        let n = name.as_str();
        if skip.contains(&n) {
            continue;
        }
        let v = String::from_utf8_lossy(value.as_bytes());
        // A field that does not fit is left out; smaller ones after it may still fit.
        if total + n.len() + v.len() > max {
            truncated = true;
            continue;
        }
        total += n.len() + v.len();
        let v = if SECRET.contains(&n) {
            mask(&v)
        } else {
            v.into_owned()
        };
        out.push((n.to_string(), v));
    }
    (out, truncated)
}

/// A secret's stand-in: hex digits of its hash, repeated to its length. Equal values give
/// equal stand-ins and every stand-in is as long as its value.
pub fn mask(value: &str) -> String {
    let h = format!("{:016x}", trove_store::hash::key_hash(value));
    h.chars().cycle().take(value.len()).collect()
}

/// µs since the epoch.
pub fn micros(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The stable name of a failure, as the trace writes it.
pub fn failure_name(f: OriginFailure) -> &'static str {
    match f {
        OriginFailure::DnsError => "dns-error",
        OriginFailure::DnsTimeout => "dns-timeout",
        OriginFailure::ConnectionRefused => "connection-refused",
        OriginFailure::ConnectionTimeout => "connection-timeout",
        OriginFailure::Overloaded(_) => "overloaded",
        OriginFailure::Timeout => "timeout",
        OriginFailure::ConnectionClosed => "connection-closed",
        OriginFailure::ProtocolError => "protocol-error",
        OriginFailure::TlsCertificate => "tls-certificate",
        OriginFailure::TlsProtocol => "tls-protocol",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn secrets_are_masked_to_the_same_length_and_stay_equal() {
        let a = mask("session=abc; theme=dark");
        assert_eq!(a.len(), "session=abc; theme=dark".len());
        assert_ne!(a, "session=abc; theme=dark");
        assert_eq!(a, mask("session=abc; theme=dark"));
        assert_ne!(a, mask("session=abd; theme=dark"));
        assert_eq!(mask(""), "");
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn request_fields_leave_out_framing_and_are_bounded() {
        let mut h = HeaderMap::new();
        h.insert("connection", HeaderValue::from_static("keep-alive"));
        h.insert("content-length", HeaderValue::from_static("0"));
        h.insert("cache-control", HeaderValue::from_static("no-cache"));
        h.insert("authorization", HeaderValue::from_static("Basic dXNlcg=="));
        let (f, truncated) = fields(&h, HOP_BY_HOP, MAX_REQUEST_FIELDS);
        assert!(!truncated);
        let names: Vec<&str> = f.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["cache-control", "authorization"]);
        assert_eq!(f[1].1.len(), "Basic dXNlcg==".len());
        assert_ne!(f[1].1, "Basic dXNlcg==");

        let big = HeaderValue::from_str(&"x".repeat(MAX_REQUEST_FIELDS)).unwrap();
        h.insert("x-big", big);
        h.insert("pragma", HeaderValue::from_static("no-cache"));
        let (f, truncated) = fields(&h, HOP_BY_HOP, MAX_REQUEST_FIELDS);
        assert!(truncated);
        assert!(f.iter().all(|(n, _)| n != "x-big"));
        assert!(
            f.iter().any(|(n, _)| n == "pragma"),
            "later small fields kept"
        );
    }

    #[test]
    fn a_record_is_one_json_line_with_its_times_in_micros() {
        let t = UNIX_EPOCH + std::time::Duration::from_micros(1_700_000_000_123_456);
        let h = HeaderMap::new();
        let x = Exchange {
            start: t,
            done: t + std::time::Duration::from_millis(3),
            client: "127.0.0.1".parse().unwrap(),
            method: "GET",
            url: "http://a.example/\"x\"\n",
            headers: &h,
            status: 200,
            outcome: Outcome::MemHit,
            aborted: false,
            bytes: 10,
        };
        let line = to_line(&request_record(&x, Capture::default()));
        assert!(!line.contains('\n'), "{line}");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["at_us"], 1_700_000_000_123_456u64, "no lookup: the start");
        assert_eq!(v["done_us"], 1_700_000_000_126_456u64);
        assert_eq!(v["result"], "TCP_MEM_HIT");
        assert_eq!(v["url"], "http://a.example/\"x\"\n");
        assert!(v.get("invalidations").is_none() && v.get("aborted").is_none());
    }
}

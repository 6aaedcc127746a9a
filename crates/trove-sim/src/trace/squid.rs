//! Squid's native access log: `time elapsed client code/status bytes method URL user
//! hierarchy/peer type` (trove writes exactly this, see trove-proxy's `access_log`).
//!
//! - `time` is when the request *completed* (Squid stamps a line when its transfer ends) and
//!   `elapsed` how long it took, in milliseconds, so the request started at
//!   `time − elapsed`: the reader gives that start as [`Record::time`].
//! - `bytes` is what the client received, the response head included; the replay takes the
//!   head off (see `assume::Head`).
//! - `code` says what the logging cache did. The replay decides for itself; it reads the
//!   code only for what the byte count holds, and to recognise trove's own log
//!   ([`writer`]).
//!
//! **Order.** Lines are written as requests complete, so a slow request's line comes after
//! lines of requests that started later. The reader holds lines back, in a heap by start,
//! and hands one out once the log has reached [`REORDER_WINDOW`] past its start: every
//! request that took at most that long comes out in start order. A slower one (a long
//! download) whose start is before something already handed out comes out at once, and is
//! replayed when the clock has got to (it never goes back). At most [`MAX_HELD`] lines are
//! held (about 250 bytes each), whatever the log's rate.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::io::BufRead;
use std::net::IpAddr;

use super::{fields, is_blank, num, sane_size, text, Lines, Record, Skipped, TraceReader};

/// How long after a request's start the log must have got before it is replayed, seconds.
pub const REORDER_WINDOW: f64 = 60.0;
/// Most lines held back at once; beyond it the earliest is handed out.
pub const MAX_HELD: usize = 1 << 18;

pub struct SquidReader<R> {
    lines: Lines<R>,
    skipped: Skipped,
    held: BinaryHeap<Reverse<Held>>,
    /// The line handed out last.
    current: Vec<u8>,
    /// Buffers of lines handed out, for the next lines read.
    spare: Vec<Vec<u8>>,
    /// The latest completion time read so far.
    latest: f64,
    read: u64,
    done: bool,
}

/// A line read and not yet handed out.
struct Held {
    start: f64,
    /// Lines that started at the same time come out in the log's order.
    seq: u64,
    line: Vec<u8>,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}

impl Eq for Held {}

impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Held {
    fn cmp(&self, o: &Self) -> Ordering {
        self.start.total_cmp(&o.start).then(self.seq.cmp(&o.seq))
    }
}

impl<R: BufRead> SquidReader<R> {
    pub fn new(input: R) -> Self {
        SquidReader {
            lines: Lines::new(input),
            skipped: Skipped::default(),
            held: BinaryHeap::new(),
            current: Vec::with_capacity(512),
            spare: Vec::new(),
            latest: f64::NEG_INFINITY,
            read: 0,
            done: false,
        }
    }

    /// Whether the earliest held line may be handed out.
    fn ready(&self) -> bool {
        self.held.peek().is_some_and(|Reverse(h)| {
            self.done || h.start <= self.latest - REORDER_WINDOW || self.held.len() >= MAX_HELD
        })
    }
}

/// Parses one line into its record (`time`: the start) and its completion time; `None` if
/// it is not a Squid native log line.
pub fn parse(line: &[u8]) -> Option<(Record<'_>, f64)> {
    let mut f = fields(line);
    let time: f64 = num(f.next()?)?;
    let elapsed_ms: u64 = num(f.next()?)?;
    let client = text(f.next()?)?;
    let code = f.next()?;
    let slash = memchr::memchr(b'/', code)?;
    let result = text(&code[..slash])?;
    let status: u16 = num(&code[slash + 1..])?;
    let bytes: u64 = sane_size(num(f.next()?)?)?;
    let method = text(f.next()?)?;
    let url = text(f.next()?)?;
    let _user = f.next()?;
    let _hier = f.next()?;
    let content_type = match f.next() {
        Some(b"-") | None => "",
        Some(t) => text(t)?,
    };
    if super::sane_time(time)? < 0.0 {
        return None;
    }
    let start = (time - elapsed_ms as f64 / 1e3).max(0.0);
    Some((
        Record {
            time: start,
            client,
            method,
            url,
            status,
            result,
            bytes,
            object_size: None,
            content_type,
            id: None,
        },
        time,
    ))
}

impl<R: BufRead> TraceReader for SquidReader<R> {
    fn next_record(&mut self) -> Option<Record<'_>> {
        while !self.ready() {
            if self.done {
                return None;
            }
            if !self.lines.advance(&mut self.skipped) {
                self.done = true;
                continue;
            }
            if is_blank(&self.lines.buf) {
                continue;
            }
            let Some((r, completion)) = parse(&self.lines.buf) else {
                self.skipped.bad(self.lines.line_no, &self.lines.buf);
                continue;
            };
            let start = r.time;
            self.latest = self.latest.max(completion);
            let mut line = self.spare.pop().unwrap_or_default();
            line.clear();
            line.extend_from_slice(&self.lines.buf);
            self.held.push(Reverse(Held {
                start,
                seq: self.read,
                line,
            }));
            self.read += 1;
        }
        let Reverse(next) = self.held.pop()?;
        let done = std::mem::replace(&mut self.current, next.line);
        if self.spare.len() < 64 {
            self.spare.push(done);
        }
        // It parsed when it was read.
        parse(&self.current).map(|(r, _)| r)
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

/// Who wrote a Squid native log, as far as its lines tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// trove: a `HIER_DIRECT` peer that is a host name or has a port (Squid writes the
    /// server's IP address), or trove's own `TCP_SHED`; and nothing trove never writes.
    Trove,
    /// Something trove never writes: a peer hierarchy code (`FIRSTUP_PARENT`,
    /// `SIBLING_HIT` …), Squid 2's `DIRECT/`, a result code trove has no name for
    /// (`TCP_INM_HIT`, `TCP_SWAPFAIL_MISS`, `NONE/` …).
    Other,
    /// Neither: a log of hits only, or whose origins are all named by IP address (Squid
    /// 3 and later log every server so, and trove an origin named so).
    Unknown,
}

/// Result codes trove writes (`trove_cache::Outcome`), with Squid's suffixes for aborted
/// and timed-out transfers.
fn trove_result(code: &str) -> bool {
    let base = code
        .strip_suffix("_ABORTED")
        .or_else(|| code.strip_suffix("_TIMEDOUT"))
        .unwrap_or(code);
    trove_cache::Outcome::ALL.iter().any(|o| o.as_str() == base)
}

/// Who wrote the lines of `sample` (the log's first lines; a last line cut short is not
/// looked at).
pub fn writer(sample: &[u8]) -> Writer {
    let sample = match memchr::memrchr(b'\n', sample) {
        Some(end) => &sample[..end],
        None => sample,
    };
    let mut trove = false;
    for line in sample.split(|b| *b == b'\n') {
        let f: Vec<&[u8]> = fields(line).collect();
        if f.len() < 9 || parse(line).is_none() {
            continue;
        }
        let code = text(f[3]).unwrap_or("");
        let result = code.split('/').next().unwrap_or("");
        if !trove_result(result) {
            return Writer::Other;
        }
        if result == "TCP_SHED" {
            trove = true;
        }
        let hier = text(f[8]).unwrap_or("");
        let (kind, peer) = hier.split_once('/').unwrap_or((hier, ""));
        match kind {
            "HIER_NONE" => {}
            // Squid writes the server's IP address; trove the origin's host (an IP address
            // too for an origin named by one, so that tells nothing).
            "HIER_DIRECT" => {
                if !peer.is_empty() && peer != "-" && peer.parse::<IpAddr>().is_err() {
                    trove = true;
                }
            }
            _ => return Writer::Other,
        }
    }
    if trove {
        Writer::Trove
    } else {
        Writer::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(log: &str) -> (Vec<(f64, String)>, Skipped) {
        let mut r = SquidReader::new(log.as_bytes());
        let mut out = Vec::new();
        while let Some(x) = r.next_record() {
            out.push((x.time, x.url.to_string()));
        }
        (out, r.skipped().clone())
    }

    #[test]
    fn reads_trove_and_squid_lines_and_counts_bad_ones() {
        let log = "\
1700000000.123      3 127.0.0.1 TCP_MISS/200 5123 GET http://a.example/logo.png - HIER_DIRECT/a.example image/png
# a comment

1700000001.000      0 10.0.0.2 TCP_MEM_HIT/200 5123 GET http://a.example/logo.png - HIER_NONE/- image/png
garbage line
1700000002.5 1 10.0.0.2 TCP_MISS/404 12 GET http://a.example/x - HIER_DIRECT/a.example -
1700000003 1 10.0.0.2 TCP_MISS/2x0 12 GET http://a.example/x - HIER_DIRECT/a.example -
1700000003 1 10.0.0.2 TCP_MISS/200 99999999999999999 GET http://a.example/x - HIER_DIRECT/a.example -
1700000003 x 10.0.0.2 TCP_MISS/200 12 GET http://a.example/x - HIER_DIRECT/a.example -
";
        let mut r = SquidReader::new(log.as_bytes());
        let a = r.next_record().unwrap();
        assert_eq!(a.time, 1700000000.123 - 0.003, "the start");
        assert_eq!(a.client, "127.0.0.1");
        assert_eq!((a.result, a.status), ("TCP_MISS", 200));
        assert_eq!(a.bytes, 5123);
        assert_eq!(a.url, "http://a.example/logo.png");
        assert_eq!(a.content_type, "image/png");
        let b = r.next_record().unwrap();
        assert_eq!((b.client, b.result), ("10.0.0.2", "TCP_MEM_HIT"));
        let c = r.next_record().unwrap();
        assert_eq!((c.status, c.content_type), (404, ""));
        assert!(r.next_record().is_none());
        assert_eq!(
            r.skipped().bad_lines,
            4,
            "garbage, a bad status, an absurd byte count, a bad elapsed time"
        );
        assert_eq!(r.skipped().examples[0].0, 5);
        assert_eq!(r.position(), log.len() as u64);
    }

    /// Lines come in completion order; records in start order.
    #[test]
    fn records_come_out_by_start_time() {
        let log = "\
100.000   5000 c TCP_MISS/200 10 GET http://a/slow - HIER_DIRECT/a -
100.500    100 c TCP_MISS/200 10 GET http://a/quick - HIER_DIRECT/a -
101.000   3000 c TCP_MISS/200 10 GET http://a/medium - HIER_DIRECT/a -
101.000      0 c TCP_MISS/200 10 GET http://a/same-1 - HIER_DIRECT/a -
101.000      0 c TCP_MISS/200 10 GET http://a/same-2 - HIER_DIRECT/a -
";
        let (got, skipped) = all(log);
        let urls: Vec<&str> = got.iter().map(|(_, u)| u.as_str()).collect();
        assert_eq!(
            urls,
            [
                "http://a/slow",
                "http://a/medium",
                "http://a/quick",
                "http://a/same-1",
                "http://a/same-2"
            ]
        );
        assert_eq!(got[0].0, 95.0);
        assert_eq!(got[1].0, 98.0);
        assert_eq!(skipped.bad_lines, 0);
    }

    /// A request longer than the window that started before what was handed out already
    /// comes out next (as early as it can); the others stay in start order.
    #[test]
    fn a_request_longer_than_the_window_comes_out_when_read() {
        let log = "\
10.000      0 c TCP_MISS/200 10 GET http://a/1 - HIER_DIRECT/a -
200.000     0 c TCP_MISS/200 10 GET http://a/2 - HIER_DIRECT/a -
300.000 295000 c TCP_MISS/200 10 GET http://a/long - HIER_DIRECT/a -
";
        let (got, _) = all(log);
        let urls: Vec<&str> = got.iter().map(|(_, u)| u.as_str()).collect();
        assert_eq!(urls, ["http://a/1", "http://a/long", "http://a/2"]);
        assert_eq!(
            got[1].0, 5.0,
            "its start, before the clock: replayed at the clock"
        );
    }

    #[test]
    fn trove_s_log_is_recognised() {
        let trove_now = "\
1.000 1 127.0.0.1 TCP_MISS/200 10 GET http://h:8080/a - HIER_DIRECT/127.0.0.1:8080 -
2.000 0 127.0.0.1 TCP_MEM_HIT/200 10 GET http://h:8080/a - HIER_NONE/- -
";
        assert_eq!(writer(trove_now.as_bytes()), Writer::Trove);
        let trove_hosts = "1.000 1 ::1 TCP_MISS/200 10 GET http://a.example/a - HIER_DIRECT/a.example text/html\n";
        assert_eq!(writer(trove_hosts.as_bytes()), Writer::Trove);
        let squid = "1.000 1 10.0.0.1 TCP_MISS/200 10 GET http://a.example/a - HIER_DIRECT/93.184.216.34 text/html\n";
        assert_eq!(writer(squid.as_bytes()), Writer::Unknown, "an IP address");
        let parent = "1.000 1 10.0.0.1 TCP_MISS/200 10 GET http://a/a - FIRSTUP_PARENT/p -\n";
        assert_eq!(writer(parent.as_bytes()), Writer::Other);
        let squid2 = "1.000 1 10.0.0.1 TCP_MISS/200 10 GET http://a/a - DIRECT/a -\n";
        assert_eq!(writer(squid2.as_bytes()), Writer::Other);
        let inm = "\
1.000 1 127.0.0.1 TCP_MISS/200 10 GET http://h/a - HIER_DIRECT/h:80 -
2.000 1 127.0.0.1 TCP_INM_HIT/304 10 GET http://h/a - HIER_NONE/- -
";
        assert_eq!(
            writer(inm.as_bytes()),
            Writer::Other,
            "a code trove never writes"
        );
        let hits = "1.000 0 127.0.0.1 TCP_MEM_HIT/200 10 GET http://h/a - HIER_NONE/- -\n";
        assert_eq!(writer(hits.as_bytes()), Writer::Unknown);
        let aborted =
            "1.000 1 127.0.0.1 TCP_MISS_ABORTED/200 10 GET http://h/a - HIER_DIRECT/h -\n";
        assert_eq!(writer(aborted.as_bytes()), Writer::Trove);
    }
}

//! What the robots record: per phase, for the whole run, and in 5-second bins.
//!
//! Each robot thread owns its own [`Stats`] (no locks on the hot path); threads' stats are merged
//! at the end. A transaction is attributed to the phase and bin of its *intended* start, and its
//! response time runs from that intended start, so a stalled proxy cannot hide its stall by
//! delaying the requests that would have measured it (coordinated omission).

use serde::Serialize;

use crate::histogram::Histogram;

/// Width of a time-series bin, seconds (Polygraph aggregates some measurements every 5 s).
pub const BIN_SECONDS: f64 = 5.0;

/// Why a transaction failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// Could not connect to the proxy or server.
    Connect,
    /// No complete response within the transaction timeout.
    Timeout,
    /// The connection failed while sending the request or reading the response.
    Io,
    /// A status other than 200 (or 304 to a conditional request).
    Status,
    /// Body length differs from the object's size (or from Content-Length).
    Length,
    /// A body byte differs from the object's content.
    Content,
    /// The response carries no server stamp, so hit or miss cannot be told.
    NoStamp,
}

impl ErrorKind {
    /// All kinds, in report order.
    pub const ALL: [ErrorKind; 7] = [
        ErrorKind::Connect,
        ErrorKind::Timeout,
        ErrorKind::Io,
        ErrorKind::Status,
        ErrorKind::Length,
        ErrorKind::Content,
        ErrorKind::NoStamp,
    ];

    /// Short name for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Io => "io",
            ErrorKind::Status => "status",
            ErrorKind::Length => "length",
            ErrorKind::Content => "content",
            ErrorKind::NoStamp => "no-stamp",
        }
    }
}

/// How one transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered by the proxy: the server stamp is not this request's.
    Hit,
    /// Answered by the server for this very request.
    Miss,
    /// Failed.
    Error(ErrorKind),
}

/// One finished transaction.
#[derive(Debug, Clone, Copy)]
pub struct Tx {
    /// Seconds since the run start of the intended send time.
    pub intended_s: f64,
    /// Phase index of the intended send time.
    pub phase: usize,
    /// How it ended.
    pub outcome: Outcome,
    /// Body bytes received (0 for errors).
    pub bytes: u64,
    /// Response time from the intended send time, microseconds.
    pub rt_us: u64,
    /// The object was requested before and is cachable: an ideal cache would hit.
    pub offered_hit: bool,
    /// The object is cachable.
    pub cachable: bool,
}

/// Totals over a phase or the whole run.
#[derive(Debug, Clone, Default)]
pub struct Agg {
    /// Requests scheduled.
    pub arrivals: u64,
    /// Hits.
    pub hits: u64,
    /// Misses.
    pub misses: u64,
    /// Errors by kind, indexed like [`ErrorKind::ALL`].
    pub errors: [u64; 7],
    /// Transactions an ideal cache would have hit.
    pub offered_hits: u64,
    /// Body bytes of offered hits.
    pub offered_hit_bytes: u64,
    /// Body bytes of all successful transactions.
    pub bytes: u64,
    /// Body bytes of hits.
    pub hit_bytes: u64,
    /// Hits on objects the server marked uncachable (a proxy bug if nonzero).
    pub uncachable_hits: u64,
    /// Response times of hits, µs.
    pub rt_hit: Histogram,
    /// Response times of misses, µs.
    pub rt_miss: Histogram,
    /// Response times of successful transactions, µs.
    pub rt_all: Histogram,
}

impl Agg {
    fn record(&mut self, tx: &Tx) {
        match tx.outcome {
            Outcome::Hit => {
                self.hits += 1;
                self.hit_bytes += tx.bytes;
                self.uncachable_hits += (!tx.cachable) as u64;
                self.rt_hit.record(tx.rt_us);
            }
            Outcome::Miss => {
                self.misses += 1;
                self.rt_miss.record(tx.rt_us);
            }
            Outcome::Error(k) => {
                self.errors[k as usize] += 1;
                return;
            }
        }
        self.bytes += tx.bytes;
        self.rt_all.record(tx.rt_us);
        if tx.offered_hit {
            self.offered_hits += 1;
            self.offered_hit_bytes += tx.bytes;
        }
    }

    /// Adds `o` into `self`.
    pub fn merge(&mut self, o: &Agg) {
        self.arrivals += o.arrivals;
        self.hits += o.hits;
        self.misses += o.misses;
        for (a, b) in self.errors.iter_mut().zip(o.errors) {
            *a += b;
        }
        self.offered_hits += o.offered_hits;
        self.offered_hit_bytes += o.offered_hit_bytes;
        self.bytes += o.bytes;
        self.hit_bytes += o.hit_bytes;
        self.uncachable_hits += o.uncachable_hits;
        self.rt_hit.merge(&o.rt_hit);
        self.rt_miss.merge(&o.rt_miss);
        self.rt_all.merge(&o.rt_all);
    }

    /// Successful transactions.
    pub fn ok(&self) -> u64 {
        self.hits + self.misses
    }

    /// Failed transactions.
    pub fn error_count(&self) -> u64 {
        self.errors.iter().sum()
    }
}

/// One 5-second bin of the time series (sums, so bins merge by addition).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Bin {
    /// Requests scheduled in the bin.
    pub arrivals: u64,
    /// Hits.
    pub hits: u64,
    /// Misses.
    pub misses: u64,
    /// Errors.
    pub errors: u64,
    /// Offered hits.
    pub offered_hits: u64,
    /// Body bytes.
    pub bytes: u64,
    /// Body bytes of hits.
    pub hit_bytes: u64,
    /// Sum of hit response times, µs.
    pub rt_hit_sum_us: u64,
    /// Sum of miss response times, µs.
    pub rt_miss_sum_us: u64,
}

/// Everything one robot thread (or a whole run, after merging) measured.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Per phase.
    pub phases: Vec<Agg>,
    /// The whole run.
    pub total: Agg,
    /// The time series.
    pub bins: Vec<Bin>,
    /// Connections the robots opened.
    pub conns_opened: u64,
    /// Requests retried once on a fresh connection after a reused one turned out closed.
    pub retries: u64,
    /// How the robots kept their schedule.
    pub sends: Sends,
}

/// When requests went out against when they were due (the generator's check on itself).
#[derive(Debug, Clone, Default)]
pub struct Sends {
    /// Requests written to a connection.
    pub sent: u64,
    /// Of those, written late (more than the run's threshold after they were due).
    pub late: u64,
    /// Of the late ones, those that had a free robot worker (connection) when they were due.
    pub late_free: u64,
    /// Transactions that timed out before their request was written.
    pub expired: u64,
    /// Delay from due to written, µs.
    pub lag: Histogram,
    /// The busiest robot thread's busy share (running or waiting for its core) of the run.
    pub busy: Option<f64>,
}

impl Sends {
    /// Counts a request written `lag_us` after it was due (`late`: past the threshold;
    /// `waited`: it had to wait for a busy robot worker).
    pub fn sent(&mut self, lag_us: u64, late: bool, waited: bool) {
        self.sent += 1;
        self.lag.record(lag_us);
        self.late += u64::from(late);
        self.late_free += u64::from(late && !waited);
    }

    fn merge(&mut self, o: &Sends) {
        self.sent += o.sent;
        self.late += o.late;
        self.late_free += o.late_free;
        self.expired += o.expired;
        self.lag.merge(&o.lag);
        self.busy = match (self.busy, o.busy) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
}

impl Stats {
    /// Empty stats for `phases` phases.
    pub fn new(phases: usize) -> Stats {
        Stats {
            phases: vec![Agg::default(); phases],
            ..Stats::default()
        }
    }

    fn bin(&mut self, t: f64) -> &mut Bin {
        let i = (t.max(0.0) / BIN_SECONDS) as usize;
        if self.bins.len() <= i {
            self.bins.resize(i + 1, Bin::default());
        }
        &mut self.bins[i]
    }

    /// Counts a scheduled request.
    pub fn arrival(&mut self, phase: usize, t: f64) {
        self.phases[phase].arrivals += 1;
        self.total.arrivals += 1;
        self.bin(t).arrivals += 1;
    }

    /// Records a finished transaction.
    pub fn record(&mut self, tx: &Tx) {
        self.phases[tx.phase].record(tx);
        self.total.record(tx);
        let b = self.bin(tx.intended_s);
        match tx.outcome {
            Outcome::Hit => {
                b.hits += 1;
                b.hit_bytes += tx.bytes;
                b.rt_hit_sum_us += tx.rt_us;
            }
            Outcome::Miss => {
                b.misses += 1;
                b.rt_miss_sum_us += tx.rt_us;
            }
            Outcome::Error(_) => {
                b.errors += 1;
                return;
            }
        }
        b.bytes += tx.bytes;
        b.offered_hits += tx.offered_hit as u64;
    }

    /// Adds another thread's stats.
    pub fn merge(&mut self, o: &Stats) {
        for (a, b) in self.phases.iter_mut().zip(&o.phases) {
            a.merge(b);
        }
        self.total.merge(&o.total);
        if self.bins.len() < o.bins.len() {
            self.bins.resize(o.bins.len(), Bin::default());
        }
        for (a, b) in self.bins.iter_mut().zip(&o.bins) {
            a.arrivals += b.arrivals;
            a.hits += b.hits;
            a.misses += b.misses;
            a.errors += b.errors;
            a.offered_hits += b.offered_hits;
            a.bytes += b.bytes;
            a.hit_bytes += b.hit_bytes;
            a.rt_hit_sum_us += b.rt_hit_sum_us;
            a.rt_miss_sum_us += b.rt_miss_sum_us;
        }
        self.conns_opened += o.conns_opened;
        self.retries += o.retries;
        self.sends.merge(&o.sends);
    }
}

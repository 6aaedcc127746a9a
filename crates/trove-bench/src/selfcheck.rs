//! The load generator's check on itself, as Web Polygraph does it: did it send every request
//! when it was due, and if not, was that its own limit or the target's?
//!
//! A request is due at an instant of the schedule and is written then if a connection is free
//! and the generator gets to it. It goes out late when every connection is busy with the
//! target (the target is slower than offered, or too few connections are allowed: that wait
//! is the target's and counts in its response time), or when the generator's own core cannot
//! keep up (then every figure of the run is the generator's, not the target's). The two are
//! told apart by the generator's threads: busy (running, or runnable and waiting for the core)
//! for most of the run means the generator was the limit; mostly asleep means it was waiting
//! for the target. The kernel's scheduler statistics say which, per thread, at no cost.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Whether the generator offered the load it was asked to: Polygraph's late-send check.
///
/// A request is due at its instant and is written then if a connection is free and the
/// generator's loop gets to it. It goes out late when every connection is busy (the target
/// is slower than offered, or `--connections` is too few: the wait is the target's, and
/// counts in its response time) or when the generator's own core cannot keep up. A request
/// still unsent `timeout` after it was due is never sent (it expired in the send queue).
/// Which of the two it was is told by the generator's thread: busy (running, or runnable
/// and waiting for its core) for most of the run means the generator was the limit.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Generator {
    /// Requests written to a connection.
    pub issued: u64,
    /// `issued` per second of the run.
    pub issued_rate: f64,
    /// Requests written more than `late_ms` after they were due.
    pub late: u64,
    /// Of those, the ones that had a free connection when they were due: late because the
    /// generator's own loop was (its core busy, or taken by other processes), not the target.
    pub late_with_free_connection: u64,
    /// The threshold, ms.
    pub late_ms: f64,
    /// Requests never written: still waiting for a connection `timeout` after they were due.
    pub expired: u64,
    /// Delay from due to written, ms.
    pub send_lag_p50_ms: f64,
    pub send_lag_p99_ms: f64,
    pub send_lag_max_ms: f64,
    /// Fraction of the run the generator's thread was running or waiting for its core
    /// (`/proc/thread-self/schedstat`); absent where the kernel does not say.
    pub busy: Option<f64>,
    /// The schedule was not kept: more than 1% of the due requests late, or any expired.
    pub fell_behind: bool,
    /// `none`; `generator` (it fell behind with its core busy, or late with connections free:
    /// the figures are the generator's limit, not the target's); `both` (it fell behind with
    /// its core busy 70–90% of the run: it may have been the limit as much as the target);
    /// `target` (it fell behind waiting for busy connections while mostly asleep: the target,
    /// or too few connections); or `unknown` (no scheduler statistics).
    pub limit: String,
    /// One sentence for people.
    pub verdict: String,
}

/// A generator whose thread was busy at least this fraction of the run was the limit.
const BUSY_LIMIT: f64 = 0.9;
/// Busy at least this much, it was near its limit: the target's figures are not clean.
const BUSY_NEAR: f64 = 0.7;
/// More than this fraction of late sends is falling behind.
const LATE_FRACTION: f64 = 0.01;

impl Generator {
    /// Sets `fell_behind`, `limit` and `verdict` from the counts; `waiting_for` names what a
    /// late request waited for ("one of the 50 connections"), `knob` the option that allows more.
    pub fn judge(&mut self, waiting_for: &str, knob: &str, timeout_s: f64) {
        let due = self.issued + self.expired;
        self.fell_behind =
            self.expired > 0 || (due > 0 && self.late as f64 > LATE_FRACTION * due as f64);
        let pct = |n: u64| {
            if due > 0 {
                100.0 * n as f64 / due as f64
            } else {
                0.0
            }
        };
        let busy = self.busy.map_or_else(
            || "its core use is unknown".to_string(),
            |b| format!("its thread was busy {:.0}% of the run", b * 100.0),
        );
        if !self.fell_behind {
            self.limit = "none".into();
            self.verdict = format!(
                "the generator kept its schedule: {} of {due} requests ({:.2}%) went out more than {} ms late; {busy}",
                self.late,
                pct(self.late),
                self.late_ms
            );
            return;
        }
        let what = format!(
            "{} of the {} requests sent ({:.1}%) went out more than {} ms late (send lag p50 {:.1} ms, p99 {:.1} ms, max {:.0} ms) and {} of {due} due ({:.1}%) were never sent (unsent {timeout_s} s after due); it sent {:.0}/s",
            self.late,
            self.issued,
            100.0 * self.late as f64 / self.issued.max(1) as f64,
            self.late_ms,
            self.send_lag_p50_ms,
            self.send_lag_p99_ms,
            self.send_lag_max_ms,
            self.expired,
            pct(self.expired),
            self.issued_rate,
        );
        let own_lateness = 2 * self.late_with_free_connection > self.late;
        match self.busy {
            Some(b) if b >= BUSY_LIMIT => {
                self.limit = "generator".into();
                self.verdict = format!(
                    "GENERATOR FELL BEHIND (its own limit, not the target's): {what}; {busy}. The served rate and response times are the generator's, not the target's: offer less, or add generator cores"
                );
            }
            _ if own_lateness => {
                self.limit = "generator".into();
                self.verdict = format!(
                    "GENERATOR FELL BEHIND (its own lateness, not the target's): {what}; {} of the {} late requests had a free connection when due, so the generator's loop was late, not the target ({busy}, counting time spent waiting for its core: other processes on the generator's core delay it). Response times include that delay",
                    self.late_with_free_connection, self.late
                );
            }
            Some(b) if b >= BUSY_NEAR => {
                self.limit = "both".into();
                self.verdict = format!(
                    "FELL BEHIND, WITH THE GENERATOR NEAR ITS OWN LIMIT: {what}; {busy}, so the generator may have been the limit as much as the target: offer less, or add generator cores, before reading these figures as the target's"
                );
            }
            Some(_) => {
                self.limit = "target".into();
                self.verdict = format!(
                    "requests waited for {waiting_for}, all busy with the target: {what}; {busy}, so the generator was not the limit: the target is slower than offered (or raise {knob})"
                );
            }
            None => {
                self.limit = "unknown".into();
                self.verdict = format!(
                    "THE SCHEDULE WAS NOT KEPT: {what}; {busy}, so the generator may be the limit"
                );
            }
        }
    }
}

/// Time this thread has spent running and waiting to run (`/proc/thread-self/schedstat`:
/// on-CPU time, then run-queue wait), or `None` where the kernel does not say.
pub fn thread_sched_time() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let mut f = text.split_ascii_whitespace();
    let run: u64 = f.next()?.parse().ok()?;
    let wait: u64 = f.next()?.parse().ok()?;
    Some(Duration::from_nanos(run + wait))
}

/// Measures one thread's busy share of a stretch of wall time.
pub struct BusyMeter {
    wall: std::time::Instant,
    sched: Option<Duration>,
}

impl BusyMeter {
    /// Starts measuring the calling thread.
    pub fn start() -> BusyMeter {
        BusyMeter {
            wall: std::time::Instant::now(),
            sched: thread_sched_time(),
        }
    }

    /// The calling thread's (the same one's) busy share since `start`, 0 to 1.
    pub fn busy(&self) -> Option<f64> {
        let wall = self.wall.elapsed();
        let now = thread_sched_time()?;
        let then = self.sched?;
        (!wall.is_zero())
            .then(|| (now.saturating_sub(then).as_secs_f64() / wall.as_secs_f64()).min(1.0))
    }
}

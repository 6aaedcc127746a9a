//! Reports: what the cache-off report shows, as a text table and JSON (HTML is in `html.rs`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::histogram::Histogram;
use crate::origin::OriginCounts;
use crate::robot::Outcomes;
use crate::stats::{Agg, ErrorKind, BIN_SECONDS};
use crate::workload::Workload;

/// Runs with more errors than this fraction fail, as the cache-off rules said (seed 000 §2).
pub const MAX_ERROR_RATIO: f64 = 0.03;

/// Response-time summary of one class of transactions, milliseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Rt {
    /// Transactions counted.
    pub count: u64,
    /// Mean, ms.
    pub mean_ms: Option<f64>,
    /// Median, ms.
    pub median_ms: Option<f64>,
    /// 99th percentile, ms.
    pub p99_ms: Option<f64>,
}

impl Rt {
    fn of(h: &Histogram) -> Rt {
        Rt {
            count: h.count(),
            mean_ms: h.mean().map(|v| v / 1000.0),
            median_ms: h.quantile(0.5).map(|v| v / 1000.0),
            p99_ms: h.quantile(0.99).map(|v| v / 1000.0),
        }
    }
}

/// Measurements of one phase, or of the whole run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PhaseReport {
    /// Phase name (`all` for the whole run).
    pub name: String,
    /// Length, seconds.
    pub duration_s: f64,
    /// Requests scheduled.
    pub requests: u64,
    /// Offered request rate, req/s.
    pub offered_rate: f64,
    /// Achieved (successful response) rate, req/s.
    pub achieved_rate: f64,
    /// Hits.
    pub hits: u64,
    /// Misses.
    pub misses: u64,
    /// Document hit ratio measured, fraction.
    pub dhr: Option<f64>,
    /// Byte hit ratio measured.
    pub bhr: Option<f64>,
    /// Document hit ratio an ideal cache would have got from the same requests.
    pub offered_dhr: Option<f64>,
    /// Byte hit ratio an ideal cache would have got.
    pub offered_bhr: Option<f64>,
    /// Hit response times.
    pub rt_hit: Rt,
    /// Miss response times.
    pub rt_miss: Rt,
    /// All successful transactions' response times.
    pub rt_all: Rt,
    /// Failed transactions.
    pub errors: u64,
    /// Failed / scheduled.
    pub error_ratio: f64,
    /// Failed transactions by kind.
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Scheduled but neither completed nor failed when the run ended.
    pub unfinished: u64,
    /// Body bytes received.
    pub bytes: u64,
    /// Hits on objects the server marked uncachable (the proxy broke HTTP if nonzero).
    pub uncachable_hits: u64,
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

impl PhaseReport {
    fn of(name: &str, duration_s: f64, a: &Agg) -> PhaseReport {
        let ok = a.ok();
        let errors = a.error_count();
        let per_s = |n: u64| {
            if duration_s > 0.0 {
                n as f64 / duration_s
            } else {
                0.0
            }
        };
        PhaseReport {
            name: name.into(),
            duration_s,
            requests: a.arrivals,
            offered_rate: per_s(a.arrivals),
            achieved_rate: per_s(ok),
            hits: a.hits,
            misses: a.misses,
            dhr: ratio(a.hits, ok),
            bhr: ratio(a.hit_bytes, a.bytes),
            offered_dhr: ratio(a.offered_hits, ok),
            offered_bhr: ratio(a.offered_hit_bytes, a.bytes),
            rt_hit: Rt::of(&a.rt_hit),
            rt_miss: Rt::of(&a.rt_miss),
            rt_all: Rt::of(&a.rt_all),
            errors,
            error_ratio: ratio(errors, a.arrivals).unwrap_or(0.0),
            errors_by_kind: ErrorKind::ALL
                .iter()
                .filter(|k| a.errors[**k as usize] > 0)
                .map(|k| (k.as_str().to_string(), a.errors[*k as usize]))
                .collect(),
            unfinished: a.arrivals.saturating_sub(ok + errors),
            bytes: a.bytes,
            uncachable_hits: a.uncachable_hits,
        }
    }
}

/// One 5-second point of the time series.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Point {
    /// Start of the bin, seconds since the run start.
    pub t: f64,
    /// Seconds of the run the bin covers: 5, except for a last bin the run ended in (rates
    /// are per second of this, so a short last bin is no dip in the charts).
    #[serde(default)]
    pub width_s: f64,
    /// Offered rate, req/s.
    pub offered_rate: f64,
    /// Successful responses, req/s.
    pub rate: f64,
    /// Errors, per second.
    pub error_rate: f64,
    /// Document hit ratio.
    pub dhr: Option<f64>,
    /// Byte hit ratio.
    pub bhr: Option<f64>,
    /// Offered document hit ratio.
    pub offered_dhr: Option<f64>,
    /// Mean hit response time, ms.
    pub rt_hit_ms: Option<f64>,
    /// Mean miss response time, ms.
    pub rt_miss_ms: Option<f64>,
    /// Mean response time, ms.
    pub rt_all_ms: Option<f64>,
}

/// Counts seen on the server side (only when the bench ran its own servers).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ServerSide {
    /// Connections the servers accepted.
    pub conns: u64,
    /// Replies the servers sent.
    pub replies: u64,
    /// Connections per reply.
    pub conns_per_request: Option<f64>,
}

/// A whole run's report.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Report {
    /// What was measured (proxy name or address).
    pub label: String,
    /// Workload name.
    pub workload: String,
    /// How the robots reached the servers.
    pub mode: String,
    /// Time scale applied to the workload.
    pub scale: f64,
    /// Peak request rate after scaling, req/s.
    pub peak_rate: f64,
    /// Number of robots.
    pub robots: u32,
    /// Server think time mean, s.
    pub think_mean_s: f64,
    /// Offered hit ratio the workload's parameters give.
    pub configured_offered_dhr: f64,
    /// Wall time, s.
    pub elapsed_s: f64,
    /// When the run ended (RFC 9110 date).
    pub date: String,
    /// The phases.
    pub phases: Vec<PhaseReport>,
    /// The whole run.
    pub total: PhaseReport,
    /// The time series, 5-second bins.
    pub series: Vec<Point>,
    /// Start of each phase, seconds (for charts).
    pub phase_starts: Vec<f64>,
    /// Connections the robots opened.
    pub client_conns: u64,
    /// Client connections per request.
    pub client_conns_per_request: Option<f64>,
    /// Requests retried once on a fresh connection after a reused one was found closed.
    pub retries: u64,
    /// Server-side counts, when known.
    pub server: Option<ServerSide>,
    /// Body bytes of cachable misses (the fill stream).
    pub fill_bytes: u64,
    /// Whether the robots kept their schedule, and whose limit it was if not.
    #[serde(default)]
    pub generator: crate::selfcheck::Generator,
    /// Whether the run failed the cache-off rules, and why.
    pub failed: bool,
    /// Reasons for failure or warnings.
    pub notes: Vec<String>,
}

/// Describes how a run was set up, for the report header.
#[derive(Debug, Clone)]
pub struct RunInfo {
    /// What was measured.
    pub label: String,
    /// Mode description.
    pub mode: String,
    /// Scale applied.
    pub scale: f64,
    /// Robots.
    pub robots: u32,
    /// Think time mean in use, s.
    pub think_mean_s: f64,
}

impl Report {
    /// Builds the report of a finished run.
    pub fn new(
        info: RunInfo,
        w: &Workload,
        out: &Outcomes,
        server: Option<OriginCounts>,
    ) -> Report {
        let s = &out.stats;
        let mut phases = Vec::new();
        let mut starts = Vec::new();
        let mut t = 0.0;
        for (p, a) in w.phases.iter().zip(&s.phases) {
            starts.push(t);
            // A phase cut short (fill reached, request cap) is reported over the time it ran.
            let ran = (out.elapsed_s - t).clamp(0.0, p.duration_s);
            phases.push(PhaseReport::of(&p.name, ran, a));
            t += p.duration_s;
        }
        let total = PhaseReport::of("all", out.elapsed_s.min(w.duration_s()), &s.total);
        // The run covers [0, end); a last bin covering under a second of it is too noisy to
        // chart and is left out (its transactions still count in the phase and run totals).
        let end = out.elapsed_s.min(w.duration_s());
        let series = s
            .bins
            .iter()
            .enumerate()
            .filter_map(|(i, b)| {
                let t = i as f64 * BIN_SECONDS;
                let width = (end - t).clamp(0.0, BIN_SECONDS);
                (width >= 1.0).then_some((t, width, b))
            })
            .map(|(t, width, b)| {
                let ok = b.hits + b.misses;
                Point {
                    t,
                    width_s: width,
                    offered_rate: b.arrivals as f64 / width,
                    rate: ok as f64 / width,
                    error_rate: b.errors as f64 / width,
                    dhr: ratio(b.hits, ok),
                    bhr: ratio(b.hit_bytes, b.bytes),
                    offered_dhr: ratio(b.offered_hits, ok),
                    rt_hit_ms: ratio(b.rt_hit_sum_us, b.hits).map(|v| v / 1000.0),
                    rt_miss_ms: ratio(b.rt_miss_sum_us, b.misses).map(|v| v / 1000.0),
                    rt_all_ms: ratio(b.rt_hit_sum_us + b.rt_miss_sum_us, ok).map(|v| v / 1000.0),
                }
            })
            .collect();
        let mut notes = Vec::new();
        let failed = total.error_ratio > MAX_ERROR_RATIO;
        if failed {
            notes.push(format!(
                "FAILED: {:.2}% of transactions failed (the cache-off limit is {:.0}%)",
                total.error_ratio * 100.0,
                MAX_ERROR_RATIO * 100.0
            ));
        }
        if total.errors_by_kind.contains_key("content")
            || total.errors_by_kind.contains_key("length")
        {
            notes.push("the proxy delivered wrong bodies (see content/length errors)".into());
        }
        let g = &s.sends;
        let ms = |q: f64| g.lag.quantile(q).unwrap_or(0.0) / 1000.0;
        let ran = out.elapsed_s.min(w.duration_s());
        let mut generator = crate::selfcheck::Generator {
            issued: g.sent,
            issued_rate: if ran > 0.0 { g.sent as f64 / ran } else { 0.0 },
            late: g.late,
            late_with_free_connection: g.late_free,
            late_ms: out.late_ms,
            // Timed out before being written, or still queued when the run ended.
            expired: s.total.arrivals.saturating_sub(g.sent).max(g.expired),
            send_lag_p50_ms: ms(0.5),
            send_lag_p99_ms: ms(0.99),
            send_lag_max_ms: g.lag.max() as f64 / 1000.0,
            busy: g.busy,
            ..Default::default()
        };
        generator.judge(
            &format!(
                "a connection of their robot (at most {} each)",
                w.robots.conn_limit
            ),
            "the robots or their conn_limit",
            out.timeout_s,
        );
        if generator.fell_behind {
            notes.push(generator.verdict.clone());
        }
        if total.uncachable_hits > 0 {
            notes.push(format!(
                "{} hits on responses marked private, no-cache: the proxy cached what it must not",
                total.uncachable_hits
            ));
        }
        Report {
            label: info.label,
            workload: w.name.clone(),
            mode: info.mode,
            scale: info.scale,
            peak_rate: w.peak_rate,
            robots: info.robots,
            think_mean_s: info.think_mean_s,
            configured_offered_dhr: w.offered_hit_ratio(),
            elapsed_s: out.elapsed_s,
            date: httpdate::fmt_http_date(std::time::SystemTime::now()),
            client_conns: s.conns_opened,
            client_conns_per_request: ratio(s.conns_opened, s.total.ok() + s.total.error_count()),
            retries: s.retries,
            server: server.map(|c| ServerSide {
                conns: c.conns,
                replies: c.replies,
                conns_per_request: ratio(c.conns, c.replies),
            }),
            fill_bytes: out.fill_bytes,
            phases,
            total,
            series,
            phase_starts: starts,
            generator,
            failed,
            notes,
        }
    }

    /// The phase the executive summary quotes: `top2` as in the cache-off, else the last phase
    /// named `top*`, else the whole run.
    pub fn summary_phase(&self) -> &PhaseReport {
        self.phases
            .iter()
            .find(|p| p.name == "top2")
            .or_else(|| self.phases.iter().rev().find(|p| p.name.starts_with("top")))
            .filter(|p| p.requests > 0)
            .unwrap_or(&self.total)
    }

    /// The report as a text table.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let _ =
            writeln!(
            o,
            "trove bench: {} against {} ({}), scale {}, peak {:.1} req/s, {} robots, think {:.2} s",
            self.workload, self.label, self.mode, self.scale, self.peak_rate, self.robots,
            self.think_mean_s
        );
        let _ = writeln!(
            o,
            "{:<6} {:>6} {:>8} {:>8} {:>13} {:>13} {:>15} {:>15} {:>15} {:>7}",
            "phase",
            "secs",
            "offered",
            "achieved",
            "DHR% (offer)",
            "BHR% (offer)",
            "hit ms mean/med",
            "miss ms mean/med",
            "all ms mean/med",
            "errors%"
        );
        for p in self.phases.iter().chain(std::iter::once(&self.total)) {
            let _ = writeln!(
                o,
                "{:<6} {:>6.0} {:>8.1} {:>8.1} {:>13} {:>13} {:>15} {:>15} {:>15} {:>7.2}",
                p.name,
                p.duration_s,
                p.offered_rate,
                p.achieved_rate,
                pair_pct(p.dhr, p.offered_dhr),
                pair_pct(p.bhr, p.offered_bhr),
                pair_ms(&p.rt_hit),
                pair_ms(&p.rt_miss),
                pair_ms(&p.rt_all),
                p.error_ratio * 100.0
            );
        }
        let t = &self.total;
        let _ = writeln!(
            o,
            "requests {}  hits {}  misses {}  errors {} {:?}  unfinished {}  bytes {}",
            t.requests, t.hits, t.misses, t.errors, t.errors_by_kind, t.unfinished, t.bytes
        );
        let _ = write!(
            o,
            "connections per request: client {}",
            opt(self.client_conns_per_request, 3)
        );
        if let Some(s) = &self.server {
            let _ = write!(o, ", server {}", opt(s.conns_per_request, 3));
        }
        let _ = writeln!(
            o,
            "  (retries on closed idle connections: {})",
            self.retries
        );
        let _ = writeln!(
            o,
            "offered hit ratio from the workload's parameters: {:.2}%",
            self.configured_offered_dhr * 100.0
        );
        if !self.generator.fell_behind && !self.generator.verdict.is_empty() {
            let _ = writeln!(o, "generator: {}", self.generator.verdict);
        }
        for n in &self.notes {
            let _ = writeln!(o, "note: {n}");
        }
        o
    }
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.prec$}"))
}

fn pair_pct(a: Option<f64>, b: Option<f64>) -> String {
    format!(
        "{} ({})",
        opt(a.map(|v| v * 100.0), 1),
        opt(b.map(|v| v * 100.0), 1)
    )
}

fn pair_ms(r: &Rt) -> String {
    format!("{}/{}", opt(r.mean_ms, 1), opt(r.median_ms, 1))
}

/// The cache-off executive summary: one row per product, from its summary phase.
pub fn summary_table(reports: &[Report]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<14} {:>6} {:>9} {:>9} {:>9} {:>9} {:>6} {:>6} {:>7} {:>8} {:>7}",
        "product",
        "phase",
        "req/s",
        "hit ms",
        "all ms",
        "miss ms",
        "DHR%",
        "BHR%",
        "offer%",
        "errors%",
        "verdict"
    );
    for r in reports {
        let p = r.summary_phase();
        let _ = writeln!(
            o,
            "{:<14} {:>6} {:>9.1} {:>9} {:>9} {:>9} {:>6} {:>6} {:>7} {:>8.2} {:>7}",
            r.label,
            p.name,
            p.achieved_rate,
            opt(p.rt_hit.mean_ms, 1),
            opt(p.rt_all.mean_ms, 1),
            opt(p.rt_miss.mean_ms, 1),
            opt(p.dhr.map(|v| v * 100.0), 1),
            opt(p.bhr.map(|v| v * 100.0), 1),
            opt(p.offered_dhr.map(|v| v * 100.0), 1),
            p.error_ratio * 100.0,
            if r.failed { "FAILED" } else { "ok" }
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Outcome, Stats, Tx};

    #[test]
    fn a_short_last_bin_is_charted_per_second_of_it_or_left_out() {
        let mut w = Workload::builtin("datacomm-1").unwrap();
        w.phases.truncate(1);
        w.phases[0].duration_s = 12.0;
        let run = |elapsed_s: f64| {
            let mut stats = Stats::new(1);
            // 10 req/s for the whole run: every bin's rate must come out at 10.
            for i in 0..(elapsed_s * 10.0) as u64 {
                let t = i as f64 / 10.0;
                stats.arrival(0, t);
                stats.record(&Tx {
                    intended_s: t,
                    phase: 0,
                    outcome: Outcome::Miss,
                    bytes: 100,
                    rt_us: 1000,
                    offered_hit: false,
                    cachable: true,
                });
            }
            let out = Outcomes {
                stats,
                elapsed_s,
                fill_bytes: 0,
                timeout_s: 30.0,
                late_ms: 10.0,
            };
            let info = RunInfo {
                label: "x".into(),
                mode: "no proxy".into(),
                scale: 1.0,
                robots: 1,
                think_mean_s: 0.0,
            };
            Report::new(info, &w, &out, None)
        };
        let r = run(12.0);
        let widths: Vec<f64> = r.series.iter().map(|p| p.width_s).collect();
        assert_eq!(widths, [5.0, 5.0, 2.0]);
        for p in &r.series {
            assert!((p.rate - 10.0).abs() < 1e-9, "{p:?}");
            assert!((p.offered_rate - 10.0).abs() < 1e-9, "{p:?}");
        }
        // A run that ended 0.5 s into its last bin: that bin is not charted.
        let r = run(10.5);
        assert_eq!(r.series.len(), 2);
        assert_eq!(r.total.requests, 105);
    }
}

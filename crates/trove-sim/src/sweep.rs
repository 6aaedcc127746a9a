//! One sweep: a trace streamed once through a [`Replay`] of every configuration asked for
//! (cache sizes × eviction policies), with a progress bar on long replays, into a
//! [`Report`].

use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::assume::Assumptions;
use crate::replay::{ConfigReport, Replay};
use crate::trace::{Skipped, TraceReader};

/// What was replayed.
#[derive(Debug, Clone, Serialize)]
pub struct TraceInfo {
    pub source: String,
    pub format: String,
    /// Records read (good lines).
    pub records: u64,
    pub replayed: u64,
    /// Records whose URL no cache could hold (CONNECT targets, malformed URLs).
    pub unreplayable: u64,
    pub skipped: Skipped,
    /// An I/O error that ended the trace early.
    pub read_error: Option<String>,
    pub distinct_urls: usize,
    pub servers: usize,
    pub clients: usize,
    /// Virtual seconds from the first record to the last.
    pub span_s: f64,
}

/// Everything a sweep found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub trace: TraceInfo,
    pub assumptions: Assumptions,
    /// Wall-clock seconds the replay took, and records replayed per second through every
    /// configuration together.
    pub elapsed_s: f64,
    pub records_per_s: f64,
    /// Threads the configurations were replayed on (each reads the trace itself).
    pub threads: usize,
    /// CPU seconds the replay's threads used, all together (where the system says:
    /// Linux's per-thread scheduler statistics); records × configurations / `cpu_s` is what
    /// one core replays.
    pub cpu_s: Option<f64>,
    pub results: Vec<ConfigReport>,
}

/// CPU time the calling thread has used so far, if the system says (Linux:
/// `/proc/thread-self/schedstat`, whose first field is nanoseconds on a CPU).
pub fn thread_cpu() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_ascii_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

/// Where the progress bar goes: stderr when it is a terminal and the replay is long,
/// nowhere otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Auto,
    Off,
}

/// Streams `reader` through `replay`. `total` is the input's length in the unit of
/// [`TraceReader::position`] (bytes of a file, requests of a synthetic trace), if known.
pub fn run(
    mut reader: Box<dyn TraceReader + '_>,
    mut replay: Replay,
    assumptions: Assumptions,
    source: &str,
    format: &str,
    total: Option<u64>,
    progress: Progress,
) -> anyhow::Result<Report> {
    let bar = match progress {
        Progress::Off => ProgressBar::hidden(),
        Progress::Auto => {
            let b = match total {
                Some(t) => ProgressBar::with_draw_target(Some(t), ProgressDrawTarget::stderr()),
                None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
            };
            b.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {wide_bar} {percent}% {msg} (eta {eta})",
                )
                .expect("a valid template"),
            );
            b
        }
    };
    let start = Instant::now();
    let cpu_start = thread_cpu();
    let mut records = 0u64;
    while let Some(r) = reader.next_record() {
        records += 1;
        replay.feed(&r)?;
        if records & 0xffff == 0 {
            bar.set_position(reader.position());
            bar.set_message(format!("{} records", records));
        }
    }
    bar.finish_and_clear();
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu_start.zip(thread_cpu()).map(|(a, b)| b - a);
    Ok(Report {
        trace: TraceInfo {
            source: source.to_string(),
            format: format.to_string(),
            records,
            replayed: replay.replayed,
            unreplayable: replay.unreplayable,
            skipped: reader.skipped().clone(),
            read_error: reader.error().map(|e| e.to_string()),
            distinct_urls: replay.distinct_urls(),
            servers: replay.servers(),
            clients: replay.clients(),
            span_s: replay.span(),
        },
        assumptions,
        elapsed_s: elapsed,
        records_per_s: if elapsed > 0.0 {
            records as f64 / elapsed
        } else {
            0.0
        },
        threads: 1,
        cpu_s: cpu,
        results: replay.results(),
    })
}

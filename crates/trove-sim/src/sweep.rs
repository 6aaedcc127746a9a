//! One sweep: a trace streamed once through a [`Replay`] of every configuration asked for
//! (cache sizes × eviction policies), with a progress bar on long replays, into a
//! [`Report`].

use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::assume::Assumptions;
use crate::replay::{ConfigReport, Replay};
use crate::trace::{Record, Skipped, TraceReader};

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
    /// With `--nodes`: the cluster modelled (each configuration's size is per node, and its
    /// figures are the cluster's, all nodes together).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterInfo>,
}

/// A modelled cluster ([`run_cluster`]).
#[derive(Debug, Clone, Serialize)]
pub struct ClusterInfo {
    pub nodes: usize,
    /// `shard` or `independent`.
    pub mode: &'static str,
    /// Requests each node served (shard: owned; independent: sent to it).
    pub requests_per_node: Vec<u64>,
}

/// How a cluster's nodes share the requests.
pub enum Route {
    /// trove's shard mode: every request is answered by its key's owner (rendezvous
    /// hashing, `trove_cluster`, as `trove serve` places keys), so what a node that does not
    /// own a key does is pass it on; the owner's hit is the cluster's.
    Shard(trove_cluster::Cluster),
    /// Independent nodes (replicate mode, or no cluster at all) behind a balancer that
    /// spreads clients: a client's requests go to one node (by a hash of the client); a
    /// trace without clients is dealt out in turn.
    Independent { nodes: usize, next: usize },
}

impl Route {
    /// Routes over `nodes` nodes in `mode` (`shard` or `independent`).
    pub fn new(nodes: usize, mode: &str) -> anyhow::Result<Route> {
        anyhow::ensure!(nodes >= 1, "--nodes: at least 1");
        match mode {
            "shard" => {
                let specs: Vec<trove_cluster::PeerSpec> = (0..nodes)
                    .map(|i| trove_cluster::PeerSpec {
                        id: format!("node-{i}"),
                        addr: std::net::SocketAddr::from(([127, 0, 0, 1], 10_000 + i as u16)),
                    })
                    .collect();
                let c = trove_cluster::Cluster::new(
                    trove_cluster::ClusterMode::Shard,
                    "node-0",
                    &specs,
                    1,
                )
                .map_err(|e| anyhow::anyhow!("--nodes: {e}"))?;
                Ok(Route::Shard(c))
            }
            "independent" => Ok(Route::Independent { nodes, next: 0 }),
            m => anyhow::bail!("--mode {m:?}: shard or independent"),
        }
    }

    fn mode(&self) -> &'static str {
        match self {
            Route::Shard(_) => "shard",
            Route::Independent { .. } => "independent",
        }
    }

    fn node(&mut self, r: &Record<'_>) -> usize {
        match self {
            Route::Shard(c) => c.owner_index(r.url),
            Route::Independent { nodes, next } if r.client.is_empty() => {
                *next = (*next + 1) % *nodes;
                *next
            }
            Route::Independent { nodes, .. } => {
                (xxhash_rust::xxh3::xxh3_64(r.client.as_bytes()) % *nodes as u64) as usize
            }
        }
    }
}

/// Streams `reader` through a cluster: one [`Replay`] of every configuration per node, each
/// record replayed by the node `route` gives it to; the results are the cluster's, each
/// configuration's figures summed over the nodes (its size is each node's).
#[allow(clippy::too_many_arguments)]
pub fn run_cluster(
    mut reader: Box<dyn TraceReader + '_>,
    mut replays: Vec<Replay>,
    mut route: Route,
    assumptions: Assumptions,
    source: &str,
    format: &str,
    progress: Progress,
) -> anyhow::Result<Report> {
    let bar = match progress {
        Progress::Off => ProgressBar::hidden(),
        Progress::Auto => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
    };
    let start = Instant::now();
    let cpu_start = thread_cpu();
    let mut records = 0u64;
    let mut per_node = vec![0u64; replays.len()];
    while let Some(r) = reader.next_record() {
        records += 1;
        let n = route.node(&r).min(replays.len() - 1);
        per_node[n] += 1;
        replays[n].feed(&r)?;
        if records & 0xffff == 0 {
            bar.set_message(format!("{records} records"));
        }
    }
    bar.finish_and_clear();
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu_start.zip(thread_cpu()).map(|(a, b)| b - a);
    let mut results: Vec<ConfigReport> = Vec::new();
    for replay in &mut replays {
        for (i, r) in replay.results().into_iter().enumerate() {
            match results.get_mut(i) {
                None => results.push(r),
                Some(sum) => sum.add(&r),
            }
        }
    }
    let shard = matches!(route, Route::Shard(_));
    // Shards see disjoint URLs (summed); independent nodes overlap (the largest is a floor).
    let count = |f: &dyn Fn(&Replay) -> usize| -> usize {
        let each = replays.iter().map(f);
        if shard {
            each.sum()
        } else {
            each.max().unwrap_or(0)
        }
    };
    Ok(Report {
        trace: TraceInfo {
            source: source.to_string(),
            format: format.to_string(),
            records,
            replayed: replays.iter().map(|r| r.replayed).sum(),
            unreplayable: replays.iter().map(|r| r.unreplayable).sum(),
            skipped: reader.skipped().clone(),
            read_error: reader.error().map(|e| e.to_string()),
            distinct_urls: count(&|r| r.distinct_urls()),
            servers: count(&|r| r.servers()),
            clients: count(&|r| r.clients()),
            span_s: replays.iter().map(Replay::span).fold(0.0, f64::max),
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
        results,
        cluster: Some(ClusterInfo {
            nodes: replays.len(),
            mode: route.mode(),
            requests_per_node: per_node,
        }),
    })
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
        cluster: None,
    })
}

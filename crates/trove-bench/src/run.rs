//! One run of the load: the arguments every load-offering command shares, the origin
//! servers it starts, the run itself and its reports. `trove bench run`, `fill`, `compare`
//! and `downtime` all build on it; the command line (`cli`) only parses and dispatches.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::model::SizeDist;
use crate::origin::{OriginConfig, OriginCounts, Origins};
use crate::report::{Report, RunInfo};
use crate::robot::{run_load, Mode, Plan};
use crate::workload::Workload;

/// Options shared by every command that offers load.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// Built-in workload name (polymix-2, datacomm-1) or path to a workload TOML file.
    #[arg(long, default_value = "polymix-2")]
    pub workload: String,
    /// Multiply every phase's duration, the working-set freeze time and the peak rate by this.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Peak request rate in req/s (after scaling); overrides the workload's.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Number of robots (default: peak rate / per-robot rate).
    #[arg(long)]
    pub robots: Option<u32>,
    /// Server think time mean in seconds (0 for raw-speed runs); sd scales with it.
    #[arg(long)]
    pub think: Option<f64>,
    /// Every object this many bytes (replaces the size distributions; keeps types and cachability).
    #[arg(long)]
    pub object_size: Option<u64>,
    /// Robot threads, each a single-threaded runtime (pin them with taskset).
    #[arg(long, default_value_t = 1)]
    pub robot_threads: usize,
    /// Worker threads of the origin servers this process starts.
    #[arg(long, default_value_t = 1)]
    pub server_threads: usize,
    /// Number of origin servers to start (default: the workload's).
    #[arg(long)]
    pub servers: Option<u32>,
    /// Use origin servers already running (`trove bench origin`) at these addresses.
    #[arg(long, value_delimiter = ',')]
    pub origins: Vec<SocketAddr>,
    /// Address the origin servers bind (any 127.0.0.0/8 address).
    #[arg(long, default_value = "127.0.0.1")]
    pub origin_host: String,
    /// Timeout, s: a transaction still unsent this long after its intended start is never sent,
    /// one sent and not answered this long after its send fails (both count as timeouts).
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    /// Stop after this many requests (a safety bound for quick tries).
    #[arg(long)]
    pub max_requests: Option<u64>,
    /// World id (hex): the URL prefix of this run's objects. Default: random, so objects of
    /// earlier runs are never hits.
    #[arg(long)]
    pub world: Option<String>,
    /// Write the JSON report here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the HTML report here.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// A request written more than this many ms after it was due is late; more than 1% late
    /// (or any never sent) and the report says the robots fell behind their schedule.
    #[arg(long, default_value_t = 10.0)]
    pub late_ms: f64,
}

/// How robots talk to the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProxyMode {
    /// Absolute URIs to a forward proxy (Polygraph's way).
    Forward,
    /// Origin-form URIs and Host headers to a reverse proxy.
    Reverse,
}

/// `trove bench run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    /// The proxy under test (host:port). Without it robots go straight to the servers.
    /// Several (repeated, or comma-separated): robots are dealt out to them round-robin, as
    /// an outside balancer spreads clients over a fleet.
    #[arg(long, value_delimiter = ',')]
    pub proxy: Vec<SocketAddr>,
    /// How to talk to the proxy.
    #[arg(long, value_enum, default_value = "forward")]
    pub mode: ProxyMode,
    /// Name of the product in reports (default: the proxy address).
    #[arg(long)]
    pub label: Option<String>,
}

/// Parses `512MiB`, `2GB`, `1048576`.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("bad size {s:?}"))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        u => return Err(format!("bad size unit {u:?} in {s:?} (use KiB, MiB, GiB)")),
    };
    Ok((n * mult) as u64)
}

/// The workload as `load` modifies it.
pub fn effective_workload(load: &LoadArgs) -> anyhow::Result<Workload> {
    anyhow::ensure!(load.scale > 0.0, "--scale must be positive");
    let mut w = Workload::load(&load.workload)?.scaled(load.scale);
    if let Some(r) = load.rate {
        anyhow::ensure!(r > 0.0, "--rate must be positive");
        w.peak_rate = r;
    }
    if let Some(size) = load.object_size {
        anyhow::ensure!(size > 0, "--object-size must be positive");
        for k in &mut w.content {
            k.size = SizeDist::Const { size: size as f64 };
        }
    }
    if let Some(n) = load.servers {
        w.servers.count = n;
    }
    if let Some(t) = load.think {
        anyhow::ensure!(t >= 0.0, "--think must not be negative");
        let sd = if w.servers.think_mean_s > 0.0 {
            w.servers.think_sd_s * t / w.servers.think_mean_s
        } else {
            0.0
        };
        w.servers.think_mean_s = t;
        w.servers.think_sd_s = sd;
    }
    w.validate()?;
    Ok(w)
}

/// How robots reach the servers: straight without proxies, else through them all.
pub(crate) fn mode_of(proxies: &[SocketAddr], mode: ProxyMode) -> Mode {
    match (proxies.is_empty(), mode) {
        (true, _) => Mode::Direct,
        (false, ProxyMode::Forward) => Mode::Forward(proxies.to_vec()),
        (false, ProxyMode::Reverse) => Mode::Reverse(proxies.to_vec()),
    }
}

/// A run's default label: its proxies' addresses, `+`-joined, or `no-proxy`.
pub(crate) fn proxies_label(proxies: &[SocketAddr]) -> String {
    if proxies.is_empty() {
        return "no-proxy".into();
    }
    let v: Vec<String> = proxies.iter().map(ToString::to_string).collect();
    v.join("+")
}

pub(crate) fn robots_for(load: &LoadArgs, w: &Workload) -> u32 {
    load.robots
        .unwrap_or_else(|| (w.peak_rate / w.robots.rate).ceil().max(1.0) as u32)
}

pub(crate) fn world_of(load: &LoadArgs) -> anyhow::Result<u64> {
    match &load.world {
        Some(h) => u64::from_str_radix(h, 16).with_context(|| format!("--world {h:?} is not hex")),
        None => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            Ok(crate::model::mix64(t.as_nanos() as u64 ^ u64::from(std::process::id())) >> 16)
        }
    }
}

/// Origin servers for a run: started in this process, or the given external ones.
pub struct OriginSet {
    /// Addresses.
    pub addrs: Vec<SocketAddr>,
    started: Option<(tokio::runtime::Runtime, Origins)>,
}

impl OriginSet {
    /// Starts the workload's servers on a runtime of `threads` workers.
    pub fn start(w: &Workload, host: &str, threads: usize) -> anyhow::Result<OriginSet> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("bench-origin")
            .enable_all()
            .build()?;
        let cfg = Arc::new(OriginConfig::new(w, None)?);
        let origins = rt.block_on(Origins::start(host, w.servers.count, cfg))?;
        Ok(OriginSet {
            addrs: origins.addrs.clone(),
            started: Some((rt, origins)),
        })
    }

    /// Servers someone else runs.
    pub fn external(addrs: Vec<SocketAddr>) -> OriginSet {
        OriginSet {
            addrs,
            started: None,
        }
    }

    /// The servers' counters, if they run in this process.
    pub fn counts(&self) -> Option<OriginCounts> {
        self.started.as_ref().map(|(_, o)| o.stats.snapshot())
    }
}

impl Drop for OriginSet {
    fn drop(&mut self) {
        if let Some((rt, origins)) = self.started.take() {
            drop(origins);
            rt.shutdown_timeout(Duration::from_millis(200));
        }
    }
}

/// Runs `a` (servers from `origins`, or started here) and returns the report.
pub fn execute(a: &RunArgs, origins: Option<&OriginSet>) -> anyhow::Result<Report> {
    let w = effective_workload(&a.load)?;
    let own;
    let origins = match origins {
        Some(o) => o,
        None => {
            own = if a.load.origins.is_empty() {
                OriginSet::start(&w, &a.load.origin_host, a.load.server_threads)?
            } else {
                OriginSet::external(a.load.origins.clone())
            };
            &own
        }
    };
    let mode = mode_of(&a.proxy, a.mode);
    let robots = robots_for(&a.load, &w);
    let before = origins.counts();
    let plan = Plan {
        workload: w.clone(),
        mode: mode.clone(),
        origins: origins.addrs.clone(),
        robots,
        threads: a.load.robot_threads,
        world: world_of(&a.load)?,
        timeout: Duration::from_secs_f64(a.load.timeout),
        fill_bytes: None,
        max_requests: a.load.max_requests,
        progress: !a.load.quiet,
        events: None,
        stop: None,
        late: std::time::Duration::from_secs_f64(a.load.late_ms.max(0.0) / 1000.0),
    };
    if !a.load.quiet {
        eprintln!(
            "bench: {} for {:.0} s at up to {:.1} req/s, {robots} robots, {}; servers {:?}",
            w.name,
            w.duration_s(),
            w.peak_rate,
            mode.describe(),
            origins.addrs
        );
    }
    let out = run_load(plan)?;
    let server = match (before, origins.counts()) {
        (Some(b), Some(e)) => Some(OriginCounts {
            conns: e.conns - b.conns,
            replies: e.replies - b.replies,
            bytes: e.bytes - b.bytes,
            bad_requests: e.bad_requests - b.bad_requests,
        }),
        _ => None,
    };
    let info = RunInfo {
        label: a.label.clone().unwrap_or_else(|| proxies_label(&a.proxy)),
        mode: mode.describe(),
        scale: a.load.scale,
        robots,
        think_mean_s: w.servers.think_mean_s,
    };
    Ok(Report::new(info, &w, &out, server))
}

/// Prints the text report and writes the requested files; fails if the run failed.
pub fn finish(report: &Report, load: &LoadArgs) -> anyhow::Result<()> {
    print!("{}", report.text());
    write_outputs(std::slice::from_ref(report), load)?;
    anyhow::ensure!(
        !report.failed,
        "the run failed: {}",
        report.notes.join("; ")
    );
    Ok(())
}

/// Writes JSON and HTML reports for one or several runs.
pub fn write_outputs(reports: &[Report], load: &LoadArgs) -> anyhow::Result<()> {
    if let Some(p) = &load.json {
        let text = if reports.len() == 1 {
            serde_json::to_string_pretty(&reports[0])?
        } else {
            serde_json::to_string_pretty(reports)?
        };
        std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?;
        eprintln!("bench: wrote {}", p.display());
    }
    if let Some(p) = &load.html {
        std::fs::write(p, crate::html::render(reports))
            .with_context(|| format!("writing {}", p.display()))?;
        eprintln!("bench: wrote {}", p.display());
    }
    Ok(())
}

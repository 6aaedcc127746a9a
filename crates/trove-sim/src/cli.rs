//! The `trove sim` command line (clap derive, like `trove bench`'s).

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use trove_cache::{CookiePolicy, RequestCookiePolicy};
use trove_http::Policy;
use trove_store::EvictionKind;

use crate::assume::{Assume, Assumptions, Head};
use crate::net::{AbortModel, Params, Preset};
use crate::replay::{Config, Replay};
use crate::sweep::{self, Progress, Report};
use crate::trace::squid::Writer;
use crate::trace::synthetic::{SyntheticReader, SyntheticSpec};
use crate::trace::{Format, TraceReader};

/// `trove sim`: replay a trace through trove's own cache core in virtual time.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SimArgs {
    #[command(subcommand)]
    pub command: Option<SimCommand>,
    #[command(flatten)]
    pub replay: ReplayArgs,
}

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// The DynamicWeb throughput, speedup and node-count model (seed 002 §3.2).
    Model(ModelArgs),
    /// Convert a trace to libCacheSim's binary `oracleGeneral` format, which replays without
    /// parsing (and in libCacheSim too).
    Convert(ConvertArgs),
}

#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// The trace to read: a file (`-` for standard input) or `synthetic:polymix-2` …
    pub input: String,
    /// The `oracleGeneral` file to write (name it `*.oracleGeneral` and `trove sim` knows
    /// its format from the name).
    pub output: PathBuf,
    /// The input's format; guessed from its first line when not given.
    #[arg(long)]
    pub format: Option<Format>,
    /// Origin for a CLF log's paths.
    #[arg(long, default_value = "http://localhost")]
    pub host: String,
    /// Requests of a synthetic trace.
    #[arg(long, default_value_t = 1_000_000)]
    pub requests: u64,
    /// A synthetic trace's peak request rate, req/s (default: the workload's).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Origin servers of a synthetic trace (default: the workload's).
    #[arg(long)]
    pub servers: Option<u32>,
    /// Seed of a synthetic trace's draws.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// `--head`: what a Squid log's byte counts hold besides the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HeadArg {
    Auto,
    None,
    Trove,
    Squid,
}

/// Which connections the proxy keeps open for reuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Persistent {
    All,
    Clients,
    Servers,
    None,
}

/// What a request carrying `Cookie` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Cookies {
    /// RFC 9111: cookies do not matter to the cache (trove's default).
    Ignore,
    /// Requests with cookies go past the cache (seed 003's proxies, Varnish).
    Bypass,
    /// Bypass, except for images (the vendors' heuristic in seed 003 §IV.A).
    BypassExceptImages,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The trace: a file (`-` for standard input) or `synthetic:polymix-2`,
    /// `synthetic:datacomm-1`, `synthetic:<workload.toml>`.
    pub trace: Option<String>,
    /// Trace format; guessed from the first line when not given.
    #[arg(long)]
    pub format: Option<Format>,
    /// Origin for a CLF log's paths.
    #[arg(long, default_value = "http://localhost")]
    pub host: String,
    /// Cache sizes to sweep, comma-separated (`64MiB`, `1GiB`, `unbounded`, `0` for no data
    /// cache).
    #[arg(
        long,
        default_value = "16MiB,64MiB,256MiB,1GiB,unbounded",
        value_delimiter = ','
    )]
    pub sizes: Vec<String>,
    /// Eviction policies to sweep: lru, s3-fifo, sieve, w-tinylfu.
    #[arg(long, default_value = "lru,s3-fifo", value_delimiter = ',')]
    pub policies: Vec<String>,
    /// Largest object stored (`[cache] max_object`).
    #[arg(long, default_value = "64MiB")]
    pub max_object: String,
    /// Freshness given to cachable responses when the trace has no headers, seconds.
    #[arg(long, default_value_t = 3600)]
    pub freshness: u64,
    /// Whose log this is, for what it cannot say: `trove` (trove's own access log: follow
    /// what trove did: `?` URLs cachable, trove's response head off each byte count),
    /// `other` (seed 003's rules: `?` and `cgi-bin` URLs uncachable), or `auto`: trove's
    /// if it looks like trove's (its hierarchy field names origins by host, its result codes
    /// are trove's).
    #[arg(long, value_enum, default_value_t = Assume::Auto)]
    pub assume: Assume,
    /// What a Squid log's byte counts hold besides the body: `auto` (trove's response head
    /// for trove's log, an estimated Squid head for another's), `trove`, `squid`, or `none`
    /// (a log that counts bodies only).
    #[arg(long, value_enum, default_value_t = HeadArg::Auto)]
    pub head: HeadArg,
    /// Treat `?` and `cgi-bin` URLs as cachable (`--cache-dynamic`, as `--assume trove`
    /// does) or not (`--cache-dynamic=false`, as `--assume other` does).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    pub cache_dynamic: Option<bool>,
    /// Fraction of (client, URL) pairs whose requests carry a cookie.
    #[arg(long, default_value_t = 0.0)]
    pub cookie_fraction: f64,
    /// Replay as uncachable every URL the log shows fetched from the origin each time it
    /// was asked, twice or more, and never served from cache (a log cannot say which
    /// responses were uncachable; this takes the logging cache's word for it, so it suits
    /// replaying a log at the size it was made with: at a larger size it undercounts hits on
    /// objects that were evicted between uses). Reads the trace twice.
    #[arg(long)]
    pub never_hit_uncachable: bool,
    /// What the cache does with a request carrying a cookie.
    #[arg(long, value_enum, default_value_t = Cookies::Ignore)]
    pub cookies: Cookies,
    /// Turn on the network model with a preset of seed 003.
    #[arg(long, value_enum)]
    pub network: Option<Preset>,
    /// Client link, bits per second (overrides the preset).
    #[arg(long)]
    pub client_bandwidth: Option<f64>,
    /// Client round trip, milliseconds.
    #[arg(long)]
    pub client_rtt: Option<f64>,
    /// Origin link, bits per second.
    #[arg(long)]
    pub origin_bandwidth: Option<f64>,
    /// Origin round trip, milliseconds: the median when `--origin-rtt-sigma` spreads it.
    #[arg(long)]
    pub origin_rtt: Option<f64>,
    /// Spread of the origin round trips: each server's is log-normal around the median,
    /// σ of its logarithm (0: every server alike; 1.5: a mean 3 times the median).
    #[arg(long)]
    pub origin_rtt_sigma: Option<f64>,
    /// Initial TCP window, segments.
    #[arg(long)]
    pub initial_window: Option<u32>,
    /// Set-up cost of every new TCP connection beyond its round trip (accept, a server's
    /// SYN processing), milliseconds: a proxy without persistent connections pays it twice.
    #[arg(long)]
    pub connect_overhead: Option<f64>,
    /// The proxy's own time per hit (PROXIM's cache hit overhead), milliseconds.
    #[arg(long)]
    pub hit_overhead: Option<f64>,
    /// The proxy's own time per request it forwards to the origin (PROXIM's cache miss
    /// overhead), milliseconds.
    #[arg(long)]
    pub miss_overhead: Option<f64>,
    /// Idle timeout of persistent client-to-proxy connections, seconds (PROXIM: 180).
    #[arg(long)]
    pub client_idle: Option<f64>,
    /// Idle timeout of persistent proxy-to-origin connections, seconds (PROXIM: 30).
    #[arg(long)]
    pub server_idle: Option<f64>,
    /// Idle timeout of the no-proxy baseline's persistent connections, seconds (with
    /// `--direct-persistent`; default 30).
    #[arg(long)]
    pub direct_idle: Option<f64>,
    /// Which connections the proxy keeps for reuse.
    #[arg(long, value_enum, default_value_t = Persistent::All)]
    pub persistent: Persistent,
    /// The no-proxy baseline keeps client-to-server connections open too.
    #[arg(long)]
    pub direct_persistent: bool,
    /// Abort handling: trove (the default policy, 64 KB read-ahead unless storing), finish,
    /// stop, stop-64k.
    #[arg(long, default_value = "trove")]
    pub abort: String,
    /// Requests of a synthetic trace.
    #[arg(long, default_value_t = 1_000_000)]
    pub requests: u64,
    /// About this fraction of a synthetic trace's transfers are aborted part-way, large
    /// objects more often (in proportion to size).
    #[arg(long, default_value_t = 0.0)]
    pub abort_fraction: f64,
    /// A synthetic trace's peak request rate, all clients together, req/s (default: the
    /// workload's; its robot rate fixes how many clients that is).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Origin servers a synthetic trace's objects are spread over (default: the workload's).
    #[arg(long)]
    pub servers: Option<u32>,
    /// Seed of a synthetic trace's draws.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the report as JSON to this file (`-`: standard output, instead of the table).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the HTML report to this file.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// Write the first configuration's result code for every record to this file.
    #[arg(long)]
    pub outcomes: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Replay the configurations on this many threads, each reading the trace itself (a
    /// file or a synthetic trace; standard input is read once, on one thread). Wall time
    /// falls; CPU time per configuration does not.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Model a cluster of this many nodes: every size in `--sizes` is each node's, and the
    /// figures are the cluster's (all nodes together).
    #[arg(long, default_value_t = 1)]
    pub nodes: usize,
    /// How the nodes share the requests: `shard` (trove's `[cluster] mode = "shard"`: each
    /// key answered by its owner, placed as `trove serve` places it) or `independent`
    /// (separate caches, or replicate mode, behind a balancer that spreads clients).
    #[arg(long, default_value = "shard")]
    pub mode: String,
    /// A disk tier under each configuration's memory (`[cache.disk] size`, `1GiB`): trove's
    /// own, writing real files (zeros of each object's size) in a directory of its own,
    /// removed at the end. None by default.
    #[arg(long)]
    pub disk: Option<String>,
    /// The disk tier's `region_size`.
    #[arg(long, default_value = "16MiB")]
    pub disk_region: String,
    /// The disk tier's `sendfile_min`: disk hits on bodies this large are not promoted.
    #[arg(long, default_value = "64KiB")]
    pub disk_sendfile_min: String,
    /// The disk tier's `reclaim`: `fifo-reinsert` or `fifo`.
    #[arg(long, default_value = "fifo-reinsert")]
    pub disk_reclaim: String,
    /// Where the disk tiers' directories go (default: the system's temporary directory).
    #[arg(long)]
    pub disk_dir: Option<std::path::PathBuf>,
}

/// Where the records come from: what a replay and a conversion share.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    pub trace: &'a str,
    pub format: Option<Format>,
    pub host: &'a str,
    pub requests: u64,
    pub abort_fraction: f64,
    pub rate: Option<f64>,
    pub servers: Option<u32>,
    pub seed: u64,
}

impl ReplayArgs {
    fn source(&self) -> anyhow::Result<Source<'_>> {
        Ok(Source {
            trace: self.trace.as_deref().ok_or_else(|| {
                anyhow::anyhow!("give a trace file (or synthetic:polymix-2), `model` or `convert`")
            })?,
            format: self.format,
            host: &self.host,
            requests: self.requests,
            abort_fraction: self.abort_fraction,
            rate: self.rate,
            servers: self.servers,
            seed: self.seed,
        })
    }
}

impl ConvertArgs {
    fn source(&self) -> Source<'_> {
        Source {
            trace: &self.input,
            format: self.format,
            host: &self.host,
            requests: self.requests,
            abort_fraction: 0.0,
            rate: self.rate,
            servers: self.servers,
            seed: self.seed,
        }
    }
}

#[derive(Debug, Args)]
pub struct ModelArgs {
    /// Cache hits per second through the whole path.
    #[arg(long, default_value_t = 175.0)]
    pub c_tp: f64,
    /// Static files per second.
    #[arg(long, default_value_t = 270.0)]
    pub f_tp: f64,
    /// Server-program invocations per second (1/c'): ~20 with CGI, ~300 with ICAPI.
    #[arg(long, default_value_t = 300.0)]
    pub c1_tp: f64,
    /// Requests per second the cache manager alone satisfies (1/c'').
    #[arg(long, default_value_t = 500.0)]
    pub c2_tp: f64,
    /// Dynamic pages generated per second.
    #[arg(long, default_value_t = 10.0)]
    pub s_tp: f64,
    /// Share of requests for dynamic pages.
    #[arg(long, default_value_t = 1.0)]
    pub p_dyn: f64,
    /// Cache hit rate of dynamic requests.
    #[arg(long, default_value_t = 0.5)]
    pub h: f64,
    /// Write Figures 7-14 for these parameters as an HTML page.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// Write the figures' data as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Parses `64MiB`, `1GiB`, `512KiB`, `100MB`, `12345`, `unbounded`.
pub fn parse_size(s: &str) -> anyhow::Result<Option<u64>> {
    let t = s.trim();
    if matches!(
        t.to_ascii_lowercase().as_str(),
        "unbounded" | "inf" | "infinite"
    ) {
        return Ok(None);
    }
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("{s:?} is not a size (say 64MiB, 1GiB or unbounded)"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "g" | "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" => 1e12,
        "tib" => 1024f64.powi(4),
        u => anyhow::bail!("{s:?}: unknown unit {u:?}"),
    };
    Ok(Some((n * mult) as u64))
}

/// Runs `trove sim`.
pub fn run(args: SimArgs) -> anyhow::Result<()> {
    match args.command {
        Some(SimCommand::Model(m)) => model(m),
        Some(SimCommand::Convert(c)) => convert(&c),
        None if is_replayable(&args.replay)? => {
            let report = replay_exact(&args.replay)?;
            output_exact(&args.replay, &report)
        }
        None => {
            let report = replay(&args.replay)?;
            output(&args.replay, &report)
        }
    }
}

fn model(m: ModelArgs) -> anyhow::Result<()> {
    let p = crate::model::Params {
        c_tp: m.c_tp,
        f_tp: m.f_tp,
        c1_tp: m.c1_tp,
        c2_tp: m.c2_tp,
        s_tp: m.s_tp,
        p_dyn: m.p_dyn,
        h: m.h,
    };
    anyhow::ensure!(
        [p.c_tp, p.f_tp, p.c1_tp, p.c2_tp, p.s_tp]
            .iter()
            .all(|v| *v > 0.0),
        "rates must be positive"
    );
    anyhow::ensure!(
        (0.0..=1.0).contains(&p.p_dyn) && (0.0..=1.0).contains(&p.h),
        "p_dyn and h are fractions within 0..=1"
    );
    print!("{}", crate::model::text(&p));
    if let Some(path) = &m.html {
        std::fs::write(path, crate::model::html(&p))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &m.json {
        let v = serde_json::json!({ "params": p, "figures": crate::model::figures(&p) });
        std::fs::write(path, serde_json::to_string_pretty(&v)?)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The configurations the arguments ask for.
pub fn configs(a: &ReplayArgs) -> anyhow::Result<Vec<Config>> {
    let max_object = parse_size(&a.max_object)?.unwrap_or(u64::MAX / 4);
    let disk = disk_model(a)?;
    let mut sizes = Vec::new();
    for s in &a.sizes {
        sizes.push(parse_size(s)?);
    }
    let mut policies = Vec::new();
    for p in &a.policies {
        policies.push(EvictionKind::parse(p).ok_or_else(|| {
            anyhow::anyhow!("unknown eviction policy {p:?} (lru, s3-fifo, sieve, w-tinylfu)")
        })?);
    }
    let cookies = match a.cookies {
        Cookies::Ignore => CookiePolicy::default(),
        Cookies::Bypass => CookiePolicy {
            request_cookie: RequestCookiePolicy::Bypass,
            ..CookiePolicy::default()
        },
        Cookies::BypassExceptImages => CookiePolicy {
            request_cookie: RequestCookiePolicy::Bypass,
            ignore_for: vec!["image/".into()],
            ..CookiePolicy::default()
        },
    };
    let net = match a.network {
        None => {
            anyhow::ensure!(
                a.client_bandwidth.is_none()
                    && a.client_rtt.is_none()
                    && a.origin_bandwidth.is_none()
                    && a.origin_rtt.is_none()
                    && a.origin_rtt_sigma.is_none()
                    && a.initial_window.is_none()
                    && a.connect_overhead.is_none()
                    && a.hit_overhead.is_none()
                    && a.miss_overhead.is_none()
                    && a.client_idle.is_none()
                    && a.server_idle.is_none()
                    && a.direct_idle.is_none(),
                "link settings need the network model: add --network modem or --network lan"
            );
            None
        }
        Some(preset) => {
            let mut p: Params = preset.params();
            if let Some(v) = a.client_bandwidth {
                p.client_bandwidth = v / 8.0;
            }
            if let Some(v) = a.client_rtt {
                p.client_rtt = v / 1e3;
            }
            if let Some(v) = a.origin_bandwidth {
                p.origin_bandwidth = v / 8.0;
            }
            if let Some(v) = a.origin_rtt {
                p.origin_rtt = v / 1e3;
            }
            if let Some(v) = a.origin_rtt_sigma {
                p.origin_rtt_sigma = v;
            }
            if let Some(w) = a.initial_window {
                p.tcp.initial_window = w.max(1);
            }
            let ms = |v: Option<f64>, d: f64| v.map_or(d, |v| v / 1e3);
            p.connect_overhead = ms(a.connect_overhead, p.connect_overhead);
            p.hit_overhead = ms(a.hit_overhead, p.hit_overhead);
            p.miss_overhead = ms(a.miss_overhead, p.miss_overhead);
            p.client_idle = a.client_idle.unwrap_or(p.client_idle);
            p.server_idle = a.server_idle.unwrap_or(p.server_idle);
            p.direct_idle = a.direct_idle.unwrap_or(p.direct_idle);
            anyhow::ensure!(
                (0.0..=5.0).contains(&p.origin_rtt_sigma),
                "--origin-rtt-sigma must be within 0..=5"
            );
            anyhow::ensure!(
                [p.connect_overhead, p.hit_overhead, p.miss_overhead]
                    .iter()
                    .all(|v| v.is_finite() && *v >= 0.0),
                "overheads must not be negative"
            );
            anyhow::ensure!(
                [p.client_idle, p.server_idle, p.direct_idle]
                    .iter()
                    .all(|v| v.is_finite() && *v >= 0.0),
                "idle timeouts must not be negative"
            );
            anyhow::ensure!(
                p.client_bandwidth > 0.0 && p.origin_bandwidth > 0.0,
                "bandwidths must be positive"
            );
            anyhow::ensure!(
                p.client_rtt >= 0.0 && p.origin_rtt >= 0.0,
                "RTTs must not be negative"
            );
            (p.persistent_clients, p.persistent_servers) = match a.persistent {
                Persistent::All => (true, true),
                Persistent::Clients => (true, false),
                Persistent::Servers => (false, true),
                Persistent::None => (false, false),
            };
            p.direct_persistent = a.direct_persistent;
            p.abort = AbortModel::parse(&a.abort).ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown abort handling {:?} (trove, finish, stop, stop-64k)",
                    a.abort
                )
            })?;
            Some(p)
        }
    };
    let mut out = Vec::new();
    for size in &sizes {
        for policy in &policies {
            out.push(Config {
                cache_size: *size,
                policy: *policy,
                max_object,
                cookies: cookies.clone(),
                heuristic: Policy::default(),
                net: net.clone(),
                disk: disk.clone(),
            });
        }
    }
    anyhow::ensure!(
        !out.is_empty(),
        "nothing to replay: give --sizes and --policies"
    );
    Ok(out)
}

/// The assumptions the arguments ask for, for the trace `opened`.
pub fn assumptions(a: &ReplayArgs, opened: &Opened) -> anyhow::Result<Assumptions> {
    anyhow::ensure!(
        (0.0..=1.0).contains(&a.cookie_fraction),
        "--cookie-fraction is a fraction within 0..=1"
    );
    let squid = opened.format == Format::Squid.as_str();
    let (log, log_reason) = match a.assume {
        Assume::Trove => (Assume::Trove, "--assume trove".to_string()),
        Assume::Other => (Assume::Other, "--assume other".to_string()),
        Assume::Auto => match opened.writer {
            Some(Writer::Trove) => (
                Assume::Trove,
                "recognised: its hierarchy field names origins by host, its result codes are trove's".to_string(),
            ),
            Some(Writer::Other) => (
                Assume::Other,
                "not trove's: a hierarchy or result code trove never writes".to_string(),
            ),
            Some(Writer::Unknown) => (
                Assume::Other,
                "not recognised as trove's (origins named by IP address only?): say --assume trove if it is".to_string(),
            ),
            None => (
                Assume::Other,
                format!("a {} trace; trove writes Squid's format", opened.format),
            ),
        },
    };
    let head = match (a.head, squid, log) {
        (HeadArg::None, ..) | (HeadArg::Auto, false, _) => Head::None,
        (HeadArg::Trove, ..) | (HeadArg::Auto, true, Assume::Trove) => Head::Trove,
        (HeadArg::Squid, ..) | (HeadArg::Auto, true, _) => Head::Squid,
    };
    Ok(Assumptions {
        log,
        log_reason,
        head,
        dynamic_uncachable: !a.cache_dynamic.unwrap_or(log == Assume::Trove),
        freshness: Duration::from_secs(a.freshness),
        cookie_fraction: a.cookie_fraction,
        uncachable: Default::default(),
    })
}

/// The URLs a log shows asked for twice or more and never served from cache (its result
/// codes say `MISS` every time): the first pass of `--never-hit-uncachable`.
pub fn never_hit(src: &Source<'_>) -> anyhow::Result<std::collections::HashSet<Box<str>>> {
    let mut opened = open(src)?;
    // URL -> (requests, hits), for URLs the log names by text.
    let mut seen: crate::intern::FastMap<Box<str>, (u32, u32)> = Default::default();
    while let Some(r) = opened.reader.next_record() {
        if r.result.is_empty() {
            continue;
        }
        let hit = r.result.contains("HIT") || r.result.contains("REFRESH");
        match seen.get_mut(r.url) {
            Some((n, h)) => {
                *n = n.saturating_add(1);
                *h += u32::from(hit);
            }
            None => {
                seen.insert(r.url.into(), (1, u32::from(hit)));
            }
        }
    }
    Ok(seen
        .into_iter()
        .filter(|(_, (n, h))| *n >= 2 && *h == 0)
        .map(|(u, _)| u)
        .collect())
}

/// An opened trace: its reader, its format's name, and its length in the unit of
/// [`TraceReader::position`] when known.
pub struct Opened {
    pub reader: Box<dyn TraceReader>,
    pub format: &'static str,
    pub total: Option<u64>,
    /// Who wrote a Squid log, as its first lines tell.
    pub writer: Option<Writer>,
}

/// Opens the trace `src` names.
pub fn open(src: &Source<'_>) -> anyhow::Result<Opened> {
    let trace = src.trace;
    if let Some(name) = trace.strip_prefix("synthetic:") {
        anyhow::ensure!(
            (0.0..=1.0).contains(&src.abort_fraction),
            "--abort-fraction is a fraction within 0..=1"
        );
        let mut workload = trove_bench::workload::Workload::load(name)?;
        if let Some(rate) = src.rate {
            anyhow::ensure!(rate > 0.0, "--rate must be positive");
            workload.peak_rate = rate;
        }
        if let Some(n) = src.servers {
            anyhow::ensure!(n >= 1, "--servers must be at least 1");
            workload.servers.count = n;
        }
        let reader = SyntheticReader::new(SyntheticSpec {
            workload,
            requests: src.requests,
            abort_fraction: src.abort_fraction,
            seed: src.seed,
        });
        return Ok(Opened {
            reader: Box::new(reader),
            format: "synthetic",
            total: Some(src.requests),
            writer: None,
        });
    }
    // Large reads: a trace is read front to back once, and a bigger buffer means fewer
    // system calls per record.
    const BUFFER: usize = 1 << 20;
    let (input, total): (Box<dyn std::io::BufRead>, Option<u64>) = if trace == "-" {
        (
            Box::new(BufReader::with_capacity(BUFFER, std::io::stdin())),
            None,
        )
    } else {
        let f = File::open(trace).map_err(|e| anyhow::anyhow!("{trace}: {e}"))?;
        let len = f.metadata().ok().map(|m| m.len());
        (Box::new(BufReader::with_capacity(BUFFER, f)), len)
    };
    let mut input = input;
    let format = match src.format.or_else(|| Format::from_path(trace)) {
        Some(f) => f,
        None => detect(&mut input)?,
    };
    // The first lines (what the buffer holds: up to a megabyte) say whose log it is.
    let writer = (format == Format::Squid)
        .then(|| input.fill_buf().map(crate::trace::squid::writer))
        .transpose()?;
    Ok(Opened {
        reader: format.reader(input, src.host),
        format: format.as_str(),
        total,
        writer,
    })
}

/// Runs the replay the arguments describe and returns its report.
pub fn replay(a: &ReplayArgs) -> anyhow::Result<Report> {
    let src = a.source()?;
    let configs = configs(a)?;
    let opened = open(&src)?;
    let mut assume = assumptions(a, &opened)?;
    if a.never_hit_uncachable {
        anyhow::ensure!(
            src.trace != "-",
            "--never-hit-uncachable reads the trace twice: give a file, not standard input"
        );
        assume.uncachable = std::sync::Arc::new(never_hit(&src)?);
    }
    let progress = if a.quiet {
        Progress::Off
    } else {
        Progress::Auto
    };
    let outcomes = |replay: Replay| -> anyhow::Result<Replay> {
        Ok(match &a.outcomes {
            Some(path) => {
                let f = File::create(path)
                    .map_err(|e| anyhow::anyhow!("--outcomes {}: {e}", path.display()))?;
                replay.with_outcomes(Box::new(BufWriter::new(f)))
            }
            None => replay,
        })
    };
    if a.nodes > 1 {
        anyhow::ensure!(
            a.disk.is_none() && a.outcomes.is_none(),
            "--nodes models memory tiers only, without --disk or --outcomes"
        );
        let route = sweep::Route::new(a.nodes, &a.mode)?;
        let replays = (0..a.nodes)
            .map(|_| Replay::new(assume.clone(), configs.clone()))
            .collect::<anyhow::Result<Vec<_>>>()?;
        return sweep::run_cluster(
            opened.reader,
            replays,
            route,
            assume,
            src.trace,
            opened.format,
            progress,
        );
    }
    let threads = if src.trace == "-" {
        1
    } else {
        a.threads.clamp(1, configs.len())
    };
    if threads == 1 {
        let replay = outcomes(Replay::new(assume.clone(), configs)?)?;
        return sweep::run(
            opened.reader,
            replay,
            assume,
            src.trace,
            opened.format,
            opened.total,
            progress,
        );
    }
    drop(opened);
    // Contiguous groups, so the results come back in the order asked for and the first
    // configuration (whose outcomes `--outcomes` writes) is in the first group.
    let per = configs.len().div_ceil(threads);
    let groups: Vec<Vec<Config>> = configs.chunks(per).map(<[Config]>::to_vec).collect();
    let reports: Vec<anyhow::Result<Report>> = std::thread::scope(|s| {
        let handles: Vec<_> = groups
            .into_iter()
            .enumerate()
            .map(|(i, group)| {
                let assume = assume.clone();
                let outcomes = &outcomes;
                s.spawn(move || -> anyhow::Result<Report> {
                    let opened = open(&src)?;
                    let mut replay = Replay::new(assume.clone(), group)?;
                    if i == 0 {
                        replay = outcomes(replay)?;
                    }
                    // One progress bar: the first group's.
                    let progress = if i == 0 { progress } else { Progress::Off };
                    sweep::run(
                        opened.reader,
                        replay,
                        assume,
                        src.trace,
                        opened.format,
                        opened.total,
                        progress,
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a replay thread panicked")))
            })
            .collect()
    });
    let mut merged: Option<Report> = None;
    for r in reports {
        let r = r?;
        match &mut merged {
            None => merged = Some(r),
            Some(m) => {
                m.elapsed_s = m.elapsed_s.max(r.elapsed_s);
                m.cpu_s = m.cpu_s.zip(r.cpu_s).map(|(a, b)| a + b);
                m.results.extend(r.results);
            }
        }
    }
    let mut m = merged.expect("at least one group");
    m.threads = threads;
    m.records_per_s = if m.elapsed_s > 0.0 {
        m.trace.records as f64 / m.elapsed_s
    } else {
        0.0
    };
    Ok(m)
}

/// Whether the trace is trove's replayable trace (`--format trace`, or its first line).
/// The disk tier `--disk` asks for, checked as `trove serve --check` checks it.
fn disk_model(a: &ReplayArgs) -> anyhow::Result<Option<crate::disk::DiskModel>> {
    let Some(disk) = &a.disk else {
        return Ok(None);
    };
    let size = |s: &str, what: &str| -> anyhow::Result<u64> {
        parse_size(s)?.ok_or_else(|| anyhow::anyhow!("{what}: a size in bytes ({s:?})"))
    };
    let mut m = crate::disk::DiskModel::new(size(disk, "--disk")?);
    m.region_size = size(&a.disk_region, "--disk-region")?;
    m.sendfile_min = size(&a.disk_sendfile_min, "--disk-sendfile-min")?;
    m.reclaim = match a.disk_reclaim.as_str() {
        "fifo-reinsert" => trove_disk::Reclaim::FifoReinsert,
        "fifo" => trove_disk::Reclaim::Fifo,
        other => anyhow::bail!("--disk-reclaim: fifo-reinsert or fifo, not {other:?}"),
    };
    m.dir = a.disk_dir.clone();
    m.check()?;
    Ok(Some(m))
}

pub fn is_replayable(a: &ReplayArgs) -> anyhow::Result<bool> {
    let Some(trace) = a.trace.as_deref() else {
        return Ok(false);
    };
    if let Some(f) = a.format {
        return Ok(f == Format::Trace);
    }
    if trace == "-" || trace.starts_with("synthetic:") || Format::from_path(trace).is_some() {
        return Ok(false);
    }
    let f = File::open(trace).map_err(|e| anyhow::anyhow!("{trace}: {e}"))?;
    let mut input: Box<dyn std::io::BufRead> = Box::new(BufReader::new(f));
    Ok(detect(&mut input).ok() == Some(Format::Trace))
}

/// The exact replay of trove's replayable trace (`crate::exact`), through every
/// configuration the arguments name; `--outcomes` gets the first's result codes.
pub fn replay_exact(a: &ReplayArgs) -> anyhow::Result<crate::exact::ExactReport> {
    let src = a.source()?;
    let configs = configs(a)?;
    anyhow::ensure!(
        configs.iter().all(|c| c.net.is_none()),
        "the exact replay of a trove trace has no network model: leave out --network"
    );
    let input: Box<dyn std::io::BufRead> = if src.trace == "-" {
        Box::new(BufReader::with_capacity(1 << 20, std::io::stdin()))
    } else {
        let f = File::open(src.trace).map_err(|e| anyhow::anyhow!("{}: {e}", src.trace))?;
        Box::new(BufReader::with_capacity(1 << 20, f))
    };
    let mut exact = crate::exact::Exact::new(configs, src.trace)?;
    if let Some(path) = &a.outcomes {
        let f = File::create(path)
            .map_err(|e| anyhow::anyhow!("--outcomes {}: {e}", path.display()))?;
        exact = exact.with_outcomes(Box::new(BufWriter::new(f)));
    }
    crate::exact::run(input, exact)
}

fn output_exact(a: &ReplayArgs, r: &crate::exact::ExactReport) -> anyhow::Result<()> {
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(r)?;
        if path == std::path::Path::new("-") {
            println!("{text}");
            return Ok(());
        }
        std::fs::write(path, text)?;
        eprintln!("wrote {}", path.display());
    }
    println!(
        "{}: {} requests ({} compared with the trace), {} invalidations ({} not replayable), \
         {} bad lines; origin answers reused {}, missing {}",
        r.trace,
        r.requests,
        r.compared,
        r.invalidations,
        r.unsupported_invalidations,
        r.skipped.bad_lines,
        r.answers_reused,
        r.answers_missing
    );
    println!(
        "{:>12} {:>10} {:>10} {:>9} {:>10}",
        "size", "policy", "hit ratio", "origin", "differing"
    );
    for c in &r.results {
        let size = c
            .cache_size
            .map_or_else(|| "unbounded".to_string(), |s| s.to_string());
        println!(
            "{size:>12} {:>10} {:>9.2}% {:>9} {:>10}",
            c.policy,
            c.hit_ratio * 100.0,
            c.origin_requests,
            c.differing
        );
        if let Some(d) = &c.disk {
            println!(
                "    disk: {} hits, {} objects, {} writes ({} dropped), {} regions reclaimed, \
                 {} reinserted",
                d.hits, d.objects, d.writes, d.writes_dropped, d.regions_reclaimed, d.reinserted
            );
        }
        for (n, what, recorded, replayed) in &c.examples {
            println!("    request {n}: {what}: trove {recorded}, replay {replayed}");
        }
    }
    Ok(())
}

/// `trove sim convert`.
fn convert(c: &ConvertArgs) -> anyhow::Result<()> {
    let mut opened = open(&c.source())?;
    let out =
        File::create(&c.output).map_err(|e| anyhow::anyhow!("{}: {e}", c.output.display()))?;
    let mut out = BufWriter::with_capacity(1 << 20, out);
    let done = crate::trace::oracle::convert(&mut *opened.reader, &mut out)?;
    let skipped = opened.reader.skipped();
    eprintln!(
        "wrote {}: {} records, {} distinct objects ({} format in; {} bad lines skipped{}{})",
        c.output.display(),
        done.records,
        done.distinct,
        opened.format,
        skipped.bad_lines,
        if done.clamped_times > 0 {
            format!("; {} times outside 0..2^32 s clamped", done.clamped_times)
        } else {
            String::new()
        },
        if done.clamped_sizes > 0 {
            format!("; {} sizes of 4 GiB or more clamped", done.clamped_sizes)
        } else {
            String::new()
        },
    );
    Ok(())
}

/// Peeks at the first line that is not blank or a comment without consuming it.
fn detect(input: &mut Box<dyn std::io::BufRead>) -> anyhow::Result<Format> {
    let buf = input.fill_buf()?;
    let first = buf
        .split(|b| *b == b'\n')
        .find(|l| !crate::trace::is_blank(l))
        .unwrap_or(b"");
    Format::detect(first).ok_or_else(|| {
        anyhow::anyhow!("cannot tell the trace's format from its first line: give --format")
    })
}

fn output(a: &ReplayArgs, r: &Report) -> anyhow::Result<()> {
    let stdout_json = a.json.as_deref() == Some(std::path::Path::new("-"));
    if stdout_json {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, r)?;
        writeln!(out)?;
    } else {
        print!("{}", crate::report::text::render(r));
        if let Some(path) = &a.json {
            std::fs::write(path, serde_json::to_string_pretty(r)?)?;
            eprintln!("wrote {}", path.display());
        }
    }
    if let Some(path) = &a.html {
        std::fs::write(path, crate::report::html::render(r))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("64MiB").unwrap(), Some(64 << 20));
        assert_eq!(parse_size("1GiB").unwrap(), Some(1 << 30));
        assert_eq!(parse_size("100MB").unwrap(), Some(100_000_000));
        assert_eq!(parse_size("12345").unwrap(), Some(12345));
        assert_eq!(parse_size("unbounded").unwrap(), None);
        assert_eq!(parse_size("0").unwrap(), Some(0));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3 parsecs").is_err());
    }

    #[derive(clap::Parser)]
    struct Cmd {
        #[command(flatten)]
        a: ReplayArgs,
    }

    fn net_of(args: &[&str]) -> anyhow::Result<Option<Params>> {
        use clap::Parser;
        let cmd = Cmd::try_parse_from(["sim", "t.log"].iter().chain(args))?;
        Ok(configs(&cmd.a)?.remove(0).net)
    }

    #[test]
    fn model_parameters_are_settable() {
        let p = net_of(&[
            "--network",
            "modem",
            "--origin-rtt",
            "200",
            "--origin-rtt-sigma",
            "1.5",
            "--connect-overhead",
            "40",
            "--hit-overhead",
            "5",
            "--miss-overhead",
            "25",
            "--client-idle",
            "60",
            "--server-idle",
            "15",
            "--direct-persistent",
            "--direct-idle",
            "10",
        ])
        .unwrap()
        .unwrap();
        assert_eq!((p.origin_rtt, p.origin_rtt_sigma), (0.2, 1.5));
        assert_eq!(
            (p.connect_overhead, p.hit_overhead, p.miss_overhead),
            (0.04, 0.005, 0.025)
        );
        assert_eq!(
            (p.client_idle, p.server_idle, p.direct_idle),
            (60.0, 15.0, 10.0)
        );
        assert!(p.direct_persistent);
        // The preset's own values otherwise (PROXIM's timeouts, no overheads).
        let d = net_of(&["--network", "lan"]).unwrap().unwrap();
        assert_eq!(d, Preset::Lan.params());
        // Settings without the model, and nonsense, are refused.
        assert!(net_of(&["--miss-overhead", "5"]).is_err());
        assert!(net_of(&["--network", "lan", "--hit-overhead", "-1"]).is_err());
        assert!(net_of(&["--network", "lan", "--origin-rtt-sigma", "9"]).is_err());
        assert!(net_of(&["--network", "lan", "--server-idle", "-3"]).is_err());
    }
}

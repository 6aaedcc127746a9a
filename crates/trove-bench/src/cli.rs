//! The `trove bench` command line.

use std::time::Duration;

use anyhow::Context as _;

use crate::report::{Report, RunInfo};
use crate::robot::{run_load, Plan};
use crate::run::{
    effective_workload, execute, finish, mode_of, parse_bytes, robots_for, world_of, LoadArgs,
    OriginSet, RunArgs,
};
use crate::workload::{Workload, BUILTINS};

/// Command-line arguments of `trove bench`.
#[derive(Debug, clap::Args)]
#[command(
    about = "Web-Polygraph-style benchmark for caching proxies",
    long_about = "Web-Polygraph-style benchmark for caching proxies: robots and origin servers \
                  that offer PolyMix-2 or DataComm-1 through any proxy and report what the \
                  IRCache cache-off reported.\n\nExample: trove bench run --workload polymix-2 \
                  --scale 0.005 --proxy 127.0.0.1:3128 --html report.html"
)]
pub struct BenchArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The `trove bench` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Run a workload (through a proxy, or straight to the servers to measure the harness).
    Run(RunArgs),
    /// Fill a cache: best effort, new objects only, until a number of cachable bytes (PolyFill).
    Fill(FillArgs),
    /// The downtime test: light load, kill -9 the proxy, restart it, time till first miss/hit.
    Downtime(crate::downtime::DowntimeArgs),
    /// Run one workload against several proxies in turn and print them side by side.
    Compare(crate::compare::CompareArgs),
    /// Run origin servers only (for robots in another process or on another machine).
    Origin(OriginArgs),
    /// Offer one path at a constant rate, open loop, and report served rate, p50, p99.
    Rate(crate::rate::RateArgs),
    /// An origin that answers every request after a fixed delay (for overload curves).
    SlowOrigin(crate::rate::SlowOriginArgs),
    /// List the built-in workloads, or print one as TOML to copy and edit.
    Workloads(WorkloadsArgs),
}

/// `trove bench fill`.
#[derive(Debug, Clone, clap::Args)]
pub struct FillArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Stop once cachable misses brought this many bytes (e.g. 512MiB, 2GB).
    #[arg(long, value_parser = parse_bytes)]
    pub bytes: u64,
    /// Give up after this many seconds even if not full.
    #[arg(long, default_value_t = 3600.0)]
    pub max_time: f64,
}

/// `trove bench origin`.
#[derive(Debug, Clone, clap::Args)]
pub struct OriginArgs {
    /// Workload whose objects to serve (must match the robots').
    #[arg(long, default_value = "polymix-2")]
    pub workload: String,
    /// Think time mean override, s.
    #[arg(long)]
    pub think: Option<f64>,
    /// Object size override, bytes (must match the robots').
    #[arg(long)]
    pub object_size: Option<u64>,
    /// Number of servers (ports).
    #[arg(long)]
    pub servers: Option<u32>,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long)]
    pub duration: Option<f64>,
}

/// `trove bench workloads`.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkloadsArgs {
    /// Print this workload's TOML.
    pub name: Option<String>,
}

pub(crate) fn dispatch(args: BenchArgs) -> anyhow::Result<()> {
    match args.command {
        Command::Run(a) => {
            let report = execute(&a, None)?;
            finish(&report, &a.load)
        }
        Command::Fill(f) => fill(f),
        Command::Downtime(d) => crate::downtime::run(d),
        Command::Compare(c) => crate::compare::run(c),
        Command::Origin(o) => origin(o),
        Command::Rate(r) => crate::rate::run(r),
        Command::SlowOrigin(o) => crate::rate::slow_origin(o),
        Command::Workloads(w) => {
            match w.name {
                Some(n) => {
                    let (_, text) = BUILTINS
                        .iter()
                        .find(|(b, _)| b.eq_ignore_ascii_case(&n))
                        .with_context(|| format!("no built-in workload {n:?}"))?;
                    print!("{text}");
                }
                None => {
                    for (name, _) in BUILTINS {
                        let w = Workload::builtin(name)?;
                        println!(
                            "{name:<12} {} phases, {:.1} h, peak {} req/s, offered hit ratio {:.1}%",
                            w.phases.len(),
                            w.duration_s() / 3600.0,
                            w.peak_rate,
                            w.offered_hit_ratio() * 100.0
                        );
                    }
                }
            }
            Ok(())
        }
    }
}

fn fill(f: FillArgs) -> anyhow::Result<()> {
    let mut w = effective_workload(&f.run.load)?;
    // PolyFill: new objects only, best effort, one phase long enough to reach the goal.
    w.recurrence = 0.0;
    w.phases = vec![crate::workload::Phase {
        name: "fill".into(),
        duration_s: f.max_time,
        from: 1.0,
        to: 1.0,
        best_effort: true,
    }];
    let path = std::env::temp_dir().join(format!("trove-bench-fill-{}.toml", std::process::id()));
    std::fs::write(&path, toml::to_string(&w)?)?;
    let mut run = f.run.clone();
    run.load.workload = path.display().to_string();
    run.load.scale = 1.0;
    run.load.rate = Some(w.peak_rate.max(1.0));
    let w2 = effective_workload(&run.load)?;
    let origins = if run.load.origins.is_empty() {
        OriginSet::start(&w2, &run.load.origin_host, run.load.server_threads)?
    } else {
        OriginSet::external(run.load.origins.clone())
    };
    let robots = robots_for(&run.load, &w).min(1000);
    let mode = mode_of(&run.proxy, run.mode);
    let plan = Plan {
        workload: w2.clone(),
        mode: mode.clone(),
        origins: origins.addrs.clone(),
        robots,
        threads: run.load.robot_threads,
        world: world_of(&run.load)?,
        timeout: Duration::from_secs_f64(run.load.timeout),
        fill_bytes: Some(f.bytes),
        max_requests: run.load.max_requests,
        progress: !run.load.quiet,
        events: None,
        stop: None,
        late: Duration::from_secs_f64(run.load.late_ms.max(0.0) / 1000.0),
    };
    let out = run_load(plan);
    let _ = std::fs::remove_file(&path);
    let out = out?;
    let info = RunInfo {
        label: run.label.clone().unwrap_or_else(|| "fill".into()),
        mode: mode.describe(),
        scale: 1.0,
        robots,
        think_mean_s: w2.servers.think_mean_s,
    };
    let report = Report::new(info, &w2, &out, origins.counts());
    println!(
        "fill: {} bytes of cachable misses in {:.1} s ({} requests)",
        out.fill_bytes, out.elapsed_s, report.total.requests
    );
    finish(&report, &run.load)
}

fn origin(o: OriginArgs) -> anyhow::Result<()> {
    let load = LoadArgs {
        workload: o.workload.clone(),
        scale: 1.0,
        rate: None,
        robots: None,
        think: o.think,
        object_size: o.object_size,
        robot_threads: 1,
        server_threads: o.threads,
        servers: o.servers,
        origins: vec![],
        origin_host: o.host.clone(),
        timeout: 30.0,
        max_requests: None,
        world: None,
        json: None,
        html: None,
        quiet: true,
        late_ms: 10.0,
    };
    let w = effective_workload(&load)?;
    let set = OriginSet::start(&w, &o.host, o.threads)?;
    let list: Vec<String> = set.addrs.iter().map(|a| a.to_string()).collect();
    for a in &list {
        println!("origin {a}");
    }
    println!("use: --origins {}", list.join(","));
    use std::io::Write as _;
    std::io::stdout().flush()?;
    match o.duration {
        Some(d) => std::thread::sleep(Duration::from_secs_f64(d)),
        None => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
    }
    if let Some(c) = set.counts() {
        println!("served {} replies on {} connections", c.replies, c.conns);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::ProxyMode;
    use clap::Parser;

    #[derive(Parser)]
    struct Top {
        #[command(subcommand)]
        cmd: Sub,
    }
    #[derive(clap::Subcommand)]
    enum Sub {
        Bench(BenchArgs),
    }

    #[test]
    fn cli_parses_the_documented_commands() {
        let t = Top::try_parse_from([
            "trove",
            "bench",
            "run",
            "--workload",
            "polymix-2",
            "--scale",
            "0.01",
            "--proxy",
            "127.0.0.1:3128",
            "--html",
            "report.html",
        ])
        .unwrap();
        let Sub::Bench(b) = t.cmd;
        let Command::Run(r) = b.command else {
            panic!("not run")
        };
        assert_eq!(r.proxy, vec!["127.0.0.1:3128".parse().unwrap()]);
        assert_eq!(r.mode, ProxyMode::Forward);
        // Several proxies: repeated, comma-separated, or both.
        let t = Top::try_parse_from([
            "trove",
            "bench",
            "run",
            "--proxy",
            "127.0.0.1:3128,127.0.0.1:3129",
            "--proxy",
            "127.0.0.1:3130",
        ])
        .unwrap();
        let Sub::Bench(b) = t.cmd;
        let Command::Run(r) = b.command else {
            panic!("not run")
        };
        let want: Vec<std::net::SocketAddr> =
            ["127.0.0.1:3128", "127.0.0.1:3129", "127.0.0.1:3130"]
                .iter()
                .map(|a| a.parse().unwrap())
                .collect();
        assert_eq!(r.proxy, want);
        assert!(Top::try_parse_from(["trove", "bench", "compare", "--scale", "0.002"]).is_ok());
        assert!(Top::try_parse_from(["trove", "bench", "fill", "--bytes", "64MiB"]).is_ok());
        assert!(Top::try_parse_from(["trove", "bench", "fill", "--bytes", "64XB"]).is_err());
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("1.5k"), Ok(1536));
        assert_eq!(parse_bytes("10"), Ok(10));
        assert!(parse_bytes("ten").is_err());
    }
}

//! `trove bench compare`: the same workload against several proxies in turn, each started and
//! stopped by the bench, printed side by side as the cache-off's executive summary.

use std::path::PathBuf;
use std::time::Duration;

use crate::cli::{
    effective_workload, execute, write_outputs, LoadArgs, OriginSet, ProxyMode, RunArgs,
};
use crate::peers::{self, Programs};
use crate::proc::{probe, wait_ready};
use crate::report::{summary_table, Report};

/// `trove bench compare`.
#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    /// Proxies to measure, in order (trove, squid, varnish, nginx, trafficserver).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "trove,squid,varnish,nginx,trafficserver"
    )]
    pub peers: Vec<String>,
    /// The trove binary (default: this program, when it is trove).
    #[arg(long)]
    pub trove_bin: Option<PathBuf>,
    /// Memory cache size of every peer, MiB.
    #[arg(long, default_value_t = 512)]
    pub mem_mb: u64,
    /// Rounds: run the whole list this many times, interleaved (A B C A B C ...).
    #[arg(long, default_value_t = 1)]
    pub rounds: u32,
}

fn default_trove() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let name = exe.file_name()?.to_str()?;
    (name == "trove").then_some(exe)
}

/// Runs the comparison.
pub fn run(a: CompareArgs) -> anyhow::Result<()> {
    let mut w = effective_workload(&a.load)?;
    // Reverse proxies have one upstream: one origin server, every object behind it.
    w.servers.count = 1;
    let origins = OriginSet::start(&w, &a.load.origin_host, a.load.server_threads)?;
    let origin = origins.addrs[0];
    let progs = Programs {
        trove: a.trove_bin.clone().or_else(default_trove),
    };
    let mut reports: Vec<Report> = Vec::new();
    let mut skipped = Vec::new();
    for round in 0..a.rounds.max(1) {
        for name in &a.peers {
            if peers::program(name, &progs).is_none() {
                if round == 0 {
                    eprintln!("compare: skipping {name}: not installed");
                    skipped.push(name.clone());
                }
                continue;
            }
            match measure(name, &progs, &a, origin, &origins) {
                Ok(mut r) => {
                    if a.rounds > 1 {
                        r.label = format!("{name}#{}", round + 1);
                    }
                    print!("{}", r.text());
                    reports.push(r);
                }
                Err(e) => {
                    eprintln!("compare: {name}: {e:#}");
                    skipped.push(format!("{name} (failed: {e})"));
                }
            }
        }
    }
    println!(
        "\nexecutive summary ({}, mode reverse, same origin, same machine):",
        w.name
    );
    print!("{}", summary_table(&reports));
    if !skipped.is_empty() {
        println!("not measured: {}", skipped.join("; "));
    }
    write_outputs(&reports, &a.load)?;
    anyhow::ensure!(!reports.is_empty(), "no proxy could be measured");
    Ok(())
}

fn measure(
    name: &str,
    progs: &Programs,
    a: &CompareArgs,
    origin: std::net::SocketAddr,
    origins: &OriginSet,
) -> anyhow::Result<Report> {
    let mut peer = peers::start(name, progs, origin, a.mem_mb)?;
    let host = origin.to_string();
    let path = format!("/c0ffee/{:016x}.bin", std::process::id());
    let waited = wait_ready(
        &mut peer.child,
        peer.addr,
        &path,
        &host,
        Duration::from_secs(60),
    )?;
    // Check it caches: the second request for a cachable object must not reach the server.
    let first = probe(peer.addr, &path, &host, "cache-check-1")?;
    let second = probe(peer.addr, &path, &host, "cache-check-2")?;
    let caches = first.status == 200 && second.status == 200 && !second.from_server;
    eprintln!(
        "compare: {name} (pid {}) ready at {} after {:.1} s; caches: {}",
        peer.child.pid(),
        peer.addr,
        waited.as_secs_f64(),
        if caches { "yes" } else { "NO" }
    );
    let run = RunArgs {
        load: LoadArgs {
            json: None,
            html: None,
            ..a.load.clone()
        },
        proxy: Some(peer.addr),
        mode: ProxyMode::Reverse,
        label: Some(name.into()),
    };
    let mut w_load = run.clone();
    w_load.load.servers = Some(1);
    let r = execute(&w_load, Some(origins));
    peer.child.stop(Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&peer.child.dir);
    let mut r = r?;
    if !caches {
        r.notes
            .push("the start-up probe saw no hit: this proxy did not cache".into());
    }
    Ok(r)
}

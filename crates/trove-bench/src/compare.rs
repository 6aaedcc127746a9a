//! `trove bench compare`: the same workload against several proxies in turn, each started and
//! stopped by the bench, printed side by side as the cache-off's executive summary.

use std::path::PathBuf;
use std::time::Duration;

use crate::model::Model;
use crate::origin::object_path;
use crate::peers::{self, Programs};
use crate::proc::{probe, wait_ready};
use crate::report::{summary_table, Report};
use crate::run::{
    effective_workload, execute, write_outputs, LoadArgs, OriginSet, ProxyMode, RunArgs,
};
use crate::workload::Workload;

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
            match measure(name, &progs, &a, &w, origin, &origins) {
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

/// World id of the start-up probe's object (never a run's: runs draw 48-bit worlds at random).
pub const PROBE_WORLD: u64 = 0xc0ffee;

/// The path of an object the model marks cachable and small (at most 64 KiB), at or after
/// `from`: the start-up probe asks for it twice, and the second answer must not come from the
/// server. (An arbitrary oid is uncachable one time in five, and a proxy that rightly refetches
/// it would be reported as not caching.)
/// `None` when the mix has (next to) no such objects.
pub fn probe_path(model: &Model, from: u64) -> Option<String> {
    let spec = (from..from.saturating_add(100_000))
        .map(|oid| model.spec(oid))
        .find(|s| s.cachable && s.size <= 64 << 10)?;
    let ext = &model.kinds()[spec.kind].ext;
    Some(object_path(PROBE_WORLD, spec.oid, ext))
}

fn measure(
    name: &str,
    progs: &Programs,
    a: &CompareArgs,
    w: &Workload,
    origin: std::net::SocketAddr,
    origins: &OriginSet,
) -> anyhow::Result<Report> {
    let mut peer = peers::start(name, progs, origin, a.mem_mb)?;
    let host = origin.to_string();
    let cachable = probe_path(&w.model(), u64::from(std::process::id()));
    // Without cachable objects, probe readiness with any object (oid 1).
    let path = cachable
        .clone()
        .unwrap_or_else(|| object_path(PROBE_WORLD, 1, "bin"));
    let waited = wait_ready(
        &mut peer.child,
        peer.addr,
        &path,
        &host,
        Duration::from_secs(60),
    )?;
    // Check it caches: asked again for a cachable object (it was asked for while waiting for
    // readiness), the answer must not come from the server.
    let caches = match cachable {
        Some(_) => {
            let first = probe(peer.addr, &path, &host, "cache-check-1")?;
            let second = probe(peer.addr, &path, &host, "cache-check-2")?;
            Some(first.status == 200 && second.status == 200 && !second.from_server)
        }
        None => None,
    };
    eprintln!(
        "compare: {name} (pid {}) ready at {} after {:.1} s; caches: {}",
        peer.child.pid(),
        peer.addr,
        waited.as_secs_f64(),
        match caches {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "not checked (the workload has no small cachable objects)",
        }
    );
    let run = RunArgs {
        load: LoadArgs {
            json: None,
            html: None,
            ..a.load.clone()
        },
        proxy: vec![peer.addr],
        mode: ProxyMode::Reverse,
        label: Some(name.into()),
    };
    let mut w_load = run.clone();
    w_load.load.servers = Some(1);
    let r = execute(&w_load, Some(origins));
    peer.child.stop(Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&peer.child.dir);
    let mut r = r?;
    if caches == Some(false) {
        r.notes
            .push("the start-up probe saw no hit: this proxy did not cache".into());
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_asks_for_a_small_cachable_object() {
        for name in ["polymix-2", "datacomm-1"] {
            let m = Workload::builtin(name).unwrap().model();
            // Start-up probes of many processes: every one must name a cachable object.
            for pid in (1..50_000u64).step_by(997) {
                let path = probe_path(&m, pid).unwrap();
                let oid = crate::origin::parse_path(&path).unwrap();
                assert!(oid >= pid);
                let spec = m.spec(oid);
                assert!(spec.cachable && spec.size <= 64 << 10, "{name} {path}");
            }
        }
    }
}

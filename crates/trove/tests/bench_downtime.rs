//! `trove bench downtime` against `trove serve`: the bench starts trove, kills it with SIGKILL
//! under load, restarts it with the same command, and sees the first miss and the first hit
//! after the restart, with the requests sent while it was down failing. Memory only, the first
//! hit is a revisit of an object fetched again after the restart; with a disk tier it may be
//! the very first answer, and the bench still waits for a miss.

use clap::Parser;
use trove_bench::{BenchArgs, Command as BenchCommand};

#[derive(Parser)]
struct Top {
    #[command(flatten)]
    bench: BenchArgs,
}

#[test]
fn downtime_test_measures_trove_killed_and_restarted() {
    downtime_of_trove("", 2);
}

#[test]
fn downtime_test_measures_trove_with_a_disk_tier() {
    downtime_of_trove(
        "[cache.disk]\npath = \"{dir}/cache\"\nsize = \"64MiB\"\n",
        4,
    );
}

/// Runs the downtime test on trove with `extra` config (`{dir}` is its directory) and `warm`
/// seconds of load before the kill.
fn downtime_of_trove(extra: &str, warm: u32) {
    let dir = std::env::temp_dir().join(format!(
        "trove-bench-downtime-{}-{}",
        std::process::id(),
        extra.len()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let extra = extra.replace("{dir}", dir.to_str().unwrap());
    // The restarted proxy must listen where the first one did: a fixed port, free a moment ago.
    let port = trove_bench::proc::free_port().unwrap();
    let config = dir.join("trove.toml");
    std::fs::write(
        &config,
        format!(
            "[[listener]]\nlisten = \"127.0.0.1:{port}\"\nmode = \"forward\"\n[cache]\n\
             memory = \"64MiB\"\n[admin]\nlisten = \"\"\n{extra}"
        ),
    )
    .unwrap();
    let argv = [
        "bench",
        "downtime",
        "--proxy",
        &format!("127.0.0.1:{port}"),
        "--rate",
        "20",
        "--warm",
        &warm.to_string(),
        "--down",
        "0.5",
        "--max-wait",
        "30",
        "--quiet",
        "--",
        env!("CARGO_BIN_EXE_trove"),
        "serve",
        "--config",
        config.to_str().unwrap(),
    ];
    let BenchCommand::Downtime(d) = Top::try_parse_from(argv).unwrap().bench.command else {
        panic!("not a downtime command")
    };
    // The bench stops (SIGTERM, then SIGKILL) the proxy it restarted before returning.
    let r = trove_bench::downtime::execute(&d).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = r.text();
    assert!(r.before.hits > 0, "trove cached before the kill:\n{text}");
    assert_eq!(r.before.errors, 0, "{text}");
    assert_ne!(r.killed_pid, r.restarted_pid);
    assert!(
        !std::path::Path::new(&format!("/proc/{}", r.killed_pid)).exists(),
        "the killed proxy is gone"
    );
    assert!(r.ttfm_s.is_some(), "a miss after the restart:\n{text}");
    assert!(r.ttfh_s.is_some(), "a hit after the restart:\n{text}");
    assert!(r.outage_errors > 0, "requests failed while down:\n{text}");
    assert_eq!(r.after.errors, 0, "none failed after recovery:\n{text}");
    assert!(r.after.requests > 0);
    assert_eq!(r.run.total.uncachable_hits, 0);
}

//! Replaying access logs (issue 20): clients are counted whether or not the network model is
//! on; whether `?` URLs are cachable follows whose log it is (trove's own: as trove cached
//! them; another's: seed 003's rule), recognised by default and settable; and a Squid log's
//! time field is the completion, so each request starts `elapsed` earlier.

use std::path::{Path, PathBuf};

use clap::Parser;
use trove_sim::assume::Assume;
use trove_sim::cli::ReplayArgs;
use trove_sim::sweep::Report;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    replay: ReplayArgs,
}

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("trove-sim-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }

    fn file(&self, name: &str, contents: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, contents).unwrap();
        p
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn replay(path: &Path, args: &[&str]) -> Report {
    let mut argv = vec!["sim", path.to_str().unwrap(), "--quiet", "--sizes", "1MiB"];
    argv.extend_from_slice(args);
    trove_sim::cli::replay(&Cli::parse_from(argv).replay).expect("the replay runs")
}

/// Four requests from three clients for a page with a query string, twice each for two of
/// them, logged with `hier` as the hierarchy field of a miss.
fn log(hier: &str) -> String {
    let mut out = String::new();
    for (i, client) in ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.1"]
        .iter()
        .enumerate()
    {
        let (code, h) = if i == 0 {
            ("TCP_MISS", hier)
        } else {
            ("TCP_MEM_HIT", "HIER_NONE/-")
        };
        out.push_str(&format!(
            "{}.000 0 {client} {code}/200 2300 GET http://shop.example/item?id=7 - {h} text/html\n",
            1_700_000_000 + i
        ));
    }
    out
}

#[test]
fn clients_are_counted_without_the_network_model() {
    let dir = Dir::new("clients");
    let path = dir.file("access.log", &log("HIER_DIRECT/shop.example"));
    let r = replay(&path, &[]);
    assert_eq!(r.trace.clients, 3);
    assert!(trove_sim::report::text::render(&r).contains(", 3 clients,"));
    let r = replay(&path, &["--network", "lan"]);
    assert_eq!(r.trace.clients, 3);
}

#[test]
fn query_string_urls_follow_whose_log_it_is() {
    let dir = Dir::new("dynamic");
    // trove names the origin it went to; Squid writes its IP address.
    let trove = dir.file("trove.log", &log("HIER_DIRECT/shop.example"));
    let squid = dir.file("squid.log", &log("HIER_DIRECT/93.184.216.34"));
    let hits = |r: &Report| r.results[0].hits;

    let r = replay(&trove, &[]);
    assert_eq!(r.assumptions.log, Assume::Trove, "recognised");
    assert!(!r.assumptions.dynamic_uncachable);
    assert_eq!(hits(&r), 3, "as trove did: a miss, then hits");
    let text = trove_sim::report::text::render(&r);
    assert!(text.contains("log: trove's own"), "{text}");
    assert!(text.contains("'?'/cgi-bin URLs cachable"), "{text}");

    let r = replay(&squid, &[]);
    assert_eq!(r.assumptions.log, Assume::Other, "not recognised");
    assert!(r.assumptions.dynamic_uncachable);
    assert_eq!(hits(&r), 0, "seed 003's rule");
    assert!(trove_sim::report::text::render(&r).contains("--assume trove"));

    // Said outright, either way.
    assert_eq!(hits(&replay(&squid, &["--assume", "trove"])), 3);
    assert_eq!(hits(&replay(&trove, &["--assume", "other"])), 0);
    assert_eq!(hits(&replay(&squid, &["--cache-dynamic"])), 3);
    assert_eq!(hits(&replay(&trove, &["--cache-dynamic=false"])), 0);
}

/// Squid's time field is when the request completed: a request logged at 100 s after
/// 5 s started at 95 s. With `--freshness 5`, what it stored is stale at 101.5 s, so the
/// next request revalidates (read as the start, it would have been a fresh hit), and the
/// trace spans 6.5 s, not 1.5 s.
#[test]
fn a_squid_log_s_time_is_the_completion() {
    let dir = Dir::new("completion");
    let path = dir.file(
        "access.log",
        "\
100.000   5000 10.0.0.1 TCP_MISS/200 5000 GET http://a.example/big.bin - HIER_DIRECT/a.example -
101.500      0 10.0.0.1 TCP_MEM_HIT/200 5000 GET http://a.example/big.bin - HIER_NONE/- -
",
    );
    let r = replay(&path, &["--freshness", "5"]);
    assert_eq!(r.trace.span_s, 6.5);
    let c = &r.results[0];
    assert_eq!(c.outcomes.get("TCP_MISS"), Some(&1), "{c:?}");
    assert_eq!(c.outcomes.get("TCP_REFRESH_UNMODIFIED"), Some(&1), "{c:?}");
}

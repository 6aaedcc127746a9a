//! Issue 18: a size is a count, never an allocation. An absurd size in a trace (past
//! `trace::MAX_OBJECT_SIZE`, 1 TiB) is a counted bad line in every format, `trove sim
//! convert` included; a large but possible one (a terabyte download, a 4 GiB binary-trace
//! object) is replayed, stored and hit without its bytes ever being allocated. Both
//! aborted the process with "memory allocation failed" before.

mod common;

use common::Dir;
use std::path::Path;

use clap::Parser;
use trove_sim::cli::ReplayArgs;
use trove_sim::sweep::Report;
use trove_sim::trace::oracle;
use trove_sim::SimArgs;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    replay: ReplayArgs,
}

#[derive(Parser)]
struct Sim {
    #[command(flatten)]
    sim: SimArgs,
}

fn replay(path: &Path, args: &[&str]) -> Report {
    let mut argv = vec!["sim", path.to_str().unwrap(), "--quiet"];
    argv.extend_from_slice(args);
    trove_sim::cli::replay(&Cli::parse_from(argv).replay).expect("the replay runs")
}

/// The command, and the same absurd count in a Squid and a CLF log.
#[test]
fn an_absurd_size_is_a_counted_bad_line_in_every_format() {
    let dir = Dir::new("absurd");
    let cases: [(&str, &str); 3] = [
        ("h.csv", "0,1,1000\n1,2,1000000000000000000\n"),
        (
            "access.log",
            "1700000000.000 1 10.0.0.1 TCP_MISS/200 1000 GET http://a.example/1 - HIER_DIRECT/93.184.216.34 -\n\
             1700000001.000 1 10.0.0.1 TCP_MISS/200 99999999999999999 GET http://a.example/2 - HIER_DIRECT/93.184.216.34 -\n",
        ),
        (
            "clf.log",
            "10.0.0.1 - - [10/Oct/2000:13:55:36 -0700] \"GET /1 HTTP/1.0\" 200 1000\n\
             10.0.0.1 - - [10/Oct/2000:13:55:37 -0700] \"GET /2 HTTP/1.0\" 200 99999999999999999\n",
        ),
    ];
    for (name, text) in cases {
        let path = dir.file(name, text.as_bytes());
        for sizes in ["1MiB", "unbounded"] {
            let r = replay(&path, &["--sizes", sizes, "--max-object", "unbounded"]);
            assert_eq!(r.trace.skipped.bad_lines, 1, "{name}");
            assert_eq!(r.trace.skipped.examples[0].0, 2, "{name}: line 2");
            assert_eq!((r.trace.records, r.trace.replayed), (1, 1), "{name}");
            assert_eq!(r.results[0].origin_requests, 1, "{name}");
        }
    }
    // `trove sim convert` reads through the same readers.
    let csv = dir.0.join("h.csv");
    let out = dir.0.join("h.oracleGeneral");
    let sim = Sim::parse_from([
        "sim",
        "convert",
        csv.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    trove_sim::run(sim.sim).expect("the conversion runs");
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(bytes.len(), oracle::RECORD, "the one good line");
    assert_eq!(
        oracle::decode(bytes[..].try_into().unwrap()),
        (0, 1, 1000, -1)
    );
}

/// A terabyte object (a size a log may hold) in an unbounded cache: fetched once, stored,
/// hit, and counted to the byte, with no terabyte allocated (the replay's bodies are
/// size-only). One byte more is a bad line.
#[test]
fn a_terabyte_object_is_replayed_without_its_bytes() {
    let dir = Dir::new("terabyte");
    let tib = 1u64 << 40;
    let path = dir.file(
        "big.csv",
        format!("0,1,{tib}\n1,1,{tib}\n2,2,1000\n3,3,{}\n", tib + 1).as_bytes(),
    );
    let r = replay(
        &path,
        &["--sizes", "unbounded", "--max-object", "unbounded"],
    );
    assert_eq!(r.trace.skipped.bad_lines, 1, "past 1 TiB");
    let c = &r.results[0];
    assert_eq!((c.requests, c.hits, c.origin_requests), (3, 1, 2));
    assert_eq!(c.origin_body_bytes, tib + 1000);
    assert_eq!(c.hit_bytes, tib);
    assert!(c.stored_bytes > tib + 1000, "charged, heads too");
    // Within an ordinary budget it is simply too large to store.
    let r = replay(&path, &["--sizes", "64MiB"]);
    assert_eq!((r.results[0].hits, r.results[0].origin_requests), (0, 3));
}

/// libCacheSim's binary records hold sizes below 4 GiB: the largest is replayed, stored
/// and hit like any other.
#[test]
fn the_largest_binary_trace_object_is_replayed_without_its_bytes() {
    let dir = Dir::new("oracle");
    let mut bin = Vec::new();
    bin.extend_from_slice(&oracle::encode(0, 7, u32::MAX, 1));
    bin.extend_from_slice(&oracle::encode(1, 7, u32::MAX, -1));
    let path = dir.file("big.oracleGeneral", &bin);
    let r = replay(
        &path,
        &["--sizes", "unbounded", "--max-object", "unbounded"],
    );
    for c in &r.results {
        assert_eq!((c.requests, c.hits), (2, 1), "{c:?}");
        assert_eq!(c.origin_body_bytes, u64::from(u32::MAX));
    }
}

//! Issue 19, defect 12: `trove sim` panicked or aborted on bad input. Every bad line is
//! counted and skipped, with bounded memory: a bad line with a multi-byte character where
//! its example is cut (byte 200), a time of `1e300` or past `u64` seconds, and a line of
//! tens of megabytes.

mod common;

use common::Dir;
use std::path::Path;

use clap::Parser;
use trove_sim::cli::ReplayArgs;
use trove_sim::sweep::Report;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    replay: ReplayArgs,
}

fn replay(path: &Path, format: &str) -> Report {
    let argv = vec!["sim", path.to_str().unwrap(), "--quiet", "--format", format];
    trove_sim::cli::replay(&Cli::parse_from(argv).replay).expect("the replay runs")
}

const GOOD1: &str =
    "1700000000.000 1 10.0.0.1 TCP_MISS/200 1000 GET http://a.example/1 - HIER_DIRECT/a -\n";
const GOOD2: &str =
    "1700000001.000 1 10.0.0.1 TCP_MISS/200 1000 GET http://a.example/1 - HIER_DIRECT/a -\n";

/// Before: `byte index 200 is not a char boundary` (the example kept for the report was
/// cut as a `String`).
#[test]
fn issue_19_a_bad_line_with_a_multibyte_character_at_byte_200_is_counted() {
    let dir = Dir::new("multibyte");
    let bad = format!("{}é{}\n", "x".repeat(199), "y".repeat(20));
    let path = dir.file("access.log", format!("{GOOD1}{bad}{GOOD2}").as_bytes());
    let r = replay(&path, "squid");
    assert_eq!(r.trace.skipped.bad_lines, 1);
    assert_eq!(r.trace.skipped.examples[0].0, 2);
    assert!(r.trace.skipped.examples[0].1.len() <= 203);
    assert_eq!(r.trace.replayed, 2);
}

/// Before: `Duration::from_secs_f64` panicked on `1e300`, `SystemTime + Duration` on
/// 9.3e18 s.
#[test]
fn issue_19_absurd_times_are_counted_bad_lines() {
    let dir = Dir::new("times");
    for t in ["1e300", "9.3e18", "18446744073709551615", "100000000001"] {
        let squid = format!(
            "{GOOD1}{t} 1 10.0.0.1 TCP_MISS/200 1000 GET http://a.example/2 - HIER_DIRECT/a -\n{GOOD2}"
        );
        let r = replay(&dir.file("access.log", squid.as_bytes()), "squid");
        assert_eq!(r.trace.skipped.bad_lines, 1, "squid {t}");
        assert_eq!(r.trace.replayed, 2, "squid {t}");
        let csv = format!("0,1,1000\n{t},2,1000\n2,1,1000\n");
        let r = replay(&dir.file("t.csv", csv.as_bytes()), "csv");
        assert_eq!(r.trace.skipped.bad_lines, 1, "csv {t}");
        assert_eq!(r.trace.replayed, 2, "csv {t}");
    }
}

/// This process's resident set, in bytes (Linux).
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Before: the reader held the whole line (a 512 MiB line cost 1.59 GB). A 96 MiB line is
/// counted bad and skipped, the lines around it replayed, and memory grows by far less
/// than the line.
#[test]
fn issue_19_an_overlong_line_is_skipped_with_bounded_memory() {
    let dir = Dir::new("overlong");
    let path = dir.0.join("access.log");
    {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        f.write_all(GOOD1.as_bytes()).unwrap();
        f.write_all(b"1700000000.500 1 10.0.0.1 TCP_MISS/200 1000 GET http://a.example/")
            .unwrap();
        let chunk = vec![b'a'; 1 << 20];
        for _ in 0..96 {
            f.write_all(&chunk).unwrap();
        }
        f.write_all(b" - HIER_DIRECT/a -\n").unwrap();
        f.write_all(GOOD2.as_bytes()).unwrap();
    }
    let before = rss();
    let r = replay(&path, "squid");
    let grown = rss().saturating_sub(before);
    assert_eq!(r.trace.skipped.bad_lines, 1);
    assert_eq!(r.trace.skipped.examples[0].0, 2);
    assert_eq!(r.trace.replayed, 2);
    assert!(grown < 32 << 20, "RSS grew {grown} bytes for a 96 MiB line");
}

//! The ways of replaying faster change no answer: a CSV trace, its `oracleGeneral`
//! conversion (`trove sim convert`) and a sweep split over threads (`--threads`) give the
//! same results, configuration by configuration, under eviction pressure with both policies.

use clap::Parser;
use trove_sim::cli::ReplayArgs;
use trove_sim::replay::ConfigReport;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    replay: ReplayArgs,
}

/// A skewed CSV trace: 4,000 requests over 300 objects of 1–40 KB, a few seconds apart.
fn csv() -> String {
    let mut out = String::from("time,id,size\n");
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for n in 0..4_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let id = ((x >> 8) % 300) * ((x >> 20) % 300) / 300;
        let size = 1_000 + (id * 7_919) % 39_000;
        out.push_str(&format!("{},{id},{size}\n", n * 3));
    }
    out
}

fn replay(args: &[&str]) -> Vec<ConfigReport> {
    let mut argv = vec!["sim"];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&[
        "--sizes",
        "256KiB,1MiB",
        "--policies",
        "lru,s3-fifo",
        "--quiet",
    ]);
    let cli = Cli::parse_from(argv);
    let r = trove_sim::cli::replay(&cli.replay).expect("the replay runs");
    assert_eq!(r.trace.records, 4_000);
    r.results
}

fn same(a: &[ConfigReport], b: &[ConfigReport], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (x, y) in a.iter().zip(b) {
        let key = |c: &ConfigReport| {
            (
                c.cache_size,
                c.policy,
                c.hits,
                c.hit_bytes,
                c.origin_requests,
                c.evictions,
                c.stored_objects,
                c.stored_bytes,
            )
        };
        assert_eq!(key(x), key(y), "{what}");
    }
}

#[test]
fn csv_oracle_general_and_threads_agree() {
    let dir = std::env::temp_dir().join(format!("trove-sim-fast-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv_path = dir.join("t.csv");
    std::fs::write(&csv_path, csv()).unwrap();
    let csv_path = csv_path.to_str().unwrap();
    let bin_path = dir.join("t.oracleGeneral");

    let mut reader = trove_sim::trace::Format::Csv.reader(
        std::io::BufReader::new(std::fs::File::open(csv_path).unwrap()),
        "http://localhost",
    );
    let mut out = std::io::BufWriter::new(std::fs::File::create(&bin_path).unwrap());
    let done = trove_sim::trace::oracle::convert(&mut *reader, &mut out).unwrap();
    drop(out);
    assert_eq!(done.records, 4_000);

    let from_csv = replay(&[csv_path]);
    assert!(
        from_csv.iter().all(|c| c.evictions > 0 && c.hits > 0),
        "under pressure: {from_csv:?}"
    );
    let from_bin = replay(&[bin_path.to_str().unwrap()]);
    same(&from_csv, &from_bin, "oracleGeneral");
    let threaded = replay(&[csv_path, "--threads", "3"]);
    same(&from_csv, &threaded, "three threads");
    let _ = std::fs::remove_dir_all(&dir);
}

//! `trove sim --nodes N --mode shard|independent` (issue 24): a modelled cluster. Shards
//! placed by rendezvous hashing (as `trove serve` places keys) hold one copy of each object,
//! so N shards of size S hit about as one node of size N×S; N independent nodes each see a
//! spread of the clients and keep their own copies, and hit less.

use clap::Parser;
use trove_sim::cli::ReplayArgs;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    replay: ReplayArgs,
}

fn sim(args: &[&str]) -> trove_sim::sweep::Report {
    let mut all = vec![
        "sim",
        "synthetic:polymix-2",
        "--requests",
        "30000",
        "--policies",
        "lru",
        "--quiet",
    ];
    all.extend_from_slice(args);
    trove_sim::cli::replay(&Cli::parse_from(all).replay).unwrap()
}

#[test]
fn three_shards_hit_as_one_node_with_their_memory_and_independent_nodes_less() {
    let big = sim(&["--sizes", "24MiB"]);
    let shard = sim(&["--sizes", "8MiB", "--nodes", "3", "--mode", "shard"]);
    let independent = sim(&["--sizes", "8MiB", "--nodes", "3", "--mode", "independent"]);
    let (b, s, i) = (&big.results[0], &shard.results[0], &independent.results[0]);
    assert_eq!(
        (b.requests, s.requests, i.requests),
        (30_000, 30_000, 30_000)
    );
    assert!(
        (b.hit_ratio - s.hit_ratio).abs() < 0.01
            && (b.byte_hit_ratio - s.byte_hit_ratio).abs() < 0.01,
        "one node {:.4}/{:.4}, three shards {:.4}/{:.4}",
        b.hit_ratio,
        b.byte_hit_ratio,
        s.hit_ratio,
        s.byte_hit_ratio
    );
    assert!(
        i.hit_ratio + 0.03 < s.hit_ratio,
        "independent {:.4} shard {:.4}",
        i.hit_ratio,
        s.hit_ratio
    );
    let c = shard.cluster.as_ref().expect("the cluster is reported");
    assert_eq!((c.nodes, c.mode), (3, "shard"));
    assert_eq!(c.requests_per_node.iter().sum::<u64>(), 30_000);
    assert!(
        c.requests_per_node.iter().all(|&n| n > 8_000),
        "{:?}",
        c.requests_per_node
    );
    assert!(big.cluster.is_none());
    let text = trove_sim::report::text::render(&shard);
    assert!(text.contains("a cluster of 3 nodes, shard mode"), "{text}");
}

#[test]
fn a_bad_mode_or_a_disk_tier_is_refused() {
    let cli = Cli::parse_from([
        "sim",
        "synthetic:polymix-2",
        "--nodes",
        "3",
        "--mode",
        "mirror",
        "--quiet",
    ]);
    let e = trove_sim::cli::replay(&cli.replay).unwrap_err().to_string();
    assert!(e.contains("mirror"), "{e}");
    let cli = Cli::parse_from([
        "sim",
        "synthetic:polymix-2",
        "--nodes",
        "2",
        "--disk",
        "1GiB",
        "--quiet",
    ]);
    let e = trove_sim::cli::replay(&cli.replay).unwrap_err().to_string();
    assert!(e.contains("--nodes"), "{e}");
}

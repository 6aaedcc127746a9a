//! What journaling adds to acknowledging an invalidation: the time from making a rule to
//! its acknowledgement (`Invalidations::add` then `durable`), with the disk tier's journal
//! (an `fdatasync` per acknowledgement, shared by concurrent callers) and without one
//! (memory only), one caller and several at once.
//!
//! `cargo run --release -p trove-disk --example journal_ack -- DIR [ACKS] [THREADS]`
//! (DIR on the disk to measure: a tmpfs would make `fdatasync` free).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use trove_disk::{DiskConfig, DiskStore, Tiered};
use trove_store::hash::key_hash;
use trove_store::invalidation::{Mode, Selector};
use trove_store::{EvictionKind, Invalidations, MemoryStore, Storage};

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// `acks` acknowledgements from each of `threads` callers; every latency.
fn run(inv: &Arc<Invalidations>, acks: usize, threads: usize) -> (Vec<Duration>, Duration) {
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let inv = Arc::clone(inv);
            std::thread::spawn(move || {
                let mut lat = Vec::with_capacity(acks);
                for i in 0..acks {
                    let t0 = Instant::now();
                    let url = format!("http://example.com/{t}/{i}");
                    let seq = inv.add(Selector::Key(key_hash(&url)), Mode::Hard, SystemTime::now());
                    inv.durable(seq).expect("durable");
                    lat.push(t0.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.join().expect("thread"));
    }
    (all, started.elapsed())
}

fn report(what: &str, threads: usize, (mut lat, wall): (Vec<Duration>, Duration)) {
    let n = lat.len();
    println!(
        "{what:<22} threads={threads} acks={n} median={:?} p99={:?} acks/s={:.0}",
        pct(&mut lat, 0.5),
        pct(&mut lat, 0.99),
        n as f64 / wall.as_secs_f64()
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().expect("a directory on the disk to measure"));
    let acks: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let threads: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(4);
    let _ = std::fs::remove_dir_all(&dir);
    let memory = MemoryStore::new(64 << 20, 16, 1 << 20, EvictionKind::Lru);
    let disk = DiskStore::open(DiskConfig::new(&dir, 64 << 20)).expect("open");
    let tiered = Tiered::new(memory, disk);
    assert!(tiered.disk().wait_ready(Duration::from_secs(30)));
    let journaled = Arc::clone(tiered.invalidations().expect("a rule log"));
    let plain = Arc::new(Invalidations::new());
    for round in 0..3 {
        println!("round {round}");
        report("memory only", 1, run(&plain, acks, 1));
        report("journaled (fdatasync)", 1, run(&journaled, acks, 1));
        report("memory only", threads, run(&plain, acks, threads));
        report(
            "journaled (fdatasync)",
            threads,
            run(&journaled, acks, threads),
        );
    }
    let s = tiered.disk().stats();
    println!(
        "journal: {} syncs, {:.1} us each on average, {} bytes",
        s.journal_syncs,
        s.journal_sync_nanos as f64 / s.journal_syncs.max(1) as f64 / 1e3,
        s.journal_bytes
    );
    drop(tiered);
    let _ = std::fs::remove_dir_all(&dir);
}

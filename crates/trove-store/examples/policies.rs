//! Replays a libCacheSim `oracleGeneral` trace through trove's eviction policies alone (no
//! HTTP, no store: byte accounting as libCacheSim's `cachesim` does it, nothing charged but
//! each object's size), to compare policies and their parameters quickly. `trove sim`
//! replays the same traces through the whole cache; `bench/hitratio` compares both with
//! libCacheSim.
//!
//! cargo run --release -p trove-store --example policies -- TRACE SIZE_BYTES... [--policies lru,sieve]

use std::io::Read;

use trove_store::hash::FastMap;
use trove_store::{Eviction, EvictionKind};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut policies: Vec<String> = EvictionKind::ALL
        .iter()
        .map(|k| k.as_str().to_string())
        .collect();
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--policies" {
            let list = it.next().expect("--policies takes a list");
            policies = list.split(',').map(str::to_string).collect();
        } else {
            rest.push(a.clone());
        }
    }
    let (path, sizes) = rest.split_first().expect("TRACE SIZE...");
    let mut data = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut data))
        .expect("a readable trace");
    // oracleGeneral: u32 time, u64 id, u32 size, i64 next access; little-endian.
    let reqs: Vec<(u64, u64)> = data
        .chunks_exact(24)
        .map(|r| {
            let id = u64::from_le_bytes(r[4..12].try_into().expect("8 bytes"));
            let size = u32::from_le_bytes(r[12..16].try_into().expect("4 bytes"));
            (id, u64::from(size))
        })
        .filter(|(_, s)| *s > 0)
        .collect();
    println!("| cache bytes | policy | hit % | byte hit % |");
    println!("|---|---|---|---|");
    for size in sizes {
        let capacity: u64 = size.parse().expect("a size in bytes");
        for name in &policies {
            let (h, bh) = run(build(name, capacity), capacity, &reqs);
            println!(
                "| {capacity} | {name} | {:.2} | {:.2} |",
                h * 100.0,
                bh * 100.0
            );
        }
    }
}

fn build(name: &str, capacity: u64) -> Box<dyn Eviction> {
    EvictionKind::parse(name)
        .expect("a policy name")
        .build(capacity)
}

fn run(mut p: Box<dyn Eviction>, capacity: u64, reqs: &[(u64, u64)]) -> (f64, f64) {
    // trace id -> (policy id, size)
    let mut stored: FastMap<u64, (u64, u64)> = FastMap::default();
    let mut by_pid: FastMap<u64, u64> = FastMap::default();
    let (mut bytes, mut next) = (0u64, 1u64);
    let (mut hits, mut hit_bytes, mut all_bytes) = (0u64, 0u64, 0u64);
    for &(id, size) in reqs {
        all_bytes += size;
        if let Some(&(pid, _)) = stored.get(&id) {
            p.touch(pid);
            hits += 1;
            hit_bytes += size;
            continue;
        }
        if size > capacity / 2 || !p.admits(id, size) {
            continue;
        }
        while bytes + size > capacity {
            let Some(v) = p.victim() else { break };
            if let Some(tid) = by_pid.remove(&v) {
                if let Some((_, s)) = stored.remove(&tid) {
                    bytes -= s;
                }
            }
        }
        p.insert(next, id, size);
        stored.insert(id, (next, size));
        by_pid.insert(next, id);
        bytes += size;
        next += 1;
    }
    let n = reqs.len().max(1) as f64;
    (hits as f64 / n, hit_bytes as f64 / all_bytes.max(1) as f64)
}

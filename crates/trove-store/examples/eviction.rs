//! Compares the eviction policies on synthetic request streams through the real
//! `MemoryStore`: a skewed (Zipf) and a uniform popularity, several cache sizes.
//!
//! cargo run --release -p trove-store --example eviction

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::{Distribution, Exp, Zipf};
use trove_store::{Body, EvictionKind, MemoryStore, Object, ObjectHead, Storage};

const OBJECTS: u64 = 200_000;
const REQUESTS: usize = 2_000_000;

fn size_of(id: u64, seed: u64) -> usize {
    // Deterministic per object: exponential sizes around 8 KB, like PolyMix's mix.
    let mut rng = StdRng::seed_from_u64(id ^ seed.rotate_left(17));
    let exp = Exp::new(1.0 / 8192.0).expect("valid");
    (exp.sample(&mut rng) as usize).clamp(64, 1 << 20)
}

fn head() -> ObjectHead {
    ObjectHead {
        status: StatusCode::OK,
        headers: HeaderMap::new(),
        request_headers: HeaderMap::new(),
        request_time: SystemTime::UNIX_EPOCH,
        response_time: SystemTime::UNIX_EPOCH,
        prepared: Default::default(),
        labels: Default::default(),
    }
}

fn run(kind: EvictionKind, stream: &[u64], capacity: u64, body: &Bytes) -> (f64, f64) {
    let store = MemoryStore::new(capacity, 1, capacity, kind);
    let (mut hits, mut hit_bytes, mut bytes) = (0u64, 0u64, 0u64);
    for &id in stream {
        let key = format!("http://o/{id}");
        let size = size_of(id, 1);
        bytes += size as u64;
        let found = store.lookup(&key);
        if let Some(obj) = found.first() {
            store.touch(obj);
            hits += 1;
            hit_bytes += size as u64;
        } else {
            let b = Body::complete(body.slice(..size));
            let _ = store.insert(Object::new(key, String::new(), head(), Arc::clone(&b)));
        }
    }
    (
        hits as f64 / stream.len() as f64,
        hit_bytes as f64 / bytes as f64,
    )
}

fn main() {
    let body = Bytes::from(vec![0u8; 1 << 20]);
    let mut rng = StdRng::seed_from_u64(42);
    let working_set: u64 = (0..OBJECTS).map(|id| size_of(id, 1) as u64).sum();
    let zipf = Zipf::new(OBJECTS, 0.9).expect("valid");
    let skewed: Vec<u64> = (0..REQUESTS)
        .map(|_| zipf.sample(&mut rng) as u64 - 1)
        .collect();
    let uniform: Vec<u64> = (0..REQUESTS).map(|_| rng.gen_range(0..OBJECTS)).collect();
    println!(
        "{OBJECTS} objects ({:.0} MiB), {REQUESTS} requests per run",
        working_set as f64 / (1 << 20) as f64
    );
    println!("| workload | cache size | policy | hit ratio | byte hit ratio | run time |");
    println!("|---|---|---|---|---|---|");
    for (name, stream) in [("zipf(0.9)", &skewed), ("uniform", &uniform)] {
        for frac in [0.01, 0.05, 0.20] {
            let capacity = (working_set as f64 * frac) as u64;
            for kind in [EvictionKind::Lru, EvictionKind::S3Fifo] {
                let t = Instant::now();
                let (h, bh) = run(kind, stream, capacity, &body);
                println!(
                    "| {name} | {:.0}% | {} | {:.2}% | {:.2}% | {:.1} s |",
                    frac * 100.0,
                    kind.as_str(),
                    h * 100.0,
                    bh * 100.0,
                    t.elapsed().as_secs_f64()
                );
            }
        }
    }
}

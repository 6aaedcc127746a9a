//! Which hash for which job: times SipHash-1-3 (`std`'s `DefaultHasher`), foldhash and XXH3
//! over URL-like cache keys, and a map lookup with each as the map's hasher.
//!
//! `cargo run --release -p trove-store --example hashers`
//!
//! The store uses XXH3 where a hash must be stable (persisted, compared across processes)
//! and foldhash for in-memory maps; the figures this prints are in BENCHMARKS.md.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::hint::black_box;
use std::time::Instant;

fn keys(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            format!(
                "http://www{}.example.com/assets/{}/img{}.png?v={}",
                i % 97,
                i % 1013,
                i,
                i * 7
            )
        })
        .collect()
}

fn time_hash(name: &str, keys: &[String], rounds: usize, f: impl Fn(&str) -> u64) {
    let start = Instant::now();
    let mut acc = 0u64;
    for _ in 0..rounds {
        for k in keys {
            acc = acc.wrapping_add(f(black_box(k)));
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / (rounds * keys.len()) as f64;
    println!("hash    {name:<10} {ns:>6.1} ns/key  ({acc:x})");
}

fn time_map<S: BuildHasher + Default>(name: &str, keys: &[String], rounds: usize) {
    let mut m: HashMap<&str, usize, S> = HashMap::with_hasher(S::default());
    for (i, k) in keys.iter().enumerate() {
        m.insert(k, i);
    }
    let start = Instant::now();
    let mut acc = 0usize;
    for _ in 0..rounds {
        for k in keys {
            acc = acc.wrapping_add(*m.get(black_box(k.as_str())).unwrap_or(&0));
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / (rounds * keys.len()) as f64;
    println!("lookup  {name:<10} {ns:>6.1} ns/key  ({acc})");
}

#[derive(Default)]
struct Xxh3Build;
struct Xxh3Hasher(xxhash_rust::xxh3::Xxh3);
impl BuildHasher for Xxh3Build {
    type Hasher = Xxh3Hasher;
    fn build_hasher(&self) -> Xxh3Hasher {
        Xxh3Hasher(xxhash_rust::xxh3::Xxh3::new())
    }
}
impl Hasher for Xxh3Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    fn finish(&self) -> u64 {
        self.0.digest()
    }
}

fn main() {
    let keys = keys(100_000);
    let rounds = 20;
    let sip = std::collections::hash_map::RandomState::new();
    let fold = foldhash::fast::RandomState::default();
    println!(
        "{} URL keys, mean length {} bytes, {rounds} rounds",
        keys.len(),
        keys.iter().map(String::len).sum::<usize>() / keys.len()
    );
    time_hash("siphash", &keys, rounds, |k| sip.hash_one(k));
    time_hash("foldhash", &keys, rounds, |k| fold.hash_one(k));
    time_hash("xxh3", &keys, rounds, trove_store::hash::key_hash);
    time_map::<std::collections::hash_map::RandomState>("siphash", &keys, rounds);
    time_map::<foldhash::fast::RandomState>("foldhash", &keys, rounds);
    time_map::<Xxh3Build>("xxh3", &keys, rounds);
}

//! What the tag index costs (BENCHMARKS.md, "Admin API"): heap bytes per object with 0, 1
//! and 4 tags (a named cache counts as one), the time to record a tag invalidation covering
//! a million objects, and the background sweep that applies it.
//!
//! `cargo run --release -p trove-store --example tag_index [OBJECTS]`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use trove_store::invalidation::{tag_hash, Mode, Selector};
use trove_store::{Body, EvictionKind, Labels, MemoryStore, Object, ObjectHead, Storage};

/// Counts live heap bytes.
struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is forwarded unchanged to `System`, which upholds `GlobalAlloc`'s
// contract; the counter is only arithmetic on the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, Ordering::Relaxed);
        // SAFETY: same layout as given to us.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as i64, Ordering::Relaxed);
        // SAFETY: `p` came from `System.alloc` with this layout.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn head(tags: &[u64]) -> ObjectHead {
    ObjectHead {
        status: StatusCode::OK,
        headers: HeaderMap::new(),
        request_headers: HeaderMap::new(),
        request_time: SystemTime::UNIX_EPOCH,
        response_time: SystemTime::UNIX_EPOCH,
        prepared: Default::default(),
        labels: Labels::new(tags.to_vec(), None, 0),
    }
}

fn fill(n: u64, tags_per: usize) -> (MemoryStore, i64) {
    let before = LIVE.load(Ordering::Relaxed);
    let store = MemoryStore::new(64 << 30, 16, 1 << 20, EvictionKind::S3Fifo);
    let body = Bytes::from_static(b"o");
    for i in 0..n {
        let tags: Vec<u64> = (0..tags_per)
            .map(|k| match k {
                0 => tag_hash("all"),
                k => tag_hash(&format!("g{k}-{}", i % 1000)),
            })
            .collect();
        let obj = Object::new(
            format!("http://bench/f/{i}"),
            String::new(),
            head(&tags),
            Body::complete(body.clone()),
        );
        store.insert(obj).expect("fits");
    }
    (store, LIVE.load(Ordering::Relaxed) - before)
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("objects"))
        .unwrap_or(1_000_000);
    let (s0, base) = fill(n, 0);
    drop(s0);
    println!(
        "{n} objects, no tags: {:.1} bytes/object",
        base as f64 / n as f64
    );
    for tags in [1usize, 4] {
        let (store, bytes) = fill(n, tags);
        println!(
            "{n} objects, {tags} tag(s): {:.1} bytes/object, of which tags {:.1} ({:.1} per tag)",
            bytes as f64 / n as f64,
            (bytes - base) as f64 / n as f64,
            (bytes - base) as f64 / n as f64 / tags as f64
        );
        let inv = Arc::clone(store.invalidations().expect("kept"));
        assert_eq!(inv.members(tag_hash("all"), 0).0, n);
        // Acknowledging: one rule appended, whatever it covers.
        let mut times = Vec::new();
        for k in 0..5 {
            let t = Instant::now();
            let sel = if k == 0 {
                Selector::Tag(tag_hash("all"))
            } else {
                Selector::Tag(tag_hash(&format!("other{k}")))
            };
            inv.add(sel, Mode::Hard, SystemTime::now());
            times.push(t.elapsed().as_nanos());
        }
        println!("  recording a tag invalidation covering {n} objects: {times:?} ns (5 calls)");
        let t = Instant::now();
        let r = inv.sweep(&store, SystemTime::UNIX_EPOCH);
        println!(
            "  background sweep applying it: {:.0} ms ({} checked, {} removed)",
            t.elapsed().as_secs_f64() * 1000.0,
            r.checked,
            r.removed
        );
    }
}

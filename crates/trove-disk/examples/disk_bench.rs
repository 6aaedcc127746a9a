//! Measures the disk tier as a library: write throughput, index bytes per object, the time
//! the index takes to come back after a stop (the writer's state at a `kill -9`: the open
//! region unsealed), and the hit ratio of FIFO against FIFO with reinsertion.
//!
//! ```text
//! cargo run --release -p trove-disk --example disk_bench -- write DIR OBJECTS BODY_BYTES
//! cargo run --release -p trove-disk --example disk_bench -- recover DIR OBJECTS BODY_BYTES
//! cargo run --release -p trove-disk --example disk_bench -- policies DIR
//! ```
//!
//! `write` fills a fresh cache directory sized for the objects and stops without sealing the
//! open region; `recover` reopens it and reports how long the index took to come back and
//! checks a sample of objects byte for byte. `policies` replays a Zipf(0.9) request stream
//! over a working set three times the disk: a miss writes the object; a hit reads it.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use rand::SeedableRng;
use rand_distr::{Distribution, Zipf};
use trove_disk::{DiskConfig, DiskStore, LoadedBody, Reclaim};
use trove_store::{Body, Object, ObjectHead};

fn head() -> ObjectHead {
    let mut headers = HeaderMap::new();
    headers.insert("cache-control", HeaderValue::from_static("max-age=3600"));
    headers.insert("content-type", HeaderValue::from_static("text/plain"));
    ObjectHead {
        status: StatusCode::OK,
        headers,
        request_headers: HeaderMap::new(),
        request_time: SystemTime::now(),
        response_time: SystemTime::now(),
        prepared: Default::default(),
        labels: Default::default(),
    }
}

fn key(i: u64) -> String {
    format!("http://origin.example/objects/{i}")
}

fn body(i: u64, n: usize) -> Bytes {
    let mut b = vec![0u8; n];
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for v in b.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *v = x as u8;
    }
    Bytes::from(b)
}

fn config(dir: &PathBuf, objects: u64, body_bytes: u64) -> DiskConfig {
    // Room for every object (record ~ body + key + head + 64) and a spare region or three,
    // in whole MiB (so a `trove serve` config can name the same size: `budget_mib` MiB).
    let budget = budget_mib(objects, body_bytes) << 20;
    DiskConfig {
        queue_bytes: 256 << 20,
        ..DiskConfig::new(dir, budget)
    }
}

/// The budget `write` and `recover` use, in MiB (printed by `write`).
fn budget_mib(objects: u64, body_bytes: u64) -> u64 {
    (objects * (body_bytes + 256) * 11 / 10)
        .max(64 << 20)
        .div_ceil(1 << 20)
}

fn write(dir: PathBuf, objects: u64, body_bytes: u64) {
    let _ = std::fs::remove_dir_all(&dir);
    let d = DiskStore::open(config(&dir, objects, body_bytes)).expect("open");
    assert!(d.wait_ready(Duration::from_secs(60)));
    let h = head();
    let started = Instant::now();
    for i in 0..objects {
        let o = Object::new(
            key(i),
            String::new(),
            h.clone(),
            Body::complete(body(i, body_bytes as usize)),
        );
        while !d.write(&o) {
            // The queue is full: let the writer catch up (a proxy would drop the write).
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    d.flush();
    let secs = started.elapsed().as_secs_f64();
    let s = d.stats();
    println!(
        "write: {objects} objects of {body_bytes} B in {secs:.2} s: {:.0} objects/s, {:.0} MB/s written; \
         index {} B = {:.1} B/object; dropped {}; [cache.disk] size = \"{}MiB\"",
        objects as f64 / secs,
        s.write_bytes as f64 / secs / 1e6,
        s.index_bytes,
        s.index_bytes as f64 / s.objects.max(1) as f64,
        s.writes_dropped,
        budget_mib(objects, body_bytes)
    );
    // Stop without sealing: what a kill -9 leaves (records are in the file already).
    drop(d);
}

fn recover(dir: PathBuf, objects: u64, body_bytes: u64) {
    let started = Instant::now();
    let d = DiskStore::open(config(&dir, objects, body_bytes)).expect("open");
    let opened = started.elapsed();
    // The first miss could be served now; a hit on each probe once it is back (recovery
    // goes newest first: the last written comes back first, the first written last).
    let probes = [objects - 1, objects / 2, 0].map(key);
    let mut found: [Option<Duration>; 3] = [None; 3];
    while found.iter().any(Option::is_none) {
        for (p, f) in probes.iter().zip(found.iter_mut()) {
            if f.is_none() && d.may_hold(p, None) {
                *f = Some(started.elapsed());
            }
        }
        if d.has_failed() {
            panic!("failed");
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    let ms = |f: Option<Duration>| f.map_or(0.0, |d| d.as_secs_f64() * 1e3);
    assert!(d.wait_ready(Duration::from_secs(600)));
    let ready = started.elapsed();
    let s = d.stats();
    let mut checked = 0;
    for i in (0..objects).step_by((objects / 1000).max(1) as usize) {
        let mut l = d.load(&key(i), u64::MAX, None);
        let got = l.pop().expect("object recovered");
        let LoadedBody::Whole(b) = got.body else {
            panic!("whole")
        };
        assert!(b == body(i, body_bytes as usize), "object {i} differs");
        checked += 1;
    }
    println!(
        "recover: {} objects; open {:.1} ms, findable: the newest object {:.1} ms, a middle one {:.1} ms, \
         the oldest {:.1} ms; index complete {:.1} ms (recovery {:.1} ms); index {:.1} B/object; corrupt {}; \
         {checked} sampled objects byte for byte",
        s.objects,
        opened.as_secs_f64() * 1e3,
        ms(found[0]),
        ms(found[1]),
        ms(found[2]),
        ready.as_secs_f64() * 1e3,
        s.recovery_micros as f64 / 1e3,
        s.index_bytes as f64 / s.objects.max(1) as f64,
        s.corrupt
    );
}

fn policies(dir: PathBuf) {
    let objects = 30_000u64;
    let size = 2_000usize;
    for policy in [Reclaim::Fifo, Reclaim::FifoReinsert] {
        let d = dir.join(policy.as_str());
        let _ = std::fs::remove_dir_all(&d);
        let store = DiskStore::open(DiskConfig {
            region_size: 1 << 20,
            reclaim: policy,
            ..DiskConfig::new(&d, objects * size as u64 / 3)
        })
        .expect("open");
        assert!(store.wait_ready(Duration::from_secs(60)));
        let mut rng = rand::rngs::StdRng::seed_from_u64(42);
        let zipf = Zipf::new(objects, 0.9).unwrap();
        let h = head();
        let (mut hits, mut reqs) = (0u64, 0u64);
        for n in 0..400_000u64 {
            let i = zipf.sample(&mut rng) as u64;
            let k = key(i);
            let hit = !store.load(&k, u64::MAX, None).is_empty();
            if n >= 100_000 {
                reqs += 1;
                hits += u64::from(hit);
            }
            if !hit {
                let o = Object::new(k, String::new(), h.clone(), Body::complete(body(i, size)));
                while !store.write(&o) {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            if n % 256 == 0 {
                store.flush();
            }
        }
        let s = store.stats();
        println!(
            "policy {}: hit ratio {:.3} over {reqs} requests (after 100,000 warm-up), {} regions reclaimed, {} reinserted",
            policy.as_str(),
            hits as f64 / reqs as f64,
            s.regions_reclaimed,
            s.reinserted
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| -> u64 { args.get(i).and_then(|a| a.parse().ok()).unwrap_or(0) };
    match args.get(1).map(String::as_str) {
        Some("write") => write(PathBuf::from(&args[2]), arg(3), arg(4)),
        Some("recover") => recover(PathBuf::from(&args[2]), arg(3), arg(4)),
        Some("policies") => policies(PathBuf::from(&args[2])),
        _ => eprintln!("usage: disk_bench write|recover DIR OBJECTS BODY_BYTES | policies DIR"),
    }
}

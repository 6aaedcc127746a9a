//! The disk tier through the storage interface alone, as the proxy sees it: a lookup's
//! probe answers "on the lower tier, open it", the handle promotes the key or hands its body
//! back as a file region, and per-object tier state is on the object.

mod common;
use common::Scratch;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use trove_disk::{DiskConfig, DiskStore, Tiered};
use trove_store::{
    Body, EvictionKind, FileOpen, Mark, MemoryStore, Object, ObjectHead, Probe, Storage,
};

fn tempdir(name: &str) -> Scratch {
    Scratch::new("if", name)
}

fn head() -> ObjectHead {
    ObjectHead {
        status: StatusCode::OK,
        headers: HeaderMap::new(),
        request_headers: HeaderMap::new(),
        request_time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000),
        response_time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_001),
        prepared: Default::default(),
        labels: Default::default(),
    }
}

fn key(i: usize) -> String {
    format!("http://example.com/{i}")
}

fn body_of(i: usize, len: usize) -> Bytes {
    Bytes::from(
        (0..len)
            .map(|j| (i * 31 + j / 7) as u8)
            .collect::<Vec<u8>>(),
    )
}

/// Memory of `memory` bytes over a disk of 1 MiB regions, as the storage interface.
fn store(dir: &PathBuf, memory: u64) -> Arc<dyn Storage> {
    let disk = DiskStore::open(DiskConfig {
        region_size: 1 << 20,
        ..DiskConfig::new(dir, 16 << 20)
    })
    .expect("open");
    assert!(disk.wait_ready(Duration::from_secs(30)));
    Arc::new(Tiered::new(
        MemoryStore::new(memory, 1, memory / 2, EvictionKind::Lru),
        disk,
    ))
}

/// Inserts objects `0..n` of `len` bytes, then more until object 0 is on the disk and not
/// in memory (the probe says so).
fn crowd_out(s: &dyn Storage, n: usize, len: usize) {
    for i in 0..n {
        let o = Object::new(
            key(i),
            String::new(),
            head(),
            Body::complete(body_of(i, len)),
        );
        s.insert(o).unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !matches!(s.probe(&key(0)), Probe::Lower(_)) {
        assert!(
            std::time::Instant::now() < deadline,
            "object 0 never reached the disk"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_probe_answers_lower_and_its_load_promotes_the_key() {
    let dir = tempdir("promote");
    let s = store(&dir, 64 << 10);
    crowd_out(&*s, 100, 2000);
    assert!(s.lookup(&key(0)).is_empty(), "not in memory");
    let Probe::Lower(lower) = s.probe(&key(0)) else {
        unreachable!("crowd_out waited for it");
    };
    // A small body arrives whole: nothing is left to fill.
    assert!(lower.load(None).is_empty());
    let found = s.lookup(&key(0));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].body.complete_bytes(), Some(body_of(0, 2000)));
    // On disk as it is: its eviction writes nothing again, and the mark says so.
    assert!(found[0].marks().has(Mark::OnLower));
    assert!(!found[0].marks().has(Mark::Promoting));
    assert!(matches!(s.probe(&key(0)), Probe::Upper), "in memory now");
    assert!(matches!(s.probe("http://example.com/none"), Probe::Upper));
    assert!(s.lower_stats().is_some_and(|d| d.hits >= 1 && !d.failed));
}

#[test]
fn a_probe_hands_back_a_large_body_as_a_verified_file_region() {
    let dir = tempdir("file");
    let s = store(&dir, 512 << 10);
    let len = 100_000;
    crowd_out(&*s, 12, len);
    let Probe::Lower(lower) = s.probe(&key(0)) else {
        unreachable!("crowd_out waited for it");
    };
    assert!(
        lower.open_file(len as u64 + 1, None).is_none(),
        "smaller than asked"
    );
    let hit = lower.open_file(64 << 10, None).expect("on disk, whole");
    assert_eq!(hit.body.len(), len as u64);
    assert_eq!(hit.head.status, StatusCode::OK);
    assert_eq!(hit.body.read(0, len as u64).unwrap(), body_of(0, len));
    // The send runs under the tier's pin, with the file and the body's offset.
    let (_fd, offset) = hit.body.file();
    assert!(offset > 0);
    assert_eq!(hit.body.pinned(&mut || Ok(7)).unwrap(), 7);
    // Verified once: now opened without blocking when its head is in the page cache.
    assert!(matches!(
        lower.open_file_now(64 << 10, None),
        FileOpen::Found(_) | FileOpen::WouldBlock
    ));
    // Not promoted by any of that.
    assert!(s.lookup(&key(0)).is_empty());
}

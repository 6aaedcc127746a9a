//! Issue 19, defect 2: a disk whose reads fail (EIO, as a device that shrank under its file
//! system) drops what it can no longer read. A large object read from its fragments that
//! fails a read leaves the tier's lookups at once, so the next request is a miss that asks
//! the origin, instead of failing at the same offset on every request until a restart.
//! (A binary of its own: the read-fault switch is process-wide.)

mod common;
use common::Scratch;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use trove_disk::{crashlog, DiskConfig, DiskStore, Tiered};
use trove_store::{Body, BodyError, EvictionKind, MemoryStore, Object, ObjectHead, Storage};

const KEY: &str = "http://example.com/big";

fn big() -> Bytes {
    (0..3_000_000u32)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

fn config(dir: &std::path::Path) -> DiskConfig {
    DiskConfig {
        region_size: 1 << 20,
        ..DiskConfig::new(dir, 16 << 20)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_19_a_large_object_the_disk_cannot_read_leaves_the_lookups() {
    let dir = Scratch::new("readfault", "large");
    {
        let d = DiskStore::open(config(&dir)).unwrap();
        assert!(d.wait_ready(Duration::from_secs(30)));
        let head = ObjectHead {
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            request_headers: HeaderMap::new(),
            request_time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000),
            response_time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_001),
            prepared: Default::default(),
            labels: Default::default(),
        };
        // Larger than a region: written as fragments and a head.
        assert!(d.write(&Object::new(
            KEY.into(),
            String::new(),
            head,
            Body::complete(big())
        )));
        d.flush();
    }
    let d = DiskStore::open(config(&dir)).unwrap();
    assert!(d.wait_ready(Duration::from_secs(30)));
    let tiered = std::sync::Arc::new(Tiered::new(
        MemoryStore::new(4 << 20, 4, 1 << 20, EvictionKind::Lru),
        d,
    ));
    let t = std::sync::Arc::clone(&tiered);
    let fills = tokio::task::spawn_blocking(move || t.promote(KEY))
        .await
        .unwrap();
    assert!(
        fills.is_empty(),
        "read from its fragments, not promoted whole"
    );
    let found = tiered.lookup(KEY);
    assert_eq!(found.len(), 1, "a hit from its fragments");
    let obj = found[0].clone();
    assert!(obj.body.has_spool());
    // A first reader gets its first bytes.
    let mut r = obj.body.reader(0);
    assert!(matches!(r.next().await, Some(Ok(b)) if !b.is_empty()));
    // The device fails: the next read errors (the reader is detached, never given bytes).
    crashlog::fail_reads(true);
    let mut r = obj.body.reader(0);
    let got = r.next().await;
    crashlog::fail_reads(false);
    assert!(
        matches!(got, Some(Err(BodyError::Released))),
        "a failed read detaches: {got:?}"
    );
    // Dropped: the next request is a miss (before: found again, and failing again).
    assert!(
        tiered.lookup(KEY).is_empty(),
        "an object the disk could not read is still found"
    );
    assert!(tiered.disk().stats().io_errors >= 1, "counted");
    drop(tiered);
}

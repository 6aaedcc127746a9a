//! Serving from the disk tier (`[cache.disk]`), in process over real sockets: disk hits
//! logged and counted apart from memory hits, large disk hits sent with `sendfile(2)` read
//! back byte for byte, a client vanishing mid-send, and a region reclaimed under a slow
//! client.

#[path = "kit/disk.rs"]
mod disk_tier;
mod kit;

use std::time::Duration;

use kit::{
    object_body as body_of, object_path as path, objects_origin as origin, Origin, TempDir, Trove,
};
use trove_proxy::settings::DiskSettings;
use trove_proxy::Settings;

/// A reverse proxy with a memory tier of `memory` bytes over a disk tier in `dir`.
async fn trove(origin: &Origin, dir: &TempDir, memory: u64, region: u64, size: u64) -> Trove {
    let disk = dir.0.join("disk");
    Trove::reverse_over(origin, &disk_tier::DiskTier, move |s: &mut Settings| {
        s.cache.memory = memory;
        s.cache.max_object = memory / 2;
        // Oldest out: what the crowd pushes out of memory is known.
        s.cache.eviction = trove_store::EvictionKind::Lru;
        s.cache.disk = Some(DiskSettings {
            path: vec![disk],
            size,
            sync_interval: Duration::from_millis(100),
            region_size: region,
            reclaim: trove_proxy::settings::Reclaim::Fifo,
            sendfile_min: 64 << 10,
            max_object: 1 << 30,
            on_failure: Default::default(),
        });
    })
    .await
}

/// Waits until the disk index holds at least `n` objects.
async fn on_disk(trove: &Trove, n: usize) {
    assert!(
        kit::eventually(|| trove.metric("trove_disk_objects") >= n as f64).await,
        "{} objects on disk, wanted {n}",
        trove.metric("trove_disk_objects")
    );
}

/// The cache key of the stored object fetched by `path` (in memory).
fn key_of(trove: &Trove, path: &str) -> String {
    let mut key = None;
    trove.running.shared.store.scan(&mut |o| {
        if o.key.ends_with(path) {
            key = Some(o.key.clone());
        }
    });
    key.unwrap_or_else(|| panic!("{path} is not in memory"))
}

/// True when the store answers `key` is not in memory but on the lower tier (the storage
/// interface's probe).
fn on_lower_tier(trove: &Trove, key: &str) -> bool {
    matches!(
        trove.running.shared.store.probe(key),
        trove_store::Probe::Lower(_)
    )
}

/// Fetches other objects of `len` bytes (ids from `first` on) until the memory tier has
/// evicted every object of `paths` and the disk holds them; returns how many it fetched.
async fn crowd_out(trove: &Trove, paths: &[&str], first: usize, len: usize) -> usize {
    let keys: Vec<String> = paths.iter().map(|p| key_of(trove, p)).collect();
    let out = || keys.iter().all(|k| on_lower_tier(trove, k));
    for n in 0..200 {
        if n % 8 == 0 && kit::eventually(out).await {
            return n;
        }
        let r = kit::get(trove, &path(first + n, len), &[]).await;
        assert_eq!(r.status, 200);
    }
    panic!("still in memory after 200 more objects");
}

#[tokio::test]
async fn a_hit_read_from_disk_is_logged_tcp_hit_and_a_memory_hit_tcp_mem_hit() {
    let origin = origin().await;
    let dir = TempDir::new();
    let trove = trove(&origin, &dir, 1 << 20, 256 << 10, 8 << 20).await;
    let small = path(1, 20_000);
    assert_eq!(kit::get(&trove, &small, &[]).await.status, 200);
    assert_eq!(trove.result(0).await, "TCP_MISS/200");
    on_disk(&trove, 1).await;
    let n = 1 + crowd_out(&trove, &[&small], 1000, 60_000).await;
    let before = origin.hits();

    // Out of memory, on disk: read from disk.
    let r = kit::get(&trove, &small, &[]).await;
    assert_eq!(r.body, body_of(1, 20_000));
    assert_eq!(origin.hits(), before, "served from the cache");
    assert_eq!(trove.result(n).await, "TCP_HIT/200");
    assert_eq!(
        r.header("cache-status"),
        Some("trove; hit; detail=disk"),
        "{:?}",
        r.headers
    );
    // Promoted into memory by that read: a memory hit now.
    let r = kit::get(&trove, &small, &[]).await;
    assert_eq!(r.body, body_of(1, 20_000));
    assert_eq!(trove.result(n + 1).await, "TCP_MEM_HIT/200");
    assert_eq!(r.header("cache-status"), Some("trove; hit"));

    let m = trove.metrics();
    assert!(
        m.contains("trove_requests_total{result=\"TCP_HIT\"} 1\n"),
        "{m}"
    );
    assert!(
        m.contains("trove_tier_hits_total{tier=\"disk\"} 1\n"),
        "{m}"
    );
    assert!(
        m.contains("trove_tier_hits_total{tier=\"memory\"} 1\n"),
        "{m}"
    );
    let page = trove_proxy::status::page(&trove.running.shared);
    assert!(page.contains("TCP_HIT") && page.contains("Hits by tier: memory 1, disk 1"));
}

/// A trove whose memory tier (8 MiB) lets 3 MB objects in, over a disk of 4 MiB regions.
async fn big_trove(origin: &Origin, dir: &TempDir, disk_size: u64) -> Trove {
    trove(origin, dir, 8 << 20, 4 << 20, disk_size).await
}

#[tokio::test]
async fn disk_hits_of_100_kb_and_3_mb_are_sent_with_sendfile_byte_for_byte() {
    let origin = origin().await;
    let dir = TempDir::new();
    let trove = big_trove(&origin, &dir, 64 << 20).await;
    let (a, b) = (path(1, 100_000), path(2, 3_000_000));
    kit::get(&trove, &a, &[]).await;
    kit::get(&trove, &b, &[]).await;
    on_disk(&trove, 2).await;
    let n = 2 + crowd_out(&trove, &[&a, &b], 1000, 600_000).await;
    let before = origin.hits();

    // Twice each, on one keep-alive connection: never promoted, sent from the file both times.
    let mut c = trove.client().await;
    for round in 0..2 {
        let r = c.get(&a, &[]).await;
        assert!(r.body == body_of(1, 100_000), "100 KB body, round {round}");
        assert_eq!(r.header("cache-status"), Some("trove; hit; detail=disk"));
        let r = c.get(&b, &[]).await;
        assert!(r.body == body_of(2, 3_000_000), "3 MB body, round {round}");
        assert_eq!(r.header("content-length"), Some("3000000"));
    }
    assert_eq!(origin.hits(), before);
    for i in n..n + 4 {
        assert_eq!(trove.result(i).await, "TCP_HIT/200", "line {i}");
    }
    assert_eq!(trove.metric("trove_disk_sendfile_hits_total"), 4.0);
    assert_eq!(
        trove.metric("trove_disk_sendfile_bytes_total"),
        2.0 * 3_100_000.0
    );
    // A conditional GET answered 304 from the disk copy's head, a HEAD by the ordinary path.
    let r = c.get(&a, &[("if-none-match", "*")]).await;
    assert_eq!(r.status, 304);
    assert_eq!(origin.hits(), before);
}

#[tokio::test]
async fn a_client_that_vanishes_mid_sendfile_leaves_trove_serving() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let origin = origin().await;
    let dir = TempDir::new();
    let trove = big_trove(&origin, &dir, 64 << 20).await;
    let b = path(2, 3_000_000);
    kit::get(&trove, &b, &[]).await;
    on_disk(&trove, 1).await;
    let n = 1 + crowd_out(&trove, &[&b], 1000, 600_000).await;

    for _ in 0..3 {
        let mut s = tokio::net::TcpStream::connect(trove.addr).await.unwrap();
        s.write_all(format!("GET {b} HTTP/1.1\r\nHost: test.local\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut got = vec![0u8; 32 << 10];
        let n = s.read(&mut got).await.unwrap();
        assert!(n > 0);
        drop(s); // Gone with most of the body unsent.
    }
    let r = kit::get(&trove, &b, &[]).await;
    assert!(r.body == body_of(2, 3_000_000));
    assert_eq!(trove.result(n + 3).await, "TCP_HIT/200");
    assert!(trove.metric("trove_disk_sendfile_hits_total") >= 1.0);
}

#[tokio::test]
async fn a_region_reclaimed_under_a_slow_client_gives_it_the_right_bytes_or_a_closed_connection() {
    let origin = origin().await;
    let dir = TempDir::new();
    // Four regions of 4 MiB: a few more objects and the first region is reclaimed.
    let trove = big_trove(&origin, &dir, 16 << 20).await;
    let len = 3_500_000;
    let a = path(1, len);
    kit::get(&trove, &a, &[]).await;
    on_disk(&trove, 1).await;
    // Out of memory as the eviction policy would take it (a crowd large enough to be sure
    // of that would fill this small disk first); its disk copy stays.
    let key = key_of(&trove, &a);
    for o in trove.running.shared.store.lookup(&key) {
        trove
            .running
            .shared
            .store
            .remove_object(&o, trove_store::Removal::Evicted);
    }
    assert!(on_lower_tier(&trove, &key));

    // A client with a small receive window that reads a little, then stops.
    let slow = kit::SlowReader::start(trove.addr, &a, 8192).await;

    // Meanwhile the disk fills and the object's region is reclaimed and rewritten.
    let reclaimed = trove.metric("trove_disk_regions_reclaimed_total");
    for i in 0..40 {
        kit::get(&trove, &path(2000 + i, 600_000), &[]).await;
    }
    assert!(
        kit::eventually(|| trove.metric("trove_disk_regions_reclaimed_total") >= reclaimed + 2.0)
            .await,
        "regions reclaimed: {}",
        trove.metric("trove_disk_regions_reclaimed_total")
    );
    assert!(
        kit::get(&trove, &a, &[("cache-control", "only-if-cached")])
            .await
            .status
            == 504,
        "the object is gone from the cache"
    );

    // Now the slow client reads on, to the end or until the connection closes.
    let body = slow.body(len).await;
    let want = body_of(1, len);
    assert!(body.len() <= len);
    let wrong = body.iter().zip(&want).position(|(x, y)| x != y);
    assert_eq!(wrong, None, "a wrong byte at {wrong:?} of {}", body.len());
    // Which of the two it was depends on how much the kernel had queued before the reclaim.
    eprintln!(
        "slow client got {} of {len} body bytes; sends cut off: {}",
        body.len(),
        trove.metric("trove_disk_sendfile_aborted_total"),
    );
}

/// Issue 20: `/v1/stats` (and `trove stats`) and the status page's store table knew only
/// the memory tier, so objects served from disk were nowhere to be seen.
#[tokio::test]
async fn stats_and_the_status_page_show_every_tier() {
    let origin = origin().await;
    let dir = TempDir::new();
    let trove = trove(&origin, &dir, 1 << 20, 1 << 20, 16 << 20).await;
    for i in 0..5 {
        kit::get(&trove, &path(i, 2000), &[]).await;
    }
    on_disk(&trove, 5).await;
    let shared = &trove.running.shared;
    let stats = trove_proxy::manage::stats(shared);
    let tiers: Vec<&str> = stats.tiers.iter().map(|t| t.tier.as_str()).collect();
    assert_eq!(tiers, ["memory", "disk"]);
    let disk = &stats.tiers[1];
    assert!(disk.objects >= 5, "{disk:?}");
    assert!(disk.bytes > 0 && disk.capacity == 16 << 20, "{disk:?}");
    assert!(disk.ready && !disk.failed, "{disk:?}");
    assert_eq!(stats.tiers[0].objects, stats.objects);
    let page = trove_proxy::status::page(shared);
    assert!(
        page.contains("<tr><td>disk</td>"),
        "no disk row in the store table"
    );
    assert!(page.contains("<tr><td>memory</td>"));
}

//! The disk tier (`[cache.disk]`) in a real `trove serve` child process: killed with
//! SIGKILL mid-load and restarted, its disk damaged, filled past its budget, its directory
//! full or read-only, and shared with a second process.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{
    is_hit, metric, metrics_text, origin_with, target_of, wait_for, TempDir, Tmpfs, Trove,
};

/// A trove child and its two addresses.
struct Running {
    trove: Trove,
    proxy: String,
    admin: String,
}

/// Starts `trove serve`; returns it, or its stderr if it exited before listening.
fn try_start(dir: &Path, config: &str) -> Result<Running, String> {
    let trove = Trove::try_start(dir, config)?;
    let (proxy, admin) = (trove.proxy(), trove.admin());
    Ok(Running {
        trove,
        proxy,
        admin,
    })
}

fn start(dir: &Path, config: &str) -> Running {
    try_start(dir, config).unwrap_or_else(|e| panic!("trove did not start: {e}"))
}

fn kill9(t: &mut Running) {
    t.trove.kill9();
}

fn config(disk: &Path, size: &str, extra: &str) -> String {
    format!(
        "[[listener]]\naddr = \"127.0.0.1:0\"\nmode = \"forward\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [cache]\nmemory = \"1MiB\"\nmax_object = \"256KiB\"\n[cache.disk]\npath = \"{}\"\nsize = \"{size}\"\n\
         region_size = \"256KiB\"\n{extra}",
        disk.display()
    )
}

/// Object `i`'s body: its length and bytes follow from `i`.
fn body_of(i: usize) -> Vec<u8> {
    let n = 500 + (i * 7919) % 20_000;
    let mut x = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// An origin serving `/o/<i>` as `body_of(i)`, cacheable; counts requests.
fn origin() -> (String, Arc<AtomicUsize>) {
    origin_with(|head| {
        let i: usize = target_of(head)
            .rsplit('/')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        common::cacheable(&body_of(i), 3600, None)
    })
}

/// GET `/o/<i>` through trove; `(head, body)`, or `None` if the exchange failed.
fn get(proxy: &str, origin: &str, i: usize) -> Option<(String, Vec<u8>)> {
    let mut s = TcpStream::connect(proxy).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let req = format!(
        "GET http://{origin}/o/{i} HTTP/1.1\r\nHost: {origin}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    let end = out.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&out[..end]).to_string();
    Some((head, out[end + 4..].to_vec()))
}

/// The disk tier's and the store's metrics, for failure messages.
fn metrics(admin: &str) -> String {
    metrics_text(admin)
        .lines()
        .filter(|l| l.starts_with("trove_disk") || l.starts_with("trove_store"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Issue 8: objects written before a `kill -9` are served from disk after the restart,
/// byte for byte; whatever was in flight is either served whole or fetched again, never
/// torn; a record cut short (a power loss mid-write) is dropped and counted.
#[test]
fn kill_9_under_load_then_restart_serves_every_object_byte_for_byte() {
    let dir = TempDir::new("disk-kill9");
    let disk = dir.join("cache");
    let (origin, fetched) = origin();
    let cfg = config(&disk, "32MiB", "");
    let mut t = start(&dir, &cfg);
    // Phase 1: written and acknowledged.
    for i in 0..150 {
        let (_, b) = get(&t.proxy, &origin, i).expect("response");
        assert!(b == body_of(i), "object {i} through the proxy");
    }
    assert!(
        wait_for(Duration::from_secs(10), || metric(
            &t.admin,
            "trove_disk_writes_total"
        ) >= 150.0),
        "150 objects written: {}",
        metrics(&t.admin)
    );
    // Phase 2: load from four clients, killed mid-way.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..4 {
        let (proxy, origin, stop) = (t.proxy.clone(), origin.clone(), stop.clone());
        clients.push(std::thread::spawn(move || {
            let mut i = 150 + c;
            while !stop.load(Ordering::Relaxed) && i < 2_000 {
                let _ = get(&proxy, &origin, i);
                i += 4;
            }
        }));
    }
    assert!(wait_for(Duration::from_secs(10), || fetched
        .load(Ordering::SeqCst)
        > 400));
    kill9(&mut t);
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    // A power loss would also have cut the last write short: cut the data file mid-record.
    // The data file is kept at its full length (sparse); the written part ends at its last
    // byte that is not zero: inside the open region, 100 bytes back is inside its last
    // record (each is over 500 bytes). If the kill came just after a region was sealed,
    // it ends with that region's footer; cutting 100 bytes would only lose the summary (the
    // records behind it are whole and found by a scan), so cut the sealed region in half
    // instead.
    let data = disk.join("regions.dat");
    let bytes = std::fs::read(&data).unwrap();
    let len = bytes
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |p| p as u64 + 1);
    drop(bytes);
    let len = if len % 8 == 0 {
        len
    } else {
        len.next_multiple_of(8)
    };
    let region = 256 * 1024;
    let cut = if len.is_multiple_of(region) {
        len - region / 2
    } else {
        len - 100
    };
    std::fs::OpenOptions::new()
        .write(true)
        .open(&data)
        .unwrap()
        .set_len(cut)
        .unwrap();

    let t = start(&dir, &cfg);
    // Misses are served at once; hits once the index is back.
    assert!(wait_for(Duration::from_secs(10), || metric(
        &t.admin,
        "trove_disk_ready"
    ) == 1.0));
    let before = fetched.load(Ordering::SeqCst);
    for i in 0..150 {
        let (head, b) = get(&t.proxy, &origin, i).expect("response");
        assert!(b == body_of(i), "object {i} after the restart");
        assert!(
            is_hit(&head),
            "object {i} written before the kill is a hit: {head}\n{}",
            metrics(&t.admin)
        );
    }
    assert_eq!(
        fetched.load(Ordering::SeqCst),
        before,
        "no origin fetch for them"
    );
    // Whatever was in flight comes back whole, from disk or the origin.
    let mut hits = 0;
    for i in 150..600 {
        let (head, b) = get(&t.proxy, &origin, i).expect("response");
        assert!(b == body_of(i), "object {i} after the restart");
        hits += usize::from(is_hit(&head));
    }
    assert!(hits > 0, "objects of the load were kept too");
    assert!(
        metric(&t.admin, "trove_disk_corrupt_records_total") >= 1.0,
        "the cut record was counted"
    );
}

/// Issue 8, the crash bound: every object acknowledged (its response complete and the disk
/// tier's write queue took it) survives a `kill -9` that comes `sync_interval` later, and is a
/// hit byte for byte after the restart. Nothing here waits for the disk writer: the test
/// waits the bound itself and kills. (It fails when the writer writes only at a clean stop,
/// or holds writes back longer than the bound: checked by breaking the writer so.)
#[test]
fn kill_9_after_sync_interval_loses_no_acknowledged_object() {
    let dir = TempDir::new("disk-bound");
    let disk = dir.join("cache");
    let (origin, fetched) = origin();
    let bound = Duration::from_millis(500);
    let cfg = config(&disk, "32MiB", "sync_interval = \"500ms\"\n");
    let mut t = start(&dir, &cfg);
    let n = 200;
    for i in 0..n {
        let (_, b) = get(&t.proxy, &origin, i).expect("response");
        assert!(b == body_of(i), "object {i} through the proxy");
    }
    // Each was acknowledged once its body completed (a hair after its client saw the last
    // byte, at most): wait for the count, then the bound.
    assert!(
        wait_for(Duration::from_secs(10), || metric(
            &t.admin,
            "trove_disk_writes_queued_total"
        ) >= n as f64),
        "{n} objects acknowledged: {}",
        metrics(&t.admin)
    );
    assert_eq!(
        metric(&t.admin, "trove_disk_writes_shed_total"),
        0.0,
        "none shed at this rate"
    );
    // The property under test: the bound has passed, so they must be in the file.
    std::thread::sleep(bound);
    kill9(&mut t);

    let t = start(&dir, &cfg);
    assert!(wait_for(Duration::from_secs(10), || metric(
        &t.admin,
        "trove_disk_ready"
    ) == 1.0));
    let before = fetched.load(Ordering::SeqCst);
    for i in 0..n {
        let (head, b) = get(&t.proxy, &origin, i).expect("response");
        assert!(b == body_of(i), "object {i} after the restart");
        assert!(
            is_hit(&head),
            "object {i}, acknowledged {bound:?} before the kill, is a hit: {head}\n{}",
            metrics(&t.admin)
        );
    }
    assert_eq!(fetched.load(Ordering::SeqCst), before, "no origin fetch");
}

/// Issue 8: a byte flipped in a region: the object is dropped and counted, and fetched
/// again, never served corrupt.
#[test]
fn flipped_bytes_on_disk_are_dropped_counted_and_refetched() {
    let dir = TempDir::new("disk-flip");
    let disk = dir.join("cache");
    let (origin, fetched) = origin();
    let cfg = config(&disk, "32MiB", "");
    let mut t = start(&dir, &cfg);
    for i in 0..20 {
        get(&t.proxy, &origin, i).expect("response");
    }
    assert!(wait_for(Duration::from_secs(10), || metric(
        &t.admin,
        "trove_disk_writes_total"
    ) >= 20.0));
    kill9(&mut t);
    let data = disk.join("regions.dat");
    let mut bytes = std::fs::read(&data).unwrap();
    let needle = &body_of(7)[100..164];
    let at = bytes
        .windows(64)
        .rposition(|w| w == needle)
        .expect("object 7 on disk");
    bytes[at] ^= 0x20;
    std::fs::write(&data, &bytes).unwrap();

    let t = start(&dir, &cfg);
    assert!(wait_for(Duration::from_secs(10), || metric(
        &t.admin,
        "trove_disk_ready"
    ) == 1.0));
    let before = fetched.load(Ordering::SeqCst);
    let (_, b) = get(&t.proxy, &origin, 7).expect("response");
    assert!(b == body_of(7), "object 7 served whole");
    assert_eq!(fetched.load(Ordering::SeqCst), before + 1, "fetched again");
    assert!(metric(&t.admin, "trove_disk_corrupt_records_total") >= 1.0);
    for i in (0..20).filter(|&i| i != 7) {
        let (head, b) = get(&t.proxy, &origin, i).expect("response");
        assert!(b == body_of(i) && is_hit(&head), "object {i}");
    }
}

/// Issue 8: writing far past the budget keeps the disk within it.
#[test]
fn the_disk_budget_is_held() {
    let dir = TempDir::new("disk-budget");
    let disk = dir.join("cache");
    let (origin, _) = origin();
    let t = start(&dir, &config(&disk, "2MiB", ""));
    for i in 0..400 {
        get(&t.proxy, &origin, i).expect("response");
    }
    assert!(wait_for(Duration::from_secs(10), || metric(
        &t.admin,
        "trove_disk_regions_reclaimed_total"
    ) >= 1.0));
    let size = std::fs::metadata(disk.join("regions.dat")).unwrap().len();
    assert!(size <= 2 << 20, "{size} bytes on disk");
    assert!(metric(&t.admin, "trove_disk_bytes") <= metric(&t.admin, "trove_disk_capacity_bytes"));
}

/// Issue 8: a second trove on the same directory refuses with a message.
#[test]
fn a_second_process_on_the_same_directory_is_refused() {
    let dir = TempDir::new("disk-lock");
    let disk = dir.join("cache");
    let cfg = config(&disk, "4MiB", "");
    let _first = start(&dir, &cfg);
    let dir2 = TempDir::new("disk-lock2");
    let err = try_start(&dir2, &cfg).err().expect("the second refused");
    assert!(err.contains("in use by another trove"), "{err}");
}

/// Issue 8: a disk that fills up (a 1 MiB tmpfs under a 16 MiB budget) and a read-only
/// directory leave trove serving from memory, saying so once in the log and in
/// `trove_disk_failed`.
#[test]
fn a_full_disk_and_a_read_only_directory_degrade_to_memory_only() {
    let dir = TempDir::new("disk-full");
    let full = dir.join("full");
    let ro = dir.join("ro");
    let Some(full_fs) = Tmpfs::mount(&full, "size=1m") else {
        eprintln!("skipped: this machine can't mount a tmpfs (needs root)");
        return;
    };
    let ro_fs = Tmpfs::mount(&ro, "ro,size=1m");
    // Issue 19, defect 11: with the default `on_failure = "stop"`, start-up fails.
    let (origin, _) = origin();
    let t = start(&dir, &config(&full, "16MiB", ""));
    for i in 0..200 {
        let (_, b) = get(&t.proxy, &origin, i).expect("still serving");
        assert!(b == body_of(i));
    }
    let failed = wait_for(Duration::from_secs(10), || {
        metric(&t.admin, "trove_disk_failed") == 1.0
    });
    // A small object fetched twice: the second is a memory hit. (The last of the 200 may
    // not be: at 16 KiB it is larger than its shard's small queue in a 1 MiB memory tier,
    // so S3-FIFO can evict it as soon as it enters; that made this check flaky.)
    let _ = get(&t.proxy, &origin, 0).expect("still serving");
    let (head, b) = get(&t.proxy, &origin, 0).expect("still serving");
    assert!(
        b == body_of(0) && is_hit(&head),
        "memory hits go on: {head}"
    );
    drop(t);
    drop(full_fs);
    assert!(failed, "the full disk was noticed");
    if let Some(ro_fs) = ro_fs {
        let dir2 = TempDir::new("disk-ro-conf");
        let err = try_start(&dir2, &config(&ro.join("cache"), "4MiB", ""))
            .err()
            .expect("a read-only directory stops the start");
        assert!(err.contains("on_failure"), "{err}");
        let t = start(
            &dir2,
            &config(&ro.join("cache"), "4MiB", "on_failure = \"memory\"\n"),
        );
        assert_eq!(metric(&t.admin, "trove_disk_failed"), 1.0);
        get(&t.proxy, &origin, 1).expect("serving");
        let (head, b) = get(&t.proxy, &origin, 1).expect("serving");
        assert!(b == body_of(1) && is_hit(&head));
        drop(t);
        drop(ro_fs);
    }
}

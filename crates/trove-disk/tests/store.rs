//! The disk tier as a library: write, stop (cleanly or not), reopen, read back verified.

mod common;
use common::Scratch;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use trove_disk::{DiskConfig, DiskStore, LoadedBody, Reclaim, Tiered, FORMAT_VERSION};
use trove_store::invalidation::{tag_hash, Mode, Selector};
use trove_store::{
    Body, EvictionKind, Labels, MemoryStore, Object, ObjectHead, Removal, Storage, Verdict,
};

fn tempdir(name: &str) -> Scratch {
    Scratch::new("it", name)
}

fn config(dir: &PathBuf, budget: u64) -> DiskConfig {
    DiskConfig {
        region_size: 256 << 10,
        ..DiskConfig::new(dir, budget)
    }
}

fn head(tag: &str) -> ObjectHead {
    let mut headers = HeaderMap::new();
    headers.insert("x-tag", HeaderValue::from_str(tag).unwrap());
    ObjectHead {
        status: StatusCode::OK,
        headers,
        request_headers: HeaderMap::new(),
        request_time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000),
        response_time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_001),
        prepared: Default::default(),
        labels: Default::default(),
    }
}

/// The body of object `i`: its size and bytes follow from `i`.
fn body_of(i: usize) -> Bytes {
    let n = 100 + (i * 7919) % 5000;
    Bytes::from((0..n).map(|j| (i * 31 + j) as u8).collect::<Vec<u8>>())
}

fn obj(i: usize, variant: &str) -> Object {
    Object::new(
        format!("http://example.com/{i}"),
        variant.into(),
        head(&i.to_string()),
        Body::complete(body_of(i)),
    )
}

/// True when `got` is object `i`'s body (never prints bodies).
fn same(got: Option<Bytes>, i: usize) -> bool {
    got.is_some_and(|b| b == body_of(i))
}

fn open(cfg: DiskConfig) -> DiskStore {
    let d = DiskStore::open(cfg).expect("open");
    assert!(d.wait_ready(Duration::from_secs(30)), "recovered");
    d
}

fn read_back(d: &DiskStore, i: usize) -> Option<Bytes> {
    let mut found = d.load(&format!("http://example.com/{i}"), u64::MAX, None);
    let l = found.pop()?;
    assert_eq!(l.head.headers["x-tag"], i.to_string().as_str());
    match l.body {
        LoadedBody::Whole(b) => Some(b),
        LoadedBody::Stream(_) => panic!("asked whole"),
    }
}

#[test]
fn objects_come_back_byte_for_byte_after_a_restart() {
    let dir = tempdir("restart");
    {
        let d = open(config(&dir, 4 << 20));
        for i in 0..200 {
            assert!(d.write(&obj(i, "")));
        }
        d.flush();
        assert_eq!(d.stats().objects, 200);
    }
    let d = open(config(&dir, 4 << 20));
    assert_eq!(d.stats().recovered_objects, 200);
    for i in 0..200 {
        assert!(same(read_back(&d, i), i), "object {}", i);
    }
    assert_eq!(d.stats().corrupt, 0);
}

/// A write torn by a crash (the data file cut mid-record) loses that record only, and is
/// counted.
#[test]
fn a_torn_record_is_dropped_and_counted_and_the_rest_survive() {
    let dir = tempdir("torn");
    {
        let d = open(config(&dir, 4 << 20));
        for i in 0..10 {
            d.write(&obj(i, ""));
        }
        d.flush();
    }
    // The open region is the only one written: cut its last record in half. The file is
    // kept at its full length (sparse): what was written ends at its last byte not zero
    // (rounded up to the records' 8-byte alignment).
    let data = dir.join("regions.dat");
    let bytes = std::fs::read(&data).unwrap();
    let len = bytes
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |p| (p as u64 + 1).next_multiple_of(8));
    drop(bytes);
    let f = std::fs::OpenOptions::new().write(true).open(&data).unwrap();
    f.set_len(len - 50).unwrap();
    drop(f);
    let d = open(config(&dir, 4 << 20));
    let s = d.stats();
    assert_eq!(s.objects, 9, "{s:?}");
    assert_eq!(s.corrupt, 1, "{s:?}");
    assert!(read_back(&d, 9).is_none());
    for i in 0..9 {
        assert!(same(read_back(&d, i), i), "object {}", i);
    }
}

/// A byte flipped in a stored body: the read catches it, drops the record and counts it.
#[test]
fn a_flipped_byte_is_caught_on_read_dropped_and_counted() {
    let dir = tempdir("flip");
    {
        let d = open(config(&dir, 4 << 20));
        d.write(&obj(1, ""));
        d.write(&obj(2, ""));
        d.flush();
    }
    let data = dir.join("regions.dat");
    let mut bytes = std::fs::read(&data).unwrap();
    let needle = &body_of(2)[..64];
    let at = bytes.windows(64).rposition(|w| w == needle).unwrap();
    bytes[at + 10] ^= 0xff;
    std::fs::write(&data, &bytes).unwrap();
    let d = open(config(&dir, 4 << 20));
    assert!(read_back(&d, 2).is_none(), "never served");
    assert_eq!(d.stats().corrupt, 1);
    assert!(same(read_back(&d, 1), 1), "object {}", 1);
    assert!(read_back(&d, 2).is_none(), "dropped from the index");
    assert_eq!(d.stats().corrupt, 1, "counted once");
}

#[test]
fn a_second_process_is_refused_and_a_newer_format_is_refused_with_a_message() {
    let dir = tempdir("lock");
    let d = open(config(&dir, 4 << 20));
    let e = DiskStore::open(config(&dir, 4 << 20)).unwrap_err();
    assert!(e.to_string().contains("in use by another trove"), "{e}");
    drop(d);
    std::fs::write(
        dir.join("FORMAT"),
        format!("trove-disk {}\n", FORMAT_VERSION + 1),
    )
    .unwrap();
    let e = DiskStore::open(config(&dir, 4 << 20)).unwrap_err();
    assert!(e.to_string().contains("newer than this trove"), "{e}");
    assert!(!e.is_io());
}

/// Writing far past the budget keeps the files within it and the newest objects readable,
/// and what is recovered after a restart is what was there.
#[test]
fn the_budget_is_held_by_reclaiming_regions() {
    let dir = tempdir("budget");
    let budget = 2 << 20;
    {
        let d = open(config(&dir, budget));
        for i in 0..3000 {
            d.write(&obj(i, ""));
            if i % 100 == 0 {
                d.flush();
            }
        }
        d.flush();
        let s = d.stats();
        assert!(s.regions_reclaimed > 10, "{s:?}");
        assert!(s.bytes <= budget, "{s:?}");
        assert!(same(read_back(&d, 2999), 2999), "object {}", 2999);
        assert!(read_back(&d, 0).is_none());
    }
    assert!(std::fs::metadata(dir.join("regions.dat")).unwrap().len() <= budget);
    let d = open(config(&dir, budget));
    let s = d.stats();
    assert_eq!(s.corrupt, 0, "{s:?}");
    assert!(s.objects > 100, "{s:?}");
    assert!(same(read_back(&d, 2999), 2999), "object {}", 2999);
}

/// A purge survives a restart (its tombstone is replayed), and so does the removal of one
/// variant.
#[test]
fn removals_are_not_revived_by_a_restart() {
    let dir = tempdir("purge");
    {
        let d = open(config(&dir, 4 << 20));
        d.write(&obj(1, ""));
        d.write(&obj(2, "gzip"));
        d.write(&obj(2, "br"));
        d.write(&obj(3, ""));
        d.flush();
        assert_eq!(d.load("http://example.com/2", u64::MAX, None).len(), 2);
        d.remove("http://example.com/1", None);
        d.remove("http://example.com/2", Some("gzip"));
        assert!(read_back(&d, 1).is_none());
        d.flush();
    }
    let d = open(config(&dir, 4 << 20));
    assert!(read_back(&d, 1).is_none(), "purge revived");
    let v = d.load("http://example.com/2", u64::MAX, None);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].variant, "br");
    assert!(read_back(&d, 3).is_some());
}

/// Recovery replays regions newest first: across many regions, the newest copy of an object
/// wins, a purge keeps older copies out, an object written again after its purge is back,
/// and a whole-key purge removes older variants but not a newer one.
#[test]
fn after_a_restart_the_newest_copy_wins_across_regions() {
    let dir = tempdir("newest");
    let with_body = |i: usize, variant: &str, body: &'static [u8]| {
        Object::new(
            format!("http://example.com/{i}"),
            variant.into(),
            head(&i.to_string()),
            Body::complete(Bytes::from_static(body)),
        )
    };
    // Fills a region or two with other objects, so what follows lands in a newer one.
    let mut next = 1000;
    let mut filler = |d: &DiskStore| {
        for _ in 0..120 {
            assert!(d.write(&obj(next, "")));
            next += 1;
        }
        d.flush();
    };
    {
        let d = open(config(&dir, 16 << 20));
        d.write(&with_body(1, "", b"first"));
        d.write(&with_body(2, "", b"purged"));
        d.write(&with_body(3, "", b"purged, then written again"));
        d.write(&with_body(4, "gzip", b"older variant"));
        filler(&d);
        d.write(&with_body(1, "", b"second"));
        d.remove("http://example.com/2", None);
        d.remove("http://example.com/3", None);
        d.remove("http://example.com/4", None);
        filler(&d);
        d.write(&with_body(3, "", b"back"));
        d.write(&with_body(4, "br", b"newer variant"));
        filler(&d);
        d.write(&with_body(1, "", b"third"));
        d.flush();
        assert!(d.stats().regions_reclaimed == 0, "nothing reclaimed");
    }
    let d = open(config(&dir, 16 << 20));
    let body = |i: usize| {
        let mut v = d.load(&format!("http://example.com/{i}"), u64::MAX, None);
        assert!(v.len() <= 1, "one variant of {i}");
        v.pop().map(|l| match l.body {
            LoadedBody::Whole(b) => (l.variant, b),
            LoadedBody::Stream(_) => panic!("asked whole"),
        })
    };
    assert_eq!(body(1), Some((String::new(), Bytes::from_static(b"third"))));
    assert_eq!(body(2), None, "purge revived");
    assert_eq!(body(3), Some((String::new(), Bytes::from_static(b"back"))));
    assert_eq!(
        body(4),
        Some(("br".to_string(), Bytes::from_static(b"newer variant")))
    );
    assert!(same(read_back(&d, 1000), 1000) && same(read_back(&d, next - 1), next - 1));
}

/// A write queued before a removal, but written after it, does not bring the object back.
#[test]
fn a_write_queued_before_a_purge_does_not_revive_it() {
    let dir = tempdir("race");
    let d = open(config(&dir, 4 << 20));
    for _ in 0..50 {
        d.write(&obj(1, ""));
        d.remove("http://example.com/1", None);
    }
    d.flush();
    assert!(read_back(&d, 1).is_none());
}

/// With reinsertion a hot object outlives many region reclaims; plain FIFO drops it.
#[test]
fn reinsertion_keeps_hot_objects_that_fifo_drops() {
    for (policy, survives) in [(Reclaim::FifoReinsert, true), (Reclaim::Fifo, false)] {
        let dir = tempdir(policy.as_str());
        let d = open(DiskConfig {
            reclaim: policy,
            ..config(&dir, 2 << 20)
        });
        d.write(&obj(0, ""));
        d.flush();
        for i in 1..3000 {
            d.write(&obj(i, ""));
            if i % 50 == 0 {
                d.flush();
                // The hot object is read now and then.
                let _ = read_back(&d, 0);
            }
        }
        d.flush();
        assert_eq!(read_back(&d, 0).is_some(), survives, "{policy:?}");
        if survives {
            assert!(d.stats().reinserted > 0);
        }
    }
}

/// A large body streams in chunks and verifies at the end; a corrupt one fails at the end.
#[test]
fn a_large_body_streams_and_is_verified_at_the_end() {
    let dir = tempdir("large");
    let big: Bytes = (0..600_000u32)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into();
    let d = open(DiskConfig {
        region_size: 1 << 20,
        ..DiskConfig::new(&dir, 8 << 20)
    });
    d.write(&Object::new(
        "http://example.com/big".into(),
        String::new(),
        head("big"),
        Body::complete(big.clone()),
    ));
    d.flush();
    let mut l = d.load("http://example.com/big", 1000, None);
    let LoadedBody::Stream(mut s) = l.pop().unwrap().body else {
        panic!("streamed");
    };
    let mut got = Vec::new();
    while let Some(c) = d.stream(&mut s).unwrap() {
        got.extend_from_slice(&c);
    }
    assert!(got == big, "streamed body differs");
    // A byte flips on disk under the running store (recovery would drop it by itself).
    let data = dir.join("regions.dat");
    let bytes = std::fs::read(&data).unwrap();
    let at = bytes
        .windows(32)
        .position(|w| w == &big[300_000..300_032])
        .unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&data).unwrap();
    std::os::unix::fs::FileExt::write_at(&f, &[bytes[at] ^ 1], at as u64).unwrap();
    let mut l = d.load("http://example.com/big", 1000, None);
    let LoadedBody::Stream(mut s) = l.pop().unwrap().body else {
        panic!("streamed");
    };
    let mut err = None;
    loop {
        match d.stream(&mut s) {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    assert!(err.is_some(), "a corrupt body never ends cleanly");
    assert_eq!(d.stats().corrupt, 1);
}

/// A large body whose region is reclaimed while it streams fails (the stream says the
/// place was reused) and is not counted as corruption: it is gone, not damaged.
#[test]
fn a_body_whose_region_is_reclaimed_while_it_streams_fails_without_counting_corruption() {
    let dir = tempdir("large-reclaimed");
    let d = open(DiskConfig {
        region_size: 1 << 20,
        reclaim: Reclaim::Fifo,
        ..DiskConfig::new(&dir, 4 << 20)
    });
    d.write(&big(1, 600_000));
    d.flush();
    let mut l = d.load("http://example.com/1", 1000, None);
    let LoadedBody::Stream(mut s) = l.pop().unwrap().body else {
        panic!("streamed");
    };
    assert!(d.stream(&mut s).unwrap().is_some(), "a first chunk");
    // Four regions of 1 MiB: enough other objects to reclaim the first.
    for i in 10..60 {
        d.write(&big(i, 100_000));
        d.flush();
    }
    assert!(d.stats().regions_reclaimed > 0);
    let err = loop {
        match d.stream(&mut s) {
            Ok(Some(_)) => {}
            Ok(None) => panic!("a body whose region was reclaimed ended cleanly"),
            Err(e) => break e,
        }
    };
    assert!(trove_disk::is_reused(&err), "{err}");
    assert_eq!(d.stats().corrupt, 0);
}

/// Memory over disk: memory victims are on disk, a memory miss is promoted back, and
/// after a restart the disk serves what memory had.
#[test]
fn the_tiers_demote_promote_and_survive_a_restart() {
    let dir = tempdir("tiered");
    let mk = || {
        Tiered::new(
            MemoryStore::new(64 << 10, 1, 32 << 10, EvictionKind::Lru),
            open(config(&dir, 8 << 20)),
        )
    };
    {
        let t = mk();
        for i in 0..100 {
            t.insert(obj(i, "")).unwrap();
        }
        assert!(
            t.lookup("http://example.com/0").is_empty(),
            "evicted from memory"
        );
        t.disk().flush(); // Written behind the inserts: wait for the writer.
        assert!(t.should_promote("http://example.com/0"));
        assert!(t.promote("http://example.com/0").is_empty());
        let o = t.lookup("http://example.com/0");
        assert!(same(o[0].body.complete_bytes(), 0));
        assert_eq!(t.remove("http://example.com/5", Removal::Purged), 1);
        t.disk().flush();
    }
    let t = mk();
    assert!(
        t.lookup("http://example.com/99").is_empty(),
        "memory starts empty"
    );
    for i in (0..100).filter(|&i| i != 5) {
        let key = format!("http://example.com/{i}");
        t.promote(&key);
        let o = t.lookup(&key);
        assert_eq!(o.len(), 1, "{i}");
        assert!(same(o[0].body.complete_bytes(), i), "{i}");
    }
    assert!(!t.should_promote("http://example.com/5"), "purge kept");
    let _ = Arc::new(t);
}

/// An object evicted from memory while its body was still arriving is demoted when the body
/// completes, unless it was purged meanwhile: the purge must win (it reached the disk after
/// the purge before the fix).
#[test]
fn a_purge_of_an_object_evicted_while_arriving_is_not_undone_by_its_completion() {
    let dir = tempdir("arriving");
    let t = Tiered::new(
        MemoryStore::new(64 << 10, 1, 32 << 10, EvictionKind::Lru),
        open(config(&dir, 8 << 20)),
    );
    let key = "http://example.com/arriving";
    let body = Body::new(Some(1000));
    let arriving = t
        .insert(Object::new(
            key.into(),
            String::new(),
            head("a"),
            Arc::clone(&body),
        ))
        .unwrap();
    for i in 0..100 {
        t.insert(obj(i, "")).unwrap();
    }
    assert!(!t.holds(&arriving), "evicted while arriving");
    t.remove(key, Removal::Purged);
    body.append_now(Bytes::from(vec![7u8; 1000])).unwrap();
    body.finish(Ok(()));
    t.recharge(&arriving);
    t.disk().flush();
    assert!(!t.should_promote(key), "the purged object reached the disk");
}

fn tagged(i: usize, tag: &str, born: u64) -> Object {
    let mut o = obj(i, "");
    o.head.labels = Labels::new(vec![tag_hash(tag)], None, born);
    o
}

fn tiered(dir: &PathBuf) -> Tiered {
    let t = Tiered::new(
        MemoryStore::new(1 << 20, 1, 256 << 10, EvictionKind::Lru),
        open(config(dir, 4 << 20)),
    )
    .with_pass_every(Duration::ZERO);
    assert!(t.disk().wait_ready(Duration::from_secs(30)));
    t
}

fn alive_after_promotion(t: &Tiered, i: usize) -> bool {
    let key = format!("http://example.com/{i}");
    t.promote(&key);
    let inv = t.invalidations().unwrap();
    t.lookup(&key)
        .iter()
        .any(|o| inv.verdict(o) == Verdict::Alive)
}

/// The rule log is journaled: a tag rule acknowledged before a stop kills the tagged
/// objects read back from disk after the restart (their records carry their tags and
/// `born`), and only those older than it; sequence numbers go on above the old ones.
#[test]
fn rules_and_labels_survive_a_restart() {
    let dir = tempdir("rules");
    let seq = {
        let t = tiered(&dir);
        let inv = Arc::clone(t.invalidations().unwrap());
        t.insert(tagged(1, "red", inv.current())).unwrap();
        t.insert(tagged(2, "blue", inv.current())).unwrap();
        let seq = inv.add(
            Selector::Tag(tag_hash("red")),
            Mode::Hard,
            SystemTime::now(),
        );
        inv.durable(seq).unwrap();
        // Stored after the rule: not covered by it.
        t.insert(tagged(3, "red", inv.current())).unwrap();
        t.disk().flush();
        seq
    };
    let t = tiered(&dir);
    let inv = t.invalidations().unwrap();
    assert!(inv.current() >= seq, "numbers never go back");
    assert!(
        !alive_after_promotion(&t, 1),
        "the red object older than the rule"
    );
    assert!(alive_after_promotion(&t, 2));
    assert!(alive_after_promotion(&t, 3), "stored after the rule");
    let next = inv.add(Selector::Tag(tag_hash("x")), Mode::Hard, SystemTime::now());
    assert!(next > seq, "{next} after {seq}");
}

/// With a disk tier, a sweep passes over the disk too: what a rule kills there leaves the
/// index (with a tombstone), and the rule can then be retired.
#[test]
fn a_disk_pass_removes_the_dead_and_lets_rules_retire() {
    let dir = tempdir("pass");
    let t = tiered(&dir);
    let inv = Arc::clone(t.invalidations().unwrap());
    for i in 0..20 {
        let tag = if i % 2 == 0 { "even" } else { "odd" };
        t.disk().write(&tagged(i, tag, inv.current()));
    }
    t.disk().flush();
    inv.add(
        Selector::Tag(tag_hash("even")),
        Mode::Hard,
        SystemTime::now(),
    );
    let far = SystemTime::now() + Duration::from_secs(3600);
    inv.sweep(&t, far);
    assert_eq!(inv.pending(), 0, "retired");
    for i in 0..20 {
        assert_eq!(
            t.disk().may_hold(&format!("http://example.com/{i}"), None),
            i % 2 == 1,
            "object {i}"
        );
    }
    drop(t);
    // The tombstones were synced before the rule was retired.
    let t = tiered(&dir);
    for i in 0..20 {
        assert_eq!(alive_after_promotion(&t, i), i % 2 == 1, "object {i}");
    }
}

/// A body of `n` bytes for the zero-copy tests.
fn big(i: usize, n: usize) -> Object {
    Object::new(
        format!("http://example.com/{i}"),
        String::new(),
        head(&i.to_string()),
        Body::complete(Bytes::from(
            (0..n).map(|j| (i * 131 + j * 7) as u8).collect::<Vec<u8>>(),
        )),
    )
}

#[test]
fn a_body_opened_for_sendfile_is_verified_first_and_refused_when_corrupt() {
    let dir = tempdir("zc-flip");
    let want = big(1, 100_000).body.complete_bytes().unwrap();
    {
        let d = open(config(&dir, 4 << 20));
        d.write(&big(1, 100_000));
        d.write(&big(2, 100_000));
        d.flush();
        // Smaller than asked for: left to the ordinary read.
        assert!(d.open_body("http://example.com/1", 200_000, None).is_none());
        let found = d
            .open_body("http://example.com/1", 64 << 10, None)
            .expect("on disk");
        assert_eq!(found.head.headers["x-tag"], "1");
        assert_eq!(found.body.len(), 100_000);
        assert!(found.body.intact());
        assert_eq!(found.body.read(0, 100_000).unwrap(), want);
        // What `file()` points at is the body itself.
        let (fd, at) = found.body.file();
        let mut b = vec![0u8; 100_000];
        rustix::io::pread(fd, &mut b, at).unwrap();
        assert!(b == want);
    }
    let data = dir.join("regions.dat");
    let mut bytes = std::fs::read(&data).unwrap();
    let needle = &big(2, 100_000).body.complete_bytes().unwrap()[500..564];
    let at = bytes.windows(64).rposition(|w| w == needle).unwrap();
    bytes[at + 10] ^= 0xff;
    std::fs::write(&data, &bytes).unwrap();
    let d = open(config(&dir, 4 << 20));
    assert!(
        d.open_body("http://example.com/2", 0, None).is_none(),
        "never sent"
    );
    assert_eq!(d.stats().corrupt, 1);
    assert!(d.open_body("http://example.com/1", 0, None).is_some());
}

#[test]
fn a_reclaimed_region_leaves_a_body_opened_for_sendfile_not_intact() {
    let dir = tempdir("zc-reclaim");
    let d = open(DiskConfig {
        reclaim: Reclaim::Fifo,
        ..config(&dir, 1 << 20)
    });
    d.write(&big(1, 100_000));
    d.flush();
    let found = d
        .open_body("http://example.com/1", 0, None)
        .expect("on disk");
    assert!(found.body.intact());
    // Four regions of 256 KiB: write enough to reclaim the first.
    for i in 10..30 {
        d.write(&big(i, 100_000));
        d.flush();
    }
    assert!(d.stats().regions_reclaimed > 0);
    assert!(!found.body.intact(), "its region was reclaimed");
    assert!(found.body.read(0, 100).is_err());
    assert!(d.open_body("http://example.com/1", 0, None).is_none());
}

/// Polls `cond` until it holds, for at most 10 s.
fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    cond()
}

#[test]
fn a_pinned_region_is_not_punched_until_its_pin_is_dropped() {
    let dir = tempdir("zc-pin");
    let d = open(DiskConfig {
        reclaim: Reclaim::Fifo,
        ..config(&dir, 1 << 20)
    });
    let want = big(1, 100_000).body.complete_bytes().unwrap();
    d.write(&big(1, 100_000));
    d.flush();
    let found = d
        .open_body("http://example.com/1", 0, None)
        .expect("on disk");
    let read_file = || {
        let (fd, at) = found.body.file();
        let mut b = vec![0u8; 100_000];
        rustix::io::pread(fd, &mut b, at).unwrap();
        b
    };
    // As a `sendfile` call in flight holds it.
    let pin = found.body.pin().expect("the region is in use");
    // Four regions of 256 KiB: enough writes to reclaim the first (queued, not flushed:
    // the writer is to stop at the pin).
    for i in 10..30 {
        d.write(&big(i, 100_000));
    }
    assert!(
        eventually(|| !found.body.intact()),
        "the region's seq was retired"
    );
    // Retired, but neither punched nor rewritten while the pin is held.
    assert!(read_file() == want, "the pinned bytes changed");
    assert_eq!(d.stats().regions_reclaimed, 0);
    // A new pin is refused now, as a `sendfile` call starting after the retirement is.
    assert!(found.body.pin().is_err_and(|e| trove_disk::is_reused(&e)));
    drop(pin);
    assert!(eventually(|| d.stats().regions_reclaimed > 0));
    d.flush();
    assert!(read_file() != want, "punched and rewritten once unpinned");
    assert!(d.open_body("http://example.com/1", 0, None).is_none());
}

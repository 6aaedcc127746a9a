//! The invalidation journal: the rule log (`trove_store::invalidation`) made durable in
//! the cache directory, so an acknowledged invalidation is never undone by a restart,
//! `kill -9` included, while objects it covers may still be on disk.
//!
//! One append-only file, `invalidations.log`, in the first cache directory (under the
//! directory's lock): a 64-byte header, then one checksummed record per rule in sequence
//! order, and *reservations* of sequence numbers. Why a file of its own and not records in
//! the regions: regions are reclaimed oldest first, and a rule must outlive every object
//! it covers, however old; and an acknowledgement waits for an `fdatasync` of a few
//! hundred bytes, not of a region's batch.
//!
//! - **Durable before the acknowledgement.** A rule is copied into a buffer as it is made
//!   (under the rule log's lock: no I/O there); the caller acknowledging it waits in
//!   `Journal::sync_through`, which writes the buffer and `fdatasync`s (concurrent waiters
//!   share one: group commit). Puts' rules are appended but not waited
//!   for (they are synced with the data, at the disk tier's `sync_interval`).
//! - **Sequence numbers never go back.** Objects are stamped with the sequence number
//!   current when their request was sent; after a restart, new rules must be numbered
//!   above every stamp on disk. Numbers are reserved `RESERVE_BLOCK` at a time by a
//!   durable reservation record, and a restart goes on above the highest reservation.
//!   The rule log asks for them ahead of need on its reserver thread
//!   (`trove_store::invalidation`), never under its lock.
//! - **Compaction.** When the background sweep retires rules, the journal is rewritten
//!   with the pending rules only (a new file, synced, renamed over the old one, the
//!   directory synced): it stays as small as the pending rule log. The rule log is not
//!   locked meanwhile (its snapshot is taken once no flush can run, under `sync_lock`), so
//!   rules appended during the rewrite stay pending and go to the new file; a lookup never
//!   waits for the rewrite's syncs.
//! - **Recovery.** The header and every record are verified (XXH3-64). The header holds
//!   the *synced length*: the file's length at the last acknowledgement sync, rewritten
//!   with every flush (the same `fdatasync`). A bad or missing record past it is a torn
//!   write never acknowledged: cut off. One within it is damage to acknowledged rules
//!   (issue 19, defect 8: 20 bytes cut from the tail revived 111 purged URLs): the rules
//!   lost can't be known, so every object not checked against the rules up to the highest
//!   sequence number ever reserved is taken as dead (the restored *floor* is raised to it,
//!   and written back), never served. A damaged record with whole ones after it means rules
//!   may be missing too: the cache's objects are discarded. (A journal of a trove before
//!   the synced length has 0 there: its torn tail is cut as before.)
//!
//! The format is in docs/storage-format.md.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use trove_store::invalidation::{Ban, FeedPosition, Mode, Rule, Selector, Snapshot};
use xxhash_rust::xxh3::xxh3_64;

/// The journal's file name in the first cache directory.
pub const FILE: &str = "invalidations.log";
const TMP: &str = "invalidations.log.new";
/// Where the cache stands in the cluster's feed of invalidations (`keep_feed_position`): a
/// file of its own, beside the journal, rewritten in place (32 bytes, one sector).
pub const FEED_FILE: &str = "feed.position";
const FEED_MAGIC: [u8; 4] = *b"TRVf";
const MAGIC: [u8; 4] = *b"TRVj";
/// The journal's own format version.
pub const JOURNAL_VERSION: u16 = 1;
const HEADER_LEN: usize = 64;
/// A record's fixed part before its payload, and the checksum after it.
const RECORD_FIXED: usize = 32;
const SUM_LEN: usize = 8;

const KIND_RULE: u8 = 1;
const KIND_RESERVE: u8 = 2;

const SEL_KEY: u8 = 1;
const SEL_TAG: u8 = 2;
const SEL_PREFIX: u8 = 3;
const SEL_BAN: u8 = 4;

/// What the journal held at start-up.
#[derive(Debug, Default)]
pub struct Restored {
    pub snapshot: Snapshot,
    /// Every record on disk had been checked against the rules up to this one when the
    /// journal was last compacted (see `DiskStore::pass`).
    pub disk_checked: u64,
    /// Acknowledged rules were lost (damage within the synced length): the floor was raised
    /// so nothing they may have covered is served. Counted in
    /// `trove_disk_journal_damaged_total`.
    pub lost_acknowledged: bool,
}

/// Why the journal could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Damaged before its end: rules may be missing.
    #[error("the invalidation journal {0} is damaged before its end (rules may be missing)")]
    Damaged(PathBuf),
    #[error("the invalidation journal {path} has version {found}, newer than this trove's {JOURNAL_VERSION}")]
    Newer { path: PathBuf, found: u16 },
}

struct Inner {
    file: Arc<File>,
    /// The header's fields but the synced length: reservation, floor, disk checked.
    head: (u64, u64, u64),
    /// The file's length once `pending` is written.
    len: u64,
    /// Records appended but not written yet: a rule is appended under the rule log's lock,
    /// so it costs a copy there, and the `pwrite` happens with the sync, outside that lock
    /// (a write into a page under writeback can wait milliseconds).
    pending: Vec<u8>,
    /// Each pending record's end in `pending`, and its rule's number (`None`: a
    /// reservation), so a compaction keeps the rules appended after its snapshot.
    pending_marks: Vec<(usize, Option<u64>)>,
    /// Records in the file (rules and reservations), to decide when compaction pays.
    records: u64,
}

/// The journal (see the module docs).
pub struct RuleJournal {
    dir: PathBuf,
    inner: Mutex<Inner>,
    /// The newest rule appended, and the newest known durable.
    appended: AtomicU64,
    synced: AtomicU64,
    sync_lock: Mutex<()>,
    /// Set on the first write error: no acknowledgement can be given from then on.
    failed: AtomicBool,
    /// Shared with the disk tier: what `DiskStore::pass` has checked every record through.
    disk_checked: Arc<AtomicU64>,
    /// The time one `fdatasync` of an acknowledgement took, last and total, for metrics.
    pub(crate) syncs: AtomicU64,
    pub(crate) sync_nanos: AtomicU64,
    /// The feed position last made durable in [`FEED_FILE`] (see `keep_feed_position`).
    feed: Mutex<Option<FeedPosition>>,
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The header: magic, version, the reservation, the floor, what the disk was checked
/// through, and the synced length (bytes 32..40: the file's length at the last sync; 0 in
/// journals written before it existed).
fn header(reserved: u64, floor: u64, disk_checked: u64, synced_len: u64) -> [u8; HEADER_LEN] {
    let mut b = [0u8; HEADER_LEN];
    b[0..4].copy_from_slice(&MAGIC);
    b[4..6].copy_from_slice(&JOURNAL_VERSION.to_le_bytes());
    b[8..16].copy_from_slice(&reserved.to_le_bytes());
    b[16..24].copy_from_slice(&floor.to_le_bytes());
    b[24..32].copy_from_slice(&disk_checked.to_le_bytes());
    b[32..40].copy_from_slice(&synced_len.to_le_bytes());
    let sum = xxh3_64(&b[..56]);
    b[56..64].copy_from_slice(&sum.to_le_bytes());
    b
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// One record's bytes, padded to a multiple of 8.
fn record(kind: u8, seq: u64, rule: Option<&Rule>) -> Vec<u8> {
    let mut b = vec![0u8; RECORD_FIXED];
    b[4] = kind;
    b[8..16].copy_from_slice(&seq.to_le_bytes());
    if let Some(r) = rule {
        b[6] = match r.mode {
            Mode::Hard => 1,
            Mode::Soft => 2,
        };
        b[16..24].copy_from_slice(&ms(r.at).to_le_bytes());
        let (sel, hash) = match &r.selector {
            Selector::Key(h) => (SEL_KEY, *h),
            Selector::Tag(h) => (SEL_TAG, *h),
            Selector::Prefix(p) => {
                b.extend_from_slice(p.as_bytes());
                (SEL_PREFIX, 0)
            }
            Selector::Ban(ban) => {
                let (subject, op, value) = ban.parts();
                put_str(&mut b, &subject);
                put_str(&mut b, op);
                put_str(&mut b, value);
                (SEL_BAN, 0)
            }
        };
        b[5] = sel;
        b[24..32].copy_from_slice(&hash.to_le_bytes());
    }
    let len = (b.len() + SUM_LEN) as u32;
    b[0..4].copy_from_slice(&len.to_le_bytes());
    let sum = xxh3_64(&b);
    b.extend_from_slice(&sum.to_le_bytes());
    b.resize(b.len().div_ceil(8) * 8, 0);
    b
}

fn take_str<'a>(b: &'a [u8], at: &mut usize) -> Option<&'a str> {
    let n = u32::from_le_bytes(b.get(*at..*at + 4)?.try_into().ok()?) as usize;
    let s = b.get(*at + 4..(*at + 4).checked_add(n)?)?;
    *at += 4 + n;
    std::str::from_utf8(s).ok()
}

/// What one verified record says.
enum Entry {
    Rule(Rule),
    Reserve(u64),
}

fn parse(b: &[u8]) -> Option<Entry> {
    let kind = b[4];
    let seq = u64_at(b, 8);
    if kind == KIND_RESERVE {
        return Some(Entry::Reserve(seq));
    }
    if kind != KIND_RULE {
        return None;
    }
    let mode = match b[6] {
        1 => Mode::Hard,
        2 => Mode::Soft,
        _ => return None,
    };
    let at = UNIX_EPOCH + Duration::from_millis(u64_at(b, 16));
    let hash = u64_at(b, 24);
    let payload = &b[RECORD_FIXED..b.len() - SUM_LEN];
    let selector = match b[5] {
        SEL_KEY => Selector::Key(hash),
        SEL_TAG => Selector::Tag(hash),
        SEL_PREFIX => Selector::Prefix(std::str::from_utf8(payload).ok()?.to_string()),
        SEL_BAN => {
            let mut at = 0;
            let subject = take_str(payload, &mut at)?;
            let op = take_str(payload, &mut at)?;
            let value = take_str(payload, &mut at)?;
            Selector::Ban(Arc::new(Ban::parse(subject, op, value).ok()?))
        }
        _ => return None,
    };
    Some(Entry::Rule(Rule {
        seq,
        selector,
        mode,
        at,
    }))
}

/// The record at the start of `b`: its padded length and what it says, or `None` when it
/// is not a whole, verified record.
fn next_record(b: &[u8]) -> Option<(usize, Option<Entry>)> {
    if b.len() < RECORD_FIXED + SUM_LEN {
        return None;
    }
    let len = u32_at(b, 0) as usize;
    if len < RECORD_FIXED + SUM_LEN || len > b.len() {
        return None;
    }
    let body = &b[..len - SUM_LEN];
    if xxh3_64(body) != u64_at(b, len - SUM_LEN) {
        return None;
    }
    Some((len.div_ceil(8) * 8, parse(&b[..len])))
}

/// The feed position in `dir`, if a whole one is there.
fn read_feed(dir: &Path) -> Option<FeedPosition> {
    let b = std::fs::read(dir.join(FEED_FILE)).ok()?;
    if b.len() < 32 || b[0..4] != FEED_MAGIC || xxh3_64(&b[..24]) != u64_at(&b, 24) {
        tracing::warn!(dir = %dir.display(), "{FEED_FILE} is damaged: the cluster's feed is read from its start");
        return None;
    }
    Some(FeedPosition {
        epoch: u64_at(&b, 8),
        seq: u64_at(&b, 16),
    })
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

impl RuleJournal {
    /// Opens (or creates) the journal in `dir` and reads it back.
    pub fn open(
        dir: &Path,
        disk_checked: Arc<AtomicU64>,
    ) -> Result<(RuleJournal, Restored), JournalError> {
        let path = dir.join(FILE);
        let _ = std::fs::remove_file(dir.join(TMP));
        let mut bytes = Vec::new();
        match File::open(&path) {
            Ok(mut f) => {
                f.read_to_end(&mut bytes)?;
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        let mut restored = Restored::default();
        let mut records = 0u64;
        let keep = if bytes.is_empty() {
            None
        } else {
            if bytes.len() < HEADER_LEN
                || bytes[0..4] != MAGIC
                || xxh3_64(&bytes[..56]) != u64_at(&bytes, 56)
            {
                return Err(JournalError::Damaged(path));
            }
            let v = u16::from_le_bytes([bytes[4], bytes[5]]);
            if v > JOURNAL_VERSION {
                return Err(JournalError::Newer { path, found: v });
            }
            restored.snapshot.reserved = u64_at(&bytes, 8);
            restored.snapshot.floor = u64_at(&bytes, 16);
            restored.disk_checked = u64_at(&bytes, 24);
            let synced_len = u64_at(&bytes, 32) as usize;
            let mut at = HEADER_LEN;
            while at < bytes.len() {
                match next_record(&bytes[at..]) {
                    Some((n, entry)) => {
                        match entry {
                            Some(Entry::Rule(r)) => restored.snapshot.rules.push(r),
                            Some(Entry::Reserve(s)) => {
                                restored.snapshot.reserved = restored.snapshot.reserved.max(s)
                            }
                            // A verified record this build can't read: a rule is missing.
                            None => return Err(JournalError::Damaged(path)),
                        }
                        records += 1;
                        at += n;
                    }
                    None => {
                        // A torn tail (never acknowledged) unless whole records follow.
                        if (at + 8..bytes.len())
                            .step_by(8)
                            .any(|p| next_record(&bytes[p..]).is_some())
                        {
                            return Err(JournalError::Damaged(path));
                        }
                        if at >= synced_len {
                            tracing::warn!(
                                path = %path.display(),
                                bytes = bytes.len() - at,
                                "invalidation journal: a torn last record was cut off (it was never acknowledged)"
                            );
                        }
                        break;
                    }
                }
            }
            if at < synced_len {
                // Acknowledged records are gone (cut off, or damaged at the end): which
                // rules is unknown, so nothing not checked against every sequence number
                // ever handed out may be served.
                let top = restored
                    .snapshot
                    .rules
                    .iter()
                    .map(|r| r.seq)
                    .max()
                    .unwrap_or(0)
                    .max(restored.snapshot.reserved);
                tracing::error!(
                    path = %path.display(),
                    synced = synced_len,
                    readable = at,
                    floor = top,
                    "invalidation journal: acknowledged records are missing or damaged; \
                     every cached object not checked against the rules through the floor \
                     is dropped rather than served"
                );
                restored.snapshot.floor = restored.snapshot.floor.max(top);
                restored.lost_acknowledged = true;
            }
            Some(at as u64)
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let head = (
            restored.snapshot.reserved,
            restored.snapshot.floor,
            restored.disk_checked,
        );
        let len = match keep {
            Some(n) => {
                if file.metadata()?.len() != n || restored.lost_acknowledged {
                    file.set_len(n)?;
                    crate::crashlog::set_len(&path, n);
                    // The synced length now, and a raised floor kept for the next start.
                    let h = header(head.0, head.1, head.2, n);
                    file.write_all_at(&h, 0)?;
                    crate::crashlog::write(&path, 0, &h);
                    file.sync_data()?;
                    crate::crashlog::sync(&path);
                }
                n
            }
            None => {
                file.set_len(0)?;
                let n = HEADER_LEN as u64;
                file.write_all_at(&header(0, 0, 0, n), 0)?;
                file.sync_data()?;
                sync_dir(dir)?;
                n
            }
        };
        restored.snapshot.rules.sort_by_key(|r| r.seq);
        let top = restored
            .snapshot
            .rules
            .last()
            .map_or(0, |r| r.seq)
            .max(restored.snapshot.reserved);
        disk_checked.store(restored.disk_checked, Ordering::Release);
        Ok((
            RuleJournal {
                dir: dir.to_path_buf(),
                inner: Mutex::new(Inner {
                    file: Arc::new(file),
                    head,
                    len,
                    pending: Vec::new(),
                    pending_marks: Vec::new(),
                    records,
                }),
                appended: AtomicU64::new(top),
                synced: AtomicU64::new(top),
                sync_lock: Mutex::new(()),
                failed: AtomicBool::new(false),
                disk_checked,
                syncs: AtomicU64::new(0),
                sync_nanos: AtomicU64::new(0),
                feed: Mutex::new(read_feed(dir)),
            },
            restored,
        ))
    }

    /// Removes the journal of a discarded cache directory (its rules covered objects that
    /// are gone).
    pub fn discard(dir: &Path) -> std::io::Result<()> {
        for f in [FILE, FEED_FILE] {
            match std::fs::remove_file(dir.join(f)) {
                Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    /// Makes `position` durable in [`FEED_FILE`]: one 32-byte `pwrite` (magic, epoch, seq,
    /// checksum) and an `fdatasync`; a new file is synced into the directory. The caller made
    /// the rules it covers durable first, so a crash between the two only makes the node
    /// read the last messages again (their rules apply twice: an extra miss at worst, never
    /// a stale hit). A damaged file reads as no position: the node reads the whole feed.
    pub fn keep_feed_position(&self, position: FeedPosition) -> std::io::Result<()> {
        let mut feed = self.feed.lock();
        if *feed == Some(position) {
            return Ok(());
        }
        let mut b = [0u8; 32];
        b[0..4].copy_from_slice(&FEED_MAGIC);
        b[8..16].copy_from_slice(&position.epoch.to_le_bytes());
        b[16..24].copy_from_slice(&position.seq.to_le_bytes());
        let sum = xxh3_64(&b[..24]);
        b[24..32].copy_from_slice(&sum.to_le_bytes());
        let path = self.dir.join(FEED_FILE);
        let new = !path.exists();
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        f.write_all_at(&b, 0)?;
        f.sync_data()?;
        if new {
            sync_dir(&self.dir)?;
        }
        *feed = Some(position);
        Ok(())
    }

    /// The position [`RuleJournal::keep_feed_position`] last made durable.
    pub fn feed_position(&self) -> Option<FeedPosition> {
        *self.feed.lock()
    }

    fn fail(&self, what: &str, e: &std::io::Error) {
        if !self.failed.swap(true, Ordering::AcqRel) {
            tracing::error!(
                dir = %self.dir.display(),
                "invalidation journal: {what} failed ({e}); invalidations can no longer be acknowledged as durable"
            );
        }
    }

    /// Queues `bytes` (one record) to be written by the next flush.
    fn push(&self, bytes: &[u8], rule: Option<u64>) {
        let mut inner = self.inner.lock();
        inner.pending.extend_from_slice(bytes);
        let end = inner.pending.len();
        inner.pending_marks.push((end, rule));
        inner.len += bytes.len() as u64;
        inner.records += 1;
    }

    /// Writes what is pending and syncs the file; returns the newest rule now durable.
    /// Called with `sync_lock` held, so flushes go down one at a time, in order.
    fn flush(&self, _one: &parking_lot::MutexGuard<'_, ()>) -> std::io::Result<u64> {
        let (buf, at, file, target, head) = {
            let mut inner = self.inner.lock();
            let buf = std::mem::take(&mut inner.pending);
            inner.pending_marks.clear();
            let at = inner.len - buf.len() as u64;
            (
                buf,
                at,
                Arc::clone(&inner.file),
                self.appended.load(Ordering::Acquire),
                inner.head,
            )
        };
        let started = std::time::Instant::now();
        let path = self.dir.join(FILE);
        if !buf.is_empty() {
            file.write_all_at(&buf, at)?;
            crate::crashlog::write(&path, at, &buf);
        }
        file.sync_data()?;
        crate::crashlog::sync(&path);
        if !buf.is_empty() {
            // The synced length, once the records are durable (so a header never claims
            // records a power loss kept out): a record within it that recovery can't read
            // was acknowledged (damage), one past it never was (a torn write). It is made
            // durable by the next sync (the next acknowledgement, or the stop); until then
            // an older one stands, which only narrows what is recognised as damage.
            let end = at + buf.len() as u64;
            let h = header(head.0, head.1, head.2, end);
            file.write_all_at(&h, 0)?;
            crate::crashlog::write(&path, 0, &h);
        }
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.sync_nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(target)
    }

    /// Syncs rules appended but not waited for (puts'), with the data's periodic sync.
    pub fn sync_pending(&self) -> std::io::Result<()> {
        let appended = self.appended.load(Ordering::Acquire);
        if self.has_failed() || self.synced.load(Ordering::Acquire) >= appended {
            return Ok(());
        }
        trove_store::Journal::sync_through(self, appended)
    }

    pub fn has_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Bytes in the file.
    pub fn len(&self) -> u64 {
        self.inner.lock().len
    }

    pub fn is_empty(&self) -> bool {
        self.len() <= HEADER_LEN as u64
    }
}

impl Drop for RuleJournal {
    /// A clean stop writes what is pending (the disk tier's writer synced it already, or
    /// it is a put's rule within the crash bound).
    fn drop(&mut self) {
        let one = self.sync_lock.lock();
        if !self.has_failed() && self.flush(&one).is_ok() {
            // The synced length the flush wrote, durable for the next start.
            if self.inner.lock().file.sync_data().is_ok() {
                crate::crashlog::sync(&self.dir.join(FILE));
            }
        }
    }
}

impl trove_store::Journal for RuleJournal {
    fn append(&self, rule: &Rule) {
        if self.has_failed() {
            return;
        }
        self.push(&record(KIND_RULE, rule.seq, Some(rule)), Some(rule.seq));
        self.appended.fetch_max(rule.seq, Ordering::AcqRel);
    }

    fn reserve(&self, upto: u64) -> std::io::Result<()> {
        if self.has_failed() {
            return Err(std::io::Error::other(
                "the invalidation journal failed earlier",
            ));
        }
        let one = self.sync_lock.lock();
        self.push(&record(KIND_RESERVE, upto, None), None);
        {
            // What a compaction's header carries on (the rule log learns of it after).
            let mut inner = self.inner.lock();
            inner.head.0 = inner.head.0.max(upto);
        }
        let r = self.flush(&one);
        match r {
            Ok(target) => {
                self.synced.fetch_max(target, Ordering::AcqRel);
                Ok(())
            }
            Err(e) => {
                self.fail("reserving sequence numbers", &e);
                Err(e)
            }
        }
    }

    fn sync_through(&self, seq: u64) -> std::io::Result<()> {
        let failed = || std::io::Error::other("the invalidation journal failed earlier");
        if self.has_failed() {
            return Err(failed());
        }
        if self.synced.load(Ordering::Acquire) >= seq {
            return Ok(());
        }
        let one = self.sync_lock.lock();
        if self.synced.load(Ordering::Acquire) >= seq {
            return Ok(());
        }
        // Everything appended so far goes down with this sync: later callers share it.
        match self.flush(&one) {
            Ok(target) => {
                self.synced.fetch_max(target, Ordering::AcqRel);
                Ok(())
            }
            Err(e) => {
                self.fail("writing and syncing", &e);
                Err(e)
            }
        }
    }

    fn compact(&self, snapshot: &dyn Fn() -> Snapshot) -> std::io::Result<()> {
        if self.has_failed() {
            return Err(std::io::Error::other(
                "the invalidation journal failed earlier",
            ));
        }
        // No flush or reservation in flight meanwhile (it would write into the file being
        // replaced). Appends go on: into `pending`, taken over below. The rule log is not
        // locked meanwhile (issue 21: a lookup never waits for this sync).
        let _one = self.sync_lock.lock();
        // Taken now: every rule a flush wrote to the old file (flushes hold `sync_lock`) is
        // in it or retired, and every later one is pending.
        let state = &snapshot();
        let (records, reserved) = {
            let inner = self.inner.lock();
            (inner.records, inner.head.0)
        };
        // Not worth a rewrite until most of the file is retired rules.
        if records < 2 * state.rules.len() as u64 + 1024 {
            return Ok(());
        }
        let r = (|| {
            let tmp = self.dir.join(TMP);
            let mut out = Vec::with_capacity(HEADER_LEN + state.rules.len() * 48);
            let head = (
                // A reservation made durable after the snapshot is carried on.
                state.reserved.max(reserved),
                state.floor,
                self.disk_checked.load(Ordering::Acquire),
            );
            out.extend_from_slice(&header(head.0, head.1, head.2, 0));
            for r in &state.rules {
                out.extend_from_slice(&record(KIND_RULE, r.seq, Some(r)));
            }
            let synced = out.len() as u64;
            out[..HEADER_LEN].copy_from_slice(&header(head.0, head.1, head.2, synced));
            let mut f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)?;
            f.write_all(&out)?;
            crate::crashlog::set_len(&tmp, 0);
            crate::crashlog::write(&tmp, 0, &out);
            f.sync_all()?;
            crate::crashlog::sync(&tmp);
            std::fs::rename(&tmp, self.dir.join(FILE))?;
            crate::crashlog::record(|| crate::crashlog::Op::Rename {
                from: tmp.clone(),
                to: self.dir.join(FILE),
            });
            sync_dir(&self.dir)?;
            crate::crashlog::record(|| crate::crashlog::Op::SyncDir {
                dir: self.dir.clone(),
            });
            Ok::<_, std::io::Error>((f, out.len() as u64, head))
        })();
        match r {
            Ok((f, len, head)) => {
                let mut inner = self.inner.lock();
                // Pending records of rules in `state` are written with it; those appended
                // after the snapshot (above `through`) stay pending, for the new file.
                let (mut kept, mut marks, mut from) = (Vec::new(), Vec::new(), 0);
                for &(end, rule) in &inner.pending_marks {
                    if rule.is_some_and(|seq| seq > state.through) {
                        kept.extend_from_slice(&inner.pending[from..end]);
                        marks.push((kept.len(), rule));
                    }
                    from = end;
                }
                inner.head = (head.0.max(inner.head.0), head.1, head.2);
                inner.records = (state.rules.len() + marks.len()) as u64;
                inner.len = len + kept.len() as u64;
                inner.pending = kept;
                inner.pending_marks = marks;
                inner.file = Arc::new(f);
                // Every rule in the snapshot is in the new file, synced.
                self.synced.fetch_max(state.through, Ordering::AcqRel);
                Ok(())
            }
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), "invalidation journal: compaction failed ({e}); the longer journal stays");
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trove_store::Journal;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "trove-journal-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn rule(seq: u64, selector: Selector) -> Rule {
        Rule {
            seq,
            selector,
            mode: Mode::Hard,
            at: UNIX_EPOCH + Duration::from_millis(1_700_000_000_000 + seq),
        }
    }

    #[test]
    fn rules_and_reservations_come_back_in_order() {
        let d = dir("back");
        let (j, r) = RuleJournal::open(&d, Arc::default()).unwrap();
        assert!(r.snapshot.rules.is_empty());
        j.reserve(4096).unwrap();
        j.append(&rule(1, Selector::Key(7)));
        j.append(&rule(2, Selector::Tag(8)));
        j.append(&rule(3, Selector::Prefix("http://a/b".into())));
        let ban = Ban::parse("header:X-Kind", "~", "^pa ge$").unwrap();
        j.append(&Rule {
            mode: Mode::Soft,
            ..rule(4, Selector::Ban(Arc::new(ban)))
        });
        j.sync_through(4).unwrap();
        drop(j);
        let (_, r) = RuleJournal::open(&d, Arc::default()).unwrap();
        let s = r.snapshot;
        assert_eq!(s.reserved, 4096);
        assert_eq!(
            s.rules.iter().map(|r| r.seq).collect::<Vec<_>>(),
            vec![1, 2, 3, 4]
        );
        assert!(matches!(s.rules[0].selector, Selector::Key(7)));
        assert!(matches!(s.rules[1].selector, Selector::Tag(8)));
        assert!(matches!(&s.rules[2].selector, Selector::Prefix(p) if p == "http://a/b"));
        match &s.rules[3].selector {
            Selector::Ban(b) => assert_eq!(b.describe(), "header:x-kind ~ ^pa ge$"),
            _ => panic!("a ban"),
        }
        assert_eq!(s.rules[3].mode, Mode::Soft);
        assert_eq!(s.rules[2].at, rule(3, Selector::Key(0)).at);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// The cluster's feed position outlives a restart, a damaged one reads as none (the
    /// node reads the feed from its start), and discarding the cache forgets it.
    #[test]
    fn the_feed_position_is_kept_across_a_restart() {
        let d = dir("feed");
        let (j, _) = RuleJournal::open(&d, Arc::default()).unwrap();
        assert_eq!(j.feed_position(), None);
        for seq in [1, 2, 70_000] {
            j.keep_feed_position(FeedPosition { epoch: 9, seq })
                .unwrap();
        }
        drop(j);
        let (j, _) = RuleJournal::open(&d, Arc::default()).unwrap();
        assert_eq!(
            j.feed_position(),
            Some(FeedPosition {
                epoch: 9,
                seq: 70_000
            })
        );
        drop(j);
        let path = d.join(FEED_FILE);
        let mut b = std::fs::read(&path).unwrap();
        b[17] ^= 1;
        std::fs::write(&path, &b).unwrap();
        let (j, _) = RuleJournal::open(&d, Arc::default()).unwrap();
        assert_eq!(j.feed_position(), None);
        j.keep_feed_position(FeedPosition { epoch: 9, seq: 3 })
            .unwrap();
        drop(j);
        RuleJournal::discard(&d).unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn a_torn_tail_is_cut_and_damage_before_the_end_is_refused() {
        let d = dir("torn");
        let (j, _) = RuleJournal::open(&d, Arc::default()).unwrap();
        for s in 1..=3 {
            j.append(&rule(s, Selector::Key(s)));
        }
        drop(j);
        let path = d.join(FILE);
        let whole = std::fs::read(&path).unwrap();
        // Torn: the last record cut short.
        std::fs::write(&path, &whole[..whole.len() - 5]).unwrap();
        let (j, r) = RuleJournal::open(&d, Arc::default()).unwrap();
        assert_eq!(r.snapshot.rules.len(), 2);
        j.append(&rule(4, Selector::Key(4)));
        drop(j);
        let (_, r) = RuleJournal::open(&d, Arc::default()).unwrap();
        assert_eq!(
            r.snapshot.rules.iter().map(|r| r.seq).collect::<Vec<_>>(),
            vec![1, 2, 4]
        );
        // Damaged in the middle: refused.
        let mut bad = std::fs::read(&path).unwrap();
        bad[HEADER_LEN + 12] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        assert!(matches!(
            RuleJournal::open(&d, Arc::default()),
            Err(JournalError::Damaged(_))
        ));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn compaction_keeps_only_the_pending_rules() {
        let d = dir("compact");
        let checked = Arc::new(AtomicU64::new(0));
        let (j, _) = RuleJournal::open(&d, Arc::clone(&checked)).unwrap();
        for s in 1..=3000 {
            j.append(&rule(s, Selector::Key(s)));
        }
        checked.store(2990, Ordering::Release);
        let state = Snapshot {
            reserved: 8192,
            floor: 2990,
            rules: (2991..=3000).map(|s| rule(s, Selector::Key(s))).collect(),
            through: 3000,
        };
        // Appended after the snapshot, while it is rewritten (the rule log is not locked
        // across a compaction): kept.
        j.append(&rule(3001, Selector::Tag(2)));
        j.compact(&|| state.clone()).unwrap();
        j.append(&rule(3002, Selector::Tag(1)));
        j.sync_through(3002).unwrap();
        drop(j);
        let (_, r) = RuleJournal::open(&d, Arc::default()).unwrap();
        assert_eq!(r.snapshot.floor, 2990);
        assert_eq!(r.snapshot.reserved, 8192);
        assert_eq!(r.disk_checked, 2990);
        assert_eq!(
            r.snapshot.rules.iter().map(|r| r.seq).collect::<Vec<_>>(),
            (2991..=3002).collect::<Vec<_>>()
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}

//! [`DiskStore`]: the disk tier's public face. Callers queue writes and removals (never
//! blocking), look objects up in the index and read them back verified.
//!
//! One writer thread owns the regions (see `writer`); at start it reads the region headers
//! and writes at once, while the index comes back on a thread of its own (`recovery`), so
//! the store answers at once (misses) and finds more of what is on disk as each region's
//! part of the index comes back, the newest first. Readers use `pread` on any thread; a disk hit
//! is read by the proxy's blocking pool, never by the cache core.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use trove_store::hash::{fingerprint, key_hash};
use trove_store::Object;

use crate::dir::{Dir, OpenError};
use crate::format::{FLAG_ALL_VARIANTS, FLAG_VARIED};
use crate::index::{Index, Loc, Varied, MAX_REGIONS, MAX_REGION_SIZE};
use crate::journal::{JournalError, Restored, RuleJournal};

/// How space is reclaimed when the regions are full (see `writer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reclaim {
    /// The oldest region goes, whole.
    Fifo,
    /// The oldest region goes, but objects hit since they were written are copied forward
    /// first (up to half a region's worth): CacheLib Navy's "reinsertion".
    #[default]
    FifoReinsert,
}

impl Reclaim {
    pub fn as_str(self) -> &'static str {
        match self {
            Reclaim::Fifo => "fifo",
            Reclaim::FifoReinsert => "fifo-reinsert",
        }
    }
    pub fn parse(s: &str) -> Option<Reclaim> {
        match s {
            "fifo" => Some(Reclaim::Fifo),
            "fifo-reinsert" => Some(Reclaim::FifoReinsert),
            _ => None,
        }
    }
}

/// What the disk tier is built from.
#[derive(Debug, Clone)]
pub struct DiskConfig {
    pub paths: Vec<PathBuf>,
    /// Bytes of disk, over all paths.
    pub budget: u64,
    pub region_size: u64,
    /// The crash bound (see `writer`): an acknowledged object reaches the file within it
    /// (what a `kill -9` can lose), and is `fdatasync`ed within it after that (a power loss:
    /// at most twice it). The write queue admits only what the writer is measured to drain
    /// in half of it; the rest is shed, not acknowledged.
    pub sync_interval: Duration,
    pub reclaim: Reclaim,
    /// Bytes of objects waiting for the writer at most, whatever its measured speed; past
    /// this (or past what it drains in half a `sync_interval`), more are not written.
    pub queue_bytes: u64,
}

impl DiskConfig {
    pub fn new(path: impl Into<PathBuf>, budget: u64) -> DiskConfig {
        DiskConfig {
            paths: vec![path.into()],
            budget,
            region_size: 16 << 20,
            sync_interval: Duration::from_secs(1),
            reclaim: Reclaim::default(),
            queue_bytes: 64 << 20,
        }
    }
}

/// Counters of the disk tier.
#[derive(Debug, Default)]
pub struct Stats {
    pub writes: AtomicU64,
    pub write_bytes: AtomicU64,
    /// Objects not written: the queue was full, or the tier had failed.
    pub writes_dropped: AtomicU64,
    /// Objects the queue took: *acknowledged*, held to the crash bound.
    pub writes_queued: AtomicU64,
    /// Of `writes_dropped`, those turned away because the writer would not have reached
    /// them within the crash bound (or the queue's byte cap).
    pub writes_shed: AtomicU64,
    /// Acknowledged objects that reached the file later than `sync_interval` after their
    /// acknowledgement (the bound did not hold for them: a stalled disk).
    pub writes_late: AtomicU64,
    /// The longest time from an acknowledgement to the write that put it in the file, µs.
    pub write_delay_max_micros: AtomicU64,
    pub hits: AtomicU64,
    /// Records found torn, truncated or corrupt (at recovery or on a read) and dropped.
    pub corrupt: AtomicU64,
    pub regions_reclaimed: AtomicU64,
    pub reinserted: AtomicU64,
    pub io_errors: AtomicU64,
    pub recovered_objects: AtomicU64,
    pub recovery_micros: AtomicU64,
    /// Regions holding data.
    pub regions_used: AtomicU64,
    /// Invalidation passes over the disk completed, and objects they removed.
    pub passes: AtomicU64,
    pub pass_removed: AtomicU64,
}

/// A snapshot of [`Stats`] and the index's size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskStats {
    pub objects: u64,
    pub index_bytes: u64,
    pub capacity: u64,
    pub bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub writes_dropped: u64,
    pub writes_queued: u64,
    pub writes_shed: u64,
    pub writes_late: u64,
    pub write_delay_max_micros: u64,
    /// What the write queue admits now, in bytes (see [`DiskConfig::sync_interval`]).
    pub queue_limit: u64,
    pub hits: u64,
    pub corrupt: u64,
    pub regions_reclaimed: u64,
    pub reinserted: u64,
    pub io_errors: u64,
    pub recovered_objects: u64,
    pub recovery_micros: u64,
    pub ready: bool,
    pub failed: bool,
    pub passes: u64,
    pub pass_removed: u64,
    /// Acknowledgement syncs of the invalidation journal, and the time they took.
    pub journal_syncs: u64,
    pub journal_sync_nanos: u64,
    pub journal_bytes: u64,
}

/// The writer's measured speed, bytes per second of work: what the queue may hold so that
/// an object acknowledged now is in the file within the crash bound.
///
/// Only passes that wrote at least [`DrainRate::MIN_SAMPLE`] bytes are measured (small ones
/// are all fixed costs, and a queue that small drains at once anyway); each counts a quarter
/// (an exponential average), so a disk that slows down (the kernel throttling dirty pages,
/// a busy device) is followed within a few passes. Until the first measurement it assumes
/// [`DrainRate::INITIAL`], a slow disk's speed.
#[derive(Debug)]
pub(crate) struct DrainRate(AtomicU64);

impl Default for DrainRate {
    fn default() -> Self {
        DrainRate(AtomicU64::new(Self::INITIAL))
    }
}

impl DrainRate {
    pub const INITIAL: u64 = 16 << 20;
    pub const MIN_SAMPLE: u64 = 256 << 10;

    /// The writer wrote `bytes` of queued objects in `busy` (encoding, writing, syncing).
    pub fn sample(&self, bytes: u64, busy: Duration) {
        if bytes < Self::MIN_SAMPLE {
            return;
        }
        let now = (bytes as f64 / busy.as_secs_f64().max(1e-6)) as u64;
        let old = self.0.load(Ordering::Relaxed);
        self.0.store(old / 4 * 3 + now / 4, Ordering::Relaxed);
    }

    pub fn bytes_per_sec(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// What the queue may hold: drained in half of `bound`, at most `cap`.
    pub fn limit(&self, bound: Duration, cap: u64) -> u64 {
        let half = bound.as_secs_f64() / 2.0;
        ((self.bytes_per_sec() as f64 * half) as u64).min(cap)
    }
}

/// Keeps whole-key removals apart from single fingerprints in `recent_removals`.
pub(crate) const ALL_SALT: u64 = 0x5a5a_a5a5_5a5a_a5a5;

pub(crate) const RECOVERING: u8 = 0;
pub(crate) const READY: u8 = 1;
pub(crate) const FAILED: u8 = 2;

/// Work for the writer.
pub(crate) enum Job {
    Object {
        key: String,
        variant: String,
        /// The labels section (`labels::encode`).
        labels: Vec<u8>,
        meta: Vec<u8>,
        body: Vec<Bytes>,
        bytes: u64,
        /// The removal epoch when it was queued: a removal after it wins.
        epoch: u64,
        /// When it was acknowledged (queued): the crash bound runs from here.
        queued_at: Instant,
    },
    Tombstone {
        key_hash: u64,
        fingerprint: u64,
        all: bool,
        epoch: u64,
    },
    Flush(Arc<(Mutex<bool>, Condvar)>),
}

/// A removal made while the index was still coming back, applied when it is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LateRemoval {
    pub key_hash: u64,
    pub fingerprint: u64,
    pub all: bool,
}

pub(crate) struct Shared {
    pub dir: Dir,
    /// Each region's current use (`format::RegionHeader::seq`); 0 while free.
    pub seqs: Vec<AtomicU64>,
    pub index: Index,
    pub varied: Varied,
    pub stats: Stats,
    pub state: AtomicU8,
    pub queue: Mutex<VecDeque<Job>>,
    pub wake: Condvar,
    pub queued_bytes: AtomicU64,
    /// How fast the writer drains its queue, measured (see [`DrainRate`]).
    pub drain: DrainRate,
    pub late_removals: Mutex<Vec<LateRemoval>>,
    /// Counts removals; see `recent_removals`.
    pub epoch: AtomicU64,
    /// Fingerprints (and, for whole keys, `key_hash ^ ALL_SALT`) removed at an epoch whose
    /// tombstone is not written yet: an object queued before the removal and written after
    /// it must not reappear in the index.
    pub recent_removals: Mutex<std::collections::HashMap<u64, u64>>,
    /// The rule log the objects are judged by (the memory tier's), once `Tiered` attached it.
    pub inv: std::sync::OnceLock<Arc<trove_store::Invalidations>>,
    /// The invalidation journal (`journal`), in the first directory.
    pub journal: Arc<RuleJournal>,
    /// Every record on disk has been checked against the rules up to this one (the last
    /// complete [`DiskStore::pass`]); a record read back is judged from here on.
    pub disk_checked: Arc<AtomicU64>,
    /// Writes take it shared while they judge an object and queue it; a pass takes it
    /// alone to mark where it starts (see [`DiskStore::pass`]).
    pub stamp: parking_lot::RwLock<()>,
    pub stop: AtomicBool,
    pub config: DiskConfig,
    /// Set once the failure was logged, so it is logged once.
    pub failure_logged: AtomicBool,
    /// Records verified for zero-copy sends, per region (`zero_copy`).
    pub verified: Vec<Mutex<crate::zero_copy::Verified>>,
    /// True while bodies may be sent from the file: the file system punches holes, so a
    /// reclaimed region's old pages stay with the sockets that reference them.
    pub zero_copy: AtomicBool,
}

impl Shared {
    /// Stops using the disk: one log line, the metric, and memory-only from now on.
    pub fn fail(&self, what: &str, err: &dyn std::fmt::Display) {
        self.stats.io_errors.fetch_add(1, Ordering::Relaxed);
        self.state.store(FAILED, Ordering::Release);
        if !self.failure_logged.swap(true, Ordering::AcqRel) {
            tracing::error!(
                paths = ?self.config.paths,
                "disk tier failed ({what}: {err}); trove goes on with the memory tier only"
            );
        }
    }
}

/// The disk tier (see the module docs). Dropping it stops the writer after it has written
/// what was queued.
pub struct DiskStore {
    pub(crate) shared: Arc<Shared>,
    writer: Option<std::thread::JoinHandle<()>>,
    restored: Mutex<Option<Restored>>,
}

impl std::fmt::Debug for DiskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskStore")
            .field("stats", &self.stats())
            .finish()
    }
}

/// An object found on disk, read back whole and verified.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub key: String,
    pub variant: String,
    pub head: trove_store::ObjectHead,
    pub body: LoadedBody,
}

/// The body of a [`Loaded`] object.
#[derive(Debug, Clone)]
pub enum LoadedBody {
    /// Small enough to have been read with the head, and verified.
    Whole(Bytes),
    /// Larger: stream it with [`DiskStore::stream`], which verifies at the end.
    Stream(Box<crate::reader::BodyStream>),
}

/// The object a record holds, without its body (enough to judge it by the rule log);
/// `None` if its head or labels don't decode.
pub(crate) fn object_of(rec: &crate::format::Record, checked_floor: u64) -> Option<Object> {
    let mut head = crate::meta::decode(&rec.meta).ok()?;
    head.labels = crate::labels::decode(&rec.labels, checked_floor).ok()?;
    Some(Object::new(
        rec.key.clone(),
        rec.variant.clone(),
        head,
        trove_store::Body::complete(Bytes::new()),
    ))
}

impl DiskStore {
    /// Opens (locks, checks the format of) the directories and starts the writer, which
    /// recovers the index in the background. Fails only when the directories can't be used.
    pub fn open(config: DiskConfig) -> Result<DiskStore, OpenError> {
        if config.region_size > MAX_REGION_SIZE || config.region_size < 64 << 10 {
            return Err(OpenError::TooSmall(0));
        }
        let dir = Dir::open(&config.paths, config.budget, config.region_size)?;
        if dir.region_count() as u64 > MAX_REGIONS {
            return Err(OpenError::TooSmall(0));
        }
        let first = config.paths.first().cloned().unwrap_or_default();
        let jio = |err: std::io::Error| OpenError::Io {
            path: first.clone(),
            err,
        };
        if dir.discarded {
            tracing::warn!(paths = ?config.paths, "disk tier: an older or unmarked cache directory was discarded");
            RuleJournal::discard(&first).map_err(jio)?;
        }
        let disk_checked = Arc::new(AtomicU64::new(0));
        let (journal, restored) = match RuleJournal::open(&first, Arc::clone(&disk_checked)) {
            Ok(j) => j,
            Err(JournalError::Io(e)) => return Err(jio(e)),
            Err(JournalError::Newer { path, found }) => {
                return Err(OpenError::NewerJournal { path, found })
            }
            Err(JournalError::Damaged(path)) => {
                // Rules may be missing: no object they may cover can be trusted.
                tracing::error!(
                    path = %path.display(),
                    "disk tier: the invalidation journal is damaged before its end; the cached objects are discarded so none it covered can come back"
                );
                dir.wipe().map_err(jio)?;
                RuleJournal::discard(&first).map_err(jio)?;
                RuleJournal::open(&first, Arc::clone(&disk_checked)).map_err(|e| match e {
                    JournalError::Io(e) => jio(e),
                    other => jio(std::io::Error::other(other.to_string())),
                })?
            }
        };
        let zero_copy = dir.can_punch();
        let shared = Arc::new(Shared {
            verified: crate::zero_copy::verified_sets(dir.region_count()),
            zero_copy: AtomicBool::new(zero_copy),
            seqs: (0..dir.region_count()).map(|_| AtomicU64::new(0)).collect(),
            dir,
            index: Index::default(),
            varied: Varied::default(),
            stats: Stats::default(),
            state: AtomicU8::new(RECOVERING),
            queue: Mutex::new(VecDeque::new()),
            wake: Condvar::new(),
            queued_bytes: AtomicU64::new(0),
            drain: DrainRate::default(),
            late_removals: Mutex::new(Vec::new()),
            epoch: AtomicU64::new(0),
            recent_removals: Mutex::new(std::collections::HashMap::new()),
            inv: std::sync::OnceLock::new(),
            journal: Arc::new(journal),
            disk_checked,
            stamp: parking_lot::RwLock::new(()),
            stop: AtomicBool::new(false),
            config,
            failure_logged: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("trove-disk-writer".into())
            .spawn(move || crate::writer::run(&s))
            .map_err(|err| OpenError::Io {
                path: PathBuf::new(),
                err,
            })?;
        Ok(DiskStore {
            shared,
            writer: Some(writer),
            restored: Mutex::new(Some(restored)),
        })
    }

    /// The rule log the journal kept, once (for `Tiered` to hand to the memory tier's
    /// `Invalidations` before anything is served).
    pub(crate) fn take_restored(&self) -> Option<Restored> {
        self.restored.lock().take()
    }

    /// Judges objects by `inv` from now on: at writes, at reinsertion and in passes.
    pub(crate) fn attach(&self, inv: Arc<trove_store::Invalidations>) {
        let _ = self.shared.inv.set(inv);
    }

    /// The invalidation journal.
    pub fn journal(&self) -> &Arc<RuleJournal> {
        &self.shared.journal
    }

    fn state(&self) -> u8 {
        self.shared.state.load(Ordering::Acquire)
    }

    /// True once the index is back.
    pub fn is_ready(&self) -> bool {
        self.state() == READY
    }

    /// True once the tier gave up on its disk (it is memory-only from then on).
    pub fn has_failed(&self) -> bool {
        self.state() == FAILED
    }

    /// Waits (up to `limit`) for recovery to finish; true if it did.
    pub fn wait_ready(&self, limit: Duration) -> bool {
        let end = std::time::Instant::now() + limit;
        while self.state() == RECOVERING {
            if std::time::Instant::now() > end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.is_ready()
    }

    /// Queues `obj` (its body complete) for writing; false if it was not queued (the body
    /// is not complete, the queue is full, the tier failed, or a rule killed it).
    pub fn write(&self, obj: &Object) -> bool {
        if self.has_failed() {
            return false;
        }
        // Judged and queued under the stamp: a pass that starts after this sees the record
        // on disk, or the record's `checked` covers every rule the pass covers.
        let _stamp = self.shared.stamp.read();
        if let Some(inv) = self.shared.inv.get() {
            if inv.verdict(obj) == trove_store::Verdict::Dead {
                return false;
            }
        }
        let Some(body) = obj.body.complete_chunks() else {
            return false;
        };
        let bytes: u64 = body.iter().map(|b| b.len() as u64).sum::<u64>() + 1024;
        let limit = self.queue_limit();
        let queued = self.shared.queued_bytes.fetch_add(bytes, Ordering::AcqRel);
        // An empty queue takes any object: the writer reaches it next.
        if queued > 0 && queued + bytes > limit {
            self.shared.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
            let s = &self.shared.stats;
            s.writes_dropped.fetch_add(1, Ordering::Relaxed);
            s.writes_shed.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.shared
            .stats
            .writes_queued
            .fetch_add(1, Ordering::Relaxed);
        self.push(Job::Object {
            key: obj.key.clone(),
            variant: obj.variant.clone(),
            labels: crate::labels::encode(&obj.head.labels),
            meta: crate::meta::encode(&obj.head),
            body,
            bytes,
            epoch: self.shared.epoch.load(Ordering::Acquire),
            queued_at: Instant::now(),
        });
        true
    }

    /// Bytes the write queue admits now: what the writer drains in half a `sync_interval`
    /// at its measured speed, at most `queue_bytes`.
    pub fn queue_limit(&self) -> u64 {
        let c = &self.shared.config;
        self.shared.drain.limit(c.sync_interval, c.queue_bytes)
    }

    fn push(&self, job: Job) {
        self.shared.queue.lock().push_back(job);
        self.shared.wake.notify_one();
    }

    /// Removes every variant of `key` (`variant: None`) or one, from the index now and, by a
    /// tombstone record, from what a restart recovers.
    pub fn remove(&self, key: &str, variant: Option<&str>) {
        if self.has_failed() {
            return;
        }
        let kh = key_hash(key);
        let (fp, all) = match variant {
            Some(v) => (fingerprint(key, v), false),
            None => (fingerprint(key, ""), true),
        };
        let removal = LateRemoval {
            key_hash: kh,
            fingerprint: fp,
            all,
        };
        if self.state() == RECOVERING {
            self.shared.late_removals.lock().push(removal);
        }
        let epoch = self.shared.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        {
            let mut recent = self.shared.recent_removals.lock();
            recent.insert(if all { kh ^ ALL_SALT } else { fp }, epoch);
        }
        crate::recovery::apply_removal(&self.shared, removal);
        self.push(Job::Tombstone {
            key_hash: kh,
            fingerprint: fp,
            all,
            epoch,
        });
    }

    /// A pass over every record on disk: each object is judged by the rule log, and the
    /// dead (and the soft-invalidated: a record's soft mark can't be updated in place) are
    /// removed from the index with a tombstone, synced before this returns. Then every
    /// record on disk has been checked through the sequence number current at the start,
    /// which becomes [`Shared::disk_checked`] — so rules up to it may be retired
    /// (`Tiered::scans`). Blocking I/O, a read of every region in use: run it off the
    /// request path, seldom. False if it could not run whole (not ready, failed, no rules).
    pub fn pass(&self) -> bool {
        let Some(inv) = self.shared.inv.get() else {
            return false;
        };
        if !self.is_ready() {
            return false;
        }
        // Records queued before this point are on disk when the regions are read (the
        // flush); records queued after it were judged at least through `upto` (`write`).
        let upto = {
            let _alone = self.shared.stamp.write();
            inv.current()
        };
        self.flush();
        let mut removed = 0u64;
        for r in 0..self.shared.dir.region_count() {
            if self.has_failed() {
                return false;
            }
            let seq = self.shared.seqs[r as usize].load(Ordering::Acquire);
            if seq == 0 {
                continue;
            }
            match crate::recovery::judge_region(&self.shared, r, seq, inv) {
                Ok(dead) => {
                    for (key, variant) in dead {
                        self.remove(&key, Some(&variant));
                        removed += 1;
                    }
                }
                Err(e) => {
                    self.shared
                        .fail("reading a region for an invalidation pass", &e);
                    return false;
                }
            }
        }
        // The tombstones go down before any rule is retired on the strength of this pass.
        self.flush();
        if self.has_failed() {
            return false;
        }
        self.shared.disk_checked.fetch_max(upto, Ordering::AcqRel);
        self.shared
            .stats
            .pass_removed
            .fetch_add(removed, Ordering::Relaxed);
        self.shared.stats.passes.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// True if the index may hold `key` (cheap: no I/O).
    pub fn may_hold(&self, key: &str) -> bool {
        if self.has_failed() {
            return false;
        }
        self.shared.index.get(fingerprint(key, "")).is_some()
            || !self.shared.varied.get(key_hash(key)).is_empty()
    }

    /// Every variant of `key` on disk, read and verified (blocking I/O: call it from a
    /// blocking pool). Bodies up to `whole_limit` bytes come back whole; larger ones as a
    /// stream. Corrupt records are dropped from the index and counted.
    pub fn load(&self, key: &str, whole_limit: u64) -> Vec<Loaded> {
        if self.has_failed() {
            return Vec::new();
        }
        let kh = key_hash(key);
        let mut fps = vec![fingerprint(key, "")];
        fps.extend(self.shared.varied.get(kh));
        let mut out = Vec::new();
        for fp in fps {
            let Some(loc) = self.shared.index.get(fp) else {
                continue;
            };
            match crate::reader::load(&self.shared, fp, loc, key, whole_limit) {
                Ok(Some(l)) => {
                    self.shared.index.mark_accessed(fp);
                    self.shared.stats.hits.fetch_add(1, Ordering::Relaxed);
                    out.push(l);
                }
                Ok(None) => {}
                Err(e) => self.drop_corrupt(fp, loc, &e),
            }
        }
        out
    }

    pub(crate) fn drop_corrupt(&self, fp: u64, loc: Loc, why: &dyn std::fmt::Display) {
        if self.shared.index.remove_if_at(fp, loc) {
            self.shared.stats.corrupt.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                region = loc.region(),
                offset = loc.offset(),
                "disk tier: dropped a corrupt record ({why})"
            );
        }
    }

    /// Reads the next chunk of a streamed body; `Ok(None)` at its verified end. A checksum
    /// mismatch at the end is an error, and the record is dropped.
    pub fn stream(&self, s: &mut crate::reader::BodyStream) -> std::io::Result<Option<Bytes>> {
        match crate::reader::next_chunk(&self.shared, s) {
            Err(e) => {
                self.drop_corrupt(s.fingerprint, s.loc, &e);
                Err(e)
            }
            ok => ok,
        }
    }

    /// Waits until everything queued so far is written (and synced when `sync`).
    pub fn flush(&self) {
        let done = Arc::new((Mutex::new(false), Condvar::new()));
        self.push(Job::Flush(Arc::clone(&done)));
        let mut d = done.0.lock();
        while !*d && !self.has_failed() {
            done.1.wait_for(&mut d, Duration::from_millis(50));
        }
    }

    pub fn stats(&self) -> DiskStats {
        let s = &self.shared.stats;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let region = self.shared.dir.region_size();
        DiskStats {
            objects: self.shared.index.len(),
            index_bytes: self.shared.index.bytes() + self.shared.varied.bytes(),
            capacity: self.shared.dir.region_count() as u64 * region,
            bytes: g(&s.regions_used) * region,
            writes: g(&s.writes),
            write_bytes: g(&s.write_bytes),
            writes_dropped: g(&s.writes_dropped),
            writes_queued: g(&s.writes_queued),
            writes_shed: g(&s.writes_shed),
            writes_late: g(&s.writes_late),
            write_delay_max_micros: g(&s.write_delay_max_micros),
            queue_limit: self.queue_limit(),
            hits: g(&s.hits),
            corrupt: g(&s.corrupt),
            regions_reclaimed: g(&s.regions_reclaimed),
            reinserted: g(&s.reinserted),
            io_errors: g(&s.io_errors),
            recovered_objects: g(&s.recovered_objects),
            recovery_micros: g(&s.recovery_micros),
            ready: self.is_ready(),
            failed: self.has_failed(),
            passes: g(&s.passes),
            pass_removed: g(&s.pass_removed),
            journal_syncs: g(&self.shared.journal.syncs),
            journal_sync_nanos: g(&self.shared.journal.sync_nanos),
            journal_bytes: self.shared.journal.len(),
        }
    }

    /// Flags of a record for `variant`.
    pub(crate) fn flags_for(variant: &str) -> u8 {
        if variant.is_empty() {
            0
        } else {
            FLAG_VARIED
        }
    }

    /// Tombstone flags.
    pub(crate) fn tombstone_flags(all: bool) -> u8 {
        if all {
            FLAG_ALL_VARIANTS
        } else {
            0
        }
    }
}

impl Drop for DiskStore {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake.notify_all();
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drain_rate_sets_the_queue_to_half_the_bound() {
        let r = DrainRate::default();
        let second = Duration::from_secs(1);
        assert_eq!(r.limit(second, 1 << 30), DrainRate::INITIAL / 2);
        // Small passes are all fixed costs: not measured.
        r.sample(1000, Duration::from_millis(100));
        assert_eq!(r.bytes_per_sec(), DrainRate::INITIAL);
        // A fast disk: the cap rules.
        for _ in 0..20 {
            r.sample(8 << 20, Duration::from_millis(4));
        }
        assert_eq!(r.limit(second, 64 << 20), 64 << 20);
        // It slows to 2 MB/s: within a few passes the queue holds about a second's half.
        for _ in 0..40 {
            r.sample(1 << 20, Duration::from_millis(500));
        }
        let l = r.limit(second, 64 << 20);
        assert!((1 << 20) - 50_000 < l && l < (1 << 20) + 50_000, "{l}");
        // A shorter bound, a shorter queue.
        let fifth = r.limit(Duration::from_millis(200), 64 << 20);
        assert!(fifth.abs_diff(l / 5) <= 1, "{fifth} against {l}");
    }

    /// A write the writer would not reach within the bound is shed (not acknowledged) and
    /// counted; an empty queue takes anything.
    #[test]
    fn writes_past_what_the_bound_drains_are_shed_and_counted() {
        let dir = std::env::temp_dir().join(format!("trove-disk-test-shed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let d = DiskStore::open(DiskConfig {
            region_size: 256 << 10,
            ..DiskConfig::new(&dir, 4 << 20)
        })
        .unwrap();
        assert!(d.wait_ready(Duration::from_secs(30)));
        let obj = |i: usize| {
            Object::new(
                format!("http://example.com/{i}"),
                String::new(),
                trove_store::ObjectHead {
                    status: http::StatusCode::OK,
                    headers: http::HeaderMap::new(),
                    request_headers: http::HeaderMap::new(),
                    request_time: std::time::SystemTime::UNIX_EPOCH,
                    response_time: std::time::SystemTime::UNIX_EPOCH,
                    prepared: Default::default(),
                    labels: Default::default(),
                },
                trove_store::Body::complete(Bytes::from(vec![7u8; 1000])),
            )
        };
        let limit = d.queue_limit();
        assert_eq!(limit, DrainRate::INITIAL / 2);
        // As if the writer were behind by the whole limit.
        d.shared.queued_bytes.fetch_add(limit, Ordering::AcqRel);
        assert!(!d.write(&obj(1)), "shed");
        let s = d.stats();
        assert_eq!(
            (s.writes_shed, s.writes_dropped, s.writes_queued),
            (1, 1, 0)
        );
        d.shared.queued_bytes.fetch_sub(limit, Ordering::AcqRel);
        assert!(d.write(&obj(2)), "taken");
        d.flush();
        let s = d.stats();
        assert_eq!((s.writes_queued, s.writes, s.writes_late), (1, 1, 0));
        assert!(s.write_delay_max_micros > 0);
        drop(d);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

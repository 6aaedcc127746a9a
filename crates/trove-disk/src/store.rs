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
use trove_store::{Note, Object};

use crate::dir::{Dir, OpenError};

use crate::format::FormatError;
use crate::index::{Index, Loc, Varied, MAX_REGIONS, MAX_REGION_SIZE};
use crate::journal::{JournalError, Restored, RuleJournal};
use crate::reader::{Loaded, ReadError};
use crate::shared::{
    DiskConfig, DiskStats, DrainRate, Gate, Job, LateRemoval, Shared, Stats, ALL_SALT, FAILED,
    READY, RECOVERING,
};
use crate::zero_copy::{self, Blocked, Cached, Mode, OnDisk};

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
        let mut journal_wiped = false;
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
                journal_wiped = true;
                RuleJournal::discard(&first).map_err(jio)?;
                RuleJournal::open(&first, Arc::clone(&disk_checked)).map_err(|e| match e {
                    JournalError::Io(e) => jio(e),
                    other => jio(std::io::Error::other(other.to_string())),
                })?
            }
        };
        let zero_copy = dir.can_punch();
        let shared = Arc::new(Shared {
            verified: crate::shared::verified_sets(dir.region_count()),
            pins: crate::shared::pin_counts(dir.region_count()),
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
            moving: Mutex::new(std::collections::HashMap::new()),
            deferred_removals: Mutex::new(VecDeque::new()),
            inv: std::sync::OnceLock::new(),
            journal: Arc::new(journal),
            disk_checked,
            stamp: parking_lot::RwLock::new(()),
            steps: parking_lot::RwLock::new(()),
            stop: AtomicBool::new(false),
            config,
            failure_logged: AtomicBool::new(false),
            jobs_pushed: AtomicU64::new(0),
            jobs_done: AtomicU64::new(0),
            jobs_begun: AtomicU64::new(0),
            regions_retired: AtomicU64::new(0),
            gate: std::sync::OnceLock::new(),
        });
        if restored.lost_acknowledged || journal_wiped {
            shared.stats.journal_damaged.fetch_add(1, Ordering::Relaxed);
        }
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
        // An empty queue takes any object: the writer reaches it next. A held writer's
        // queue (a replay's) is as long as the replay lets it be, and its speed is this
        // machine's: it sheds nothing, or what a replay stores would depend on them.
        if queued > 0 && queued + bytes > limit && self.shared.gate.get().is_none() {
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

    /// A spool for `obj`, whose body of `len` bytes is to be written to disk as it arrives
    /// (`crate::spool`); `None` if the tier has failed, or the body would take more than
    /// half the disk (its last fragments would reclaim the regions of its first). Nothing
    /// is written before the body hands its first piece over.
    pub fn spool(&self, obj: &Object, len: u64) -> Option<crate::DiskSpool> {
        if self.has_failed() {
            return None;
        }
        let d = &self.shared.dir;
        if len > d.region_count() as u64 * d.region_size() / 2 {
            return None;
        }
        Some(crate::spool::DiskSpool::arriving(
            Arc::clone(&self.shared),
            &obj.key,
            &obj.variant,
        ))
    }

    /// Queues the head of `obj`, whose body `spool` has taken whole
    /// ([`trove_store::Spool::finish`]), to be written after its fragments: judged by the
    /// rules under the stamp first, as [`DiskStore::write`] judges an object, so a rule the
    /// disk pass retires meanwhile still reaches it. False (and the spool abandoned) if the
    /// body is not whole, a rule killed it, the spool failed or the tier did.
    pub fn finish_spool(&self, obj: &Object, spool: &crate::DiskSpool) -> bool {
        use trove_store::Spool;
        let len = spool.0.finished.load(Ordering::Acquire);
        if self.has_failed() || !spool.0.going() || len == u64::MAX {
            spool.abandon();
            return false;
        }
        let _stamp = self.shared.stamp.read();
        if let Some(inv) = self.shared.inv.get() {
            if inv.verdict(obj) == trove_store::Verdict::Dead {
                spool.abandon();
                return false;
            }
        }
        self.shared
            .stats
            .writes_queued
            .fetch_add(1, Ordering::Relaxed);
        self.push(Job::SpoolHead {
            spool: Arc::clone(&spool.0),
            len,
            key: obj.key.clone(),
            variant: obj.variant.clone(),
            labels: crate::labels::encode(&obj.head.labels),
            meta: crate::meta::encode(&obj.head),
            epoch: self.shared.epoch.load(Ordering::Acquire),
            queued_at: Instant::now(),
        });
        true
    }

    /// The fragments of a head found on disk (`s`, from [`DiskStore::load`]), to read its
    /// body from as a spool; `None` if `s` is an ordinary record's body.
    pub fn spool_at_rest(&self, s: &crate::reader::BodyStream) -> Option<crate::DiskSpool> {
        let list = s.fragment_list()?;
        Some(crate::spool::DiskSpool::at_rest(
            Arc::clone(&self.shared),
            s.fingerprint,
            s.key_hash(),
            s.loc,
            list.clone(),
        ))
    }

    /// The largest body the disk can spool: half of it.
    pub fn max_spool(&self) -> u64 {
        let d = &self.shared.dir;
        d.region_count() as u64 * d.region_size() / 2
    }

    /// Bytes the write queue admits now: what the writer drains in half a `sync_interval`
    /// at its measured speed, at most `queue_bytes`.
    pub fn queue_limit(&self) -> u64 {
        let c = &self.shared.config;
        self.shared.drain.limit(c.sync_interval, c.queue_bytes)
    }

    fn push(&self, job: Job) {
        self.shared.push(job);
    }

    /// Jobs (writes, tombstones, fragments) the writer has carried out so far, and those
    /// queued: where it is, for a trace to record beside each request
    /// ([`trove_store::Storage::lower_progress`]).
    pub fn progress(&self) -> trove_store::LowerProgress {
        let done = self.shared.jobs_done.load(Ordering::Acquire);
        trove_store::LowerProgress {
            done,
            // A failed batch counts its jobs done without beginning them all.
            begun: self.shared.jobs_begun.load(Ordering::Acquire).max(done),
            reclaims: self.shared.regions_retired.load(Ordering::Acquire),
            queued: self.shared.jobs_pushed.load(Ordering::Acquire),
        }
    }

    /// Holds the writer: from now on it carries out queued jobs only as far as
    /// [`DiskStore::release`] lets it. For a replay that puts the writer where a trace says
    /// trove's was (its writer runs beside the requests: what it has written or reclaimed
    /// when a request looks up depends on timing). Call before the store is used.
    pub fn hold_writer(&self) {
        // Under the queue's lock, and waking it: a writer already waiting for work in the
        // unheld way must not take the first jobs queued all at once.
        let _q = self.shared.queue.lock();
        let _ = self.shared.gate.set(Gate::default());
        self.shared.wake.notify_all();
    }

    /// With the writer held: lets it carry out the jobs queued up to the `n`th in all (of
    /// those queued now), and waits until it has.
    pub fn release(&self, n: u64) {
        let Some(g) = self.shared.gate.get() else {
            return;
        };
        // Only what is queued now: a job queued later (by the request about to run) waits
        // for the next release, not for the writer's timing.
        let target = {
            let _q = self.shared.queue.lock();
            let target = n.min(self.shared.jobs_pushed.load(Ordering::Acquire));
            g.allowed.fetch_max(target, Ordering::AcqRel);
            self.shared.wake.notify_one();
            target
        };
        let mut lock = g.done.0.lock();
        loop {
            if self.shared.jobs_done.load(Ordering::Acquire) >= target || self.has_failed() {
                return;
            }
            g.done.1.wait_for(&mut lock, Duration::from_millis(50));
        }
    }

    /// With the writer held: if it has reclaimed fewer than `reclaims` regions in all, lets
    /// it reclaim the one the next queued job needs (if it needs one), as it does before
    /// beginning that job, without beginning it; waits until it has. For a replay whose
    /// trace says trove's writer had reclaimed the region for a job it had not begun yet.
    pub fn roll_ahead(&self, reclaims: u64) {
        let Some(g) = self.shared.gate.get() else {
            return;
        };
        if self.shared.regions_retired.load(Ordering::Acquire) >= reclaims {
            return;
        }
        let ticket = {
            let _q = self.shared.queue.lock();
            g.roll_to.store(reclaims, Ordering::Release);
            let ticket = g.roll_asked.fetch_add(1, Ordering::AcqRel) + 1;
            self.shared.wake.notify_one();
            ticket
        };
        let mut lock = g.done.0.lock();
        while g.roll_answered.load(Ordering::Acquire) < ticket && !self.has_failed() {
            g.done.1.wait_for(&mut lock, Duration::from_millis(50));
        }
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
        // A held writer's (a replay's): the removals are made where trove's were, each
        // a tombstone queued as the requests looked up meanwhile say (`reach`), not all
        // before the next request; trove's pass runs beside them.
        let held = self.shared.gate.get().is_some();
        for r in 0..self.shared.dir.region_count() {
            if self.has_failed() {
                return false;
            }
            let seq = self.shared.seqs[r as usize].load(Ordering::Acquire);
            if seq == 0 {
                continue;
            }
            // By the rules made before it began: one made while it runs is the next
            // pass's (so what a pass removes does not depend on how long it takes).
            match crate::recovery::judge_region(&self.shared, r, seq, inv, upto) {
                Ok(dead) if held => {
                    removed += dead.len() as u64;
                    self.shared.deferred_removals.lock().extend(dead);
                }
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

    /// With the writer held (a replay): makes the removals a pass decided and left waiting
    /// (see [`DiskStore::pass`]), in order, until `queued` jobs have been queued in all,
    /// each removal queueing one (its tombstone): trove's pass made them one by one while
    /// requests went on, and a request's record says how many jobs had been queued when
    /// it was looked up. `u64::MAX`: all of them.
    pub fn reach(&self, queued: u64) {
        loop {
            if self.shared.jobs_pushed.load(Ordering::Acquire) >= queued {
                return;
            }
            let Some((key, variant)) = self.shared.deferred_removals.lock().pop_front() else {
                return;
            };
            self.remove(&key, Some(&variant));
        }
    }

    /// True if the index may hold `key` (cheap: no I/O).
    pub fn may_hold(&self, key: &str, note: Note<'_>) -> bool {
        if self.has_failed() {
            return false;
        }
        self.at_one_step(note, || {
            self.shared.index.get(fingerprint(key, "")).is_some()
                || !self.shared.varied.get(key_hash(key)).is_empty()
        })
    }

    /// Runs `look` (index lookups, no waiting on the writer) with `note` called first, both
    /// between two of the writer's steps (see `Shared::steps`); without a note, just runs
    /// it.
    fn at_one_step<T>(&self, note: Note<'_>, look: impl FnOnce() -> T) -> T {
        match note {
            None => look(),
            Some(note) => {
                let _between = self.shared.steps.read();
                note();
                look()
            }
        }
    }

    /// Every variant of `key` on disk, read and verified (blocking I/O: call it from a
    /// blocking pool). Bodies up to `whole_limit` bytes come back whole; larger ones as a
    /// stream. Corrupt records are dropped from the index and counted.
    /// The variants are found in the index all at once (and `note` called then), then read.
    pub fn load(&self, key: &str, whole_limit: u64, note: Note<'_>) -> Vec<Loaded> {
        if self.has_failed() {
            return Vec::new();
        }
        let kh = key_hash(key);
        let found: Vec<(u64, Loc)> = self.at_one_step(note, || {
            let mut fps = vec![fingerprint(key, "")];
            fps.extend(self.shared.varied.get(kh));
            fps.into_iter()
                .filter_map(|fp| self.shared.index.get(fp).map(|loc| (fp, loc)))
                .collect()
        });
        let mut out = Vec::new();
        for (fp, loc) in found {
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
        // Being copied forward by a reclaim: its old place is being reused, not corrupt.
        if self.shared.moving.lock().contains_key(&fp) {
            return;
        }
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
    /// mismatch at the end is an error, and the record is dropped; a region reclaimed
    /// under the reader is an error too ([`trove_store::tier::is_reused`]), not counted
    /// as corruption.
    pub fn stream(&self, s: &mut crate::reader::BodyStream) -> std::io::Result<Option<Bytes>> {
        match crate::reader::next_chunk(&self.shared, s) {
            Err(e) if trove_store::tier::is_reused(&e) => Err(e),
            Err(e) => {
                self.drop_corrupt(s.fingerprint, s.loc, &e);
                Err(e)
            }
            ok => ok,
        }
    }

    /// Waits until everything queued so far is written (and synced when `sync`).
    pub fn flush(&self) {
        if let Some(g) = self.shared.gate.get() {
            // A held writer too: everything queued so far.
            let _q = self.shared.queue.lock();
            g.allowed.fetch_max(
                self.shared.jobs_pushed.load(Ordering::Acquire),
                Ordering::AcqRel,
            );
        }
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
            writes_synced: g(&s.writes_synced),
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
            regions_discarded: g(&s.regions_discarded),
            journal_damaged: g(&s.journal_damaged),
            journal_syncs: g(&self.shared.journal.syncs),
            journal_sync_nanos: g(&self.shared.journal.sync_nanos),
            journal_bytes: self.shared.journal.len(),
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

/// Zero-copy hits (see [`crate::zero_copy`]): here, not there, so that module needs nothing
/// of this one.
impl DiskStore {
    /// The unvaried object of `key`, if on disk with a body of at least `min_len` bytes,
    /// verified (see the module docs), its body left on disk to be sent from the file
    /// (blocking I/O: call it from a blocking pool). `None` when there is none, when the
    /// key has variants, when the body is smaller, or when this directory can't do
    /// zero-copy sends. A corrupt record is dropped and counted, as on any read.
    pub fn open_body(&self, key: &str, min_len: u64, mut note: Note<'_>) -> Option<OnDisk> {
        if self.has_failed() || !self.shared.zero_copy.load(Ordering::Acquire) {
            return None;
        }
        let fp = fingerprint(key, "");
        // A hot record being copied forward by a reclaim (its old region retired, its copy
        // not published yet) is opened at its new place once the copy is published: the
        // reclaim and its copies are one step of the writer's (see `writer`), and a read
        // that began within it finds the disk as after it, not half way — as a replay that
        // puts its writer after the step finds it (a sendfile hit either way, never a
        // promotion in one and not the other). The step is short (the copies of one
        // region, at most half a region's bytes); at most two waits.
        let mut waits = 0;
        loop {
            if waits < 2 && self.wait_moved(fp) {
                waits += 1;
            }
            // Looked up again after a wait: the place noted last is the one that counts.
            let again: Note<'_> = match &mut note {
                Some(n) => Some(&mut **n),
                None => None,
            };
            let loc = self.at_one_step(again, || {
                if self.shared.varied.get(key_hash(key)).is_empty() {
                    self.shared.index.get(fp)
                } else {
                    None
                }
            })?;
            match zero_copy::open(&self.shared, fp, loc, key, min_len, Mode::Blocking) {
                Ok(Some(found)) => {
                    self.shared.index.mark_accessed(fp);
                    self.shared.stats.hits.fetch_add(1, Ordering::Relaxed);
                    return Some(found);
                }
                // Retired under it: moving (opened once the copy is published), or gone.
                Ok(None) | Err(Blocked::Read(ReadError::Format(FormatError::StaleGeneration)))
                    if waits < 2 && self.is_moving(fp) => {}
                Ok(None) | Err(Blocked::WouldBlock) => return None,
                // Its region was reused since the index was read, which is no corruption:
                // the promotion reads it.
                Err(Blocked::Read(ReadError::Format(FormatError::StaleGeneration))) => return None,
                Err(Blocked::Read(e)) => {
                    self.drop_corrupt(fp, loc, &e);
                    return None;
                }
            }
        }
    }

    /// True while a reclaim is copying `fp`'s record forward (see `Shared::moving`).
    fn is_moving(&self, fp: u64) -> bool {
        self.shared.moving.lock().contains_key(&fp)
    }

    /// If `fp`'s record is being copied forward, waits (blocking) until its copy is
    /// published, at most [`MOVE_WAIT`]; true if it was moving.
    fn wait_moved(&self, fp: u64) -> bool {
        if !self.is_moving(fp) {
            return false;
        }
        let deadline = std::time::Instant::now() + MOVE_WAIT;
        while self.is_moving(fp) && std::time::Instant::now() < deadline && !self.has_failed() {
            std::thread::sleep(Duration::from_micros(100));
        }
        true
    }
}

/// The longest [`DiskStore::open_body`] waits for a record being copied forward to be
/// published at its new place (a reclaim's copies: at most half a region).
const MOVE_WAIT: Duration = Duration::from_secs(1);

impl DiskStore {
    /// [`DiskStore::open_body`] without blocking, for the common hit on a record already
    /// verified whose head is in the page cache: the head is read with `RWF_NOWAIT`, so an
    /// async runtime thread may call this, and only the rest go to a blocking pool.
    pub fn open_body_cached(&self, key: &str, min_len: u64, note: Note<'_>) -> Cached {
        if self.has_failed() || !self.shared.zero_copy.load(Ordering::Acquire) {
            return Cached::No;
        }
        let fp = fingerprint(key, "");
        // Being copied forward: opened at its new place by the blocking open, which waits
        // for it (see `open_body`), and notes the place then.
        if self.is_moving(fp) {
            return Cached::WouldBlock;
        }
        let looked = self.at_one_step(note, || {
            if self.shared.varied.get(key_hash(key)).is_empty() {
                Some(self.shared.index.get(fp))
            } else {
                None
            }
        });
        let Some(loc) = looked.flatten() else {
            return Cached::No;
        };
        match zero_copy::open(&self.shared, fp, loc, key, min_len, Mode::Cached) {
            Ok(Some(found)) => {
                self.shared.index.mark_accessed(fp);
                self.shared.stats.hits.fetch_add(1, Ordering::Relaxed);
                Cached::Found(Box::new(found))
            }
            Ok(None) | Err(Blocked::Read(ReadError::Format(FormatError::StaleGeneration)))
                if self.is_moving(fp) =>
            {
                Cached::WouldBlock
            }
            Ok(None) => Cached::No,
            Err(Blocked::WouldBlock) => Cached::WouldBlock,
            Err(Blocked::Read(ReadError::Format(FormatError::StaleGeneration))) => Cached::No,
            Err(Blocked::Read(e)) => {
                self.drop_corrupt(fp, loc, &e);
                Cached::No
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store of 4 MiB in regions of 256 KiB in a fresh directory of its own, ready.
    /// Copies `key`'s record aside into `moving`, as a reclaim does before it retires the
    /// record's region; its fingerprint, place and the region's sequence number.
    fn copy_aside(d: &DiskStore, key: &str) -> (u64, crate::index::Loc, u64) {
        let fp = fingerprint(key, "");
        let loc = d.shared.index.get(fp).unwrap();
        let seq = d.shared.seqs[loc.region() as usize].load(Ordering::Acquire);
        let b = d
            .shared
            .dir
            .read_vec(loc.region(), loc.offset(), loc.len_hint() as usize)
            .unwrap();
        let record = crate::format::Record::decode(&Bytes::from(b), seq).unwrap();
        d.shared.moving.lock().insert(fp, record);
        (fp, loc, seq)
    }

    fn small_store(name: &str) -> (PathBuf, DiskStore) {
        let dir =
            std::env::temp_dir().join(format!("trove-disk-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let d = DiskStore::open(DiskConfig {
            region_size: 256 << 10,
            ..DiskConfig::new(&dir, 4 << 20)
        })
        .unwrap();
        assert!(d.wait_ready(Duration::from_secs(30)));
        (dir, d)
    }

    /// A complete `200` of `len` bytes stored under `key`.
    fn object(key: &str, len: usize) -> Object {
        Object::new(
            key.to_string(),
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
            trove_store::Body::complete(Bytes::from(vec![7u8; len])),
        )
    }

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
        let (dir, d) = small_store("shed");
        let obj = |i: usize| object(&format!("http://example.com/{i}"), 1000);
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

    /// A hot object being copied forward by a reclaim is read from its copy in memory
    /// once its old region is retired, until the copy is published; a record whose region
    /// was reused is a miss, never counted corrupt.
    #[test]
    fn an_object_being_copied_forward_is_read_from_memory_and_a_reused_place_is_no_corruption() {
        let (dir, d) = small_store("moving");
        let key = "http://example.com/hot";
        let obj = object(key, 3000);
        assert!(d.write(&obj));
        d.flush();
        assert_eq!(d.load(key, 1 << 20, None).len(), 1);
        // As a reclaim leaves it: copied aside, its region retired, the index unchanged.
        let (_, loc, seq) = copy_aside(&d, key);
        let r = loc.region() as usize;
        d.shared.seqs[r].store(seq + 1000, Ordering::SeqCst);
        let found = d.load(key, 1 << 20, None);
        assert_eq!(found.len(), 1, "read from the copy in memory");
        match &found[0].body {
            crate::LoadedBody::Whole(body) => assert_eq!(body.len(), 3000),
            other => panic!("a whole body, not {other:?}"),
        }
        // Gone from `moving` without being published (its region reused): a miss.
        d.shared.moving.lock().clear();
        assert!(d.load(key, 1 << 20, None).is_empty());
        assert_eq!(d.stats().corrupt, 0, "a reused place is not corruption");
        d.shared.seqs[r].store(seq, Ordering::SeqCst);
        drop(d);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// While a reclaim copies a hot object forward, its old place may already read as
    /// zeros (a punched region) or as the new region's records: it is read from its copy
    /// in memory all the same, is not taken for corrupt, and, once the copy is published,
    /// is read from its new place by a reader that still holds the old one.
    #[test]
    fn an_object_whose_old_place_is_overwritten_while_it_moves_is_found_and_not_corrupt() {
        let (dir, d) = small_store("overwritten");
        let key = "http://example.com/hot";
        assert!(d.write(&object(key, 3000)));
        d.flush();
        let (fp, loc, _) = copy_aside(&d, key);
        let zeros = vec![0u8; loc.len_hint() as usize];
        d.shared
            .dir
            .write_at(loc.region(), loc.offset(), &zeros)
            .unwrap();
        assert_eq!(
            d.load(key, 1 << 20, None).len(),
            1,
            "read from the copy in memory"
        );
        assert_eq!(
            d.stats().corrupt,
            0,
            "a place being reused is not corruption"
        );
        assert!(d.shared.index.get(fp).is_some(), "still indexed");
        // The copy published (here: the object written anew), `moving` emptied: a
        // reader holding the old place finds the new one.
        assert!(d.write(&object(key, 3000)));
        d.flush();
        d.shared.moving.lock().clear();
        let found = crate::reader::load(&d.shared, fp, loc, key, 1 << 20).unwrap();
        assert!(found.is_some(), "read from its new place");
        drop(d);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A held writer's pass over the disk (a replay's) decides its removals and leaves them
    /// to `reach`, which makes them one tombstone at a time up to a count of jobs queued:
    /// trove's pass makes them while requests go on, and a request sees those made before
    /// it was looked up, not all of them.
    #[test]
    fn a_held_writers_pass_leaves_its_removals_to_reach() {
        use trove_store::invalidation::{Mode, Selector};
        let (dir, d) = small_store("pass-reach");
        let inv = Arc::new(trove_store::Invalidations::new());
        d.attach(Arc::clone(&inv));
        let keys: Vec<String> = (0..3).map(|i| format!("http://example.com/p{i}")).collect();
        for k in &keys {
            assert!(d.write(&object(k, 3000)));
        }
        d.flush();
        d.hold_writer();
        for k in &keys[..2] {
            inv.add(
                Selector::Key(key_hash(k)),
                Mode::Hard,
                std::time::SystemTime::now(),
            );
        }
        let q0 = d.progress().queued;
        assert!(d.pass());
        assert_eq!(d.progress().queued, q0, "decided, not made");
        assert!(d.may_hold(&keys[0], None) && d.may_hold(&keys[1], None));
        d.reach(q0 + 1);
        assert_eq!(d.progress().queued, q0 + 1);
        assert!(!d.may_hold(&keys[0], None), "the first removal, made");
        assert!(d.may_hold(&keys[1], None), "the second, not yet");
        d.reach(q0 + 1);
        assert!(d.may_hold(&keys[1], None), "reached already: nothing more");
        d.reach(u64::MAX);
        assert_eq!(d.progress().queued, q0 + 2);
        assert!(!d.may_hold(&keys[1], None));
        assert!(d.may_hold(&keys[2], None), "no rule kills it");
        drop(d);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A `sendfile` open of a hot record that a reclaim is copying forward (its region
    /// retired, the copy not yet published) waits for the copy and opens it: a read that
    /// began within the reclaim's step finds the disk as after it (as a replay's writer,
    /// put after the step, has it), not a miss that sends the request to a promotion.
    #[test]
    fn a_sendfile_open_while_its_record_moves_waits_for_the_copy() {
        let (dir, d) = small_store("open-moving");
        let key = "http://example.com/hot-file";
        let min = 64 << 10;
        assert!(d.write(&object(key, 100_000)));
        d.flush();
        if d.open_body(key, min, None).is_none() {
            // This directory can't send from the file (no hole punching): nothing to test.
            assert!(!d.shared.zero_copy.load(Ordering::Acquire));
            drop(d);
            let _ = std::fs::remove_dir_all(&dir);
            return;
        }
        // As a reclaim leaves it: copied aside, its region retired.
        let (_, loc, seq) = copy_aside(&d, key);
        let r = loc.region() as usize;
        d.shared.seqs[r].store(0, Ordering::SeqCst);
        assert!(matches!(
            d.open_body_cached(key, min, None),
            crate::Cached::WouldBlock
        ));
        let shared = Arc::clone(&d.shared);
        let publish = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            // The copy published (here: at its old place, its region live again) and
            // `moving` emptied, as the writer does.
            shared.seqs[r].store(seq, Ordering::SeqCst);
            shared.moving.lock().clear();
        });
        let found = d.open_body(key, min, None);
        publish.join().unwrap();
        assert!(found.is_some(), "opened once its copy was published");
        assert_eq!(d.stats().corrupt, 0);
        drop(found);
        drop(d);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A read that notes the writer's place finds the index as of that place: the writer's
    /// step (here, publishing a write) waits while the read notes and looks, so a write
    /// published meanwhile is neither counted in the place noted nor found.
    #[test]
    fn a_noting_read_and_the_place_it_notes_are_of_one_moment() {
        let key = "http://example.com/noted";
        let (dir, d) = small_store("steps");
        let d = Arc::new(d);
        d.hold_writer();
        assert!(d.write(&object(key, 10_000)));
        let (tx, rx) = std::sync::mpsc::channel();
        let releaser = {
            let d = Arc::clone(&d);
            std::thread::spawn(move || {
                rx.recv().unwrap();
                // Published at once if nothing holds it back.
                d.release(1);
            })
        };
        let mut noted = None;
        let found = d.may_hold(
            key,
            Some(&mut || {
                noted = Some(d.progress());
                tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(200));
            }),
        );
        releaser.join().unwrap();
        let noted = noted.expect("noted");
        assert_eq!(
            (noted.done, found),
            (0, false),
            "noted before the write was published, and not found"
        );
        assert_eq!(d.progress().done, 1);
        assert!(d.may_hold(key, None), "published once the read was done");
        drop(d);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The writer reclaims the region a job needs before it begins the job, a step of its
    /// own: a held writer can be stopped after the jobs before it and that reclaim, with
    /// the job itself neither begun nor visible, and goes on from there.
    #[test]
    fn a_held_writer_reclaims_for_the_next_job_before_beginning_it() {
        let objects: Vec<Object> = (0..40)
            .map(|i| object(&format!("http://example.com/{i}"), 100_000))
            .collect();
        // Where the first reclaim comes: found by releasing one job at a time.
        let (dir, d) = small_store("roll-find");
        d.hold_writer();
        for o in &objects {
            assert!(d.write(o));
        }
        let mut first = None;
        for n in 1..=objects.len() as u64 {
            d.release(n);
            if d.progress().reclaims > 0 {
                first = Some(n);
                break;
            }
        }
        let needs = first.expect("40 objects of 100 kB reclaim a region of 4 MiB");
        drop(d);
        let _ = std::fs::remove_dir_all(&dir);

        let (dir, d) = small_store("roll-ahead");
        d.hold_writer();
        for o in &objects {
            assert!(d.write(o));
        }
        d.release(needs - 1);
        assert_eq!(d.progress().reclaims, 0);
        // By the index, not by a load: a hit would make it hot, and copied forward.
        let before = |i: usize| {
            d.shared
                .index
                .get(fingerprint(&objects[i].key, ""))
                .is_some()
        };
        assert!(
            before(0),
            "the oldest region's first object, before the reclaim"
        );
        d.roll_ahead(1);
        let p = d.progress();
        assert_eq!((p.done, p.begun, p.reclaims), (needs - 1, needs - 1, 1));
        assert!(!before(0), "reclaimed");
        let next = needs as usize - 1;
        assert!(!before(next), "the job it was reclaimed for: not begun");
        // Asked again, or for no more than it has: nothing moves.
        d.roll_ahead(1);
        assert_eq!(d.progress(), p);
        d.release(needs);
        let p = d.progress();
        assert_eq!((p.done, p.reclaims), (needs, 1), "no second reclaim for it");
        assert!(before(next));
        drop(d);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! The writer thread: appends records to the open region, seals full regions, reclaims the
//! oldest region when none is free, and syncs.
//!
//! Records are encoded into a buffer and written with one `pwrite` per batch (what was
//! queued when the thread woke, up to [`BATCH`]), so disk writes are large and sequential;
//! only then are their index entries published, so an object becomes visible only once it
//! is wholly written.
//!
//! **The crash bound.** An object is *acknowledged* when the disk tier takes it into its
//! write queue (`DiskStore::write` returns true; the object's body is complete, so its
//! client has had, or is being sent, the whole response). From then on:
//!
//! - it is in the file (`pwrite`, so in the page cache, which survives the process) within
//!   `sync_interval`: a `kill -9` at any instant loses at most what was acknowledged in the
//!   last `sync_interval`. The queue admits only what this thread, at its measured speed
//!   (`store::DrainRate`), writes in half that time; past it, objects are shed (counted, not
//!   acknowledged: a cache loses nothing but a future hit by not storing, whereas holding a
//!   client back to wait for the disk would turn a slow disk into slow responses). A write
//!   that still came late (a disk that stalled) is counted (`writes_late`), and the longest
//!   delay is kept, so the bound is measured, not assumed;
//! - it is `fdatasync`ed within `sync_interval` of that write (the thread wakes for it):
//!   a power loss loses at most the last two `sync_interval`s.
//!
//! **Steps a lookup can see.** A job's record becomes visible when its batch is published
//! (`flush`); a region a job needs is reclaimed before the job begins, with the records
//! before it published and the hot records it keeps copied forward and published, as one
//! step of its own (`Writer::make_room`). So what a lookup finds is the disk after `n`
//! jobs, or after `n` jobs and the next one's reclaim, which `DiskStore::progress` says
//! and a replay's held writer can be stopped at (`DiskStore::release`,
//! `DiskStore::roll_ahead`). Only a large object's fragments reclaim as they go.
//!
//! Reclamation is FIFO over regions (the oldest use goes first, whole: no fragmentation, no
//! compaction), optionally with reinsertion (CacheLib Navy's answer to FIFO's weakness):
//! objects read since they were written are copied into the open region, up to half a
//! region, before theirs is reused. Tombstones need no copying: a tombstone is always newer
//! than what it removed, so FIFO reclaims the object's region first. A reclaim decides and
//! reads first, then takes what goes off the index at once; what is copied forward stays
//! findable throughout (`Shared::moving` between its old region's retirement and its new
//! place's publication, which follows the copies at once).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use trove_store::hash::{fingerprint, key_hash};

use crate::format::{
    fragment_body, seal, FragmentList, FragmentMeta, FragmentRef, Kind, NewRecord, Record,
    RegionHeader, SummaryEntry, FLAG_VARIED, FOOTER_LEN, RECORD_HEADER_LEN, SUMMARY_ENTRY_LEN,
};

/// An object to write as fragments and a head.
struct Large<'a> {
    key: &'a str,
    variant: &'a str,
    labels: &'a [u8],
    meta: &'a [u8],
    body: &'a [Bytes],
}
use crate::index::Loc;
use crate::recovery;
use crate::shared::{Job, LateRemoval, Reclaim, Shared, ALL_SALT, FAILED};

/// Bytes encoded before a batch is written even if more is queued.
const BATCH: usize = 1 << 20;

enum Publish {
    /// A spooled body's fragment is in the file: readable, and its body may let it go.
    Fragment {
        spool: Arc<crate::shared::SpoolState>,
        at: FragmentRef,
        end: u64,
        progress: trove_store::SpoolProgress,
    },
    Put {
        fp: u64,
        key_hash: u64,
        varied: bool,
        loc: Loc,
        epoch: u64,
        /// When it was acknowledged (`None` for a reinserted copy).
        queued_at: Option<Instant>,
        /// A reinserted copy's old place: it moves there only if still indexed at it.
        from: Option<Loc>,
    },
    Remove(LateRemoval, u64),
}

struct Active {
    region: u32,
    seq: u64,
    /// Region offset of `buf[0]`.
    start: u64,
    buf: Vec<u8>,
    entries: Vec<SummaryEntry>,
    publish: Vec<Publish>,
}

struct Writer<'a> {
    shared: &'a Shared,
    /// The index's recovery, while it runs.
    recovering: Option<std::thread::JoinHandle<()>>,
    size: u64,
    active: Option<Active>,
    /// Regions in use, oldest first (not the active one).
    used: VecDeque<u32>,
    free: Vec<u32>,
    next_seq: u64,
    /// When the first write since the last sync was made (`None`: nothing to sync).
    unsynced_since: Option<Instant>,
    /// Hot records of a reclaimed region, to be written again, each with where it was.
    reinsert: Vec<(Record, Loc)>,
    /// Jobs handled since the last flush: counted done when it publishes them.
    unpublished: u64,
    /// The removal epoch when they were chosen: a removal after that wins over the copy.
    reinsert_epoch: u64,
}

/// The thread's body. It reads the region headers, starts the index's recovery on a thread
/// of its own, and writes at once (into free regions; an object queued while the index
/// comes back is held to the crash bound like any other): a region is reclaimed only once
/// recovery is done.
pub(crate) fn run(shared: &Arc<Shared>) {
    let rec = match recovery::regions(shared) {
        Ok(r) => r,
        Err(e) => {
            shared.fail("reading the regions at start-up", &e);
            return idle(shared);
        }
    };
    let recovering = {
        let (s, used) = (Arc::clone(shared), rec.used.clone());
        std::thread::Builder::new()
            .name("trove-disk-recovery".into())
            .spawn(move || {
                if let Err(e) = recovery::index(&s, &used) {
                    s.fail("reading the regions at start-up", &e);
                }
            })
    };
    let recovering = match recovering {
        Ok(h) => Some(h),
        Err(_) => {
            // No thread to spare: recover here, then write.
            if let Err(e) = recovery::index(shared, &rec.used) {
                shared.fail("reading the regions at start-up", &e);
                return idle(shared);
            }
            None
        }
    };
    let mut w = Writer {
        recovering,
        shared,
        size: shared.dir.region_size(),
        active: None,
        used: rec.used.iter().map(|&(r, _)| r).collect(),
        free: rec.free,
        next_seq: rec.next_seq,
        unsynced_since: None,
        reinsert: Vec::new(),
        reinsert_epoch: 0,
        unpublished: 0,
    };
    loop {
        let Taken { jobs, stop, roll } = take(shared, w.unsynced_since);
        if let Some(ask) = roll {
            let rolled = w.roll_ahead(&ask);
            if let Some(g) = shared.gate.get() {
                g.roll_answered.fetch_max(ask.ticket, Ordering::AcqRel);
                let _l = g.done.0.lock();
                g.done.1.notify_all();
            }
            if let Err(e) = rolled {
                shared.fail("writing", &e);
                w.end_recovery();
                return idle(shared);
            }
        }
        let busy = Instant::now();
        let bytes: u64 = jobs
            .iter()
            .map(|j| match j {
                Job::Object { bytes, .. } => *bytes,
                Job::Fragment { body, .. } => body.iter().map(|b| b.len() as u64).sum(),
                _ => 0,
            })
            .sum();
        let mut flushes = Vec::new();
        let done = jobs.iter().filter(|j| !matches!(j, Job::Flush(_))).count() as u64;
        // Counted as their records are published (`flush`); a failed batch, all of it.
        let done_after = shared.jobs_done.load(Ordering::Acquire) + done;
        let result = (|| {
            for job in jobs {
                match job {
                    Job::Flush(done) => flushes.push(done),
                    job => {
                        // A region reclaimed for this job is reclaimed before it begins,
                        // a step of its own (see `Writer::make_room`).
                        w.make_room(&job)?;
                        shared.jobs_begun.fetch_add(1, Ordering::AcqRel);
                        w.handle(job)?;
                        w.unpublished += 1;
                    }
                }
                if w.active.as_ref().is_some_and(|a| a.buf.len() >= BATCH) {
                    w.flush()?;
                }
            }
            w.flush()?;
            let due = w
                .unsynced_since
                .is_some_and(|t| t.elapsed() >= shared.config.sync_interval);
            if !flushes.is_empty() || stop || due {
                shared.dir.sync()?;
                // Every write counted so far was flushed above: this sync covers it.
                let written = shared.stats.writes.load(Ordering::Acquire);
                shared
                    .stats
                    .writes_synced
                    .fetch_max(written, Ordering::AcqRel);
                // Puts' rules, appended but not waited for, go down with the data.
                shared.journal.sync_pending()?;
                w.unsynced_since = None;
            }
            Ok::<(), std::io::Error>(())
        })();
        shared.drain.sample(bytes, busy.elapsed());
        w.unpublished = 0;
        shared.jobs_done.fetch_max(done_after, Ordering::AcqRel);
        if let Some(g) = shared.gate.get() {
            let _l = g.done.0.lock();
            g.done.1.notify_all();
        }
        for done in flushes {
            *done.0.lock() = true;
            done.1.notify_all();
        }
        if let Err(e) = result {
            shared.fail("writing", &e);
            w.end_recovery();
            return idle(shared);
        }
        if stop {
            w.end_recovery();
            return;
        }
        if shared.state.load(Ordering::Acquire) == FAILED {
            // Recovery failed (and said so).
            w.end_recovery();
            return idle(shared);
        }
    }
}

/// Measures the crash bound on one acknowledged object: acknowledged `delay` ago, in the
/// file now.
fn note_delay(shared: &Shared, delay: Duration) {
    let s = &shared.stats;
    let micros = delay.as_micros().min(u64::MAX as u128) as u64;
    s.write_delay_max_micros
        .fetch_max(micros, Ordering::Relaxed);
    if delay > shared.config.sync_interval {
        s.writes_late.fetch_add(1, Ordering::Relaxed);
    }
}

/// After a failure: drop what is queued and release flush waiters until stopped.
fn idle(shared: &Shared) {
    shared.state.store(FAILED, Ordering::Release);
    loop {
        let Taken { jobs, stop, roll } = take(shared, None);
        if let (Some(ask), Some(g)) = (roll, shared.gate.get()) {
            g.roll_answered.fetch_max(ask.ticket, Ordering::AcqRel);
            let _l = g.done.0.lock();
            g.done.1.notify_all();
        }
        for job in jobs {
            match job {
                Job::Flush(done) => {
                    *done.0.lock() = true;
                    done.1.notify_all();
                }
                Job::Object { bytes, .. } => {
                    shared.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
                    shared.stats.writes_dropped.fetch_add(1, Ordering::Relaxed);
                }
                Job::Fragment {
                    spool, progress, ..
                } => {
                    spool.fail();
                    progress.failed();
                }
                Job::SpoolHead { .. } => {
                    shared.stats.writes_dropped.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            }
        }
        if stop {
            return;
        }
    }
}

/// What [`take`] hands the writer.
struct Taken {
    jobs: Vec<Job>,
    stop: bool,
    /// A held writer asked to reclaim ahead of the next job ([`crate::DiskStore::roll_ahead`]).
    roll: Option<RollAsk>,
}

/// A held writer's request to reclaim for the next queued job before it is released.
struct RollAsk {
    ticket: u64,
    /// Regions reclaimed in all that are wanted.
    to: u64,
    /// The next job's first record, if it is one whose room `make_room` makes.
    len: Option<u64>,
}

/// Waits for work, or until a sync is due (`sync_interval` after the first write it
/// covers), or a sync interval when nothing waits; returns it and whether to stop.
fn take(shared: &Shared, unsynced_since: Option<Instant>) -> Taken {
    let interval = shared.config.sync_interval;
    let wait = unsynced_since.map_or(interval, |t| interval.saturating_sub(t.elapsed()));
    let mut q = shared.queue.lock();
    let stop = shared.stop.load(Ordering::Acquire);
    let Some(gate) = shared.gate.get().filter(|_| !stop) else {
        if q.is_empty() && !stop && !wait.is_zero() {
            shared.wake.wait_for(&mut q, wait);
            // Held while it waited (set under this lock, with a wake-up): it takes only
            // what it is released, from the first job on.
            if shared.gate.get().is_some() {
                return Taken {
                    jobs: Vec::new(),
                    stop: shared.stop.load(Ordering::Acquire),
                    roll: None,
                };
            }
        }
        let jobs: Vec<Job> = q.drain(..).collect();
        return Taken {
            jobs,
            stop: shared.stop.load(Ordering::Acquire),
            roll: None,
        };
    };
    // Held: the jobs released so far, flushes with them.
    let room = |g: &crate::shared::Gate| {
        g.allowed
            .load(Ordering::Acquire)
            .saturating_sub(g.taken.load(Ordering::Acquire))
    };
    let asked = |g: &crate::shared::Gate| {
        let ticket = g.roll_asked.load(Ordering::Acquire);
        (ticket > g.roll_answered.load(Ordering::Acquire)).then_some(ticket)
    };
    let ready = |q: &std::collections::VecDeque<Job>| {
        asked(gate).is_some()
            || q.front()
                .is_some_and(|j| matches!(j, Job::Flush(_)) || room(gate) > 0)
    };
    if !ready(&q) && !wait.is_zero() {
        shared.wake.wait_for(&mut q, wait);
    }
    let mut jobs = Vec::new();
    let mut left = room(gate);
    while let Some(job) = q.front() {
        if !matches!(job, Job::Flush(_)) {
            if left == 0 {
                break;
            }
            left -= 1;
            gate.taken.fetch_add(1, Ordering::AcqRel);
        }
        jobs.extend(q.pop_front());
    }
    let roll = asked(gate).map(|ticket| RollAsk {
        ticket,
        to: gate.roll_to.load(Ordering::Acquire),
        len: q
            .front()
            .and_then(|j| first_record_len(j, shared.dir.region_size())),
    });
    Taken {
        jobs,
        stop: shared.stop.load(Ordering::Acquire),
        roll,
    }
}

/// The length of the first record `job` writes, for the jobs whose room
/// [`Writer::make_room`] makes before they begin (an object of one record, a tombstone);
/// `None` for the others (a large object's fragments, a spool's), which roll as they go.
fn first_record_len(job: &Job, region_size: u64) -> Option<u64> {
    let len = match job {
        Job::Object {
            key,
            variant,
            labels,
            meta,
            body,
            ..
        } => NewRecord {
            kind: Kind::Object,
            flags: crate::shared::flags_for(variant),
            key,
            variant,
            fingerprint: 0,
            key_hash: 0,
            labels,
            meta,
            body,
        }
        .record_len(),
        Job::Tombstone { all, .. } => NewRecord {
            kind: Kind::Tombstone,
            flags: crate::shared::tombstone_flags(*all),
            key: "",
            variant: "",
            fingerprint: 0,
            key_hash: 0,
            labels: &[],
            meta: &[],
            body: &[],
        }
        .record_len(),
        _ => return None,
    };
    (len <= crate::format::max_record(region_size)).then_some(len)
}

impl Writer<'_> {
    /// Waits for the index's recovery to end (it stops early when the store is stopping).
    fn end_recovery(&mut self) {
        if let Some(h) = self.recovering.take() {
            let _ = h.join();
        }
    }

    fn handle(&mut self, job: Job) -> std::io::Result<()> {
        match job {
            Job::Object {
                key,
                variant,
                labels,
                meta,
                body,
                bytes,
                epoch,
                queued_at,
            } => {
                self.shared.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
                let body_len: u64 = body.iter().map(|b| b.len() as u64).sum();
                if self.head_len(&key, &variant, &labels, &meta, body_len) > self.max_record() {
                    return self.append_large(
                        Large {
                            key: &key,
                            variant: &variant,
                            labels: &labels,
                            meta: &meta,
                            body: &body,
                        },
                        epoch,
                        queued_at,
                    );
                }
                let rec = NewRecord {
                    kind: Kind::Object,
                    flags: crate::shared::flags_for(&variant),
                    key: &key,
                    variant: &variant,
                    fingerprint: fingerprint(&key, &variant),
                    key_hash: key_hash(&key),
                    labels: &labels,
                    meta: &meta,
                    body: &body,
                };
                self.append(&rec, epoch, Some(queued_at))
            }
            Job::Tombstone {
                key_hash,
                fingerprint,
                all,
                epoch,
            } => {
                let rec = NewRecord {
                    kind: Kind::Tombstone,
                    flags: crate::shared::tombstone_flags(all),
                    key: "",
                    variant: "",
                    fingerprint,
                    key_hash,
                    labels: &[],
                    meta: &[],
                    body: &[],
                };
                self.append(&rec, epoch, None)
            }
            Job::Fragment {
                spool,
                offset,
                body,
                progress,
            } => self.append_fragment(spool, offset, &body, progress),
            Job::SpoolHead {
                spool,
                len,
                key,
                variant,
                labels,
                meta,
                epoch,
                queued_at,
            } => self.append_spool_head(
                &spool,
                Large {
                    key: &key,
                    variant: &variant,
                    labels: &labels,
                    meta: &meta,
                    body: &[],
                },
                len,
                (epoch, queued_at),
            ),
            Job::Flush(_) => Ok(()),
        }
    }

    /// A piece of a spooled body as a fragment record; its body learns it is written once
    /// the batch holding it is (`flush`).
    fn append_fragment(
        &mut self,
        spool: Arc<crate::shared::SpoolState>,
        offset: u64,
        body: &[Bytes],
        progress: trove_store::SpoolProgress,
    ) -> std::io::Result<()> {
        let inner: &crate::shared::SpoolState = &spool;
        if !inner.going() {
            return Ok(());
        }
        let len: u64 = body.iter().map(|b| b.len() as u64).sum();
        let number = inner.placed.lock().fragments.len() as u64;
        if offset != number * inner.piece || len == 0 || len > inner.piece {
            // Out of order or misshapen (a defect): never a head naming it.
            inner.fail();
            progress.failed();
            return Ok(());
        }
        let meta = FragmentMeta {
            spool: inner.id,
            number: number as u32,
            offset,
        }
        .encode();
        let rec = NewRecord {
            kind: Kind::Fragment,
            flags: 0,
            key: "",
            variant: "",
            fingerprint: inner.fingerprint,
            key_hash: inner.key_hash,
            labels: &[],
            meta: &meta,
            body,
        };
        let epoch = self.shared.epoch.load(Ordering::Acquire);
        let Some(at) = self.place(&rec, epoch, None, None)? else {
            inner.fail();
            progress.failed();
            return Ok(());
        };
        {
            let mut p = inner.placed.lock();
            for b in body {
                p.hasher.update(b);
            }
            p.fragments.push(at);
        }
        if let Some(a) = self.active.as_mut() {
            a.publish.push(Publish::Fragment {
                spool: spool.clone(),
                at,
                end: offset + len,
                progress,
            });
        }
        Ok(())
    }

    /// A spooled body's head, after its last fragment: written only if every piece was
    /// placed, in order, and the spool was neither abandoned nor failed.
    fn append_spool_head(
        &mut self,
        spool: &Arc<crate::shared::SpoolState>,
        head: Large<'_>,
        len: u64,
        (epoch, queued_at): (u64, Instant),
    ) -> std::io::Result<()> {
        let inner: &crate::shared::SpoolState = spool;
        let (fragments, sum) = {
            let p = inner.placed.lock();
            (p.fragments.clone(), p.hasher.digest())
        };
        let whole = (fragments.len() as u64) == len.div_ceil(inner.piece).max(1);
        if !inner.going() || !whole || len == 0 {
            self.shared
                .stats
                .writes_dropped
                .fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let list = FragmentList {
            body_len: len,
            body_sum: sum,
            spool: inner.id,
            fragments,
        };
        self.append_head(
            &head,
            &list,
            (inner.fingerprint, inner.key_hash),
            epoch,
            queued_at,
        )
    }

    /// The head record of a large object: its fragment list as its body (written after
    /// every fragment it names, so the object is findable only once whole).
    fn append_head(
        &mut self,
        head: &Large<'_>,
        list: &FragmentList,
        (fingerprint, key_hash): (u64, u64),
        epoch: u64,
        queued_at: Instant,
    ) -> std::io::Result<()> {
        let body = [Bytes::from(list.encode())];
        let rec = NewRecord {
            kind: Kind::Head,
            flags: crate::shared::flags_for(head.variant),
            key: head.key,
            variant: head.variant,
            fingerprint,
            key_hash,
            labels: head.labels,
            meta: head.meta,
            body: &body,
        };
        self.append(&rec, epoch, Some(queued_at))
    }

    /// The largest record a region takes.
    fn max_record(&self) -> u64 {
        crate::format::max_record(self.size)
    }

    /// Reclaims a region for `job` before it begins, when its record would not fit the
    /// open one: sealing that region (publishing what the jobs before wrote), the reclaim
    /// and the copies it makes are one step between two jobs, so a lookup finds the disk
    /// after job `n`, or after job `n` and the reclaim the next one needs, never part way
    /// through a job; a held writer can be stopped at either ([`Writer::roll_ahead`]).
    fn make_room(&mut self, job: &Job) -> std::io::Result<()> {
        match first_record_len(job, self.size) {
            Some(len) if !self.fits(len) => self.roll_and_copy(),
            _ => Ok(()),
        }
    }

    /// Opens the next region (reclaiming one if none is free), and writes and publishes
    /// the hot records the reclaim kept.
    fn roll_and_copy(&mut self) -> std::io::Result<()> {
        self.roll()?;
        if !self.reinsert.is_empty() {
            self.write_reinserts()?;
            self.flush()?;
            self.shared.moving.lock().clear();
        }
        Ok(())
    }

    /// A held writer, asked: makes room for the next job, as it would before beginning
    /// it, if regions reclaimed are fewer than asked.
    fn roll_ahead(&mut self, ask: &RollAsk) -> std::io::Result<()> {
        let retired = self.shared.regions_retired.load(Ordering::Acquire);
        match ask.len {
            Some(len) if retired < ask.to && !self.fits(len) => self.roll_and_copy(),
            _ => Ok(()),
        }
    }

    fn fits(&self, len: u64) -> bool {
        self.active.as_ref().is_some_and(|a| {
            a.start
                + a.buf.len() as u64
                + len
                + (a.entries.len() as u64 + 1) * SUMMARY_ENTRY_LEN as u64
                + FOOTER_LEN
                <= self.size
        })
    }

    fn append(
        &mut self,
        rec: &NewRecord<'_>,
        epoch: u64,
        queued_at: Option<Instant>,
    ) -> std::io::Result<()> {
        self.place(rec, epoch, queued_at, None).map(|_| ())
    }

    /// The bytes a record of these parts takes with a body of `body` bytes.
    fn head_len(&self, key: &str, variant: &str, labels: &[u8], meta: &[u8], body: u64) -> u64 {
        crate::format::aligned(
            RECORD_HEADER_LEN as u64
                + (key.len() + variant.len() + labels.len() + meta.len()) as u64
                + body,
        )
    }

    /// An object too large for one record: its body as fragments of at most
    /// [`FRAGMENT_BODY`], then a head listing them (docs/storage-format.md, *Large
    /// objects*). Only the head is published to the index, once it is written, so the
    /// object becomes visible only when wholly written.
    fn append_large(
        &mut self,
        obj: Large<'_>,
        epoch: u64,
        queued_at: Instant,
    ) -> std::io::Result<()> {
        let body_len: u64 = obj.body.iter().map(|b| b.len() as u64).sum();
        if body_len > self.shared.dir.region_count() as u64 * self.size / 2 {
            // Its last fragments would reclaim the regions of its first ones.
            self.shared
                .stats
                .writes_dropped
                .fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let fp = fingerprint(obj.key, obj.variant);
        let kh = key_hash(obj.key);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let spool = xxhash_rust::xxh3::xxh3_64_with_seed(&nanos.to_le_bytes(), fp ^ self.next_seq);
        // At most [`FRAGMENT_BODY`], and a fragment record must fit a region.
        let most = fragment_body(self.size);
        let mut whole = xxhash_rust::xxh3::Xxh3::new();
        let mut fragments = Vec::new();
        let mut piece: Vec<Bytes> = Vec::new();
        let mut piece_len = 0u64;
        let mut offset = 0u64;
        let mut chunks = obj
            .body
            .iter()
            .cloned()
            .collect::<std::collections::VecDeque<_>>();
        while let Some(mut c) = chunks.pop_front() {
            let room = (most - piece_len) as usize;
            if c.len() > room {
                chunks.push_front(c.split_off(room));
            }
            whole.update(&c);
            piece_len += c.len() as u64;
            piece.push(c);
            if piece_len == most || chunks.is_empty() {
                let meta = FragmentMeta {
                    spool,
                    number: fragments.len() as u32,
                    offset,
                }
                .encode();
                let rec = NewRecord {
                    kind: Kind::Fragment,
                    flags: 0,
                    key: "",
                    variant: "",
                    fingerprint: fp,
                    key_hash: kh,
                    labels: &[],
                    meta: &meta,
                    body: &piece,
                };
                let Some(at) = self.place(&rec, epoch, None, None)? else {
                    return Ok(());
                };
                fragments.push(at);
                // Written a batch at a time, as any records: the open region's buffer
                // need not hold the whole object.
                if self.active.as_ref().is_some_and(|a| a.buf.len() >= BATCH) {
                    self.flush()?;
                }
                offset += piece_len;
                piece.clear();
                piece_len = 0;
            }
        }
        let list = FragmentList {
            body_len: offset,
            body_sum: whole.digest(),
            spool,
            fragments,
        };
        self.append_head(&obj, &list, (fp, kh), epoch, queued_at)
    }

    /// Appends one record to the open region (rolling to the next when it does not fit);
    /// where it went, or `None` if it is larger than a region (dropped and counted).
    fn place(
        &mut self,
        rec: &NewRecord<'_>,
        epoch: u64,
        queued_at: Option<Instant>,
        from: Option<Loc>,
    ) -> std::io::Result<Option<FragmentRef>> {
        let len = rec.record_len();
        if len > self.max_record() {
            self.shared
                .stats
                .writes_dropped
                .fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        if !self.fits(len) {
            self.roll()?;
        }
        let a = self.active.as_mut().expect("rolled");
        let offset = a.start + a.buf.len() as u64;
        let h = rec.encode_into(a.seq, &mut a.buf);
        a.entries.push(SummaryEntry::of(&h, offset));
        let at = FragmentRef {
            region: a.region,
            len: len as u32,
            seq: a.seq,
            offset,
        };
        match rec.kind {
            Kind::Fragment => {}
            Kind::Object | Kind::Head => {
                a.publish.push(Publish::Put {
                    fp: h.fingerprint,
                    key_hash: h.key_hash,
                    varied: h.flags & FLAG_VARIED != 0,
                    loc: Loc::new(a.region, offset, len),
                    epoch,
                    queued_at,
                    from,
                });
                self.shared.stats.writes.fetch_add(1, Ordering::Relaxed);
            }
            Kind::Tombstone => a.publish.push(Publish::Remove(
                LateRemoval {
                    key_hash: h.key_hash,
                    fingerprint: h.fingerprint,
                    all: h.flags & crate::format::FLAG_ALL_VARIANTS != 0,
                },
                epoch,
            )),
        }
        // Reinserted records wait for room made by a roll; write them now, and publish
        // them at once: until then a read of one is answered from `moving`, in memory.
        if !self.reinsert.is_empty() {
            self.write_reinserts()?;
            self.flush()?;
            self.shared.moving.lock().clear();
        }
        Ok(Some(at))
    }

    fn write_reinserts(&mut self) -> std::io::Result<()> {
        for (r, from) in std::mem::take(&mut self.reinsert) {
            let body = [r.body.clone()];
            let rec = NewRecord {
                kind: Kind::Object,
                flags: r.header.flags,
                key: &r.key,
                variant: &r.variant,
                fingerprint: r.header.fingerprint,
                key_hash: r.header.key_hash,
                labels: &r.labels,
                meta: &r.meta,
                body: &body,
            };
            // As of when it was chosen: an object removed since (its index entry gone at
            // once) is not brought back by its copy's publication.
            self.place(&rec, self.reinsert_epoch, None, Some(from))?;
            self.shared.stats.reinserted.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Writes the buffer, then makes its records visible.
    fn flush(&mut self) -> std::io::Result<()> {
        let Some(a) = self.active.as_mut() else {
            return Ok(());
        };
        if !a.buf.is_empty() {
            self.shared.dir.write_at(a.region, a.start, &a.buf)?;
            self.shared
                .stats
                .write_bytes
                .fetch_add(a.buf.len() as u64, Ordering::Relaxed);
            a.start += a.buf.len() as u64;
            a.buf.clear();
            self.unsynced_since.get_or_insert_with(Instant::now);
        }
        let shared = self.shared;
        let written = Instant::now();
        // The batch's records become visible and are counted done as one step.
        let step = shared.steps.write();
        for p in a.publish.drain(..) {
            match p {
                Publish::Fragment {
                    spool,
                    at,
                    end,
                    progress,
                } => {
                    spool.written.lock().push((at, end));
                    progress.written(end);
                }
                Publish::Put {
                    fp,
                    key_hash,
                    varied,
                    loc,
                    epoch,
                    queued_at,
                    from,
                } => {
                    if let Some(q) = queued_at {
                        note_delay(shared, written.saturating_duration_since(q));
                    }
                    let recent = shared.recent_removals.lock();
                    let removed_after = [fp, key_hash ^ ALL_SALT]
                        .iter()
                        .any(|k| recent.get(k).is_some_and(|&e| e > epoch));
                    drop(recent);
                    if removed_after {
                        continue;
                    }
                    match from {
                        // A copy goes where its record was still indexed (not removed nor
                        // replaced by a newer write meanwhile), hit meanwhile or not.
                        Some(from) => {
                            if !shared.index.move_if_at(fp, from, loc) {
                                continue;
                            }
                        }
                        None => {
                            shared.index.insert(fp, loc);
                        }
                    }
                    if varied {
                        shared.varied.add(key_hash, fp);
                    }
                }
                Publish::Remove(r, epoch) => {
                    recovery::apply_removal(shared, r);
                    let k = if r.all {
                        r.key_hash ^ ALL_SALT
                    } else {
                        r.fingerprint
                    };
                    let mut recent = shared.recent_removals.lock();
                    if recent.get(&k).is_some_and(|&e| e <= epoch) {
                        recent.remove(&k);
                    }
                }
            }
        }
        // Their records are in the file and indexed: a replay counts them done from here.
        shared
            .jobs_done
            .fetch_add(std::mem::take(&mut self.unpublished), Ordering::AcqRel);
        drop(step);
        Ok(())
    }

    /// Seals the open region (if any) and opens the next.
    fn roll(&mut self) -> std::io::Result<()> {
        self.flush()?;
        if let Some(a) = self.active.take() {
            let (at, bytes) = seal(&a.entries, a.seq, self.size);
            self.shared.dir.write_at(a.region, at, &bytes)?;
            self.unsynced_since.get_or_insert_with(Instant::now);
            self.used.push_back(a.region);
        }
        let region = match self.free.pop() {
            Some(r) => r,
            None => self.reclaim()?,
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        self.shared.seqs[region as usize].store(seq, Ordering::Release);
        self.active = Some(Active {
            region,
            seq,
            start: 0,
            buf: RegionHeader {
                seq,
                region_size: self.size,
            }
            .encode()
            .to_vec(),
            entries: Vec::new(),
            publish: Vec::new(),
        });
        self.shared
            .stats
            .regions_used
            .store(self.used.len() as u64 + 1, Ordering::Relaxed);
        Ok(())
    }

    /// A hot record about to be copied forward, judged by the rule log now (a pass may
    /// have passed its new region already): `None` if a rule kills it, else the record
    /// with its labels brought up to date (its `checked` and soft mark).
    fn judged(&self, mut r: Record) -> Option<Record> {
        let Some(inv) = self.shared.inv.get() else {
            return Some(r);
        };
        let floor = self.shared.disk_checked.load(Ordering::Acquire);
        let obj = crate::shared::object_of(&r, floor)?;
        if inv.verdict(&obj) == trove_store::Verdict::Dead {
            return None;
        }
        r.labels = Bytes::from(crate::labels::encode(&obj.head.labels));
        Some(r)
    }

    /// Keeps a hot record of the region being reclaimed to be copied forward, if it is an
    /// object, fits what is left of `budget`, reads back whole and no rule kills it.
    fn keep(
        &mut self,
        victim: u32,
        seq: u64,
        e: &SummaryEntry,
        loc: Loc,
        budget: &mut u64,
    ) -> std::io::Result<bool> {
        if e.kind != Kind::Object || (e.len as u64) > *budget {
            return Ok(false);
        }
        let mut b = bytes::BytesMut::zeroed(e.len as usize);
        let n = self.shared.dir.read_at(victim, e.offset as u64, &mut b)?;
        b.truncate(n);
        let Some(r) = Record::decode(&Bytes::from(b), seq)
            .ok()
            .and_then(|r| self.judged(r))
        else {
            return Ok(false);
        };
        *budget -= e.len as u64;
        // Hits from here on are the copy's (see `Index::move_if_at`).
        self.shared.index.clear_accessed_if_at(e.fingerprint, loc);
        // Left in the index until its copy is published (`place`), and read from `moving`
        // once its region is retired: a hot object is found all the while it moves.
        self.reinsert.push((r, loc));
        Ok(true)
    }

    /// Empties the oldest region: its objects leave the index, the hot ones (with
    /// reinsertion) are kept to be written again. Returns it.
    fn reclaim(&mut self) -> std::io::Result<u32> {
        // The oldest region is the last recovery reaches: it must be indexed before it can
        // be emptied.
        self.end_recovery();
        if self.shared.state.load(Ordering::Acquire) == FAILED {
            return Err(std::io::Error::other("the index could not be recovered"));
        }
        let victim = self
            .used
            .pop_front()
            .ok_or_else(|| std::io::Error::other("no region to reclaim"))?;
        let seq = self.shared.seqs[victim as usize].load(Ordering::Acquire);
        self.reinsert_epoch = self.shared.epoch.load(Ordering::Acquire);
        let entries = match recovery::summary(self.shared, victim, seq) {
            Some(e) => e,
            None => recovery::scan(self.shared, victim, seq)?.0,
        };
        let mut budget = match self.shared.config.reclaim {
            Reclaim::Fifo => 0,
            Reclaim::FifoReinsert => self.size / 2,
        };
        // Heads leave the index like objects but are never copied forward: their fragments
        // stay where they are, and copying them (up to a whole object) would turn FIFO
        // reclaiming into compaction.
        // Decided first (reading what is copied forward), then taken off the index all at
        // once: a lookup meanwhile finds the region as it was, not half emptied. The whole
        // of it, to the count below, is one step for a read that notes the writer's place
        // (`Shared::steps`).
        let step = self.shared.steps.write();
        let mut gone = Vec::new();
        for e in entries
            .iter()
            .filter(|e| matches!(e.kind, Kind::Object | Kind::Head))
        {
            let loc = Loc::new(victim, e.offset as u64, e.len as u64);
            let Some(cur) = self.shared.index.get(e.fingerprint) else {
                continue;
            };
            if !cur.same_place(loc) {
                continue;
            }
            if cur.accessed() && self.keep(victim, seq, e, loc, &mut budget)? {
                continue;
            }
            gone.push((loc, e));
        }
        for (loc, e) in gone {
            // Hit since it was passed over above (while the hot ones were read): kept as
            // if the hit had come before the reclaim began, so what a reclaim keeps
            // depends on the hits made before this moment, not on how long its reads took.
            if self.shared.index.remove_unless_accessed(e.fingerprint, loc)
                && !self.keep(victim, seq, e, loc, &mut budget)?
            {
                self.shared.index.remove_if_at(e.fingerprint, loc);
            }
            if e.flags & FLAG_VARIED != 0 && self.shared.index.get(e.fingerprint).is_none() {
                self.shared.varied.forget(e.key_hash, e.fingerprint);
            }
        }
        if !self.reinsert.is_empty() {
            let mut moving = self.shared.moving.lock();
            for (r, _) in &self.reinsert {
                moving.insert(r.header.fingerprint, r.clone());
            }
        }
        self.shared.seqs[victim as usize].store(0, Ordering::SeqCst);
        // Counted here, as a lookup sees it (a replayable trace records the count).
        self.shared.regions_retired.fetch_add(1, Ordering::AcqRel);
        drop(step);
        if self.shared.zero_copy.load(Ordering::Acquire) {
            // After `seq` is retired, and after every `sendfile` that may have read the
            // region under its old `seq` returned, before a byte is rewritten: see
            // `zero_copy`.
            crate::zero_copy::drain_pins(self.shared, victim);
            if let Err(e) = self.shared.dir.punch(victim) {
                self.shared.zero_copy.store(false, Ordering::Release);
                tracing::warn!(
                    "disk tier: punching a hole failed ({e}); sendfile is off from now on"
                );
            }
        }
        self.shared
            .stats
            .regions_reclaimed
            .fetch_add(1, Ordering::Relaxed);
        Ok(victim)
    }
}

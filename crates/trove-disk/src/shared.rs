//! What the disk tier's parts share: its settings and statistics, the state the writer,
//! readers and recovery all work on ([`Shared`]), the jobs queued for the writer, and the
//! record flags. Kept apart from [`crate::DiskStore`] (the public face, which starts the
//! writer and recovery) so those parts depend on this and not on each other's caller.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use trove_store::Object;

use crate::dir::Dir;
use crate::format::{FLAG_ALL_VARIANTS, FLAG_VARIED};
use crate::index::{Index, Varied};
use crate::journal::RuleJournal;

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
    /// Of `writes`, those the last sync of the data files covered (durable across a crash
    /// of the machine).
    pub writes_synced: AtomicU64,
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
    /// Regions whose data recovery could not take (a damaged region header, a data file
    /// cut short before them) and dropped, each with a log line (issue 19, defect 7).
    pub regions_discarded: AtomicU64,
    /// Starts that found acknowledged invalidations damaged in the journal (and dropped
    /// every object they may have covered).
    pub journal_damaged: AtomicU64,
}

/// A snapshot of [`Stats`] and the index's size: the storage interface's figures of a lower
/// tier, so the proxy reports them without naming this crate.
pub type DiskStats = trove_store::LowerStats;

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
    /// A piece of a body being spooled (`spool`), as a fragment record.
    Fragment {
        spool: Arc<SpoolState>,
        offset: u64,
        body: Vec<Bytes>,
        progress: trove_store::SpoolProgress,
    },
    /// A spooled body's head, after its last fragment: the object becomes findable.
    SpoolHead {
        spool: Arc<SpoolState>,
        len: u64,
        key: String,
        variant: String,
        labels: Vec<u8>,
        meta: Vec<u8>,
        epoch: u64,
        queued_at: Instant,
    },
    Flush(Arc<(Mutex<bool>, Condvar)>),
}

/// The writer's side of a spool: what it placed so far (in order), and the running
/// checksum of the body.
pub(crate) struct Placed {
    pub fragments: Vec<crate::format::FragmentRef>,
    pub hasher: xxhash_rust::xxh3::Xxh3,
}

/// A spool's state, shared by its [`crate::DiskSpool`] handles and the writer's jobs (here,
/// beside [`Job`], so the queue's types need nothing of the spool's module).
pub(crate) struct SpoolState {
    pub shared: Arc<Shared>,
    pub fingerprint: u64,
    pub key_hash: u64,
    /// Random per spool (see `FragmentMeta::spool`).
    pub id: u64,
    pub piece: u64,
    /// The whole body's length once handed over ([`Spool::finish`]); `u64::MAX` before.
    pub finished: AtomicU64,
    pub placed: Mutex<Placed>,
    /// Fragments written (their batch is in the file), readable, each with where its bytes
    /// end in the body.
    pub written: Mutex<Vec<(crate::format::FragmentRef, u64)>>,
    /// 0 going on, 1 abandoned, 2 failed.
    pub state: std::sync::atomic::AtomicU8,
    /// The head's index location, for a body at rest: a corrupt fragment drops it.
    pub at: Option<crate::index::Loc>,
    /// A fragment was found corrupt: the body is of no use any more.
    pub broken: std::sync::atomic::AtomicBool,
}

/// A spool's [`SpoolState::state`]: going on, abandoned, failed.
pub(crate) const SPOOL_GOING: u8 = 0;
pub(crate) const SPOOL_ABANDONED: u8 = 1;
pub(crate) const SPOOL_FAILED: u8 = 2;

impl SpoolState {
    pub(crate) fn going(&self) -> bool {
        self.state.load(Ordering::Acquire) == SPOOL_GOING
    }

    pub(crate) fn fail(&self) {
        let _ = self.state.compare_exchange(
            SPOOL_GOING,
            SPOOL_FAILED,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
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
    /// Records being copied forward by a reclaim, by fingerprint: from the moment their
    /// region is retired until their copies are published, a load that finds the old
    /// place gone reads them from here ([`crate::reader::load`]), so a hot object never
    /// misses while it moves.
    pub moving: Mutex<std::collections::HashMap<u64, crate::format::Record>>,
    /// With the writer held (a replay): the removals a pass over the disk decided, not
    /// made yet, in order (key, variant); made by [`crate::DiskStore::reach`] where the
    /// trace says trove's were made, beside the requests looked up meanwhile.
    pub deferred_removals: Mutex<VecDeque<(String, String)>>,
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
    /// The writer takes it alone for each step a lookup could otherwise see half made (a
    /// batch's records published and counted done; a reclaim's removals from the index and
    /// its count); a read asked to note the writer's place ([`trove_store::Note`]) takes it
    /// shared while it notes the place and looks at the index, so the two are of one
    /// moment. Only noting reads (a replayable trace's) take it shared: otherwise the
    /// writer never waits for it.
    pub steps: parking_lot::RwLock<()>,
    pub stop: AtomicBool,
    pub config: DiskConfig,
    /// Set once the failure was logged, so it is logged once.
    pub failure_logged: AtomicBool,
    /// Records verified for zero-copy sends, per region (`zero_copy`).
    pub verified: Vec<Mutex<Verified>>,
    /// True while bodies may be sent from the file: the file system punches holes, so a
    /// reclaimed region's old pages stay with the sockets that reference them.
    pub zero_copy: AtomicBool,
    /// Per region, how many `sendfile` calls are reading from it right now (`zero_copy`,
    /// "Pins"): the writer retires a region's `seq`, then waits for its count to drain
    /// before it punches and rewrites the region.
    pub pins: Vec<std::sync::atomic::AtomicU32>,
    /// Jobs queued and jobs the writer has carried out (flushes aside), counted done as
    /// their records are published: a replay reads the second to know where trove's
    /// writer was ([`crate::DiskStore::progress`]).
    pub jobs_pushed: AtomicU64,
    pub jobs_done: AtomicU64,
    /// Jobs it has begun: past `jobs_done` while jobs are written but not published yet.
    /// A region a job needs is reclaimed before the job begins (`Writer::make_room`).
    pub jobs_begun: AtomicU64,
    /// Regions reclaimed so far, counted the moment their objects left the index (before
    /// a pinned region's punch, which `DiskStats::regions_reclaimed` waits for).
    pub regions_retired: AtomicU64,
    /// Set when the writer is held (a replay's, [`crate::DiskStore::hold_writer`]).
    pub gate: std::sync::OnceLock<Gate>,
}

/// A held writer: it carries out jobs only as far as it is released to.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    /// Jobs it may have taken in all.
    pub allowed: AtomicU64,
    /// Jobs it has taken.
    pub taken: AtomicU64,
    /// Signalled when jobs are done, and when a request to reclaim ahead is answered.
    pub done: (Mutex<()>, Condvar),
    /// Requests to reclaim ahead of the next job ([`crate::DiskStore::roll_ahead`]): how
    /// many were made and answered, and the regions reclaimed in all the last one wants.
    pub roll_asked: AtomicU64,
    pub roll_answered: AtomicU64,
    pub roll_to: AtomicU64,
}

impl Shared {
    /// Queues a job for the writer.
    pub fn push(&self, job: Job) {
        let mut q = self.queue.lock();
        if !matches!(job, Job::Flush(_)) {
            self.jobs_pushed.fetch_add(1, Ordering::AcqRel);
        }
        q.push_back(job);
        drop(q);
        self.wake.notify_one();
    }

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

/// Records verified for zero-copy sends (see `zero_copy`).
/// Records of one region verified since it was last reclaimed.
#[derive(Default)]
pub(crate) struct Verified {
    pub(crate) seq: u64,
    /// Record offsets / 8.
    pub(crate) offsets: std::collections::HashSet<u32>,
}

/// One [`Verified`] per region.
pub(crate) fn verified_sets(regions: u32) -> Vec<parking_lot::Mutex<Verified>> {
    (0..regions)
        .map(|_| parking_lot::Mutex::new(Verified::default()))
        .collect()
}

/// One pin count per region, all 0 (see `Shared::pins`).
pub(crate) fn pin_counts(regions: u32) -> Vec<std::sync::atomic::AtomicU32> {
    (0..regions)
        .map(|_| std::sync::atomic::AtomicU32::new(0))
        .collect()
}

//! The disk tier as the replay runs it: trove's own (`trove_disk::Tiered`, the memory tier
//! over a `DiskStore`), writing real files in a directory of its own, so disk hits, what
//! the disk's FIFO regions reclaim, reinsertion and promotion are trove's, not a model of
//! them.
//!
//! Three things differ from `trove serve`, all to make a replay repeatable:
//! - **The writer is put where trove's was.** In `trove serve` the disk's writer runs
//!   beside the requests: an object reaches the disk a moment after its body completes, and
//!   a region is reclaimed a moment after the write that needs it, so what a request finds
//!   depends on timing. A replayable trace records, with each request, how far trove's
//!   writer had got when it looked the request up (jobs done and queued, regions
//!   reclaimed); the exact replay holds its writer and lets it go that far
//!   ([`DiskTier::settle`]), and places bodies' ends and sweeps by the jobs they queued
//!   (`crate::trace::replayable`). A replay of a log that does not say waits for its
//!   writer after every request.
//! - **Passes over the disk** (removing what invalidation rules kill there) are made
//!   where the trace says trove made them, never by this machine's clock.
//! - **Bodies are zeros** of the recorded length (the disk stores what it is given, and a
//!   simulated origin sends lengths only), so a replay with a disk writes as many bytes as
//!   the trace's objects hold, up to `--disk`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use trove_disk::{DiskConfig, DiskStore, Reclaim, Tiered};
use trove_store::MemoryStore;

/// A disk tier under the memory tier (`[cache.disk]`).
#[derive(Debug, Clone)]
pub struct DiskModel {
    /// Bytes of disk (`[cache.disk] size`).
    pub size: u64,
    /// `[cache.disk] region_size` (trove's default 16 MiB).
    pub region_size: u64,
    /// `[cache.disk] sendfile_min` (trove's default 64 KiB).
    pub sendfile_min: u64,
    pub reclaim: Reclaim,
    /// Where the tiers' directories go; the system's temporary directory when `None`.
    pub dir: Option<PathBuf>,
}

impl DiskModel {
    /// trove's defaults for a disk of `size` bytes.
    pub fn new(size: u64) -> DiskModel {
        DiskModel {
            size,
            region_size: 16 << 20,
            sendfile_min: 64 << 10,
            reclaim: Reclaim::default(),
            dir: None,
        }
    }

    /// What `trove serve --check` would refuse, said the same way (the rules are
    /// `trove_proxy::settings`' for `[cache.disk]`, which this crate does not depend on).
    pub fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (64 << 10..=128 << 20).contains(&self.region_size),
            "--disk-region: between 64KiB and 128MiB"
        );
        anyhow::ensure!(
            self.size / self.region_size >= 3,
            "--disk: at least 3 regions (--disk-region) of disk"
        );
        Ok(())
    }
}

/// One configuration's disk tier: the store, and its directory, removed when dropped.
pub struct DiskTier {
    pub store: Arc<Tiered>,
    dir: PathBuf,
    /// Its writer held, released as far as the trace says trove's had got.
    held: bool,
}

/// Tiers opened by this process so far (each gets a directory of its own).
static OPENED: AtomicU64 = AtomicU64::new(0);

impl DiskTier {
    /// `memory` over a fresh disk tier as `model` says, in a new directory.
    /// With `held`, the writer is held ([`DiskTier::settle`] lets it go as far as a trace
    /// says trove's writer had got); else it is waited for after each request.
    pub fn open(memory: MemoryStore, model: &DiskModel, held: bool) -> anyhow::Result<DiskTier> {
        let base = model.dir.clone().unwrap_or_else(std::env::temp_dir);
        let n = OPENED.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("trove-sim-disk-{}-{n}", std::process::id()));
        // A directory left by a process of the same id that was killed is not ours to keep.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| anyhow::anyhow!("the disk tier's directory {}: {e}", dir.display()))?;
        let config = DiskConfig {
            region_size: model.region_size,
            reclaim: model.reclaim,
            ..DiskConfig::new(&dir, model.size)
        };
        let disk = match DiskStore::open(config) {
            Ok(d) => d,
            Err(e) => {
                remove(&dir);
                anyhow::bail!("the disk tier in {}: {e}", dir.display());
            }
        };
        if held {
            disk.hold_writer();
        }
        Ok(DiskTier {
            store: Arc::new(Tiered::new(memory, disk).with_passes_told()),
            dir,
            held,
        })
    }

    /// Puts the disk's writer where trove's was when it looked a request up: `upto` jobs
    /// done (a replayable trace's `lower_jobs`), or, when the trace does not say, all that
    /// are queued. So the state a request finds depends neither on how fast this machine's
    /// disk is nor on how far ahead of trove's the replay's writer runs.
    ///
    /// Trove's writer reclaims the region a job needs before it begins that job, a step
    /// of its own: if it had reclaimed more regions than the replay's has once `upto` jobs
    /// are done (`reclaims`, the trace's `lower_reclaims`), it was between that step and
    /// the next job, and the replay's is put there too ([`DiskStore::roll_ahead`]).
    ///
    /// [`DiskStore::roll_ahead`]: trove_disk::DiskStore::roll_ahead
    /// Makes the removals the last pass over the disk decided as far as trove's had been
    /// made when `queued` jobs had been queued for its writer (the trace's `lower_queued`;
    /// all of them when it does not say): trove's pass made them one by one, beside the
    /// requests ([`DiskStore::reach`]).
    ///
    /// [`DiskStore::reach`]: trove_disk::DiskStore::reach
    pub fn reach(&self, queued: Option<u64>) {
        self.store.disk().reach(queued.unwrap_or(u64::MAX));
    }

    pub fn settle(&self, done: Option<u64>, reclaims: Option<u64>) {
        let disk = self.store.disk();
        if let Some(n) = done {
            // Jobs done were queued first.
            self.reach(Some(n));
        }
        match (self.held, done) {
            (true, Some(n)) => {
                disk.release(n);
                if let Some(r) = reclaims {
                    disk.roll_ahead(r);
                }
            }
            (true, None) => disk.release(u64::MAX),
            (false, _) => disk.flush(),
        }
    }
}

impl Drop for DiskTier {
    fn drop(&mut self) {
        remove(&self.dir);
    }
}

fn remove(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}

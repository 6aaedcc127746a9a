//! Memory over disk: [`Tiered`] is the `Storage` the cache core drives when a disk tier is
//! configured.
//!
//! - **Write-through at completion.** An object whose body is complete (on insert, or when
//!   its fill finishes and `recharge` is called) is queued for the disk at once, so a
//!   `kill -9` loses only what the writer had not reached (see `writer`), not everything
//!   that happened to be in memory.
//! - **Demotion.** A memory victim not yet on disk (the queue was full, or its head was
//!   freshened since) is written on its way out by the memory tier's `EvictionHook`. A
//!   victim whose body is still arriving is written when it completes: its fill keeps the
//!   body whole meanwhile ([`Storage::wants`]), within a quarter of the memory tier's budget
//!   for all such bodies together.
//! - **Promotion.** A memory miss the disk index may hold is answered by
//!   [`Storage::probe`] (no I/O) with a handle ([`trove_store::Lower`]) that the caller runs
//!   where blocking is allowed (the proxy: its blocking pool; never inside a cache-core
//!   decision). Its `load` ([`Tiered::promote`]) reads the key into the memory tier,
//!   verified, whole when small; a large body is inserted at once and filled from disk as it
//!   is read (the work it hands back, [`Tiered::fill`]), clients following it like any body
//!   being stored, and it never completes if its checksum fails. Its `open_file` hands a
//!   large unvaried body back as a [`trove_store::FileBody`] to `sendfile`
//!   ([`crate::zero_copy`]), not promoted.
//! - **Per-object state on the object.** Whether an object's snapshot is on disk already
//!   (evicting it writes nothing) and whether it is being promoted are its
//!   [`trove_store::TierMarks`]; what remains here are registries the tier must search by
//!   key: objects evicted while arriving (bounded in bytes), spools, recent promotions.
//! - **Spooling.** A body too large for memory (declared, or grown past
//!   [`Tiered::spool_above`] while arriving) is written to disk as it arrives
//!   ([`crate::DiskSpool`]), memory holding only a window of it; clients collapsed onto its
//!   fetch follow it, those behind the window from its fragments. It is findable here while
//!   it arrives, on disk once its head is written; a hit on it reads its fragments, never
//!   promoting it whole.
//! - **Removal.** Purges and invalidations reach both tiers; the disk keeps a tombstone.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use trove_store::tier::Fill as Work;
use trove_store::{
    Body, BodyError, EvictionHook, FileHit, FileOpen, Lower, LowerStats, Mark, MemoryStore, Note,
    Object, ObjectHead, Probe, Refused, Removal, Storage, StoreStats, StreamLimits,
};

use crate::reader::BodyStream;
use crate::reader::LoadedBody;
use crate::store::DiskStore;

/// Bodies up to this size are read from disk whole, in one read; larger ones stream.
pub const WHOLE_LIMIT: u64 = 1 << 20;

/// Objects evicted while their body was still arriving, to be written to disk when it
/// completes. Their fills keep their bodies whole until then (see [`Tiered::wants`]),
/// outside the memory tier's budget, so the bytes they may hold are bounded: at most
/// [`ARRIVING_SHARE`] of the memory tier's budget, charged as the memory tier charged them
/// (the declared length, or what had arrived); past that an object evicted while arriving
/// is not kept for the disk, as before (its body keeps only `stream_buffer` bytes).
#[derive(Default)]
struct ArrivingSet {
    /// Id → (key, bytes charged).
    objects: HashMap<u64, (String, u64)>,
    bytes: u64,
    /// The most `bytes` may reach.
    limit: u64,
}

/// The share of the memory tier's budget that bodies evicted while arriving may hold in
/// all, kept whole for the disk: a quarter.
const ARRIVING_SHARE: u64 = 4;

impl ArrivingSet {
    fn insert(&mut self, id: u64, key: String, charge: u64) -> bool {
        if self.bytes.saturating_add(charge) > self.limit {
            return false;
        }
        self.bytes += charge;
        if let Some((_, old)) = self.objects.insert(id, (key, charge)) {
            self.bytes -= old;
        }
        true
    }

    fn remove(&mut self, id: u64) -> bool {
        match self.objects.remove(&id) {
            Some((_, c)) => {
                self.bytes -= c;
                true
            }
            None => false,
        }
    }

    fn contains(&self, id: u64) -> bool {
        self.objects.contains_key(&id)
    }

    fn forget_key(&mut self, key: &str) {
        let ids: Vec<u64> = self
            .objects
            .iter()
            .filter(|(_, (k, _))| k == key)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.remove(id);
        }
    }
}

type Arriving = Arc<Mutex<ArrivingSet>>;

/// Objects promoted from disk kept this many at most in [`Recent`].
const RECENT: usize = 1024;

/// Objects just read from disk, so they are served even if the memory tier turns them
/// away at once (a small memory tier, or S3-FIFO's probation queue evicting a newcomer to
/// make room): a lookup falls back to these after a memory miss. Bounded, oldest out.
#[derive(Default)]
struct Recent {
    map: HashMap<String, Vec<Arc<Object>>>,
    order: VecDeque<String>,
}

impl Recent {
    fn add(&mut self, obj: Arc<Object>) {
        let v = self.map.entry(obj.key.clone()).or_default();
        v.retain(|o| o.variant != obj.variant);
        if v.is_empty() {
            self.order.push_back(obj.key.clone());
        }
        v.push(obj);
        while self.order.len() > RECENT {
            if let Some(k) = self.order.pop_front() {
                self.map.remove(&k);
            }
        }
    }

    fn get(&self, key: &str) -> Vec<Arc<Object>> {
        self.map.get(key).cloned().unwrap_or_default()
    }

    fn forget(&mut self, key: &str) {
        if self.map.remove(key).is_some() {
            self.order.retain(|k| k != key);
        }
    }
}

/// The journal as the memory tier's rule log sees it: a failure of the journal fails the
/// disk tier too (memory-only from then on: no object on disk is served or written while
/// rules can't be kept). The store is held weakly: it holds the rule log, which holds this.
struct JournalHandle {
    journal: Arc<crate::journal::RuleJournal>,
    shared: std::sync::Weak<crate::shared::Shared>,
}

impl JournalHandle {
    fn fail(&self, e: &dyn std::fmt::Display) {
        if let Some(s) = self.shared.upgrade() {
            s.fail("the invalidation journal", e);
        }
    }

    fn check<T>(&self, r: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(e) = &r {
            self.fail(e);
        }
        r
    }
}

impl trove_store::Journal for JournalHandle {
    fn append(&self, rule: &trove_store::invalidation::Rule) {
        self.journal.append(rule);
        if self.journal.has_failed() {
            self.fail(&"appending a rule failed");
        }
    }
    fn reserve(&self, upto: u64) -> std::io::Result<()> {
        self.check(self.journal.reserve(upto))
    }
    fn sync_through(&self, seq: u64) -> std::io::Result<()> {
        self.check(self.journal.sync_through(seq))
    }
    fn compact(
        &self,
        snapshot: &dyn Fn() -> trove_store::invalidation::Snapshot,
    ) -> std::io::Result<()> {
        self.journal.compact(snapshot)
    }
    fn keep_feed_position(
        &self,
        position: trove_store::invalidation::FeedPosition,
    ) -> std::io::Result<()> {
        self.journal.keep_feed_position(position)
    }
    fn feed_position(&self) -> Option<trove_store::invalidation::FeedPosition> {
        self.journal.feed_position()
    }
}

/// How often, at most, the background sweep also passes over the disk (reading every
/// region in use) so rules can be retired with a disk tier on; and never more than a tenth
/// of the time (a pass that took 10 s waits 100 s).
pub const DISK_PASS_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

struct Demote {
    disk: Arc<DiskStore>,
    /// Ids of objects evicted while their body was still arriving: written to disk when it
    /// completes (`Tiered::recharge`), as they would have been had they stayed.
    arriving: Arriving,
}

impl EvictionHook for Demote {
    fn evicted(&self, obj: Arc<Object>) {
        // On disk already (its snapshot written, or being promoted from there).
        if obj.marks().has(Mark::OnLower) || obj.marks().has(Mark::Promoting) {
            return;
        }
        if obj.body.outcome().is_none() {
            let charge = obj.charge();
            self.arriving
                .lock()
                .insert(obj.id(), obj.key.clone(), charge);
        } else {
            self.disk.write(&obj);
        }
    }
}

/// How bodies too large for memory are spooled to disk as they arrive (see the module
/// docs).
#[derive(Debug, Clone)]
pub struct SpoolConfig {
    /// The largest body spooled (`[cache.disk] max_object`); larger ones pass through
    /// uncached. 0: nothing is spooled.
    pub max_object: u64,
    /// Bytes of a spooled body kept in memory behind its writer (`[cache] stream_buffer`).
    pub window: u64,
    /// What a spooled body keeps should its spool fail (it is unstored from then on).
    pub fallback: StreamLimits,
    /// Where the bytes spooled bodies hold are counted.
    pub meter: Option<Arc<std::sync::atomic::AtomicU64>>,
}

impl Default for SpoolConfig {
    fn default() -> SpoolConfig {
        SpoolConfig {
            max_object: 1 << 30,
            window: 1 << 20,
            fallback: StreamLimits {
                read_ahead: 256 << 10,
                buffer: 1 << 20,
            },
            meter: None,
        }
    }
}

/// Objects whose body is being spooled, by key, with their spools: findable while they
/// arrive.
type Spooling = Mutex<HashMap<String, Vec<(Arc<Object>, crate::DiskSpool)>>>;

/// A large body to fill from disk (see [`Tiered::fill`]).
pub struct Fill {
    obj: Arc<Object>,
    stream: Box<BodyStream>,
}

/// See the module docs: the tiered store as the storage interface hands it out, its state
/// shared with the handles its lookups hand back ([`Storage::probe`]).
pub struct Tiered(Arc<Inner>);

/// The tiered store itself.
struct Inner {
    memory: MemoryStore,
    disk: Arc<DiskStore>,
    arriving: Arriving,
    recent: Mutex<Recent>,
    /// When the last disk pass ended and how long it took, and whether the last `scan`
    /// included a whole one.
    last_pass: Mutex<Option<(std::time::Instant, std::time::Duration)>>,
    pass_every: std::time::Duration,
    /// `Some`: passes over the disk are made only when told ([`Tiered::pass_on_next_scan`],
    /// the flag), never by the clock.
    told: Option<std::sync::atomic::AtomicBool>,
    scanned_all: std::sync::atomic::AtomicBool,
    spool: SpoolConfig,
    spooling: Spooling,
    /// Keys in `spooling`, so a lookup skips its lock when there are none (nearly always).
    spool_keys: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tiered")
            .field("memory", &self.memory)
            .field("disk", &self.disk)
            .finish()
    }
}

impl std::fmt::Debug for Tiered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl Tiered {
    /// `memory` (built without an eviction hook) over `disk`. The rule log the disk's
    /// journal kept is handed to the memory tier's `Invalidations` first, and every rule
    /// made from now on is journaled.
    pub fn new(memory: MemoryStore, disk: DiskStore) -> Tiered {
        Tiered(Arc::new(Inner::new(memory, disk)))
    }

    /// Spools large bodies as `config` says (default: [`SpoolConfig::default`]). Set before
    /// the store is used: a store already handed out keeps its settings.
    pub fn with_spool(mut self, config: SpoolConfig) -> Tiered {
        if let Some(inner) = Arc::get_mut(&mut self.0) {
            inner.spool = config;
        }
        self
    }

    /// Passes over the disk at most this often (default [`DISK_PASS_EVERY`]); set before
    /// the store is used, like [`Tiered::with_spool`].
    pub fn with_pass_every(mut self, every: std::time::Duration) -> Tiered {
        if let Some(inner) = Arc::get_mut(&mut self.0) {
            inner.pass_every = every;
        }
        self
    }

    /// Passes over the disk only when told ([`Tiered::pass_on_next_scan`]), whatever the
    /// time: for a replay that makes them where a trace says trove made them. Set before
    /// the store is used, like [`Tiered::with_spool`].
    pub fn with_passes_told(mut self) -> Tiered {
        if let Some(inner) = Arc::get_mut(&mut self.0) {
            inner.told = Some(std::sync::atomic::AtomicBool::new(false));
        }
        self
    }

    /// With [`Tiered::with_passes_told`]: the next scan passes over the disk.
    pub fn pass_on_next_scan(&self) {
        if let Some(t) = &self.0.told {
            t.store(true, std::sync::atomic::Ordering::Release);
        }
    }

    /// With [`Tiered::with_passes_told`]: a pass told for the next scan and not made (no
    /// scan followed: the sweep had no rule to apply) is forgotten, so it is not made at a
    /// later sweep's scan instead. For a replay of a trace that said a sweep passed over
    /// the disk when it scanned nothing (traces written before `SweepReport::whole`).
    pub fn forget_told_pass(&self) {
        if let Some(t) = &self.0.told {
            t.store(false, std::sync::atomic::Ordering::Release);
        }
    }

    pub fn disk(&self) -> &DiskStore {
        &self.0.disk
    }

    /// [`Storage::probe`], with `note` called as the disk's index is looked at.
    fn probe_with(&self, key: &str, note: Note<'_>) -> Probe {
        if self.0.should_promote(key, note) {
            Probe::Lower(Box::new(DiskKey {
                tiered: Arc::clone(&self.0),
                key: key.to_string(),
            }))
        } else {
            Probe::Upper
        }
    }

    /// True when a memory miss for `key` should be tried on disk first (no I/O): what
    /// [`Storage::probe`] answers [`Probe::Lower`] for.
    pub fn should_promote(&self, key: &str) -> bool {
        self.0.should_promote(key, None)
    }

    /// Loads `key`'s variants from disk into memory (blocking I/O): [`Lower::load`]. Small
    /// bodies arrive whole; each large one is returned as a [`Fill`] for [`Tiered::fill`].
    pub fn promote(&self, key: &str) -> Vec<Fill> {
        self.0.promote(key, None)
    }

    /// Reads a large promoted body from disk into its object (blocking I/O).
    pub fn fill(&self, f: Fill) {
        self.0.fill(f)
    }
}

/// A key the disk may hold and memory does not: the handle [`Storage::probe`] hands out.
struct DiskKey {
    tiered: Arc<Inner>,
    key: String,
}

impl Lower for DiskKey {
    fn open_file_now(&self, min: u64, note: Note<'_>) -> FileOpen {
        match self.tiered.disk.open_body_cached(&self.key, min, note) {
            crate::Cached::Found(found) => FileOpen::Found(Box::new(file_hit(*found))),
            crate::Cached::No => FileOpen::No,
            crate::Cached::WouldBlock => FileOpen::WouldBlock,
        }
    }

    fn open_file(&self, min: u64, note: Note<'_>) -> Option<FileHit> {
        self.tiered
            .disk
            .open_body(&self.key, min, note)
            .map(file_hit)
    }

    fn load(&self, note: Note<'_>) -> Vec<Work> {
        self.tiered
            .promote(&self.key, note)
            .into_iter()
            .map(|f| {
                let t = Arc::clone(&self.tiered);
                Work::new(move || t.fill(f))
            })
            .collect()
    }
}

fn file_hit(found: crate::OnDisk) -> FileHit {
    FileHit {
        head: found.head,
        body: Box::new(found.body),
    }
}

impl Inner {
    fn new(memory: MemoryStore, disk: DiskStore) -> Inner {
        let disk = Arc::new(disk);
        if let Some(inv) = memory.invalidations() {
            if let Some(restored) = disk.take_restored() {
                inv.attach_journal(
                    Arc::new(JournalHandle {
                        journal: Arc::clone(disk.journal()),
                        shared: Arc::downgrade(&disk.shared),
                    }),
                    restored.snapshot,
                );
            }
            disk.attach(Arc::clone(inv));
        }
        let arriving: Arriving = Arc::new(Mutex::new(ArrivingSet {
            limit: memory.stats().capacity / ARRIVING_SHARE,
            ..ArrivingSet::default()
        }));
        let memory = memory.with_eviction_hook(Arc::new(Demote {
            disk: Arc::clone(&disk),
            arriving: Arc::clone(&arriving),
        }));
        Inner {
            memory,
            disk,
            arriving,
            recent: Mutex::default(),
            last_pass: Mutex::new(None),
            pass_every: DISK_PASS_EVERY,
            told: None,
            scanned_all: std::sync::atomic::AtomicBool::new(false),
            spool: SpoolConfig::default(),
            spooling: Mutex::default(),
            spool_keys: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Starts spooling `obj` (its body still arriving, `len` bytes or more): out of the
    /// memory tier, findable here until it ends. False if the disk can't take it.
    fn start_spool(&self, obj: &Arc<Object>, len: u64) -> bool {
        let Some(spool) = self.disk.spool(obj, len) else {
            return false;
        };
        let c = &self.spool;
        if !obj.body.set_spooled(
            c.window,
            Arc::new(spool.clone()),
            c.fallback,
            c.meter.clone(),
        ) {
            return false;
        }
        let mut map = self.spooling.lock();
        let v = map.entry(obj.key.clone()).or_default();
        for (old, _) in v.iter().filter(|(o, _)| o.variant == obj.variant) {
            old.body.abandon_spool();
        }
        v.retain(|(o, _)| o.variant != obj.variant);
        v.push((Arc::clone(obj), spool));
        self.spool_keys
            .store(map.len(), std::sync::atomic::Ordering::Release);
        true
    }

    /// `obj` leaves the spools, if it is one: complete, its head is queued (under the
    /// spools' lock, so a purge of its key is either before, and finds it here, or after,
    /// and its tombstone follows the head); else its spool is abandoned and nothing of it
    /// becomes findable.
    fn end_spool(&self, obj: &Object, completed: bool) -> Option<Arc<Object>> {
        let mut map = self.spooling.lock();
        let v = map.get_mut(&obj.key)?;
        let i = v.iter().position(|(o, _)| o.id() == obj.id())?;
        let (o, spool) = v.swap_remove(i);
        if v.is_empty() {
            map.remove(&obj.key);
            self.spool_keys
                .store(map.len(), std::sync::atomic::Ordering::Release);
        }
        if !(completed && self.disk.finish_spool(&o, &spool)) {
            o.body.abandon_spool();
        }
        Some(o)
    }

    /// Every object of `key` being spooled leaves, its spool abandoned; how many.
    fn forget_spools(&self, key: &str) -> usize {
        let gone = {
            let mut map = self.spooling.lock();
            let gone = map.remove(key).unwrap_or_default();
            self.spool_keys
                .store(map.len(), std::sync::atomic::Ordering::Release);
            gone
        };
        for (o, _) in &gone {
            o.body.abandon_spool();
        }
        gone.len()
    }

    fn spooled(&self, key: &str) -> Vec<Arc<Object>> {
        self.spooling
            .lock()
            .get(key)
            .map(|v| v.iter().map(|(o, _)| Arc::clone(o)).collect())
            .unwrap_or_default()
    }

    /// Forgets every object of `key` read from the disk's fragments (the tier failed).
    fn drop_unreadable(&self, key: &str) {
        let mut recent = self.recent.lock();
        if recent.get(key).iter().any(|o| o.body.has_spool()) {
            recent.forget(key);
        }
        drop(recent);
        if self.spooled(key).iter().any(|o| o.body.outcome().is_some()) {
            self.forget_spools(key);
        }
    }

    fn should_promote(&self, key: &str, note: Note<'_>) -> bool {
        self.disk.may_hold(key, note) && self.lookup(key).is_empty()
    }

    /// Loads `key`'s variants from disk into memory (blocking I/O). Small bodies arrive
    /// whole; each large one is returned as a [`Fill`] for [`Tiered::fill`] to run.
    fn promote(&self, key: &str, note: Note<'_>) -> Vec<Fill> {
        let mut fills = Vec::new();
        for l in self.disk.load(key, WHOLE_LIMIT, note) {
            if self.lookup(key).iter().any(|o| o.variant == l.variant) {
                continue; // Promoted by another request meanwhile, or fetched anew.
            }
            if let LoadedBody::Stream(s) = &l.body {
                if let Some(spool) = self.disk.spool_at_rest(s) {
                    // A large object: read from its fragments by whoever asks, never
                    // whole in memory.
                    let body = Body::from_spool(s.len(), Arc::new(spool));
                    let obj = self
                        .memory
                        .identify(Object::new(l.key, l.variant, l.head, body));
                    self.recent.lock().add(Arc::new(obj));
                    continue;
                }
            }
            let (body, stream) = match l.body {
                LoadedBody::Whole(b) => (Body::complete(b), None),
                LoadedBody::Stream(s) => (Body::new(Some(s.len())), Some(s)),
            };
            let obj = Object::new(l.key, l.variant, l.head, body);
            // The memory tier may evict it within the very insert that promotes it, and it
            // is on disk already.
            obj.marks().set(Mark::Promoting);
            let Ok(obj) = self.memory.insert(obj) else {
                continue;
            };
            if self.memory.holds(&obj) && stream.is_none() {
                // Already on disk, as it is: no need to write it again when evicted.
                obj.marks().set(Mark::OnLower);
            }
            obj.marks().clear(Mark::Promoting);
            self.recent.lock().add(Arc::clone(&obj));
            if let Some(stream) = stream {
                fills.push(Fill { obj, stream });
            }
        }
        fills
    }

    /// Reads a large promoted body from disk into its object (blocking I/O). A read error or
    /// a checksum mismatch fails the body (readers see the error, never a complete body)
    /// and removes the object.
    fn fill(&self, mut f: Fill) {
        loop {
            match self.disk.stream(&mut f.stream) {
                Ok(Some(b)) => {
                    if f.obj.body.append_now(b).is_err() {
                        return; // Left the store: nobody new will read it.
                    }
                }
                Ok(None) => {
                    f.obj.body.finish(Ok(()));
                    f.obj.marks().set(Mark::OnLower);
                    self.memory.recharge(&f.obj);
                    return;
                }
                Err(_) => {
                    f.obj.body.finish(Err(BodyError::Incomplete));
                    self.memory.remove_object(&f.obj, Removal::Failed);
                    return;
                }
            }
        }
    }

    /// Queues `obj` for the disk if its body is complete and it is not there already.
    fn persist(&self, obj: &Object) {
        if obj.body.outcome() != Some(Ok(())) {
            return;
        }
        if !obj.marks().set(Mark::OnLower) {
            return;
        }
        if !self.disk.write(obj) {
            obj.marks().clear(Mark::OnLower);
        }
    }

    fn is_spooling(&self, obj: &Object) -> bool {
        obj.body.is_spooled()
            && self
                .spooling
                .lock()
                .get(&obj.key)
                .is_some_and(|v| v.iter().any(|(o, _)| o.id() == obj.id()))
    }

    fn forget(&self, key: &str) {
        for o in self.memory.lookup(key) {
            o.marks().clear(Mark::OnLower);
        }
    }
}

impl Storage for Inner {
    /// The memory tier's rule log and tag index, journaled on disk. Records carry their
    /// objects' labels (tags, named cache, stamps), so every kind of rule reaches an
    /// object promoted from disk.
    fn invalidations(&self) -> Option<&Arc<trove_store::Invalidations>> {
        self.memory.invalidations()
    }

    /// The memory tier's objects; then, at most every `pass_every`, a pass over the disk
    /// ([`DiskStore::pass`]) that removes what the rules kill there. Only a scan that
    /// included a whole disk pass lets rules be retired ([`Storage::scans`]).
    fn scan(&self, visit: &mut dyn FnMut(&Arc<Object>)) {
        use std::sync::atomic::Ordering;
        self.scanned_all.store(false, Ordering::Release);
        self.memory.scan(visit);
        // Objects arriving on disk are judged too: a rule retired before their head is
        // written must still have reached them (their head is judged again when queued).
        let spools: Vec<Arc<Object>> = self
            .spooling
            .lock()
            .values()
            .flat_map(|v| v.iter().map(|(o, _)| Arc::clone(o)))
            .collect();
        for o in &spools {
            visit(o);
        }
        if self.disk.has_failed() {
            // Nothing on disk is served or written again in this process; objects left
            // there are older than the journal's `disk_checked`, so the retired rules'
            // floor kills them if a later start reads them.
            self.scanned_all.store(true, Ordering::Release);
            return;
        }
        // At most every `pass_every`, and never more than a tenth of the time: a pass
        // reads every region in use.
        let due = match &self.told {
            Some(told) => told.swap(false, Ordering::AcqRel),
            None => self
                .last_pass
                .lock()
                .is_none_or(|(at, took)| at.elapsed() >= self.pass_every.max(took * 10)),
        };
        if due {
            let started = std::time::Instant::now();
            let whole = self.disk.pass();
            *self.last_pass.lock() = Some((std::time::Instant::now(), started.elapsed()));
            self.scanned_all.store(whole, Ordering::Release);
        }
    }

    fn scans(&self) -> bool {
        self.scanned_all.load(std::sync::atomic::Ordering::Acquire)
    }

    fn lookup(&self, key: &str) -> Vec<Arc<Object>> {
        let mut found = self.memory.lookup(key);
        if found.is_empty() {
            found = self.recent.lock().get(key);
            // A large object read from disk whose fragments' regions were reused since.
            found.retain(|o| o.body.spool_intact());
        }
        if self.spool_keys.load(std::sync::atomic::Ordering::Acquire) > 0 {
            for o in self.spooled(key) {
                if o.body.spool_intact() && !found.iter().any(|f| f.variant == o.variant) {
                    found.push(o);
                }
            }
        }
        if self.disk.has_failed() && found.iter().any(|o| o.body.has_spool()) {
            // A failed tier is read no more: what only it holds is dropped (issue 19,
            // defect 2), so the request is a miss and the origin is asked again, rather than
            // a read that fails on every request until a restart.
            self.drop_unreadable(key);
            found.retain(|o| !o.body.has_spool());
        }
        found
    }

    fn insert(&self, obj: Object) -> Result<Arc<Object>, Refused> {
        self.recent.lock().forget(&obj.key);
        let declared = obj.body.expected_len().unwrap_or(0);
        // Whole responses only: a stored partial is combined from memory.
        if declared > self.spool_above() && obj.head.status == http::StatusCode::OK {
            if declared > self.spool.max_object {
                return Err(Refused::TooLarge);
            }
            let obj = Arc::new(self.memory.identify(obj));
            // A smaller copy in memory is replaced by this one.
            if let Some(old) = self
                .memory
                .lookup(&obj.key)
                .into_iter()
                .find(|o| o.variant == obj.variant)
            {
                old.marks().clear(Mark::OnLower);
                self.memory.remove_object(&old, Removal::Replaced);
            }
            return if self.start_spool(&obj, declared) {
                Ok(obj)
            } else {
                Err(Refused::TooLarge)
            };
        }
        if let Some(old) = self
            .memory
            .lookup(&obj.key)
            .iter()
            .find(|o| o.variant == obj.variant)
        {
            old.marks().clear(Mark::OnLower);
        }
        let stored = self.memory.insert(obj)?;
        self.persist(&stored);
        Ok(stored)
    }

    fn update_meta(&self, obj: &Object, head: ObjectHead) -> Option<Arc<Object>> {
        // The disk copy has the old head: write the new one (a new snapshot, unmarked).
        let updated = self.memory.update_meta(obj, head)?;
        self.persist(&updated);
        Some(updated)
    }

    fn touch(&self, obj: &Object) {
        self.memory.touch(obj)
    }

    fn remove(&self, key: &str, why: Removal) -> usize {
        self.forget(key);
        let spools = self.forget_spools(key);
        self.recent.lock().forget(key);
        // An evicted object still arriving is no longer wanted on disk either.
        self.arriving.lock().forget_key(key);
        let on_disk = self.disk.may_hold(key, None);
        let n = self.memory.remove(key, why) + spools;
        self.disk.remove(key, None);
        if n == 0 && on_disk {
            1
        } else {
            n
        }
    }

    fn remove_object(&self, obj: &Object, why: Removal) -> bool {
        if self.end_spool(obj, false).is_some() {
            if matches!(why, Removal::Invalidated | Removal::Purged) {
                self.disk.remove(&obj.key, Some(&obj.variant));
            }
            return true;
        }
        obj.marks().clear(Mark::OnLower);
        self.arriving.lock().remove(obj.id());
        {
            let mut recent = self.recent.lock();
            if recent.get(&obj.key).iter().any(|o| o.id() == obj.id()) {
                recent.forget(&obj.key);
            }
        }
        if matches!(why, Removal::Invalidated | Removal::Purged) {
            self.disk.remove(&obj.key, Some(&obj.variant));
        }
        self.memory.remove_object(obj, why)
    }

    fn holds(&self, obj: &Object) -> bool {
        self.memory.holds(obj) || self.is_spooling(obj)
    }

    /// Stored in memory, or evicted from it while arriving and to be written to disk when
    /// complete ([`Tiered::recharge`]): the fill must keep the whole body for that (it is
    /// at most the memory tier's `max_object`, outside its budget until then).
    fn wants(&self, obj: &Object) -> bool {
        self.memory.holds(obj)
            || self.is_spooling(obj)
            || (!self.disk.has_failed() && self.arriving.lock().contains(obj.id()))
    }

    fn recharge(&self, obj: &Object) {
        if obj.body.is_spooled() {
            // Out of memory's budget. Once complete (its head queued by the body), it stays
            // findable among the recent disk objects until its head is on disk.
            if obj.body.outcome() == Some(Ok(())) {
                if let Some(o) = self.end_spool(obj, true) {
                    self.recent.lock().add(o);
                }
            }
            return;
        }
        if obj.body.outcome().is_some() && self.arriving.lock().remove(obj.id()) {
            // Evicted while arriving, now complete: demoted as it would have been.
            if obj.body.outcome() == Some(Ok(())) {
                self.disk.write(obj);
            }
            return;
        }
        self.memory.recharge(obj);
        if obj.body.outcome() == Some(Ok(())) {
            if let Some(stored) = self
                .memory
                .lookup(&obj.key)
                .into_iter()
                .find(|o| o.id() == obj.id())
            {
                self.persist(&stored); // Nothing if it is on disk already.
            }
        }
    }

    fn max_object(&self) -> u64 {
        if self.spool_above() == u64::MAX {
            return self.memory.max_object();
        }
        self.memory.max_object().max(self.spool.max_object)
    }

    /// A region, or the memory tier's limit if smaller: a body larger than a region can't
    /// be one record (smaller ones are kept in memory, written at completion as one record
    /// and sent from disk by `sendfile`). `u64::MAX` with the disk failed, or spooling off.
    fn spool_above(&self) -> u64 {
        if self.spool.max_object == 0 || self.disk.has_failed() {
            return u64::MAX;
        }
        self.memory
            .max_object()
            .min(self.disk.shared.dir.region_size())
    }

    fn spool(&self, obj: &Arc<Object>) -> bool {
        let len = obj.body.len();
        let evicted = self.arriving.lock().contains(obj.id());
        if len > self.spool.max_object
            || obj.head.status != http::StatusCode::OK
            || !(self.memory.holds(obj) || evicted)
        {
            return false;
        }
        if !self.start_spool(obj, len) {
            return false;
        }
        self.arriving.lock().remove(obj.id());
        // Out of the memory tier (its budget), not lost: findable while it arrives.
        obj.marks().clear(Mark::OnLower);
        self.memory.remove_object(obj, Removal::TooLarge);
        true
    }

    fn resize(&self, capacity: u64, max_object: u64) -> bool {
        // The memory tier's budget; the disk's is fixed until the next start.
        self.arriving.lock().limit = capacity / ARRIVING_SHARE;
        self.memory.resize(capacity, max_object)
    }

    fn stats(&self) -> StoreStats {
        self.memory.stats()
    }
}

/// The storage interface: `Inner`'s, plus the probe that hands out [`DiskKey`]s.
impl Storage for Tiered {
    /// [`Probe::Lower`] for a memory miss the disk index may hold (no I/O).
    fn probe(&self, key: &str) -> Probe {
        self.probe_with(key, None)
    }
    fn probe_noting(&self, key: &str, note: &mut dyn FnMut()) -> Probe {
        self.probe_with(key, Some(note))
    }
    fn lookup(&self, key: &str) -> Vec<Arc<Object>> {
        self.0.lookup(key)
    }
    fn lookup_into(&self, key: &str, out: &mut Vec<Arc<Object>>) {
        self.0.lookup_into(key, out)
    }
    fn insert(&self, obj: Object) -> Result<Arc<Object>, Refused> {
        self.0.insert(obj)
    }
    fn update_meta(&self, obj: &Object, head: ObjectHead) -> Option<Arc<Object>> {
        self.0.update_meta(obj, head)
    }
    fn touch(&self, obj: &Object) {
        self.0.touch(obj)
    }
    fn remove(&self, key: &str, why: Removal) -> usize {
        self.0.remove(key, why)
    }
    fn remove_object(&self, obj: &Object, why: Removal) -> bool {
        self.0.remove_object(obj, why)
    }
    fn holds(&self, obj: &Object) -> bool {
        self.0.holds(obj)
    }
    fn recharge(&self, obj: &Object) {
        self.0.recharge(obj)
    }
    fn wants(&self, obj: &Object) -> bool {
        self.0.wants(obj)
    }
    fn max_object(&self) -> u64 {
        self.0.max_object()
    }
    fn spool_above(&self) -> u64 {
        self.0.spool_above()
    }
    fn spool(&self, obj: &Arc<Object>) -> bool {
        self.0.spool(obj)
    }
    fn stats(&self) -> StoreStats {
        self.0.stats()
    }
    /// The disk's figures.
    fn lower_stats(&self) -> Option<LowerStats> {
        Some(self.0.disk.stats())
    }
    fn resize(&self, capacity: u64, max_object: u64) -> bool {
        self.0.resize(capacity, max_object)
    }
    fn invalidations(&self) -> Option<&Arc<trove_store::Invalidations>> {
        self.0.invalidations()
    }
    fn scan(&self, visit: &mut dyn FnMut(&Arc<Object>)) {
        self.0.scan(visit)
    }
    fn scans(&self) -> bool {
        self.0.scans()
    }
    fn lower_progress(&self) -> Option<trove_store::LowerProgress> {
        Some(self.0.disk.progress())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bodies kept whole for the disk while they arrive are bounded in all: past the limit
    /// an evicted object is not kept, and what leaves gives its bytes back.
    #[test]
    fn bodies_kept_for_the_disk_while_arriving_stay_within_their_share() {
        let mut a = ArrivingSet {
            limit: 10,
            ..ArrivingSet::default()
        };
        assert!(a.insert(1, "a".into(), 6));
        assert!(!a.insert(2, "b".into(), 5), "over the limit");
        assert!(!a.contains(2));
        assert!(a.insert(3, "c".into(), 4));
        assert_eq!(a.bytes, 10);
        a.forget_key("a");
        assert!(!a.contains(1));
        assert!(a.insert(2, "b".into(), 5));
        assert!(a.remove(3));
        assert!(!a.remove(3));
        assert_eq!(a.bytes, 5);
    }
}

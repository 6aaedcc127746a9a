//! Bringing the index back after a start, clean or not.
//!
//! Every region in use starts with a header naming its use (`seq`). A sealed region's
//! summary (32 bytes per record, at its tail) gives its index entries without reading a
//! record; the region being written when trove stopped has none, and is scanned record by
//! record, each verified, up to the first that is not whole (a torn or truncated write:
//! dropped and counted).
//!
//! Regions are replayed **newest first**, each region's entries last to first: the first
//! record met of a fingerprint is its newest, so it goes in only if nothing is indexed for it
//! yet, and a tombstone keeps every older record of what it names out (a purge survives a
//! restart). Why this order: the proxy serves while this runs, and what was written last is
//! what clients were asking for when trove stopped, so it is what comes back first; and
//! whatever is in the index at any moment is already the newest copy of it, never an older
//! one a later region would replace. One thread reads and verifies summaries (after
//! hinting them all to the kernel, for a cold page cache) while this one inserts.
//!
//! Why summaries rather than a checkpoint of the index plus a replay: a summary is written
//! once, when its region is sealed, costs 32 B per object on disk and nothing in memory,
//! and is never out of date, so there is no checkpoint schedule to trade against loss and
//! nothing to replay but the one open region. Reading them costs one small read per region
//! (measured in BENCHMARKS.md).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::format::{
    Footer, FormatError, Kind, Record, RecordHeader, RegionHeader, SummaryEntry, FLAG_ALL_VARIANTS,
    FLAG_VARIED, FOOTER_LEN, RECORD_HEADER_LEN, REGION_HEADER_LEN, SUMMARY_ENTRY_LEN,
};
use crate::index::Loc;
use crate::shared::{LateRemoval, Shared};

/// What recovery hands the writer.
pub(crate) struct Recovered {
    /// Regions in use, oldest first, with their `seq`.
    pub used: Vec<(u32, u64)>,
    pub free: Vec<u32>,
    pub next_seq: u64,
}

/// `fingerprint(key, "")` from the key's hash alone (tombstones carry only the hash).
fn plain_fingerprint(key_hash: u64) -> u64 {
    xxh3_64_with_seed(b"", key_hash)
}

/// Removes what a tombstone (or a live removal) names from the index.
pub(crate) fn apply_removal(shared: &Shared, r: LateRemoval) {
    if r.all {
        shared.index.remove(plain_fingerprint(r.key_hash));
        for fp in shared.varied.take(r.key_hash) {
            shared.index.remove(fp);
        }
    } else {
        shared.index.remove(r.fingerprint);
        shared.varied.forget(r.key_hash, r.fingerprint);
    }
}

fn footer(shared: &Shared, r: u32, seq: u64) -> Option<Footer> {
    let size = shared.dir.region_size();
    let mut f = [0u8; FOOTER_LEN as usize];
    let n = shared.dir.read_at(r, size - FOOTER_LEN, &mut f).ok()?;
    Footer::decode(&f[..n], seq, size).ok()
}

/// Reads region `r`'s summary, if it was sealed in use `seq`.
pub(crate) fn summary(shared: &Shared, r: u32, seq: u64) -> Option<Vec<SummaryEntry>> {
    summary_of(shared, r, footer(shared, r, seq)?)
}

/// Reads the summary `footer` describes, verified.
fn summary_of(shared: &Shared, r: u32, footer: Footer) -> Option<Vec<SummaryEntry>> {
    let len = footer.count as usize * SUMMARY_ENTRY_LEN;
    let b = shared.dir.read_vec(r, footer.summary_offset, len).ok()?;
    footer.entries(&b).ok()
}

/// Reads region `r` record by record (use `seq`), verifying each; stops at the first that is
/// not whole, skipping a damaged one whose successor is whole. Returns the entries and
/// how many damaged records were dropped.
pub(crate) fn scan(shared: &Shared, r: u32, seq: u64) -> std::io::Result<(Vec<SummaryEntry>, u64)> {
    let size = shared.dir.region_size();
    let mut buf = BytesMut::zeroed(size as usize);
    let n = shared.dir.read_at(r, 0, &mut buf)?;
    buf.truncate(n);
    let b: Bytes = buf.freeze();
    let mut at = REGION_HEADER_LEN as usize;
    let mut out = Vec::new();
    let mut damaged = 0u64;
    // Stop before the summary area could start (a sealed region's summary is not a record).
    while at + RECORD_HEADER_LEN <= b.len() {
        let room = size - at as u64;
        let h = match RecordHeader::decode(&b[at..], seq, room) {
            Ok(h) => h,
            // Nothing more was written in this use of the region.
            Err(FormatError::NoMagic | FormatError::StaleGeneration) => break,
            Err(_) => return Ok((out, damaged + 1)),
        };
        let end = at + h.record_len() as usize;
        if end > b.len() {
            return Ok((out, damaged + 1));
        }
        if Record::decode(&b.slice(at..end), seq).is_err() {
            // A damaged record whose successor is whole (a flipped byte in its payload,
            // not a torn tail): skip it and go on, else stop here.
            if !whole_record_at(&b, end, seq, size) {
                return Ok((out, damaged + 1));
            }
            damaged += 1;
            at = end;
            continue;
        }
        out.push(SummaryEntry::of(&h, at as u64));
        at = end;
    }
    Ok((out, damaged))
}

fn whole_record_at(b: &Bytes, at: usize, seq: u64, size: u64) -> bool {
    if at + RECORD_HEADER_LEN > b.len() {
        return false;
    }
    let Ok(h) = RecordHeader::decode(&b[at..], seq, size - at as u64) else {
        return false;
    };
    let end = at + h.record_len() as usize;
    end <= b.len() && Record::decode(&b.slice(at..end), seq).is_ok()
}

/// What tombstones removed, met newest first: no older record of these comes back.
#[derive(Default)]
struct Gone {
    fingerprints: HashSet<u64>,
    /// Key hashes removed with every variant.
    keys: HashSet<u64>,
}

impl Gone {
    fn add(&mut self, r: LateRemoval) {
        if r.all {
            self.keys.insert(r.key_hash);
        } else {
            self.fingerprints.insert(r.fingerprint);
        }
    }

    fn covers(&self, e: &SummaryEntry) -> bool {
        (!self.fingerprints.is_empty() && self.fingerprints.contains(&e.fingerprint))
            || (!self.keys.is_empty() && self.keys.contains(&e.key_hash))
    }
}

/// Puts regions' entries in the index, the newest region first and each region's entries
/// last to first, so the first record met of a fingerprint is its newest: it is inserted
/// only if nothing is indexed for it yet, and a tombstone keeps every older record of what
/// it names out.
///
/// Regions are inserted in batches, grouped by shard (a counting sort, stable, so of two
/// records of one fingerprint the newer still comes first), one lock per shard and batch.
/// The grouping is what makes recovery fast: the index is ~150 MB at 10 M objects, and one
/// region's ~50,000 entries touch each shard's table a dozen times, each a cache and TLB
/// miss (measured: 440 ns an insert, three quarters of recovery); a batch of a million
/// entries loads each table once and fills it from the cache. Batches start at one region
/// (the newest objects are findable at once) and double up to [`BATCH_MAX`] entries; a
/// batch is also cut short whenever the reader has nothing ready (a cold disk).
struct Applier<'a> {
    shared: &'a Shared,
    gone: Gone,
    /// Live removals (`DiskStore::remove` while recovering) already taken into `gone`.
    late_seen: usize,
    /// Reused buffers: a batch's objects, newest first, and the same grouped by shard;
    /// the key hashes of its objects with a variant (few: most responses have no `Vary`).
    run: Vec<Pending>,
    grouped: Vec<(u64, Loc)>,
    varied_keys: HashMap<u64, u64>,
    counts: Vec<u32>,
}

/// An object record on its way into the index.
#[derive(Clone, Copy)]
struct Pending {
    fingerprint: u64,
    key_hash: u64,
    loc: Loc,
    varied: bool,
}

/// The most entries inserted in one batch (~50 MB of buffers at most).
const BATCH_MAX: usize = 1 << 20;

impl<'a> Applier<'a> {
    fn new(shared: &'a Shared) -> Applier<'a> {
        Applier {
            shared,
            gone: Gone::default(),
            late_seen: 0,
            run: Vec::new(),
            grouped: Vec::new(),
            varied_keys: HashMap::new(),
            counts: vec![0; 1 << crate::index::SHARD_BITS],
        }
    }

    /// Applies regions, newest first.
    fn batch(&mut self, regions: &[Found]) {
        self.catch_up();
        self.run.clear();
        for f in regions {
            for e in f.entries.iter().rev() {
                match e.kind {
                    // A fragment is read only through its head; a head whose fragments
                    // were reclaimed fails its read (verified) and is dropped then.
                    Kind::Fragment => {}
                    Kind::Object | Kind::Head => {
                        if !self.gone.covers(e) {
                            self.run.push(Pending {
                                fingerprint: e.fingerprint,
                                key_hash: e.key_hash,
                                loc: Loc::new(f.region, e.offset as u64, e.len as u64),
                                varied: e.flags & FLAG_VARIED != 0,
                            });
                        }
                    }
                    Kind::Tombstone => self.gone.add(LateRemoval {
                        key_hash: e.key_hash,
                        fingerprint: e.fingerprint,
                        all: e.flags & FLAG_ALL_VARIANTS != 0,
                    }),
                }
            }
        }
        self.insert();
        // A removal that came while this batch went in may have been undone by it.
        self.catch_up();
    }

    /// Inserts the objects in `run`, grouped by shard and, within a shard, in the order of
    /// their home slots (so each table is walked forwards, which the CPU prefetches).
    fn insert(&mut self) {
        let shard = |p: &Pending| crate::index::Index::shard_of(p.fingerprint);
        self.counts.fill(0);
        for p in &self.run {
            self.counts[shard(p)] += 1;
        }
        let mut at = 0u32;
        for c in self.counts.iter_mut() {
            let n = *c;
            *c = at;
            at += n;
        }
        self.grouped.clear();
        self.grouped.resize(self.run.len(), (0, Loc::new(0, 0, 0)));
        self.varied_keys.clear();
        for p in &self.run {
            let slot = &mut self.counts[shard(p)];
            self.grouped[*slot as usize] = (p.fingerprint, p.loc);
            *slot += 1;
            if p.varied {
                self.varied_keys.entry(p.fingerprint).or_insert(p.key_hash);
            }
        }
        // `counts[s]` is now where shard s ends. A stable sort: two records of one
        // fingerprint keep their order, the newer first.
        let mut start = 0usize;
        for &end in &self.counts {
            let end = end as usize;
            self.grouped[start..end].sort_by_key(|&(fp, _)| crate::index::Index::probe_order(fp));
            start = end;
        }
        let shared = self.shared;
        let (grouped, varied) = (&self.grouped, &self.varied_keys);
        let mut inserted = 0u64;
        shared.index.insert_absent(grouped, |k| {
            inserted += 1;
            if !varied.is_empty() {
                let fp = grouped[k].0;
                if let Some(&kh) = varied.get(&fp) {
                    shared.varied.add(kh, fp);
                }
            }
        });
        shared
            .stats
            .recovered_objects
            .fetch_add(inserted, Ordering::Relaxed);
    }

    /// Takes live removals made since the last call into `gone`, and applies them again
    /// (the batch just inserted may have brought back what they removed).
    fn catch_up(&mut self) {
        let late = self.shared.late_removals.lock();
        for &r in &late[self.late_seen..] {
            self.gone.add(r);
            apply_removal(self.shared, r);
        }
        self.late_seen = late.len();
    }
}

/// One region's entries as the reader found them.
struct Found {
    region: u32,
    entries: Vec<SummaryEntry>,
    damaged: u64,
}

/// Reads a region's entries: its summary when it was sealed (its footer already read), else
/// a verified scan.
fn read_region(
    shared: &Shared,
    r: u32,
    seq: u64,
    footer: Option<Footer>,
) -> std::io::Result<Found> {
    if let Some(entries) = footer.and_then(|f| summary_of(shared, r, f)) {
        return Ok(Found {
            region: r,
            entries,
            damaged: 0,
        });
    }
    let (entries, damaged) = scan(shared, r, seq)?;
    Ok(Found {
        region: r,
        entries,
        damaged,
    })
}

/// The objects of region `r` (use `seq`) that the index still points at and that the
/// rule log kills or marks stale: their keys and variants (see `DiskStore::pass`).
pub(crate) fn judge_region(
    shared: &Shared,
    r: u32,
    seq: u64,
    inv: &trove_store::Invalidations,
    upto: u64,
) -> std::io::Result<Vec<(String, String)>> {
    let size = shared.dir.region_size();
    let mut buf = BytesMut::zeroed(size as usize);
    let n = shared.dir.read_at(r, 0, &mut buf)?;
    buf.truncate(n);
    let b: Bytes = buf.freeze();
    // Reused since the caller looked: its records are newer than the pass.
    if shared.seqs[r as usize].load(Ordering::Acquire) != seq {
        return Ok(Vec::new());
    }
    let entries = match summary(shared, r, seq) {
        Some(e) => e,
        None => scan(shared, r, seq)?.0,
    };
    let floor = shared.disk_checked.load(Ordering::Acquire);
    let mut out = Vec::new();
    for e in entries
        .iter()
        .filter(|e| matches!(e.kind, Kind::Object | Kind::Head))
    {
        let loc = Loc::new(r, e.offset as u64, e.len as u64);
        if !shared
            .index
            .get(e.fingerprint)
            .is_some_and(|cur| cur.same_place(loc))
        {
            continue;
        }
        let (start, end) = (e.offset as usize, e.offset as usize + e.len as usize);
        let Some(rec) = b
            .get(start..end)
            .and_then(|_| Record::decode(&b.slice(start..end), seq).ok())
        else {
            continue; // Read verifies it again and drops it if it is corrupt.
        };
        let Some(obj) = crate::shared::object_of(&rec, floor) else {
            continue;
        };
        if inv.verdict_through(&obj, upto) != trove_store::Verdict::Alive {
            out.push((rec.key, rec.variant));
        }
    }
    Ok(out)
}

/// Reads every region header: which regions are in use (oldest first) and which are free.
/// Fast (one small read per region): the writer starts writing right after it, into free
/// regions, while [`index`] brings the index back on a thread of its own.
pub(crate) fn regions(shared: &Shared) -> std::io::Result<Recovered> {
    let mut used = Vec::new();
    let mut free = Vec::new();
    let size = shared.dir.region_size();
    for &(file, had, want) in &shared.dir.cut_short {
        // Regions starting at or past the cut: whatever they held is gone.
        let lost = (0..shared.dir.region_count())
            .filter(|&r| {
                let (f, base) = shared.dir.place(r);
                f == file && base + size > had
            })
            .count() as u64;
        shared
            .stats
            .regions_discarded
            .fetch_add(lost, Ordering::Relaxed);
        tracing::error!(
            file,
            found = had,
            full = want,
            regions = lost,
            "disk tier: the data file was cut short; the regions past the cut are dropped with whatever they held"
        );
    }
    for r in 0..shared.dir.region_count() {
        let mut h = [0u8; REGION_HEADER_LEN as usize];
        let n = shared.dir.read_at(r, 0, &mut h)?;
        match RegionHeader::decode(&h[..n]) {
            Ok(h) if h.region_size == size => used.push((r, h.seq)),
            // Never written, or punched and not reused: free.
            _ if h[..n].iter().all(|&b| b == 0) => free.push(r),
            other => {
                // Something was written here that can't be read as a region's header: its
                // records can't be placed in a use, so they are dropped, and said so.
                let why = match other {
                    Ok(h) => format!("written with region size {}", h.region_size),
                    Err(e) => e.to_string(),
                };
                shared
                    .stats
                    .regions_discarded
                    .fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    region = r,
                    "disk tier: a damaged region header ({why}); the region's records are dropped"
                );
                free.push(r);
            }
        }
    }
    used.sort_by_key(|&(_, seq)| seq);
    // The writer pops from the end: the first region to use goes last.
    free.sort_by_key(|&r| std::cmp::Reverse(shared.dir.first_use_order(r)));
    let next_seq = used.last().map_or(1, |&(_, s)| s + 1);
    for &(r, seq) in &used {
        shared.seqs[r as usize].store(seq, Ordering::Release);
    }
    shared
        .stats
        .regions_used
        .store(used.len() as u64, Ordering::Relaxed);
    Ok(Recovered {
        used,
        free,
        next_seq,
    })
}

/// Rebuilds the index from the regions in use (see the module docs), then marks the store
/// ready. Objects the writer indexes meanwhile are newer than anything on these regions, and
/// stay: recovery inserts only fingerprints not indexed yet. Gives up early (not ready) when
/// the store is stopping.
pub(crate) fn index(shared: &Shared, used: &[(u32, u64)]) -> std::io::Result<()> {
    let started = std::time::Instant::now();
    // Newest first. Each sealed region's footer is read once: it sizes the index, and its
    // summary is announced to the kernel for reading ahead.
    let newest_first: Vec<(u32, u64, Option<Footer>)> = used
        .iter()
        .rev()
        .map(|&(r, seq)| {
            let f = footer(shared, r, seq);
            if let Some(f) = f {
                shared.dir.will_need(
                    r,
                    f.summary_offset,
                    f.count as u64 * SUMMARY_ENTRY_LEN as u64,
                );
            }
            (r, seq, f)
        })
        .collect();
    let announced: u64 = newest_first
        .iter()
        .filter_map(|(_, _, f)| f.map(|f| f.count as u64))
        .sum();
    shared.index.reserve(announced);
    let stopping = || shared.stop.load(Ordering::Acquire);
    // One thread reads (and verifies) summaries while this one inserts what it read.
    let mut applier = Applier::new(shared);
    std::thread::scope(|s| -> std::io::Result<()> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<std::io::Result<Found>>(2);
        let list = &newest_first;
        let reader = std::thread::Builder::new()
            .name("trove-disk-summaries".into())
            .spawn_scoped(s, move || {
                for &(r, seq, f) in list {
                    if stopping() {
                        return;
                    }
                    let found = read_region(shared, r, seq, f);
                    let failed = found.is_err();
                    if tx.send(found).is_err() || failed {
                        return;
                    }
                }
            });
        if reader.is_ok() {
            let mut batch: Vec<Found> = Vec::new();
            let (mut pending, mut target) = (0usize, 0usize);
            loop {
                let next = match rx.try_recv() {
                    Ok(found) => Some(found),
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => None,
                    Err(std::sync::mpsc::TryRecvError::Empty) => {
                        // Nothing ready: insert what is here rather than wait with it.
                        if !batch.is_empty() {
                            applier.batch(&batch);
                            batch.clear();
                            pending = 0;
                        }
                        rx.recv().ok()
                    }
                };
                let Some(found) = next else { break };
                let found = found?;
                note_damage(shared, &found);
                pending += found.entries.len();
                batch.push(found);
                if pending >= target {
                    applier.batch(&batch);
                    batch.clear();
                    pending = 0;
                    target = (target * 2).clamp(1 << 16, BATCH_MAX);
                }
            }
            if !batch.is_empty() {
                applier.batch(&batch);
            }
        } else {
            // No thread to spare: read here, in turn.
            for &(r, seq, f) in &newest_first {
                if stopping() {
                    break;
                }
                let found = read_region(shared, r, seq, f)?;
                note_damage(shared, &found);
                applier.batch(std::slice::from_ref(&found));
            }
        }
        Ok(())
    })?;
    if stopping() {
        return Ok(());
    }
    // Removals asked for while this ran were applied over what it found (each once more,
    // right after the region it came during: not later, so an object written anew after
    // its removal is not taken out again).
    applier.catch_up();
    shared.late_removals.lock().clear();
    shared
        .stats
        .recovery_micros
        .store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    // Ready, unless the tier failed meanwhile.
    let _ = shared.state.compare_exchange(
        crate::shared::RECOVERING,
        crate::shared::READY,
        Ordering::AcqRel,
        Ordering::Acquire,
    );
    Ok(())
}

fn note_damage(shared: &Shared, found: &Found) {
    if found.damaged > 0 {
        shared
            .stats
            .corrupt
            .fetch_add(found.damaged, Ordering::Relaxed);
        tracing::warn!(
            region = found.region,
            damaged = found.damaged,
            "disk tier: torn or corrupt records in the open region were dropped"
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_plain_fingerprint_follows_the_stable_hash() {
        use trove_store::hash::{fingerprint, key_hash};
        let k = "http://example.com/a";
        assert_eq!(super::plain_fingerprint(key_hash(k)), fingerprint(k, ""));
    }
}

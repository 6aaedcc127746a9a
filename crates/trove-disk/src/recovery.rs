//! Bringing the index back after a start, clean or not.
//!
//! Every region in use starts with a header naming its use (`seq`). Regions are replayed
//! oldest first: a sealed region's summary (32 bytes per record, at its tail) gives its
//! index entries without reading a record; the region being written when trove stopped has
//! none, and is scanned record by record, each verified, up to the first that is not whole
//! (a torn or truncated write: dropped and counted). Replaying in write order makes newer
//! records replace older ones and tombstones remove what they name, so a purge survives a
//! restart.
//!
//! Why summaries rather than a checkpoint of the index plus a replay: a summary is written
//! once, when its region is sealed, costs 32 B per object on disk and nothing in memory,
//! and is never out of date, so there is no checkpoint schedule to trade against loss and
//! nothing to replay but the one open region. Reading them costs one small read per region
//! (measured in BENCHMARKS.md).

use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::format::{
    Footer, FormatError, Kind, Record, RecordHeader, RegionHeader, SummaryEntry, FLAG_ALL_VARIANTS,
    FLAG_VARIED, FOOTER_LEN, RECORD_HEADER_LEN, REGION_HEADER_LEN,
};
use crate::index::Loc;
use crate::store::{LateRemoval, Shared};

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
    let footer = footer(shared, r, seq)?;
    let mut b = vec![0u8; footer.count as usize * crate::format::SUMMARY_ENTRY_LEN];
    let n = shared.dir.read_at(r, footer.summary_offset, &mut b).ok()?;
    footer.entries(&b[..n]).ok()
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

/// Puts a region's entries in the index, in order. A run of object entries between two
/// removals is inserted shard by shard (a stable sort keeps the order of any two entries of
/// one fingerprint, which share a shard): at millions of entries that order is what keeps
/// recovery from waiting on cache misses.
pub(crate) fn apply(shared: &Shared, r: u32, _seq: u64, entries: &[SummaryEntry]) {
    let mut run: Vec<&SummaryEntry> = Vec::new();
    for e in entries {
        if e.kind == Kind::Object {
            run.push(e);
            continue;
        }
        insert_run(shared, r, &mut run);
        match e.kind {
            Kind::Tombstone => apply_removal(
                shared,
                LateRemoval {
                    key_hash: e.key_hash,
                    fingerprint: e.fingerprint,
                    all: e.flags & FLAG_ALL_VARIANTS != 0,
                },
            ),
            Kind::Object => {}
        }
    }
    insert_run(shared, r, &mut run);
}

fn insert_run(shared: &Shared, r: u32, run: &mut Vec<&SummaryEntry>) {
    run.sort_by_key(|e| crate::index::Index::shard_of(e.fingerprint));
    for e in run.iter() {
        shared
            .index
            .insert(e.fingerprint, Loc::new(r, e.offset as u64, e.len as u64));
        if e.flags & FLAG_VARIED != 0 {
            shared.varied.add(e.key_hash, e.fingerprint);
        }
    }
    shared
        .stats
        .recovered_objects
        .fetch_add(run.len() as u64, Ordering::Relaxed);
    run.clear();
}

/// The objects of region `r` (use `seq`) that the index still points at and that the
/// rule log kills or marks stale: their keys and variants (see `DiskStore::pass`).
pub(crate) fn judge_region(
    shared: &Shared,
    r: u32,
    seq: u64,
    inv: &trove_store::Invalidations,
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
    for e in entries.iter().filter(|e| e.kind == Kind::Object) {
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
        let Some(obj) = crate::store::object_of(&rec, floor) else {
            continue;
        };
        if inv.verdict(&obj) != trove_store::Verdict::Alive {
            out.push((rec.key, rec.variant));
        }
    }
    Ok(out)
}

/// Rebuilds the index from the regions (see the module docs).
pub(crate) fn recover(shared: &Shared) -> std::io::Result<Recovered> {
    let started = std::time::Instant::now();
    let mut used = Vec::new();
    let mut free = Vec::new();
    for r in 0..shared.dir.region_count() {
        let mut h = [0u8; REGION_HEADER_LEN as usize];
        let n = shared.dir.read_at(r, 0, &mut h)?;
        match RegionHeader::decode(&h[..n]) {
            Ok(h) if h.region_size == shared.dir.region_size() => used.push((r, h.seq)),
            _ => free.push(r),
        }
    }
    used.sort_by_key(|&(_, seq)| seq);
    // Size the index once for what the sealed regions' footers announce.
    let announced: u64 = used
        .iter()
        .filter_map(|&(r, seq)| footer(shared, r, seq))
        .map(|f| f.count as u64)
        .sum();
    shared.index.reserve(announced);
    // The writer pops from the end: the first region to use goes last.
    free.sort_by_key(|&r| std::cmp::Reverse(shared.dir.first_use_order(r)));
    let next_seq = used.last().map_or(1, |&(_, s)| s + 1);
    for &(r, seq) in &used {
        shared.seqs[r as usize].store(seq, Ordering::Release);
        let entries = match summary(shared, r, seq) {
            Some(e) => e,
            None => {
                let (e, damaged) = scan(shared, r, seq)?;
                if damaged > 0 {
                    shared.stats.corrupt.fetch_add(damaged, Ordering::Relaxed);
                    tracing::warn!(
                        region = r,
                        damaged,
                        "disk tier: torn or corrupt records in the open region were dropped"
                    );
                }
                e
            }
        };
        apply(shared, r, seq, &entries);
    }
    shared
        .stats
        .regions_used
        .store(used.len() as u64, Ordering::Relaxed);
    // Removals asked for while this ran are applied over what it found.
    let late = std::mem::take(&mut *shared.late_removals.lock());
    for r in late {
        apply_removal(shared, r);
    }
    shared
        .stats
        .recovery_micros
        .store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    Ok(Recovered {
        used,
        free,
        next_seq,
    })
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

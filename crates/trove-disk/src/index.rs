//! The in-memory index: where each object on disk is, in 12 bytes.
//!
//! An object is named by its stable fingerprint (`trove_store::hash::fingerprint` of key and
//! variant, 64 bits). The top [`SHARD_BITS`] bits pick one of 4,096 shards (each its own
//! lock, so readers and the writer rarely meet); the low 32 bits are the *tag* stored in
//! the shard's open-addressing table (linear probing, backward-shift deletion) beside a
//! 64-bit packed [`Loc`]. So an entry is 12 bytes and, with the table between 45% and 90%
//! full, 13–27 bytes per object (measured figures in BENCHMARKS.md); CacheLib's Navy and
//! Traffic Server spend 10–12 B the same way.
//!
//! 44 bits of the fingerprint are kept, so two objects may share an entry with probability
//! about n / 2^44 per lookup: that is why every read verifies the key and variant stored in
//! the record (`reader`), and correctness never depends on the index.
//!
//! Objects with a non-empty variant (the key's response had `Vary`) are also listed under
//! their primary key in [`Varied`], so a lookup by key finds every variant. Most keys have
//! none, and pay nothing for it.

use parking_lot::Mutex;
use std::collections::HashMap;

/// `2^SHARD_BITS` shards.
pub const SHARD_BITS: u32 = 12;

/// Where a record is: region, offset, a size hint and the accessed bit, in 64 bits.
///
/// | bits | field |
/// |---|---|
/// | 44..64 | region number (20 bits: a million regions) |
/// | 20..44 | offset in the region / 8 (24 bits: regions up to 128 MiB) |
/// | 1..20 | record length / 512, rounded up, saturating (a read-size hint) |
/// | 0 | accessed since written (the reclaimer's reinsertion bit) |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc(u64);

/// The largest region a [`Loc`] can address.
pub const MAX_REGION_SIZE: u64 = 8 << 24;
/// The most regions a [`Loc`] can address.
pub const MAX_REGIONS: u64 = 1 << 20;

impl Loc {
    pub fn new(region: u32, offset: u64, len: u64) -> Loc {
        debug_assert!((region as u64) < MAX_REGIONS && offset < MAX_REGION_SIZE);
        let size = len.div_ceil(512).min((1 << 19) - 1);
        Loc(((region as u64) << 44) | ((offset / 8) << 20) | (size << 1))
    }
    pub fn region(self) -> u32 {
        (self.0 >> 44) as u32
    }
    pub fn offset(self) -> u64 {
        ((self.0 >> 20) & ((1 << 24) - 1)) * 8
    }
    /// At least the record's length when it is below 256 MiB; else a first read size.
    pub fn len_hint(self) -> u64 {
        ((self.0 >> 1) & ((1 << 19) - 1)) * 512
    }
    pub fn accessed(self) -> bool {
        self.0 & 1 == 1
    }
    fn place(self) -> u64 {
        self.0 & !1
    }
    /// The same place (ignoring the accessed bit).
    pub fn same_place(self, other: Loc) -> bool {
        self.place() == other.place()
    }
}

const EMPTY: u32 = 0;

/// A tag mixed: its home slot is this scaled to the table's size, so the order of these is
/// the order of home slots in a table of any size.
fn mix(tag: u32) -> u32 {
    tag.wrapping_mul(0x9E37_79B9).rotate_left(13)
}

fn tag_of(fp: u64) -> u32 {
    match fp as u32 {
        EMPTY => 1,
        t => t,
    }
}

struct Table {
    /// `[tag, loc low, loc high]`; tag 0 is an empty slot.
    slots: Vec<[u32; 3]>,
    len: usize,
}

impl Table {
    fn new() -> Table {
        Table {
            slots: Vec::new(),
            len: 0,
        }
    }

    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    fn home(&self, tag: u32) -> usize {
        // Any table size (growth by a quarter keeps tables 72-90% full): the mixed tag
        // scaled to the size (Lemire's fast range), recomputable from the tag alone.
        ((mix(tag) as u64 * self.slots.len() as u64) >> 32) as usize
    }

    fn find(&self, tag: u32) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mut i = self.home(tag);
        loop {
            match self.slots[i][0] {
                EMPTY => return None,
                t if t == tag => return Some(i),
                _ => i = self.next(i),
            }
        }
    }

    fn loc(&self, i: usize) -> Loc {
        let s = self.slots[i];
        Loc(s[1] as u64 | ((s[2] as u64) << 32))
    }

    fn set_loc(&mut self, i: usize, loc: Loc) {
        self.slots[i][1] = loc.0 as u32;
        self.slots[i][2] = (loc.0 >> 32) as u32;
    }

    fn insert(&mut self, tag: u32, loc: Loc) -> Option<Loc> {
        if let Some(i) = self.find(tag) {
            let old = self.loc(i);
            self.set_loc(i, loc);
            return Some(old);
        }
        if (self.len + 1) * 10 > self.slots.len() * 9 {
            self.grow();
        }
        let mut i = self.home(tag);
        while self.slots[i][0] != EMPTY {
            i = self.next(i);
        }
        self.slots[i] = [tag, loc.0 as u32, (loc.0 >> 32) as u32];
        self.len += 1;
        None
    }

    /// Inserts `tag` unless it is there; true if it was inserted. One probe run, not two
    /// (a miss probes to the empty slot it then fills).
    fn insert_absent(&mut self, tag: u32, loc: Loc) -> bool {
        if (self.len + 1) * 10 > self.slots.len() * 9 {
            self.grow();
        }
        let mut i = self.home(tag);
        loop {
            match self.slots[i][0] {
                EMPTY => break,
                t if t == tag => return false,
                _ => i = self.next(i),
            }
        }
        self.slots[i] = [tag, loc.0 as u32, (loc.0 >> 32) as u32];
        self.len += 1;
        true
    }

    fn grow(&mut self) {
        self.resize((self.slots.len() + self.slots.len() / 4).max(8));
    }

    fn resize(&mut self, cap: usize) {
        let old = std::mem::replace(&mut self.slots, vec![[EMPTY; 3]; cap]);
        for s in old.into_iter().filter(|s| s[0] != EMPTY) {
            let mut i = self.home(s[0]);
            while self.slots[i][0] != EMPTY {
                i = self.next(i);
            }
            self.slots[i] = s;
        }
    }

    /// Removes slot `i`, shifting back the entries of its probe run.
    fn remove_at(&mut self, mut i: usize) {
        self.len -= 1;
        loop {
            self.slots[i] = [EMPTY; 3];
            let mut j = self.next(i);
            loop {
                let t = self.slots[j][0];
                if t == EMPTY {
                    return;
                }
                let home = self.home(t);
                // Entry at j may move to i if its home is not cyclically in (i, j].
                let moves = if i <= j {
                    home <= i || home > j
                } else {
                    home <= i && home > j
                };
                if moves {
                    self.slots[i] = self.slots[j];
                    i = j;
                    break;
                }
                j = self.next(j);
            }
        }
    }
}

/// See the module docs.
pub struct Index {
    shards: Vec<Mutex<Table>>,
}

impl Default for Index {
    fn default() -> Self {
        Index {
            shards: (0..1 << SHARD_BITS)
                .map(|_| Mutex::new(Table::new()))
                .collect(),
        }
    }
}

impl Index {
    fn shard(&self, fp: u64) -> &Mutex<Table> {
        &self.shards[(fp >> (64 - SHARD_BITS)) as usize]
    }

    /// Sizes the tables for `n` objects in all (recovery knows how many are coming), so
    /// they are filled to about 80% without growing on the way.
    pub fn reserve(&self, n: u64) {
        let per_shard = (n >> SHARD_BITS) as usize;
        let want = per_shard + per_shard / 4 + 8;
        for s in &self.shards {
            let mut t = s.lock();
            if t.slots.len() < want {
                t.resize(want);
            }
        }
    }

    /// Sorting a shard's fingerprints by this sorts them by home slot (recovery inserts
    /// them so: a table walked forwards).
    pub fn probe_order(fp: u64) -> u32 {
        mix(tag_of(fp))
    }

    /// The shard of `fp` (recovery inserts a region's entries shard by shard).
    pub fn shard_of(fp: u64) -> usize {
        (fp >> (64 - SHARD_BITS)) as usize
    }

    /// Points `fp` at `loc`; returns where it was.
    pub fn insert(&self, fp: u64, loc: Loc) -> Option<Loc> {
        self.shard(fp).lock().insert(tag_of(fp), loc)
    }

    /// Recovery's insert, newest record first: points each `(fp, loc)` of `items` whose
    /// fingerprint is not indexed yet (else a newer record of it already was), taking each
    /// shard's lock once for a run of entries of that shard (so `items` should be grouped by
    /// shard: see [`Index::shard_of`]). Calls `inserted(i)` for each `items[i]` inserted.
    pub fn insert_absent(&self, items: &[(u64, Loc)], mut inserted: impl FnMut(usize)) {
        let mut i = 0;
        while i < items.len() {
            let shard = Index::shard_of(items[i].0);
            let mut t = self.shards[shard].lock();
            while i < items.len() && Index::shard_of(items[i].0) == shard {
                let (fp, loc) = items[i];
                if t.insert_absent(tag_of(fp), loc) {
                    inserted(i);
                }
                i += 1;
            }
        }
    }

    pub fn get(&self, fp: u64) -> Option<Loc> {
        let t = self.shard(fp).lock();
        t.find(tag_of(fp)).map(|i| t.loc(i))
    }

    /// Sets the accessed bit (a disk hit), so the reclaimer may keep the object.
    pub fn mark_accessed(&self, fp: u64) {
        let mut t = self.shard(fp).lock();
        if let Some(i) = t.find(tag_of(fp)) {
            let loc = t.loc(i);
            t.set_loc(i, Loc(loc.0 | 1));
        }
    }

    pub fn remove(&self, fp: u64) -> Option<Loc> {
        let mut t = self.shard(fp).lock();
        let i = t.find(tag_of(fp))?;
        let loc = t.loc(i);
        t.remove_at(i);
        Some(loc)
    }

    /// Removes `fp` only if it still points at `loc` (a reclaimed region's records).
    /// Clears the accessed bit if `fp` is at `loc`: a record chosen to be copied forward,
    /// so only the hits after the choice count for its copy.
    pub fn clear_accessed_if_at(&self, fp: u64, loc: Loc) {
        let mut t = self.shard(fp).lock();
        if let Some(i) = t.find(tag_of(fp)) {
            let cur = t.loc(i);
            if cur.same_place(loc) {
                t.set_loc(i, Loc(cur.0 & !1));
            }
        }
    }

    /// Points `fp` at `to` if it is at `from`, its accessed bit kept (a copy moved forward
    /// by a reclaim, hit while it moved); false if it is not at `from` (removed, or
    /// written anew, meanwhile).
    pub fn move_if_at(&self, fp: u64, from: Loc, to: Loc) -> bool {
        let mut t = self.shard(fp).lock();
        match t.find(tag_of(fp)) {
            Some(i) if t.loc(i).same_place(from) => {
                let accessed = t.loc(i).0 & 1;
                t.set_loc(i, Loc((to.0 & !1) | accessed));
                true
            }
            _ => false,
        }
    }

    /// Removes `fp` if it is at `loc` and not accessed; true if it is there, accessed, and
    /// left in place (a reclaim's last look: a hit just now keeps it).
    pub fn remove_unless_accessed(&self, fp: u64, loc: Loc) -> bool {
        let mut t = self.shard(fp).lock();
        match t.find(tag_of(fp)) {
            Some(i) if t.loc(i).same_place(loc) => {
                if t.loc(i).accessed() {
                    return true;
                }
                t.remove_at(i);
                false
            }
            _ => false,
        }
    }

    pub fn remove_if_at(&self, fp: u64, loc: Loc) -> bool {
        let mut t = self.shard(fp).lock();
        match t.find(tag_of(fp)) {
            Some(i) if t.loc(i).same_place(loc) => {
                t.remove_at(i);
                true
            }
            _ => false,
        }
    }

    /// Objects indexed.
    pub fn len(&self) -> u64 {
        self.shards.iter().map(|s| s.lock().len as u64).sum()
    }

    /// Bytes the tables take (slots allocated, whether full or not, and the shard headers).
    pub fn bytes(&self) -> u64 {
        let per_shard = std::mem::size_of::<Mutex<Table>>() as u64;
        self.shards
            .iter()
            .map(|s| s.lock().slots.capacity() as u64 * 12 + per_shard)
            .sum()
    }
}

/// Primary key hash → the fingerprints of its non-empty variants (see the module docs).
#[derive(Default)]
pub struct Varied {
    map: Mutex<HashMap<u64, Vec<u64>>>,
}

impl Varied {
    pub fn add(&self, key_hash: u64, fp: u64) {
        let mut m = self.map.lock();
        let v = m.entry(key_hash).or_default();
        if !v.contains(&fp) {
            v.push(fp);
        }
    }

    pub fn get(&self, key_hash: u64) -> Vec<u64> {
        self.map.lock().get(&key_hash).cloned().unwrap_or_default()
    }

    pub fn forget(&self, key_hash: u64, fp: u64) {
        let mut m = self.map.lock();
        if let Some(v) = m.get_mut(&key_hash) {
            v.retain(|f| *f != fp);
            if v.is_empty() {
                m.remove(&key_hash);
            }
        }
    }

    pub fn take(&self, key_hash: u64) -> Vec<u64> {
        self.map.lock().remove(&key_hash).unwrap_or_default()
    }

    pub fn bytes(&self) -> u64 {
        let m = self.map.lock();
        (m.capacity() * 40) as u64 + m.values().map(|v| v.capacity() as u64 * 8).sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;

    #[test]
    fn loc_packs_and_unpacks() {
        let l = Loc::new(1_000_000, (128 << 20) - 8, 70_000);
        assert_eq!(l.region(), 1_000_000);
        assert_eq!(l.offset(), (128 << 20) - 8);
        assert!(l.len_hint() >= 70_000);
        assert!(!l.accessed());
    }

    /// The table against a `HashMap`, through inserts, replacements, removals and growth.
    #[test]
    fn the_index_agrees_with_a_map() {
        let idx = Index::default();
        let mut model: HashMap<u64, Loc> = HashMap::new();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        // Few distinct shard bits so tables get long probe runs.
        let fps: Vec<u64> = (0..20_000u64)
            .map(|_| (rng.gen::<u64>() & 0x0030_0000_ffff_ffff) | 1)
            .collect();
        for step in 0..200_000u32 {
            let fp = fps[rng.gen_range(0..fps.len())];
            match rng.gen_range(0..10) {
                0..=5 => {
                    let loc = Loc::new(step % 1000, 8 * (step as u64 % 1000), 100);
                    assert_eq!(idx.insert(fp, loc), model.insert(fp, loc));
                }
                6..=7 => assert_eq!(idx.remove(fp), model.remove(&fp)),
                _ => assert_eq!(idx.get(fp), model.get(&fp).copied()),
            }
        }
        assert_eq!(idx.len(), model.len() as u64);
        for (fp, loc) in &model {
            assert_eq!(idx.get(*fp), Some(*loc));
        }
    }

    #[test]
    fn insert_absent_keeps_what_is_there_and_reports_what_it_added() {
        let idx = Index::default();
        let a = Loc::new(1, 64, 10);
        let b = Loc::new(2, 64, 10);
        idx.insert(5, a);
        let far = (1u64 << 63) | 9;
        let items = [(5, b), (6, b), (6, a), (far, a)];
        let mut added = Vec::new();
        idx.insert_absent(&items, |i| added.push(i));
        assert_eq!(added, [1, 3]);
        assert_eq!(
            (idx.get(5), idx.get(6), idx.get(far)),
            (Some(a), Some(b), Some(a))
        );
    }

    /// A copy moved forward by a reclaim keeps the hits made while it moved (those before
    /// the reclaim chose it are not its), and never replaces a newer write nor brings back
    /// a removed object.
    #[test]
    fn a_moved_copy_keeps_its_hits_and_gives_way_to_a_newer_write() {
        let idx = Index::default();
        let (old, new, newer) = (
            Loc::new(1, 64, 10),
            Loc::new(2, 64, 10),
            Loc::new(3, 64, 10),
        );
        idx.insert(5, old);
        idx.mark_accessed(5);
        idx.clear_accessed_if_at(5, old);
        assert!(
            !idx.get(5).unwrap().accessed(),
            "chosen: its earlier hits spent"
        );
        idx.mark_accessed(5);
        assert!(idx.move_if_at(5, old, new));
        let at = idx.get(5).unwrap();
        assert!(at.same_place(new) && at.accessed(), "hit while it moved");
        assert!(idx.move_if_at(5, new, old));
        assert!(!idx.get(5).unwrap().accessed() || idx.get(5).unwrap().same_place(old));
        // Written anew meanwhile: the copy gives way.
        idx.insert(5, newer);
        assert!(!idx.move_if_at(5, old, new));
        assert!(idx.get(5).unwrap().same_place(newer));
        // Removed meanwhile: not brought back.
        idx.remove(5);
        assert!(!idx.move_if_at(5, newer, new));
        assert!(idx.get(5).is_none());
    }

    /// A reclaim's last look: an entry hit since it was passed over stays, one not hit
    /// goes, one elsewhere is left alone.
    #[test]
    fn removal_unless_accessed_keeps_a_hit_entry() {
        let idx = Index::default();
        let (a, b) = (Loc::new(1, 64, 10), Loc::new(2, 64, 10));
        idx.insert(5, a);
        idx.insert(6, a);
        idx.mark_accessed(6);
        assert!(!idx.remove_unless_accessed(5, a));
        assert!(idx.get(5).is_none(), "not hit: gone");
        assert!(idx.remove_unless_accessed(6, a));
        assert!(idx.get(6).is_some(), "hit: kept");
        assert!(!idx.remove_unless_accessed(6, b));
        assert!(idx.get(6).is_some(), "elsewhere: left alone");
    }

    #[test]
    fn conditional_removal_respects_the_place() {
        let idx = Index::default();
        let a = Loc::new(1, 64, 10);
        let b = Loc::new(2, 64, 10);
        idx.insert(5, a);
        idx.mark_accessed(5);
        assert!(idx.get(5).unwrap().accessed());
        assert!(!idx.remove_if_at(5, b));
        assert!(idx.remove_if_at(5, a));
        assert!(idx.get(5).is_none());
    }
}

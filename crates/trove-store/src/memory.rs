//! The memory tier: a sharded map from primary key to stored variants, under one byte
//! budget kept by one eviction order.

use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::eviction::{Eviction, EvictionKind};
use crate::hash::{fast_map, key_hash, FastMap};
use crate::invalidation::Invalidations;
use crate::object::{Object, ObjectHead};
use crate::storage::{Admission, AdmitAll, EvictionHook, Refused, Removal, Storage};

/// Counters a store keeps; read with [`Storage::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub bytes: u64,
    pub objects: u64,
    pub evictions: u64,
    pub capacity: u64,
    /// Objects removed, by [`Removal`] reason (indexed as [`Removal::ALL`]).
    pub removed: [u64; Removal::ALL.len()],
}

impl StoreStats {
    /// Objects removed for `why`.
    pub fn removed(&self, why: Removal) -> u64 {
        self.removed[why.index()]
    }
}

/// The stored variants under one key hash: usually one object, held inline. Objects of
/// two keys whose 64-bit hashes collide share a list; every reader filters by key.
type Variants = SmallVec<[Arc<Object>; 1]>;

/// One shard of the map: what a lookup needs, under its own lock.
struct Shard {
    /// Primary key's [`key_hash`] → stored variants. Keyed by the hash the shard was chosen
    /// by, not by a copy of the key: an insertion allocates no key strings and a lookup
    /// hashes the key once (a miss-heavy replay spent a tenth of its time on them).
    entries: FastMap<u64, Variants>,
}

impl Shard {
    /// Takes object `id` (under key hash `h`) out of the map.
    fn take(&mut self, h: u64, id: u64) -> Option<Arc<Object>> {
        // One probe of the map, whether or not the key's list empties.
        let Entry::Occupied(mut e) = self.entries.entry(h) else {
            return None;
        };
        let v = e.get_mut();
        let gone = v.iter().position(|o| o.id == id).map(|i| v.swap_remove(i));
        if v.is_empty() {
            e.remove();
        }
        gone
    }
}

/// The objects one change evicted (a miss evicts one or two in the steady state: kept
/// inline, not allocated each time).
type Victims = SmallVec<[Arc<Object>; 4]>;

/// The one eviction order over the whole tier, and the byte budget it keeps.
///
/// Which object leaves next is a single decision for the tier: a policy per shard, each
/// evicting its own first (what this replaced), let shard sizes drift without bound once
/// object sizes mix, so keys that hashed to a shard that had lost its large objects were in
/// effect not cached (at 256 MiB on a Zipf trace with a MiB tail, a byte hit ratio of 27.6 %
/// where a textbook LRU gets 70.4 %).
struct Order {
    policy: Box<dyn Eviction>,
    /// Object id → where it lives and what it costs.
    ids: FastMap<u64, Stored>,
    bytes: u64,
    removed: [u64; Removal::ALL.len()],
}

/// What the order knows of one stored object.
#[derive(Debug, Clone, Copy)]
struct Stored {
    /// Its key hash: where a victim lives in the shards.
    hash: u64,
    /// [`Object::head_charge`] of the stored snapshot: fixed until a new head replaces it.
    head: u64,
    /// Its body's charge when last charged: a body that has not grown since costs no
    /// recharge (a miss's body is charged its declared length when inserted, and again
    /// when it is whole).
    body: u64,
}

impl Stored {
    /// The bytes charged for it.
    fn charge(&self) -> u64 {
        self.head.saturating_add(self.body)
    }
}

impl Order {
    /// Forgets `id`; returns its key hash if it was stored.
    fn forget(&mut self, id: u64, why: Removal) -> Option<u64> {
        let stored = self.ids.remove(&id)?;
        self.bytes = self.bytes.saturating_sub(stored.charge());
        self.policy.remove(id);
        self.removed[why.index()] += 1;
        Some(stored.hash)
    }

    /// Charges `id` `head` and `body` bytes now; false if it is not stored.
    fn recharge(&mut self, id: u64, head: u64, body: u64) -> bool {
        let Some(s) = self.ids.get_mut(&id) else {
            return false;
        };
        let old = s.charge();
        (s.head, s.body) = (head, body);
        let charge = s.charge();
        self.bytes = self.bytes.saturating_sub(old) + charge;
        self.policy.recharge(id, charge);
        true
    }
}

/// Hits noted while another thread held the order's lock, applied by the next holder.
/// Lossy when full, as Caffeine's read buffers are: a dropped hit only makes the order a
/// little less exact, never wrong, and a hit never waits for an insertion's evictions.
struct Touches {
    stripes: Vec<Mutex<Vec<u64>>>,
    pending: AtomicUsize,
}

/// Hits one stripe holds before further ones are dropped.
const TOUCH_STRIPE: usize = 256;

impl Touches {
    fn new(stripes: usize) -> Self {
        Touches {
            stripes: (0..stripes)
                .map(|_| Mutex::new(Vec::with_capacity(TOUCH_STRIPE)))
                .collect(),
            pending: AtomicUsize::new(0),
        }
    }

    fn note(&self, stripe: usize, id: u64) {
        let mut s = self.stripes[stripe % self.stripes.len()].lock();
        if s.len() < TOUCH_STRIPE {
            s.push(id);
            self.pending.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Applies every noted hit to `order` (whose lock the caller holds).
    fn drain(&self, order: &mut Order) {
        if self.pending.load(Ordering::Relaxed) == 0 {
            return;
        }
        for stripe in &self.stripes {
            let mut s = stripe.lock();
            self.pending.fetch_sub(s.len(), Ordering::Relaxed);
            for id in s.drain(..) {
                order.policy.touch(id);
            }
        }
    }
}

/// A byte-budgeted memory store: a sharded map for lookups, one eviction order for the
/// budget. Cheap to share (`Arc` it).
///
/// Locks: a lookup takes its key's shard only. Anything that changes what is stored
/// (insert, remove, recharge) takes the order's lock, then shard locks; never the reverse.
/// A hit applies itself to the order if its lock is free and is noted for the lock's
/// holder otherwise ([`Touches`]), so single-threaded (the simulator) the order is exact.
pub struct MemoryStore {
    shards: Vec<Mutex<Shard>>,
    order: Mutex<Order>,
    touches: Touches,
    /// The byte budget; changed only by [`Storage::resize`].
    capacity: AtomicU64,
    next_id: AtomicU64,
    max_object: AtomicU64,
    kind: EvictionKind,
    hook: Option<Arc<dyn EvictionHook>>,
    admission: Arc<dyn Admission>,
    invalidations: Arc<Invalidations>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("stats", &self.stats())
            .field("policy", &self.kind.as_str())
            .finish()
    }
}

impl MemoryStore {
    /// A store of `capacity` bytes whose map is split in `shards` shards. Objects larger
    /// than `max_object` bytes (or half the capacity, whichever is smaller) are never
    /// admitted.
    pub fn new(capacity: u64, shards: usize, max_object: u64, kind: EvictionKind) -> Self {
        let shards = shards.max(1);
        MemoryStore {
            capacity: AtomicU64::new(capacity),
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        entries: fast_map(),
                    })
                })
                .collect(),
            order: Mutex::new(Order {
                policy: kind.build(capacity),
                ids: fast_map(),
                bytes: 0,
                removed: Default::default(),
            }),
            touches: Touches::new(shards),
            next_id: AtomicU64::new(1),
            max_object: AtomicU64::new(max_object.min(capacity / 2).max(1)),
            kind,
            hook: None,
            admission: Arc::new(AdmitAll),
            invalidations: Arc::default(),
        }
    }

    /// Judges objects by `inv` (shared with another tier) instead of a rule log of its own.
    pub fn with_invalidations(mut self, inv: Arc<Invalidations>) -> Self {
        self.invalidations = inv;
        self
    }

    /// Hands every evicted object to `hook` (a lower tier).
    pub fn with_eviction_hook(mut self, hook: Arc<dyn EvictionHook>) -> Self {
        self.hook = Some(hook);
        self
    }

    /// Lets `admission` turn objects away before they cost anything.
    pub fn with_admission(mut self, admission: Arc<dyn Admission>) -> Self {
        self.admission = admission;
        self
    }

    /// Object ids start at `first` (a persistent tier continues from its high-water mark).
    pub fn with_first_id(self, first: u64) -> Self {
        self.next_id.store(first.max(1), Ordering::Relaxed);
        self
    }

    /// `obj` with an identity of this store's, without storing it: for an object a lower
    /// tier keeps (a body spooled to disk), so `Storage::holds` and friends can tell it
    /// from every object stored here.
    pub fn identify(&self, mut obj: Object) -> Object {
        obj.id = self.next_id.fetch_add(1, Ordering::Relaxed);
        obj
    }

    /// The eviction policy in use.
    pub fn eviction(&self) -> EvictionKind {
        self.kind
    }

    fn index_of(&self, hash: u64) -> usize {
        (hash % self.shards.len() as u64) as usize
    }

    /// The key's hash and its shard.
    fn shard(&self, key: &str) -> (u64, &Mutex<Shard>) {
        let h = key_hash(key);
        (h, &self.shards[self.index_of(h)])
    }

    /// The order, locked, with every hit noted meanwhile applied.
    fn order(&self) -> parking_lot::MutexGuard<'_, Order> {
        let mut order = self.order.lock();
        self.touches.drain(&mut order);
        order
    }

    /// Evicts in the policy's order until the tier is within budget; returns the victims
    /// for the eviction hook (handed over once the locks are released).
    fn evict_to_budget(&self, order: &mut Order) -> Victims {
        self.evict_to(order, self.budget())
    }

    /// The bytes objects may take: the capacity less what the tag index holds besides
    /// them (distinct tags, remembered names), which the budget covers too.
    fn budget(&self) -> u64 {
        self.capacity
            .load(Ordering::Relaxed)
            .saturating_sub(self.invalidations.index_bytes())
    }

    /// Evicts in the policy's order until at most `limit` bytes are stored.
    fn evict_to(&self, order: &mut Order, limit: u64) -> Victims {
        let mut victims = Victims::new();
        while order.bytes > limit {
            let Some(victim) = order.policy.victim() else {
                break;
            };
            let Some(stored) = order.ids.remove(&victim) else {
                continue;
            };
            order.bytes = order.bytes.saturating_sub(stored.charge());
            let h = stored.hash;
            order.removed[Removal::Evicted.index()] += 1;
            if let Some(gone) = self.shards[self.index_of(h)].lock().take(h, victim) {
                self.invalidations.removed(&gone);
                victims.push(gone);
            }
        }
        victims
    }

    fn hand_over(&self, victims: Victims) {
        if let Some(hook) = &self.hook {
            for v in victims {
                hook.evicted(v);
            }
        }
    }

    /// What `obj` would be charged (its head's part and its body's), if it may be stored.
    fn admit(&self, obj: &Object) -> Result<(u64, u64), Refused> {
        let (head, body) = (obj.head_charge(), obj.body.charge());
        if head.saturating_add(body) > self.max_object.load(Ordering::Relaxed) {
            return Err(Refused::TooLarge);
        }
        if !self.admission.admit(obj) {
            return Err(Refused::NotAdmitted);
        }
        Ok((head, body))
    }

    /// Stores `obj`, admitted and charged `head` and `body` by [`MemoryStore::admit`] and
    /// given its id, replacing the same key and variant.
    fn enter(&self, obj: Arc<Object>, (head, body): (u64, u64)) -> Result<Arc<Object>, Refused> {
        let charge = head.saturating_add(body);
        let h = key_hash(&obj.key);
        // `hash::fingerprint`, with the key's hash already in hand.
        let fp = xxhash_rust::xxh3::xxh3_64_with_seed(obj.variant.as_bytes(), h);
        let victims = {
            let mut guard = self.order();
            let order = &mut *guard;
            if !order.policy.admits(fp, charge) {
                return Err(Refused::NotAdmitted);
            }
            let replaced = {
                let mut shard = self.shards[self.index_of(h)].lock();
                let list = shard.entries.entry(h).or_default();
                let old = list
                    .iter()
                    .position(|o| o.key == obj.key && o.variant == obj.variant)
                    .map(|i| list.swap_remove(i));
                list.push(Arc::clone(&obj));
                old
            };
            if let Some(old) = replaced {
                order.forget(old.id, Removal::Replaced);
                self.invalidations.removed(&old);
            }
            // Room is made before the newcomer enters the order, so it is never its own
            // victim: a policy that admits into a small queue (S3-FIFO) would otherwise
            // evict every object larger than that queue at once, before its second use.
            let room = self.budget().saturating_sub(charge);
            let victims = self.evict_to(order, room);
            let stored = Stored {
                hash: h,
                head,
                body,
            };
            order.ids.insert(obj.id, stored);
            order.bytes += charge;
            order.policy.insert(obj.id, fp, charge);
            self.invalidations.added(&obj);
            victims
        };
        self.hand_over(victims);
        Ok(obj)
    }

    /// Removes object `id` of key hash `h` (the order's lock held).
    fn remove_locked(&self, order: &mut Order, id: u64, why: Removal) -> bool {
        let Some(h) = order.forget(id, why) else {
            return false;
        };
        if let Some(gone) = self.shards[self.index_of(h)].lock().take(h, id) {
            self.invalidations.removed(&gone);
        }
        true
    }
}

impl Storage for MemoryStore {
    fn lookup(&self, key: &str) -> Vec<Arc<Object>> {
        let mut out = Vec::new();
        self.lookup_into(key, &mut out);
        out
    }

    fn lookup_into(&self, key: &str, out: &mut Vec<Arc<Object>>) {
        let (h, shard) = self.shard(key);
        if let Some(v) = shard.lock().entries.get(&h) {
            // A plain loop: the iterator chain's `extend` did not inline into this.
            for o in v.iter() {
                if o.key == key {
                    out.push(Arc::clone(o));
                }
            }
        }
    }

    fn touch(&self, obj: &Object) {
        match self.order.try_lock() {
            Some(mut order) => {
                self.touches.drain(&mut order);
                order.policy.touch(obj.id);
            }
            None => self.touches.note(obj.id as usize, obj.id),
        }
    }

    fn insert(&self, mut obj: Object) -> Result<Arc<Object>, Refused> {
        let charged = self.admit(&obj)?;
        obj.id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.enter(Arc::new(obj), charged)
    }

    fn insert_shared(&self, mut obj: Arc<Object>) -> Result<Arc<Object>, Refused> {
        let charged = self.admit(&obj)?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        match Arc::get_mut(&mut obj) {
            Some(o) => o.id = id,
            None => {
                let mut copy = obj.unstored_copy();
                copy.id = id;
                obj = Arc::new(copy);
            }
        }
        self.enter(obj, charged)
    }

    fn update_meta(&self, obj: &Object, head: ObjectHead) -> Option<Arc<Object>> {
        let h = key_hash(&obj.key);
        let (updated, victims) = {
            let mut order = self.order();
            let updated = {
                let mut shard = self.shards[self.index_of(h)].lock();
                let slot = shard
                    .entries
                    .get_mut(&h)?
                    .iter_mut()
                    .find(|o| o.id == obj.id)?;
                let updated = Arc::new(Object {
                    key: obj.key.clone(),
                    variant: obj.variant.clone(),
                    head,
                    body: Arc::clone(&obj.body),
                    id: obj.id,
                    // A new snapshot: its head is not below yet.
                    marks: Default::default(),
                });
                *slot = Arc::clone(&updated);
                updated
            };
            self.invalidations.added(&updated);
            // The new head may be larger or smaller: charge it now.
            order.recharge(obj.id, updated.head_charge(), updated.body.charge());
            (updated, self.evict_to_budget(&mut order))
        };
        self.hand_over(victims);
        Some(updated)
    }

    fn recharge(&self, obj: &Object) {
        let victims = {
            let mut order = self.order();
            let Some(&stored) = order.ids.get(&obj.id) else {
                return;
            };
            // Only the body's charge can have changed: the stored snapshot's head is
            // charged as it was stored (`update_meta` charges a new one), and every snapshot
            // of one object shares its body, so `obj`'s is the stored one's. Usually the
            // same (a body whose length was declared): nothing to evict.
            let body = obj.body.charge();
            if body == stored.body {
                return;
            }
            order.recharge(obj.id, stored.head, body);
            self.evict_to_budget(&mut order)
        };
        self.hand_over(victims);
    }

    fn holds(&self, obj: &Object) -> bool {
        let (h, shard) = self.shard(&obj.key);
        shard
            .lock()
            .entries
            .get(&h)
            .is_some_and(|v| v.iter().any(|o| o.id == obj.id))
    }

    fn remove_object(&self, obj: &Object, why: Removal) -> bool {
        let mut order = self.order();
        self.remove_locked(&mut order, obj.id, why)
    }

    fn remove(&self, key: &str, why: Removal) -> usize {
        let (h, shard) = self.shard(key);
        let mut order = self.order();
        let ids: SmallVec<[u64; 4]> = shard
            .lock()
            .entries
            .get(&h)
            .map(|v| v.iter().filter(|o| o.key == key).map(|o| o.id).collect())
            .unwrap_or_default();
        ids.iter()
            .filter(|id| self.remove_locked(&mut order, **id, why))
            .count()
    }

    fn max_object(&self) -> u64 {
        self.max_object.load(Ordering::Relaxed)
    }

    fn resize(&self, capacity: u64, max_object: u64) -> bool {
        self.capacity.store(capacity, Ordering::Relaxed);
        self.max_object
            .store(max_object.min(capacity / 2).max(1), Ordering::Relaxed);
        let victims = {
            let mut order = self.order();
            order.policy.resize(capacity);
            self.evict_to_budget(&mut order)
        };
        self.hand_over(victims);
        true
    }

    fn invalidations(&self) -> Option<&Arc<Invalidations>> {
        Some(&self.invalidations)
    }

    fn scan(&self, visit: &mut dyn FnMut(&Arc<Object>)) {
        for shard in &self.shards {
            // Copied out so the shard's lock is not held while visiting.
            let objs: Vec<Arc<Object>> = shard.lock().entries.values().flatten().cloned().collect();
            for o in &objs {
                visit(o);
            }
        }
    }

    fn scans(&self) -> bool {
        true
    }

    fn stats(&self) -> StoreStats {
        let order = self.order.lock();
        let mut s = StoreStats {
            bytes: order.bytes + self.invalidations.index_bytes(),
            objects: order.ids.len() as u64,
            removed: order.removed,
            ..Default::default()
        };
        s.evictions = s.removed(Removal::Evicted);
        s.capacity = self.capacity.load(Ordering::Relaxed);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::Body;
    use crate::object::ObjectHead;
    use crate::storage::{Admission, EvictionHook, Refused, Removal};
    use bytes::Bytes;
    use http::{HeaderMap, StatusCode};
    use std::time::SystemTime;

    fn obj(key: &str, variant: &str, size: usize) -> Object {
        Object::new(
            key.into(),
            variant.into(),
            ObjectHead {
                status: StatusCode::OK,
                headers: HeaderMap::new(),
                request_headers: HeaderMap::new(),
                request_time: SystemTime::UNIX_EPOCH,
                response_time: SystemTime::UNIX_EPOCH,
                prepared: Default::default(),
                labels: Default::default(),
            },
            Body::complete(Bytes::from(vec![b'x'; size])),
        )
    }

    /// A reload's smaller budget evicts down to it at once; a larger one lets more in.
    #[test]
    fn resize_evicts_to_the_new_budget() {
        let store = MemoryStore::new(1 << 20, 4, 1 << 20, EvictionKind::S3Fifo);
        for i in 0..64 {
            store
                .insert(obj(&format!("http://x/{i}"), "", 8 << 10))
                .unwrap();
        }
        let before = store.stats().bytes;
        assert!(before > 256 << 10, "{before}");
        assert!(store.resize(256 << 10, 1 << 20));
        let after = store.stats();
        assert!(after.bytes <= 256 << 10, "{}", after.bytes);
        assert_eq!(after.capacity, 256 << 10);
        assert_eq!(store.max_object(), 128 << 10, "at most half the budget");
        assert!(store.resize(4 << 20, 1 << 20));
        assert_eq!(store.max_object(), 1 << 20);
    }

    /// Issue 18: one eviction order over the whole tier. Distinct 1.2 MB objects, each
    /// fetched twice in a row, in a 4 MiB store of 16 shards, with a 1 KB object fetched
    /// between every two fetches: every second fetch of a large object hits and the small
    /// object, used all the time, is never evicted. With an order per shard, an insertion
    /// evicted from its own shard first: the second fetch hit 13 times in 60.
    #[test]
    fn one_order_for_the_whole_tier() {
        // W-TinyLFU is left out: with its object goal it refuses a 1.2 MB object used twice
        // in a 4 MiB store (it would push out far more uses than it brings).
        for kind in [EvictionKind::Lru, EvictionKind::S3Fifo, EvictionKind::Sieve] {
            let s = MemoryStore::new(4 << 20, 16, 8 << 20, kind);
            let (mut small_misses, mut big_hits) = (0, 0);
            let mut small = |s: &MemoryStore| match s.lookup("http://x/small").first() {
                Some(o) => s.touch(o),
                None => {
                    small_misses += 1;
                    s.insert(obj("http://x/small", "", 1000)).unwrap();
                }
            };
            for i in 0..60 {
                let key = format!("http://x/big/{i}");
                small(&s);
                assert!(s.lookup(&key).is_empty());
                s.insert(obj(&key, "", 1_200_000)).unwrap();
                small(&s);
                if let Some(o) = s.lookup(&key).first() {
                    s.touch(o);
                    big_hits += 1;
                }
                let st = s.stats();
                assert!(st.bytes <= 4 << 20, "{kind:?}: {st:?}");
            }
            assert_eq!(big_hits, 60, "{kind:?}");
            // LRU never loses it. S3-FIFO and SIEVE may, once, when every object was used
            // since the last eviction: the one pass over them then clears every mark.
            let lost = if kind == EvictionKind::Lru { 1 } else { 2 };
            assert!(small_misses <= lost, "{kind:?}: {small_misses}");
        }
    }

    /// An object larger than a shard's share of the budget is stored if it fits the
    /// budget (half of it, the admission limit), and evicts what it must from anywhere.
    #[test]
    fn an_object_larger_than_a_share_is_stored() {
        for kind in EvictionKind::ALL {
            let s = MemoryStore::new(1 << 20, 16, 1 << 20, kind);
            for i in 0..200 {
                s.insert(obj(&format!("k{i}"), "", 4000)).unwrap();
            }
            s.insert(obj("big", "", 500_000)).unwrap();
            assert_eq!(s.lookup("big").len(), 1, "{kind:?}");
            let st = s.stats();
            assert!(st.bytes <= 1 << 20, "{kind:?}: {st:?}");
            assert!(st.evictions > 0, "{kind:?}: {st:?}");
        }
    }

    #[test]
    fn variants_are_kept_side_by_side_and_replaced_by_variant() {
        let s = MemoryStore::new(1 << 20, 1, 1 << 20, EvictionKind::Lru);
        s.insert(obj("k", "gzip", 10)).unwrap();
        s.insert(obj("k", "br", 10)).unwrap();
        s.insert(obj("k", "gzip", 20)).unwrap();
        let v = s.lookup("k");
        assert_eq!(v.len(), 2);
        assert_eq!(s.stats().objects, 2);
        assert_eq!(s.remove("k", Removal::Purged), 2);
        assert!(s.lookup("k").is_empty());
        assert_eq!(s.stats().bytes, 0);
    }

    #[test]
    fn budget_is_kept_by_evicting() {
        for kind in [EvictionKind::Lru, EvictionKind::S3Fifo] {
            let s = MemoryStore::new(100_000, 4, 10_000, kind);
            for i in 0..100 {
                s.insert(obj(&format!("k{i}"), "", 5_000)).unwrap();
            }
            let st = s.stats();
            assert!(st.bytes <= 100_000, "{kind:?}: {st:?}");
            assert!(st.evictions > 70, "{kind:?}: {st:?}");
            assert!(s.lookup("k99").len() == 1, "{kind:?}: newest kept");
        }
    }

    #[test]
    fn update_meta_keeps_identity_and_body() {
        let s = MemoryStore::new(1 << 20, 2, 1 << 20, EvictionKind::S3Fifo);
        let a = s.insert(obj("k", "", 10)).unwrap();
        let mut head = a.head.clone();
        head.status = StatusCode::NOT_FOUND;
        let b = s.update_meta(&a, head).unwrap();
        assert!(s.holds(&a) && s.holds(&b));
        assert!(Arc::ptr_eq(&a.body, &b.body));
        assert_eq!(s.lookup("k")[0].head.status, StatusCode::NOT_FOUND);
        assert_eq!(s.stats().objects, 1);
        assert!(s.remove_object(&a, Removal::Invalidated));
        assert!(s.update_meta(&b, b.head.clone()).is_none());
        assert_eq!(s.stats().removed(Removal::Invalidated), 1);
    }

    /// A body that grows after its object is stored is charged as it is now, under the
    /// head stored last (a new head from `update_meta` included), and the budget is kept.
    #[test]
    fn a_growing_body_is_recharged_under_the_stored_head() {
        let s = MemoryStore::new(4_000, 1, 4_000, EvictionKind::Lru);
        let growing = |key: &str| {
            let mut o = obj(key, "", 0);
            o.body = Body::new(None);
            o
        };
        let a = s.insert(growing("a")).unwrap();
        let stored = |s: &MemoryStore| s.stats().bytes;
        assert_eq!(stored(&s), a.charge());
        s.recharge(&a);
        assert_eq!(stored(&s), a.charge(), "nothing grew: the same charge");
        a.body.append_now(Bytes::from(vec![b'x'; 500])).unwrap();
        s.recharge(&a);
        assert_eq!(stored(&s), a.charge());
        let mut head = a.head.clone();
        head.headers
            .insert(http::header::ETAG, http::HeaderValue::from_static("\"v2\""));
        let b = s.update_meta(&a, head).unwrap();
        assert_eq!(stored(&s), b.charge());
        // The old snapshot shares the body: growth it reports is charged under the new head.
        a.body.append_now(Bytes::from(vec![b'x'; 700])).unwrap();
        s.recharge(&a);
        assert_eq!(stored(&s), b.charge());
        assert!(b.charge() > a.charge());
        // Grown past the budget with a second object in: the older one leaves.
        let c = s.insert(growing("c")).unwrap();
        c.body.append_now(Bytes::from(vec![b'x'; 3_000])).unwrap();
        s.recharge(&c);
        assert!(!s.holds(&b) && s.holds(&c));
        assert_eq!(stored(&s), c.charge());
    }

    #[test]
    fn evicted_objects_go_to_the_hook() {
        struct Keep(Mutex<Vec<String>>);
        impl EvictionHook for Keep {
            fn evicted(&self, obj: Arc<Object>) {
                self.0.lock().push(obj.key.clone());
            }
        }
        let hook = Arc::new(Keep(Mutex::new(Vec::new())));
        let s = MemoryStore::new(20_000, 1, 10_000, EvictionKind::Lru)
            .with_eviction_hook(Arc::clone(&hook) as Arc<dyn EvictionHook>);
        for i in 0..10 {
            s.insert(obj(&format!("k{i}"), "", 5_000)).unwrap();
        }
        let st = s.stats();
        assert_eq!(hook.0.lock().len() as u64, st.evictions);
        assert_eq!(hook.0.lock()[0], "k0", "LRU hands over the oldest first");
    }

    #[test]
    fn admission_can_refuse() {
        struct Small;
        impl Admission for Small {
            fn admit(&self, obj: &Object) -> bool {
                obj.body.len() < 100
            }
        }
        let s = MemoryStore::new(1 << 20, 1, 1 << 20, EvictionKind::Lru)
            .with_admission(Arc::new(Small));
        assert!(s.insert(obj("a", "", 10)).is_ok());
        assert_eq!(
            s.insert(obj("b", "", 1000)).err(),
            Some(Refused::NotAdmitted)
        );
    }

    #[test]
    fn objects_over_the_limit_are_not_admitted() {
        let s = MemoryStore::new(1 << 20, 4, 1000, EvictionKind::S3Fifo);
        assert_eq!(
            s.insert(obj("big", "", 5000)).err(),
            Some(Refused::TooLarge)
        );
        assert!(s.lookup("big").is_empty());
    }
}

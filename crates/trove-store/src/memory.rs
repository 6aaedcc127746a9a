//! The memory tier: a sharded map from primary key to stored variants, under a byte budget.

use std::sync::atomic::{AtomicU64, Ordering};
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

struct Shard {
    /// Primary key's [`key_hash`] → stored variants. Keyed by the hash the shard was chosen
    /// by, not by a copy of the key: an insertion allocates no key strings and a lookup
    /// hashes the key once (a miss-heavy replay spent a tenth of its time on them).
    entries: FastMap<u64, Variants>,
    /// Object id → (key hash, charged bytes), so an eviction victim can be found.
    ids: FastMap<u64, (u64, u64)>,
    policy: Box<dyn Eviction>,
    bytes: u64,
    removed: [u64; Removal::ALL.len()],
}

/// A byte-budgeted, sharded memory store. Cheap to share (`Arc` it).
///
/// The budget is global: an insertion that takes the total over it evicts from its own
/// shard first (keys hash uniformly, so shards stay balanced), then from the others.
pub struct MemoryStore {
    shards: Vec<Mutex<Shard>>,
    bytes: AtomicU64,
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
    /// A store of `capacity` bytes in `shards` shards. Objects larger than `max_object`
    /// bytes (or half the capacity, whichever is smaller) are never admitted.
    pub fn new(capacity: u64, shards: usize, max_object: u64, kind: EvictionKind) -> Self {
        let shards = shards.max(1);
        let per_shard = capacity / shards as u64;
        MemoryStore {
            bytes: AtomicU64::new(0),
            capacity: AtomicU64::new(capacity),
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        entries: fast_map(),
                        ids: fast_map(),
                        policy: kind.build(per_shard),
                        bytes: 0,
                        removed: Default::default(),
                    })
                })
                .collect(),
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

    /// Evicts until the total is within budget: from shard `first`, then the others.
    fn evict_to_budget(&self, first: usize) {
        let n = self.shards.len();
        let capacity = self.capacity.load(Ordering::Relaxed);
        for i in 0..n {
            if self.bytes.load(Ordering::Relaxed) <= capacity {
                return;
            }
            let victims = {
                let mut shard = self.shards[(first + i) % n].lock();
                shard.evict_while(
                    || self.bytes.load(Ordering::Relaxed) > capacity,
                    &self.bytes,
                    &self.invalidations,
                )
            };
            self.hand_over(victims);
        }
    }

    fn hand_over(&self, victims: Vec<Arc<Object>>) {
        if let Some(hook) = &self.hook {
            for v in victims {
                hook.evicted(v);
            }
        }
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
            out.extend(v.iter().filter(|o| o.key == key).cloned());
        }
    }

    fn touch(&self, obj: &Object) {
        self.shard(&obj.key).1.lock().policy.touch(obj.id);
    }

    fn insert(&self, mut obj: Object) -> Result<Arc<Object>, Refused> {
        let charge = obj.charge();
        if charge > self.max_object.load(Ordering::Relaxed) {
            return Err(Refused::TooLarge);
        }
        if !self.admission.admit(&obj) {
            return Err(Refused::NotAdmitted);
        }
        obj.id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let obj = Arc::new(obj);
        let h = key_hash(&obj.key);
        // `hash::fingerprint`, with the key's hash already in hand.
        let fp = xxhash_rust::xxh3::xxh3_64_with_seed(obj.variant.as_bytes(), h);
        let idx = self.index_of(h);
        let victims = {
            let mut guard = self.shards[idx].lock();
            let shard = &mut *guard;
            let old = shard
                .entries
                .get(&h)
                .and_then(|v| {
                    v.iter()
                        .find(|o| o.key == obj.key && o.variant == obj.variant)
                })
                .map(|o| o.id);
            if let Some(old) = old {
                shard.remove_id(old, &self.bytes, Removal::Replaced, &self.invalidations);
            }
            shard.entries.entry(h).or_default().push(Arc::clone(&obj));
            shard.ids.insert(obj.id, (h, charge));
            shard.bytes += charge;
            self.bytes.fetch_add(charge, Ordering::Relaxed);
            shard.policy.insert(obj.id, fp, charge);
            self.invalidations.added(&obj);
            let capacity = self.capacity.load(Ordering::Relaxed);
            shard.evict_while(
                || self.bytes.load(Ordering::Relaxed) > capacity,
                &self.bytes,
                &self.invalidations,
            )
        };
        self.hand_over(victims);
        self.evict_to_budget(idx);
        Ok(obj)
    }

    fn update_meta(&self, obj: &Object, head: ObjectHead) -> Option<Arc<Object>> {
        let h = key_hash(&obj.key);
        let idx = self.index_of(h);
        let updated = {
            let mut guard = self.shards[idx].lock();
            let shard = &mut *guard;
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
            });
            *slot = Arc::clone(&updated);
            self.invalidations.added(&updated);
            // The new head may be larger or smaller: charge it now.
            let charge = updated.charge();
            if let Some((_, c)) = shard.ids.get_mut(&obj.id) {
                let old = std::mem::replace(c, charge);
                shard.bytes = shard.bytes.saturating_sub(old) + charge;
                self.bytes.fetch_sub(old, Ordering::Relaxed);
                self.bytes.fetch_add(charge, Ordering::Relaxed);
            }
            updated
        };
        self.evict_to_budget(idx);
        Some(updated)
    }

    fn recharge(&self, obj: &Object) {
        let h = key_hash(&obj.key);
        let idx = self.index_of(h);
        {
            let mut guard = self.shards[idx].lock();
            let shard = &mut *guard;
            // Charge the object as stored now (its head may have been updated since).
            let charge = shard
                .entries
                .get(&h)
                .and_then(|v| v.iter().find(|o| o.id == obj.id))
                .map(|o| o.charge());
            let (Some(charge), Some((_, c))) = (charge, shard.ids.get_mut(&obj.id)) else {
                return;
            };
            // Usually so (a body whose length was declared): nothing to charge or evict,
            // and the shared total is left alone (a locked instruction per miss saved).
            if *c == charge {
                return;
            }
            let old = std::mem::replace(c, charge);
            shard.bytes = shard.bytes.saturating_sub(old) + charge;
            self.bytes.fetch_sub(old, Ordering::Relaxed);
            self.bytes.fetch_add(charge, Ordering::Relaxed);
        }
        self.evict_to_budget(idx);
    }

    fn holds(&self, obj: &Object) -> bool {
        self.shard(&obj.key).1.lock().ids.contains_key(&obj.id)
    }

    fn remove_object(&self, obj: &Object, why: Removal) -> bool {
        self.shard(&obj.key)
            .1
            .lock()
            .remove_id(obj.id, &self.bytes, why, &self.invalidations)
    }

    fn remove(&self, key: &str, why: Removal) -> usize {
        let (h, shard) = self.shard(key);
        let mut shard = shard.lock();
        let ids: SmallVec<[u64; 4]> = shard
            .entries
            .get(&h)
            .map(|v| v.iter().filter(|o| o.key == key).map(|o| o.id).collect())
            .unwrap_or_default();
        ids.iter()
            .filter(|id| shard.remove_id(**id, &self.bytes, why, &self.invalidations))
            .count()
    }

    fn max_object(&self) -> u64 {
        self.max_object.load(Ordering::Relaxed)
    }

    fn resize(&self, capacity: u64, max_object: u64) -> bool {
        self.capacity.store(capacity, Ordering::Relaxed);
        self.max_object
            .store(max_object.min(capacity / 2).max(1), Ordering::Relaxed);
        let per_shard = capacity / self.shards.len() as u64;
        for shard in &self.shards {
            shard.lock().policy.resize(per_shard);
        }
        self.evict_to_budget(0);
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
        let mut s = StoreStats::default();
        for shard in &self.shards {
            let sh = shard.lock();
            s.bytes += sh.bytes;
            s.objects += sh.ids.len() as u64;
            for (total, n) in s.removed.iter_mut().zip(sh.removed) {
                *total += n;
            }
        }
        s.evictions = s.removed(Removal::Evicted);
        s.capacity = self.capacity.load(Ordering::Relaxed);
        s
    }
}

impl Shard {
    fn remove_id(&mut self, id: u64, total: &AtomicU64, why: Removal, inv: &Invalidations) -> bool {
        let Some((h, charge)) = self.ids.remove(&id) else {
            return false;
        };
        self.bytes = self.bytes.saturating_sub(charge);
        total.fetch_sub(charge, Ordering::Relaxed);
        self.policy.remove(id);
        self.removed[why.index()] += 1;
        if let Some(v) = self.entries.get_mut(&h) {
            if let Some(i) = v.iter().position(|o| o.id == id) {
                inv.removed(&v.remove(i));
            }
            if v.is_empty() {
                self.entries.remove(&h);
            }
        }
        true
    }

    /// Evicts while `over()`; returns the victims for the eviction hook.
    fn evict_while(
        &mut self,
        over: impl Fn() -> bool,
        total: &AtomicU64,
        inv: &Invalidations,
    ) -> Vec<Arc<Object>> {
        let mut victims = Vec::new();
        while over() {
            let Some(victim) = self.policy.victim() else {
                break;
            };
            if let Some((h, charge)) = self.ids.remove(&victim) {
                self.bytes = self.bytes.saturating_sub(charge);
                total.fetch_sub(charge, Ordering::Relaxed);
                self.removed[Removal::Evicted.index()] += 1;
                if let Some(v) = self.entries.get_mut(&h) {
                    if let Some(i) = v.iter().position(|o| o.id == victim) {
                        let gone = v.swap_remove(i);
                        inv.removed(&gone);
                        victims.push(gone);
                    }
                    if v.is_empty() {
                        self.entries.remove(&h);
                    }
                }
            }
        }
        victims
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

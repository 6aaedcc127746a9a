//! The memory tier: a sharded map from primary key to stored variants, under a byte budget.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::eviction::{Eviction, EvictionKind};
use crate::object::Object;

/// Counters a store keeps; read with [`MemoryStore::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub bytes: u64,
    pub objects: u64,
    pub evictions: u64,
    pub capacity: u64,
}

struct Shard {
    /// Primary key → stored variants (usually one).
    entries: HashMap<String, Vec<Arc<Object>>>,
    /// Object id → (primary key, charged bytes), so an eviction victim can be found.
    ids: HashMap<u64, (String, u64)>,
    policy: Box<dyn Eviction>,
    bytes: u64,
    evictions: u64,
}

/// A byte-budgeted, sharded memory store. Cheap to share (`Arc` it).
///
/// The budget is global: an insertion that takes the total over it evicts from its own
/// shard first (keys hash uniformly, so shards stay balanced), then from the others.
pub struct MemoryStore {
    shards: Vec<Mutex<Shard>>,
    bytes: AtomicU64,
    capacity: u64,
    next_id: AtomicU64,
    max_object: u64,
    kind: EvictionKind,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("stats", &self.stats())
            .field("policy", &self.kind.as_str())
            .finish()
    }
}

fn fingerprint(key: &str, variant: &str) -> u64 {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    variant.hash(&mut h);
    h.finish()
}

impl MemoryStore {
    /// A store of `capacity` bytes in `shards` shards. Objects larger than `max_object`
    /// bytes (or half the capacity, whichever is smaller) are never admitted.
    pub fn new(capacity: u64, shards: usize, max_object: u64, kind: EvictionKind) -> Self {
        let shards = shards.max(1);
        let per_shard = capacity / shards as u64;
        MemoryStore {
            bytes: AtomicU64::new(0),
            capacity,
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        entries: HashMap::new(),
                        ids: HashMap::new(),
                        policy: kind.build(per_shard),
                        bytes: 0,
                        evictions: 0,
                    })
                })
                .collect(),
            next_id: AtomicU64::new(1),
            max_object: max_object.min(capacity / 2).max(1),
            kind,
        }
    }

    /// The largest object this store admits.
    pub fn max_object(&self) -> u64 {
        self.max_object
    }

    /// The eviction policy in use.
    pub fn eviction(&self) -> EvictionKind {
        self.kind
    }

    fn shard_index(&self, key: &str) -> usize {
        let mut h = DefaultHasher::new();
        key.hash(&mut h);
        (h.finish() % self.shards.len() as u64) as usize
    }

    fn shard(&self, key: &str) -> &Mutex<Shard> {
        &self.shards[self.shard_index(key)]
    }

    /// Evicts until the total is within budget: from shard `first`, then the others.
    fn evict_to_budget(&self, first: usize) {
        let n = self.shards.len();
        for i in 0..n {
            if self.bytes.load(Ordering::Relaxed) <= self.capacity {
                return;
            }
            let mut shard = self.shards[(first + i) % n].lock();
            shard.evict_while(
                || self.bytes.load(Ordering::Relaxed) > self.capacity,
                &self.bytes,
            );
        }
    }

    /// All stored variants for `key` (empty on a miss). Does not count as a use: call
    /// [`MemoryStore::touch`] for the variant actually served.
    pub fn lookup(&self, key: &str) -> Vec<Arc<Object>> {
        self.shard(key)
            .lock()
            .entries
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    /// Records that `obj` was served (feeds the eviction policy).
    pub fn touch(&self, obj: &Object) {
        self.shard(&obj.key).lock().policy.touch(obj.id);
    }

    /// Stores `obj`, replacing a stored object with the same key and variant, evicting others
    /// as needed. Returns the stored object, or `None` if it is too large to admit.
    pub fn insert(&self, mut obj: Object) -> Option<Arc<Object>> {
        let charge = obj.charge();
        if charge > self.max_object {
            return None;
        }
        obj.id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let obj = Arc::new(obj);
        let fp = fingerprint(&obj.key, &obj.variant);
        let idx = self.shard_index(&obj.key);
        {
            let mut guard = self.shards[idx].lock();
            let shard = &mut *guard;
            let old = shard
                .entries
                .get(&obj.key)
                .and_then(|v| v.iter().find(|o| o.variant == obj.variant))
                .map(|o| o.id);
            if let Some(old) = old {
                shard.remove_id(old, &self.bytes);
            }
            shard
                .entries
                .entry(obj.key.clone())
                .or_default()
                .push(Arc::clone(&obj));
            shard.ids.insert(obj.id, (obj.key.clone(), charge));
            shard.bytes += charge;
            self.bytes.fetch_add(charge, Ordering::Relaxed);
            shard.policy.insert(obj.id, fp, charge);
            shard.evict_while(
                || self.bytes.load(Ordering::Relaxed) > self.capacity,
                &self.bytes,
            );
        }
        self.evict_to_budget(idx);
        Some(obj)
    }

    /// Re-reads the charge of `obj` (its body has grown or completed) and evicts to budget.
    pub fn recharge(&self, obj: &Object) {
        let idx = self.shard_index(&obj.key);
        let charge = obj.charge();
        {
            let mut guard = self.shards[idx].lock();
            let shard = &mut *guard;
            let Some((_, c)) = shard.ids.get_mut(&obj.id) else {
                return;
            };
            let old = std::mem::replace(c, charge);
            shard.bytes = shard.bytes.saturating_sub(old) + charge;
            self.bytes.fetch_sub(old, Ordering::Relaxed);
            self.bytes.fetch_add(charge, Ordering::Relaxed);
        }
        self.evict_to_budget(idx);
    }

    /// True while `obj` itself (not a replacement) is stored.
    pub fn holds(&self, obj: &Object) -> bool {
        self.shard(&obj.key).lock().ids.contains_key(&obj.id)
    }

    /// Removes one stored object (if it is still the stored one).
    pub fn remove_object(&self, obj: &Object) -> bool {
        self.shard(&obj.key).lock().remove_id(obj.id, &self.bytes)
    }

    /// Removes every variant stored under `key`; returns how many were removed.
    pub fn remove(&self, key: &str) -> usize {
        let mut shard = self.shard(key).lock();
        let ids: Vec<u64> = shard
            .entries
            .get(key)
            .map(|v| v.iter().map(|o| o.id).collect())
            .unwrap_or_default();
        ids.iter()
            .filter(|id| shard.remove_id(**id, &self.bytes))
            .count()
    }

    /// Totals over all shards.
    pub fn stats(&self) -> StoreStats {
        let mut s = StoreStats::default();
        for shard in &self.shards {
            let sh = shard.lock();
            s.bytes += sh.bytes;
            s.objects += sh.ids.len() as u64;
            s.evictions += sh.evictions;
        }
        s.capacity = self.capacity;
        s
    }
}

impl Shard {
    fn remove_id(&mut self, id: u64, total: &AtomicU64) -> bool {
        let Some((key, charge)) = self.ids.remove(&id) else {
            return false;
        };
        self.bytes = self.bytes.saturating_sub(charge);
        total.fetch_sub(charge, Ordering::Relaxed);
        self.policy.remove(id);
        if let Some(v) = self.entries.get_mut(&key) {
            v.retain(|o| o.id != id);
            if v.is_empty() {
                self.entries.remove(&key);
            }
        }
        true
    }

    fn evict_while(&mut self, over: impl Fn() -> bool, total: &AtomicU64) {
        while over() {
            let Some(victim) = self.policy.victim() else {
                break;
            };
            if let Some((key, charge)) = self.ids.remove(&victim) {
                self.bytes = self.bytes.saturating_sub(charge);
                total.fetch_sub(charge, Ordering::Relaxed);
                self.evictions += 1;
                if let Some(v) = self.entries.get_mut(&key) {
                    v.retain(|o| o.id != victim);
                    if v.is_empty() {
                        self.entries.remove(&key);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::Body;
    use crate::object::ObjectHead;
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
            },
            Body::complete(Bytes::from(vec![b'x'; size])),
        )
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
        assert_eq!(s.remove("k"), 2);
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
    fn objects_over_the_limit_are_not_admitted() {
        let s = MemoryStore::new(1 << 20, 4, 1000, EvictionKind::S3Fifo);
        assert!(s.insert(obj("big", "", 5000)).is_none());
        assert!(s.lookup("big").is_empty());
    }
}

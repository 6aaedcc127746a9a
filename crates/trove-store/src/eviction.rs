//! Eviction policies: which object leaves when a byte budget is reached.
//!
//! A policy only sees object ids and sizes, never keys or bodies, so the memory tier, the
//! disk tier and the simulator drive the same code. Two are provided:
//!
//! - [`Lru`]: least recently used, the classic baseline.
//! - [`S3Fifo`]: Yang et al., "FIFO queues are all you need for cache eviction" (SOSP '23).
//!   A small FIFO admits new objects; those touched again while there move to the main FIFO,
//!   the rest leave and are remembered in a ghost queue so a quick return goes straight to
//!   main. It resists one-hit wonders (most of a proxy's misses) better than LRU and needs no
//!   list surgery on a hit, only a counter bump.

use std::collections::VecDeque;

use crate::hash::{fast_map, FastMap, FastSet};

/// A byte-budgeted eviction policy over object ids.
pub trait Eviction: Send {
    /// An object entered the cache. `fingerprint` identifies its content across
    /// re-insertions (a hash of its key), so a policy may remember objects it evicted.
    fn insert(&mut self, id: u64, fingerprint: u64, size: u64);
    /// An object was served.
    fn touch(&mut self, id: u64);
    /// An object left the cache for another reason (replaced, invalidated).
    fn remove(&mut self, id: u64);
    /// Chooses the next object to evict and forgets it; `None` when empty.
    fn victim(&mut self) -> Option<u64>;
    /// A short name for reports.
    fn name(&self) -> &'static str;
    /// The cache it serves now holds `capacity` bytes (a reload changed the budget).
    fn resize(&mut self, capacity: u64) {
        let _ = capacity;
    }
}

/// The policies trove knows, by name (config files and the simulator use these names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EvictionKind {
    Lru,
    #[default]
    S3Fifo,
}

impl EvictionKind {
    /// Parses `lru` or `s3-fifo`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "lru" => Some(EvictionKind::Lru),
            "s3-fifo" | "s3fifo" => Some(EvictionKind::S3Fifo),
            _ => None,
        }
    }

    /// The config name.
    pub fn as_str(self) -> &'static str {
        match self {
            EvictionKind::Lru => "lru",
            EvictionKind::S3Fifo => "s3-fifo",
        }
    }

    /// A new policy for a cache of `capacity` bytes.
    pub fn build(self, capacity: u64) -> Box<dyn Eviction> {
        match self {
            EvictionKind::Lru => Box::new(Lru::default()),
            EvictionKind::S3Fifo => Box::new(S3Fifo::new(capacity)),
        }
    }
}

/// Least recently used, O(1) per operation: an intrusive doubly linked list threaded
/// through a slab of nodes (indices, not pointers, so no `unsafe`), most recent at the head,
/// and a map from object id to slot. A hit unlinks one node and relinks it at the head; an
/// ordered map re-keyed by a use counter (what this replaced) cost a tree removal and
/// insertion per hit.
#[derive(Debug)]
pub struct Lru {
    slots: FastMap<u64, u32>,
    nodes: Vec<Node>,
    /// Slots of removed nodes, reused before the slab grows.
    free: Vec<u32>,
    /// Most recently used, or [`NIL`].
    head: u32,
    /// Least recently used (the next victim), or [`NIL`].
    tail: u32,
}

/// No slot.
const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Node {
    id: u64,
    /// Toward the head (more recent).
    prev: u32,
    /// Toward the tail (less recent).
    next: u32,
}

impl Default for Lru {
    fn default() -> Self {
        Lru {
            slots: fast_map(),
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
        }
    }
}

impl Lru {
    fn unlink(&mut self, slot: u32) {
        let Node { prev, next, .. } = self.nodes[slot as usize];
        match prev {
            NIL => self.head = next,
            p => self.nodes[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.nodes[n as usize].prev = prev,
        }
    }

    fn push_front(&mut self, slot: u32) {
        let old = self.head;
        {
            let n = &mut self.nodes[slot as usize];
            n.prev = NIL;
            n.next = old;
        }
        match old {
            NIL => self.tail = slot,
            o => self.nodes[o as usize].prev = slot,
        }
        self.head = slot;
    }

    /// Objects tracked.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

impl Eviction for Lru {
    fn insert(&mut self, id: u64, _fingerprint: u64, _size: u64) {
        self.remove(id);
        let node = Node {
            id,
            prev: NIL,
            next: NIL,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.nodes[s as usize] = node;
                s
            }
            None => {
                // A slab of 2^32 - 1 nodes (64 GiB of them) is beyond any memory budget.
                let s = u32::try_from(self.nodes.len()).expect("fewer than 2^32 objects");
                self.nodes.push(node);
                s
            }
        };
        self.slots.insert(id, slot);
        self.push_front(slot);
    }

    fn touch(&mut self, id: u64) {
        if let Some(&slot) = self.slots.get(&id) {
            if self.head != slot {
                self.unlink(slot);
                self.push_front(slot);
            }
        }
    }

    fn remove(&mut self, id: u64) {
        if let Some(slot) = self.slots.remove(&id) {
            self.unlink(slot);
            self.free.push(slot);
        }
    }

    fn victim(&mut self) -> Option<u64> {
        let slot = self.tail;
        if slot == NIL {
            return None;
        }
        let id = self.nodes[slot as usize].id;
        self.unlink(slot);
        self.slots.remove(&id);
        self.free.push(slot);
        Some(id)
    }

    fn name(&self) -> &'static str {
        "lru"
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Queue {
    Small,
    Main,
}

#[derive(Debug)]
struct Meta {
    size: u64,
    /// Ghosts remember evicted objects by fingerprint: a re-fetched object gets a new id.
    fingerprint: u64,
    freq: u8,
    queue: Queue,
}

/// S3-FIFO (see the module docs). Removal from the middle of a queue is lazy: the id stays
/// in the queue and is skipped when it reaches the tail.
#[derive(Debug)]
pub struct S3Fifo {
    small_target: u64,
    small_bytes: u64,
    small: VecDeque<u64>,
    main: VecDeque<u64>,
    meta: FastMap<u64, Meta>,
    ghost: VecDeque<u64>,
    ghost_set: FastSet<u64>,
    ghost_limit: usize,
    /// Ids removed from `meta` but still sitting in a queue (lazy removal).
    dead: usize,
}

impl S3Fifo {
    /// A policy for `capacity` bytes: 10% small queue, as in the paper.
    pub fn new(capacity: u64) -> Self {
        S3Fifo {
            small_target: (capacity / 10).max(1),
            small_bytes: 0,
            small: VecDeque::new(),
            main: VecDeque::new(),
            meta: fast_map(),
            ghost: VecDeque::new(),
            ghost_set: FastSet::default(),
            ghost_limit: 4096,
            dead: 0,
        }
    }

    /// Drops dead ids from the queues once they outnumber the live ones, so a store that
    /// replaces objects without ever filling up does not grow its queues without bound.
    fn compact(&mut self) {
        if self.dead <= self.meta.len() + 1024 {
            return;
        }
        let meta = &self.meta;
        self.small
            .retain(|id| meta.get(id).is_some_and(|m| m.queue == Queue::Small));
        self.main
            .retain(|id| meta.get(id).is_some_and(|m| m.queue == Queue::Main));
        self.dead = 0;
    }

    /// An object whose fingerprint is still in the ghost queue goes straight to main.
    fn insert_keyed(&mut self, id: u64, fingerprint: u64, size: u64) {
        self.remove(id);
        let queue = if self.ghost_set.remove(&fingerprint) {
            self.main.push_back(id);
            Queue::Main
        } else {
            self.small.push_back(id);
            self.small_bytes += size;
            Queue::Small
        };
        self.meta.insert(
            id,
            Meta {
                size,
                fingerprint,
                freq: 0,
                queue,
            },
        );
    }

    fn remember_ghost(&mut self, fp: u64) {
        if self.ghost_set.insert(fp) {
            self.ghost.push_back(fp);
        }
        // Ghost size is bounded by count, roughly the number of objects in main.
        self.ghost_limit = self.ghost_limit.max(self.meta.len());
        while self.ghost.len() > self.ghost_limit {
            if let Some(old) = self.ghost.pop_front() {
                self.ghost_set.remove(&old);
            }
        }
    }

    fn evict_small(&mut self) -> Option<u64> {
        while let Some(id) = self.small.pop_front() {
            let Some(m) = self.meta.get_mut(&id) else {
                continue;
            };
            if m.queue != Queue::Small {
                continue;
            }
            self.small_bytes = self.small_bytes.saturating_sub(m.size);
            if m.freq > 0 {
                m.freq = 0;
                m.queue = Queue::Main;
                self.main.push_back(id);
                continue;
            }
            let fp = m.fingerprint;
            self.meta.remove(&id);
            self.remember_ghost(fp);
            return Some(id);
        }
        None
    }

    fn evict_main(&mut self) -> Option<u64> {
        while let Some(id) = self.main.pop_front() {
            let Some(m) = self.meta.get_mut(&id) else {
                continue;
            };
            if m.queue != Queue::Main {
                continue;
            }
            if m.freq > 0 {
                m.freq -= 1;
                self.main.push_back(id);
                continue;
            }
            self.meta.remove(&id);
            return Some(id);
        }
        None
    }
}

impl Eviction for S3Fifo {
    fn resize(&mut self, capacity: u64) {
        self.small_target = (capacity / 10).max(1);
    }

    fn insert(&mut self, id: u64, fingerprint: u64, size: u64) {
        self.insert_keyed(id, fingerprint, size);
    }

    fn touch(&mut self, id: u64) {
        if let Some(m) = self.meta.get_mut(&id) {
            m.freq = (m.freq + 1).min(3);
        }
    }

    fn remove(&mut self, id: u64) {
        if let Some(m) = self.meta.remove(&id) {
            if m.queue == Queue::Small {
                self.small_bytes = self.small_bytes.saturating_sub(m.size);
            }
            self.dead += 1;
            self.compact();
        }
    }

    fn victim(&mut self) -> Option<u64> {
        if self.small_bytes >= self.small_target || self.main.is_empty() {
            if let Some(id) = self.evict_small() {
                return Some(id);
            }
        }
        self.evict_main().or_else(|| self.evict_small())
    }

    fn name(&self) -> &'static str {
        "s3-fifo"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_least_recently_used() {
        let mut p = Lru::default();
        p.insert(1, 1, 10);
        p.insert(2, 2, 10);
        p.insert(3, 3, 10);
        p.touch(1);
        assert_eq!(p.victim(), Some(2));
        assert_eq!(p.victim(), Some(3));
        assert_eq!(p.victim(), Some(1));
        assert_eq!(p.victim(), None);
    }

    /// The linked-list LRU evicts in exactly the order of the obvious model (a use counter
    /// per id, the smallest leaves first) over a random mix of every operation.
    #[test]
    fn lru_agrees_with_a_use_counter_model() {
        use std::collections::BTreeMap;
        let mut p = Lru::default();
        let mut model: BTreeMap<u64, u64> = BTreeMap::new(); // id -> last use
        let mut tick = 0u64;
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let id = (x >> 8) % 500;
            tick += 1;
            match x % 10 {
                0..=3 => {
                    p.insert(id, id, 1);
                    model.insert(id, tick);
                }
                4..=6 => {
                    p.touch(id);
                    if let Some(t) = model.get_mut(&id) {
                        *t = tick;
                    }
                }
                7 => {
                    p.remove(id);
                    model.remove(&id);
                }
                _ => {
                    let want = model.iter().min_by_key(|(_, t)| **t).map(|(id, _)| *id);
                    if let Some(w) = want {
                        model.remove(&w);
                    }
                    assert_eq!(p.victim(), want);
                }
            }
            assert_eq!(p.len(), model.len());
        }
        while let Some(v) = p.victim() {
            let want = model.iter().min_by_key(|(_, t)| **t).map(|(id, _)| *id);
            model.remove(&v);
            assert_eq!(Some(v), want);
        }
        assert!(model.is_empty() && p.is_empty());
    }

    #[test]
    fn s3fifo_evicts_one_hit_wonders_before_reused_objects() {
        let mut p = S3Fifo::new(100);
        p.insert(1, 1, 10);
        p.touch(1);
        for id in 2..6 {
            p.insert(id, id, 10);
        }
        // 1 was touched while in small, so it is promoted; 2 is the first cold victim.
        assert_eq!(p.victim(), Some(2));
        assert_eq!(p.victim(), Some(3));
    }

    #[test]
    fn s3fifo_ghost_hit_goes_to_main() {
        let mut p = S3Fifo::new(100);
        p.insert(1, 77, 10);
        assert_eq!(p.victim(), Some(1));
        p.insert(2, 77, 10);
        p.insert(3, 78, 10);
        // 2 came back from the ghost queue into main; small (3) is evicted first while main
        // holds only returning objects.
        assert_eq!(p.victim(), Some(3));
        assert_eq!(p.victim(), Some(2));
    }

    #[test]
    fn replaced_objects_do_not_grow_the_queues() {
        let mut p = S3Fifo::new(1 << 30);
        for id in 0..100_000u64 {
            p.insert(id, 7, 10);
            p.remove(id);
        }
        assert!(
            p.small.len() + p.main.len() < 2_000,
            "{} queued",
            p.small.len() + p.main.len()
        );
    }

    #[test]
    fn removed_ids_are_never_victims() {
        for kind in [EvictionKind::Lru, EvictionKind::S3Fifo] {
            let mut p = kind.build(100);
            p.insert(1, 1, 10);
            p.insert(2, 2, 10);
            p.remove(1);
            assert_eq!(p.victim(), Some(2), "{}", p.name());
            assert_eq!(p.victim(), None, "{}", p.name());
        }
    }
}

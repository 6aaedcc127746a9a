//! Eviction policies: which object leaves when a byte budget is reached.
//!
//! A policy only sees object ids, fingerprints and sizes, never keys or bodies, so the
//! memory tier and the simulator drive the same code. The memory tier keeps one policy for
//! the whole tier (see `memory.rs`). Four are provided, each checked against libCacheSim's
//! implementation of the same name by `bench/hitratio`:
//!
//! - [`Lru`]: least recently used, the classic baseline.
//! - [`S3Fifo`]: Yang et al., "FIFO queues are all you need for cache eviction" (SOSP '23).
//!   A small FIFO admits new objects; those used again while there move to the main FIFO,
//!   the rest leave and are remembered in a ghost queue so a quick return goes straight to
//!   main. It resists one-hit wonders (most of a proxy's misses) better than LRU and needs no
//!   list surgery on a hit, only a counter bump.
//! - [`Sieve`]: Zhang et al. (NSDI '24), a FIFO with a visited bit and a moving hand.
//! - [`WTinyLfu`]: a small LRU window before a segmented LRU, admission by a frequency
//!   sketch (Caffeine's policy). Best on object hit ratio where popularity is stable.

use std::collections::VecDeque;

use crate::hash::{fast_map, FastMap};
use crate::slab_list::{Ends, Slab, NIL};

/// A byte-budgeted eviction policy over object ids.
pub trait Eviction: Send {
    /// An object entered the cache. `fingerprint` identifies its content across
    /// re-insertions (a hash of its key), so a policy may remember objects it evicted.
    fn insert(&mut self, id: u64, fingerprint: u64, size: u64);
    /// An object was served.
    fn touch(&mut self, id: u64);
    /// Whether an object of `size` bytes may enter at all; asked before room is made for
    /// it (and before [`Eviction::insert`]). A refusal is still a use the policy may count.
    fn admits(&mut self, fingerprint: u64, size: u64) -> bool {
        let _ = (fingerprint, size);
        true
    }
    /// An object left the cache for another reason (replaced, invalidated).
    fn remove(&mut self, id: u64);
    /// An object's charge changed (its body grew as it arrived, or its head was replaced).
    fn recharge(&mut self, id: u64, size: u64) {
        let _ = (id, size);
    }
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
    Sieve,
    WTinyLfu,
}

impl EvictionKind {
    /// Every policy, in the order reports list them.
    pub const ALL: [EvictionKind; 4] = [
        EvictionKind::Lru,
        EvictionKind::S3Fifo,
        EvictionKind::Sieve,
        EvictionKind::WTinyLfu,
    ];

    /// Parses `lru`, `s3-fifo`, `sieve` or `w-tinylfu`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "lru" => Some(EvictionKind::Lru),
            "s3-fifo" | "s3fifo" => Some(EvictionKind::S3Fifo),
            "sieve" => Some(EvictionKind::Sieve),
            "w-tinylfu" | "wtinylfu" | "tinylfu" => Some(EvictionKind::WTinyLfu),
            _ => None,
        }
    }

    /// The config name.
    pub fn as_str(self) -> &'static str {
        match self {
            EvictionKind::Lru => "lru",
            EvictionKind::S3Fifo => "s3-fifo",
            EvictionKind::Sieve => "sieve",
            EvictionKind::WTinyLfu => "w-tinylfu",
        }
    }

    /// A new policy for a cache of `capacity` bytes.
    pub fn build(self, capacity: u64) -> Box<dyn Eviction> {
        match self {
            EvictionKind::Lru => Box::new(Lru::default()),
            EvictionKind::S3Fifo => Box::new(S3Fifo::new(capacity)),
            EvictionKind::Sieve => Box::new(Sieve::default()),
            EvictionKind::WTinyLfu => Box::new(WTinyLfu::new(capacity)),
        }
    }
}

/// Least recently used, O(1) per operation: a linked list through a slab of nodes
/// ([`crate::slab_list`]), most recent at the newest end, and a map from object id to slot.
/// A hit unlinks one node and relinks it at the newest end; an ordered map re-keyed by a use
/// counter (what this replaced) cost a tree removal and insertion per hit.
#[derive(Debug)]
pub struct Lru {
    slots: FastMap<u64, u32>,
    /// Object ids.
    slab: Slab<u64>,
    list: Ends,
}

impl Default for Lru {
    fn default() -> Self {
        Lru {
            slots: fast_map(),
            slab: Slab::default(),
            list: Ends::default(),
        }
    }
}

impl Lru {
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
        let slot = self.slab.alloc(id);
        // One probe of the map: an id inserted again leaves its old place.
        if let Some(old) = self.slots.insert(id, slot) {
            self.slab.unlink(&mut self.list, old);
            self.slab.release(old);
        }
        self.slab.push_newest(&mut self.list, slot);
    }

    fn touch(&mut self, id: u64) {
        if let Some(&slot) = self.slots.get(&id) {
            if self.list.newest != slot {
                self.slab.unlink(&mut self.list, slot);
                self.slab.push_newest(&mut self.list, slot);
            }
        }
    }

    fn remove(&mut self, id: u64) {
        if let Some(slot) = self.slots.remove(&id) {
            self.slab.unlink(&mut self.list, slot);
            self.slab.release(slot);
        }
    }

    fn victim(&mut self) -> Option<u64> {
        let slot = self.list.oldest;
        if slot == NIL {
            return None;
        }
        let id = *self.slab.get(slot);
        self.remove(id);
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
    /// Uses since it entered its queue (or, in main, since the clock last passed it).
    freq: u8,
    queue: Queue,
}

/// S3-FIFO as its authors implement it (libCacheSim's `S3FIFO.c`, which the hit-ratio
/// benchmark in `bench/hitratio` holds trove to):
///
/// - a small FIFO of 10 % of the budget's bytes admits new objects, a main FIFO holds the
///   rest, and a ghost FIFO remembers the fingerprints of objects evicted from small, bounded
///   to 90 % of the budget's bytes by the sizes of the objects it remembers;
/// - main is evicted from while it holds more than its 90 % or small is empty, small
///   otherwise (so small may hold more than its share while main is not full);
/// - an object leaving small that was used at least twice there moves to main with its count
///   reset (several may move before one is evicted); otherwise it is evicted into the ghost;
/// - main is a clock with a two-bit counter: an object used since the hand last passed goes
///   round again with `min(count, 3) - 1`;
/// - an object whose fingerprint is in the ghost enters main directly.
///
/// Removal from the middle of a queue is lazy: the id stays queued and is skipped at the
/// tail.
#[derive(Debug)]
pub struct S3Fifo {
    capacity: u64,
    small_target: u64,
    small_bytes: u64,
    main_bytes: u64,
    small: VecDeque<u64>,
    main: VecDeque<u64>,
    meta: FastMap<u64, Meta>,
    ghost: Ghost,
    /// Ids removed from `meta` but still sitting in a queue (lazy removal).
    dead: usize,
}

/// Uses in small that move an object to main rather than evicting it.
const MOVE_TO_MAIN: u8 = 2;

/// A FIFO of fingerprints bounded by the bytes of the objects they stand for.
#[derive(Debug, Default)]
struct Ghost {
    limit: u64,
    bytes: u64,
    /// (fingerprint, sequence number), oldest first; an entry whose sequence number is not
    /// the fingerprint's current one was taken out by a hit and is skipped.
    fifo: VecDeque<(u64, u64)>,
    /// Fingerprint → (sequence number, size).
    index: FastMap<u64, (u64, u64)>,
    seq: u64,
}

impl Ghost {
    fn remember(&mut self, fp: u64, size: u64) {
        if size > self.limit {
            return;
        }
        self.seq += 1;
        if let Some((_, old)) = self.index.insert(fp, (self.seq, size)) {
            self.bytes -= old;
        }
        self.fifo.push_back((fp, self.seq));
        self.bytes += size;
        self.trim();
    }

    fn trim(&mut self) {
        while self.bytes > self.limit {
            let Some((fp, seq)) = self.fifo.pop_front() else {
                break;
            };
            if let Some(&(s, size)) = self.index.get(&fp) {
                if s == seq {
                    self.index.remove(&fp);
                    self.bytes -= size;
                }
            }
        }
        // Entries taken out by hits are dropped once they outnumber the live ones.
        if self.fifo.len() > 2 * self.index.len() + 1024 {
            let index = &self.index;
            self.fifo
                .retain(|(fp, seq)| index.get(fp).is_some_and(|(s, _)| s == seq));
        }
    }

    /// True (and forgotten) if `fp` was remembered.
    fn take(&mut self, fp: u64) -> bool {
        match self.index.remove(&fp) {
            Some((_, size)) => {
                self.bytes -= size;
                true
            }
            None => false,
        }
    }
}

impl S3Fifo {
    /// A policy for `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        let mut p = S3Fifo {
            capacity: 0,
            small_target: 0,
            small_bytes: 0,
            main_bytes: 0,
            small: VecDeque::new(),
            main: VecDeque::new(),
            meta: fast_map(),
            ghost: Ghost::default(),
            dead: 0,
        };
        p.resize(capacity);
        p
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

    /// Evicts one object from small, first moving to main those used enough there.
    fn evict_small(&mut self) -> Option<u64> {
        while let Some(id) = self.small.pop_front() {
            let Some(m) = self.meta.get_mut(&id) else {
                self.dead = self.dead.saturating_sub(1);
                continue;
            };
            if m.queue != Queue::Small {
                continue;
            }
            self.small_bytes -= m.size;
            if m.freq >= MOVE_TO_MAIN {
                m.freq = 0;
                m.queue = Queue::Main;
                self.main_bytes += m.size;
                self.main.push_back(id);
                continue;
            }
            let (fp, size) = (m.fingerprint, m.size);
            self.meta.remove(&id);
            self.ghost.remember(fp, size);
            return Some(id);
        }
        None
    }

    /// Evicts one object from main: a clock with a two-bit counter.
    fn evict_main(&mut self) -> Option<u64> {
        while let Some(id) = self.main.pop_front() {
            let Some(m) = self.meta.get_mut(&id) else {
                self.dead = self.dead.saturating_sub(1);
                continue;
            };
            if m.queue != Queue::Main {
                continue;
            }
            if m.freq >= 1 {
                m.freq = m.freq.min(3) - 1;
                self.main.push_back(id);
                continue;
            }
            self.main_bytes -= m.size;
            self.meta.remove(&id);
            return Some(id);
        }
        None
    }
}

impl Eviction for S3Fifo {
    fn resize(&mut self, capacity: u64) {
        self.capacity = capacity;
        self.small_target = capacity / 10;
        self.ghost.limit = capacity / 10 * 9;
        self.ghost.trim();
    }

    fn insert(&mut self, id: u64, fingerprint: u64, size: u64) {
        self.remove(id);
        let queue = if self.ghost.take(fingerprint) {
            self.main.push_back(id);
            self.main_bytes += size;
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

    fn touch(&mut self, id: u64) {
        if let Some(m) = self.meta.get_mut(&id) {
            m.freq = m.freq.saturating_add(1);
        }
    }

    fn recharge(&mut self, id: u64, size: u64) {
        if let Some(m) = self.meta.get_mut(&id) {
            let bytes = match m.queue {
                Queue::Small => &mut self.small_bytes,
                Queue::Main => &mut self.main_bytes,
            };
            *bytes = *bytes - m.size + size;
            m.size = size;
        }
    }

    fn remove(&mut self, id: u64) {
        if let Some(m) = self.meta.remove(&id) {
            match m.queue {
                Queue::Small => self.small_bytes -= m.size,
                Queue::Main => self.main_bytes -= m.size,
            }
            self.dead += 1;
            self.compact();
        }
    }

    fn victim(&mut self) -> Option<u64> {
        let main_target = self.capacity - self.small_target;
        if self.main_bytes > main_target || self.small_bytes == 0 {
            self.evict_main().or_else(|| self.evict_small())
        } else {
            self.evict_small().or_else(|| self.evict_main())
        }
    }

    fn name(&self) -> &'static str {
        "s3-fifo"
    }
}

/// SIEVE: Zhang et al., "SIEVE is simpler than LRU" (NSDI '24). One FIFO of objects with
/// a visited bit; a hit only sets the bit; a hand walks from the oldest toward the newest,
/// clearing bits, and evicts the first unvisited object it meets, staying there for the
/// next eviction. New objects enter at the newest end.
#[derive(Debug)]
pub struct Sieve {
    slots: FastMap<u64, u32>,
    /// (object id, visited).
    slab: Slab<(u64, bool)>,
    list: Ends,
    /// Where the next eviction looks first, or [`NIL`] (start at the oldest).
    hand: u32,
}

impl Default for Sieve {
    fn default() -> Self {
        Sieve {
            slots: fast_map(),
            slab: Slab::default(),
            list: Ends::default(),
            hand: NIL,
        }
    }
}

impl Eviction for Sieve {
    fn insert(&mut self, id: u64, _fingerprint: u64, _size: u64) {
        self.remove(id);
        let slot = self.slab.alloc((id, false));
        self.slab.push_newest(&mut self.list, slot);
        self.slots.insert(id, slot);
    }

    fn touch(&mut self, id: u64) {
        if let Some(&slot) = self.slots.get(&id) {
            self.slab.get_mut(slot).1 = true;
        }
    }

    fn remove(&mut self, id: u64) {
        if let Some(slot) = self.slots.remove(&id) {
            if self.hand == slot {
                // The hand moves on toward the newer end, as it would have.
                self.hand = self.slab.newer(slot);
            }
            self.slab.unlink(&mut self.list, slot);
            self.slab.release(slot);
        }
    }

    fn victim(&mut self) -> Option<u64> {
        let mut at = self.hand;
        loop {
            if at == NIL {
                if self.list.oldest == NIL {
                    return None;
                }
                at = self.list.oldest;
            }
            let (id, visited) = self.slab.get_mut(at);
            if *visited {
                *visited = false;
                at = self.slab.newer(at);
                continue;
            }
            let id = *id;
            self.hand = at;
            self.remove(id);
            return Some(id);
        }
    }

    fn name(&self) -> &'static str {
        "sieve"
    }
}

/// W-TinyLFU: Einziger, Friedman and Manes, "TinyLFU: A Highly Efficient Cache Admission
/// Policy" (ACM ToS 2017), as Caffeine runs it, in bytes: a window LRU of 1 % of the budget
/// takes new objects; the rest is a segmented LRU (probation 20 %, protected 80 %). When the
/// window is over its share, its oldest object (the candidate) moves to probation if main
/// has room, and otherwise competes with main's next victims, by a count-min sketch of recent
/// uses (keyed by fingerprint, so it outlives evictions; halved every ten uses per counter to
/// forget the past).
///
/// It maximises object hits, size-aware where libCacheSim's `WTinyLFU.c` refuses every
/// object larger than 1 % of the cache: the candidate stays only if it is used more often
/// than all the objects it would push out of main together, and an object larger than the
/// window is admitted at all ([`Eviction::admits`]) only on the same terms, so a large object
/// enters when it earns more hits than the small ones it displaces.
#[derive(Debug)]
pub struct WTinyLfu {
    /// A candidate that won its contest and is being made room for.
    admitting: Option<u64>,
    /// The fingerprint whose use [`Eviction::admits`] already counted.
    counted: Option<u64>,
    window_target: u64,
    main_target: u64,
    protected_target: u64,
    /// Bytes per segment, indexed by [`Seg`].
    bytes: [u64; 3],
    /// One list per segment, indexed by [`Seg`].
    lists: [Ends; 3],
    slab: Slab<WNode>,
    slots: FastMap<u64, u32>,
    sketch: Sketch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seg {
    Window = 0,
    Probation = 1,
    Protected = 2,
}

#[derive(Debug, Clone, Copy)]
struct WNode {
    id: u64,
    fingerprint: u64,
    size: u64,
    seg: Seg,
}

impl WTinyLfu {
    /// A policy for `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        let mut p = WTinyLfu {
            admitting: None,
            counted: None,
            window_target: 0,
            main_target: 0,
            protected_target: 0,
            bytes: [0; 3],
            lists: [Ends::default(); 3],
            slab: Slab::default(),
            slots: fast_map(),
            sketch: Sketch::new(1024),
        };
        p.resize(capacity);
        p
    }

    fn unlink(&mut self, slot: u32) {
        let WNode { seg, size, .. } = *self.slab.get(slot);
        self.slab.unlink(&mut self.lists[seg as usize], slot);
        self.bytes[seg as usize] -= size;
    }

    fn push_newest(&mut self, slot: u32, seg: Seg) {
        self.slab.push_newest(&mut self.lists[seg as usize], slot);
        let n = self.slab.get_mut(slot);
        n.seg = seg;
        self.bytes[seg as usize] += n.size;
    }

    fn oldest(&self, seg: Seg) -> Option<u32> {
        let s = self.lists[seg as usize].oldest;
        (s != NIL).then_some(s)
    }

    /// Takes `slot` out for good; returns its id.
    fn evict(&mut self, slot: u32) -> u64 {
        self.unlink(slot);
        let id = self.slab.get(slot).id;
        self.slots.remove(&id);
        self.slab.release(slot);
        id
    }

    /// The estimated uses of main's next victims that free `need` bytes, summed; past a
    /// bound on the walk (no candidate's 4-bit estimate beats that many victims anyway),
    /// `u32::MAX`.
    fn displaced_uses(&self, need: u64) -> u32 {
        let (mut freed, mut uses) = (0u64, 0u32);
        let mut seg = Seg::Probation;
        let mut at = self.oldest(seg);
        for _ in 0..64 {
            let slot = match at {
                Some(s) => s,
                None if seg == Seg::Probation => {
                    seg = Seg::Protected;
                    match self.oldest(seg) {
                        Some(s) => s,
                        None => return uses,
                    }
                }
                None => return uses,
            };
            let n = self.slab.get(slot);
            uses += u32::from(self.sketch.estimate(n.fingerprint));
            freed += n.size;
            if freed >= need {
                return uses;
            }
            let newer = self.slab.newer(slot);
            at = (newer != NIL).then_some(newer);
        }
        u32::MAX
    }

    fn main_victim(&self) -> Option<u32> {
        self.oldest(Seg::Probation)
            .or_else(|| self.oldest(Seg::Protected))
    }
}

impl Eviction for WTinyLfu {
    fn resize(&mut self, capacity: u64) {
        self.window_target = capacity / 100;
        self.main_target = capacity - self.window_target;
        self.protected_target = self.main_target / 5 * 4;
    }

    /// An object larger than the window enters only if it is used more often than the
    /// objects it would push out of main together.
    fn admits(&mut self, fingerprint: u64, size: u64) -> bool {
        if size <= self.window_target {
            return true;
        }
        self.sketch.increment(fingerprint);
        self.counted = Some(fingerprint);
        let held: u64 = self.bytes.iter().sum();
        if held + size <= self.window_target + self.main_target {
            return true;
        }
        u32::from(self.sketch.estimate(fingerprint)) > self.displaced_uses(size)
    }

    fn insert(&mut self, id: u64, fingerprint: u64, size: u64) {
        self.remove(id);
        if self.counted.take() != Some(fingerprint) {
            self.sketch.increment(fingerprint);
        }
        let slot = self.slab.alloc(WNode {
            id,
            fingerprint,
            size,
            seg: Seg::Window,
        });
        self.slots.insert(id, slot);
        self.push_newest(slot, Seg::Window);
        self.sketch.fit(self.slots.len());
    }

    fn touch(&mut self, id: u64) {
        let Some(&slot) = self.slots.get(&id) else {
            return;
        };
        let WNode {
            fingerprint, seg, ..
        } = *self.slab.get(slot);
        self.sketch.increment(fingerprint);
        self.unlink(slot);
        match seg {
            Seg::Window => self.push_newest(slot, Seg::Window),
            Seg::Probation | Seg::Protected => {
                self.push_newest(slot, Seg::Protected);
                while self.bytes[Seg::Protected as usize] > self.protected_target {
                    let Some(old) = self.oldest(Seg::Protected) else {
                        break;
                    };
                    if old == slot {
                        break;
                    }
                    self.unlink(old);
                    self.push_newest(old, Seg::Probation);
                }
            }
        }
    }

    fn remove(&mut self, id: u64) {
        if let Some(&slot) = self.slots.get(&id) {
            self.evict(slot);
        }
    }

    fn recharge(&mut self, id: u64, size: u64) {
        if let Some(&slot) = self.slots.get(&id) {
            let n = self.slab.get_mut(slot);
            let seg = n.seg as usize;
            self.bytes[seg] = self.bytes[seg] - n.size + size;
            n.size = size;
        }
    }

    fn victim(&mut self) -> Option<u64> {
        while self.bytes[Seg::Window as usize] > self.window_target {
            let Some(cand) = self.oldest(Seg::Window) else {
                break;
            };
            let main = self.bytes[Seg::Probation as usize] + self.bytes[Seg::Protected as usize];
            let c = *self.slab.get(cand);
            let Some(victim) = self
                .main_victim()
                .filter(|_| main + c.size > self.main_target)
            else {
                // Main has room: the candidate moves in without a contest.
                self.unlink(cand);
                self.push_newest(cand, Seg::Probation);
                self.admitting = None;
                continue;
            };
            if self.admitting == Some(c.id) {
                return Some(self.evict(victim));
            }
            let uses = u32::from(self.sketch.estimate(c.fingerprint));
            if uses > self.displaced_uses(main + c.size - self.main_target) {
                self.admitting = Some(c.id);
                return Some(self.evict(victim));
            }
            return Some(self.evict(cand));
        }
        let slot = self.main_victim().or_else(|| self.oldest(Seg::Window))?;
        Some(self.evict(slot))
    }

    fn name(&self) -> &'static str {
        "w-tinylfu"
    }
}

/// A count-min sketch of 4-bit counters (held in bytes), four rows, aged by halving every
/// counter after ten increments per counter of one row.
#[derive(Debug)]
struct Sketch {
    rows: [Vec<u8>; 4],
    mask: u64,
    added: u64,
}

impl Sketch {
    fn new(width: usize) -> Self {
        let width = width.next_power_of_two();
        Sketch {
            rows: std::array::from_fn(|_| vec![0; width]),
            mask: width as u64 - 1,
            added: 0,
        }
    }

    /// Grows (and starts afresh) once the objects tracked outnumber the counters per row,
    /// as Caffeine sizes its sketch to the cache's entries.
    fn fit(&mut self, objects: usize) {
        if objects as u64 > self.mask + 1 {
            *self = Sketch::new(objects * 2);
        }
    }

    fn index(&self, fp: u64, row: usize) -> usize {
        // splitmix64's finalizer over the fingerprint and a per-row offset: every bit of the
        // fingerprint reaches the bits kept, so fingerprints alike in their low bits (small
        // integers) do not collide in every row at once.
        let mut h = fp.wrapping_add((row as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
        (h & self.mask) as usize
    }

    fn increment(&mut self, fp: u64) {
        for row in 0..4 {
            let i = self.index(fp, row);
            let c = &mut self.rows[row][i];
            if *c < 15 {
                *c += 1;
            }
        }
        self.added += 1;
        if self.added >= 10 * (self.mask + 1) {
            for row in &mut self.rows {
                for c in row.iter_mut() {
                    *c >>= 1;
                }
            }
            self.added /= 2;
        }
    }

    fn estimate(&self, fp: u64) -> u8 {
        (0..4)
            .map(|row| self.rows[row][self.index(fp, row)])
            .min()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::FastSet;

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
        p.touch(1);
        for id in 2..6 {
            p.insert(id, id, 10);
        }
        // 1 was used twice while in small, so it is promoted; 2 is the first cold victim.
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

    /// SIEVE evicts in exactly the order of the paper's description (a list oldest first,
    /// a hand that clears visited bits and stays where it evicted) over a random mix of
    /// every operation.
    #[test]
    fn sieve_agrees_with_the_papers_model() {
        let mut p = Sieve::default();
        let mut model: Vec<(u64, bool)> = Vec::new(); // oldest first
        let mut hand = 0usize;
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let id = (x >> 8) % 300;
            match x % 10 {
                0..=3 => {
                    if let Some(i) = model.iter().position(|(m, _)| *m == id) {
                        model.remove(i);
                        if i < hand {
                            hand -= 1;
                        }
                    }
                    p.insert(id, id, 1);
                    model.push((id, false));
                }
                4..=6 => {
                    p.touch(id);
                    if let Some(m) = model.iter_mut().find(|(m, _)| *m == id) {
                        m.1 = true;
                    }
                }
                7 => {
                    p.remove(id);
                    if let Some(i) = model.iter().position(|(m, _)| *m == id) {
                        model.remove(i);
                        if i < hand {
                            hand -= 1;
                        }
                    }
                }
                _ => {
                    let want = if model.is_empty() {
                        None
                    } else {
                        loop {
                            if hand >= model.len() {
                                hand = 0;
                            }
                            if model[hand].1 {
                                model[hand].1 = false;
                                hand += 1;
                            } else {
                                break Some(model.remove(hand).0);
                            }
                        }
                    };
                    assert_eq!(p.victim(), want);
                }
            }
            // Past the newest object, the hand starts again from the oldest.
            if hand >= model.len() {
                hand = 0;
            }
            assert_eq!(p.slots.len(), model.len());
        }
    }

    /// W-TinyLFU keeps a frequently used object against a stream of one-hit wonders,
    /// where LRU loses it, and the budget's bytes are never exceeded by its own count.
    #[test]
    fn w_tinylfu_keeps_the_frequent_against_a_scan() {
        let mut p = WTinyLfu::new(1000);
        let mut stored: FastMap<u64, u64> = fast_map();
        let mut bytes = 0u64;
        let mut put = |p: &mut WTinyLfu, id: u64, fp: u64, size: u64| {
            while bytes + size > 1000 {
                let v = p.victim().expect("something to evict");
                bytes -= stored.remove(&v).expect("a stored victim");
            }
            p.insert(id, fp, size);
            stored.insert(id, size);
            bytes += size;
            stored.len()
        };
        put(&mut p, 1, 1, 100);
        for _ in 0..20 {
            p.touch(1);
        }
        let mut id = 2;
        for round in 0..50 {
            for _ in 0..5 {
                put(&mut p, id, id, 50);
                id += 1;
            }
            p.touch(1);
            assert!(p.slots.contains_key(&1), "round {round}");
        }
        // Sizes are accounted exactly.
        let held: u64 = p.bytes.iter().sum();
        assert_eq!(held, p.slots.values().map(|s| p.slab.get(*s).size).sum());
    }

    /// With the object goal, an object larger than the window enters while there is room,
    /// and once the cache is full only if it is used more often than the objects it would
    /// push out together.
    #[test]
    fn w_tinylfu_admits_a_large_object_by_the_uses_it_displaces() {
        let mut p = WTinyLfu::new(100_000);
        assert!(p.admits(1, 20_000), "room: admitted");
        // Fill with 100 small objects, each used three times.
        for id in 10..110u64 {
            assert!(p.admits(id, 1000));
            if p.slots.values().map(|s| p.slab.get(*s).size).sum::<u64>() + 1000 > 100_000 {
                p.victim();
            }
            p.insert(id, id, 1000);
            p.touch(id);
            p.touch(id);
        }
        while p.bytes[Seg::Window as usize] > p.window_target {
            p.victim();
        }
        assert!(
            !p.admits(7, 20_000),
            "a cold large object displaces 20 used ones"
        );
        // Used often (the sketch counts every refused use too), it still loses to twenty
        // objects used three times each: 15 at most against 60.
        for _ in 0..20 {
            assert!(!p.admits(7, 20_000));
        }
        // Against two of them it wins once used more often than both together.
        for _ in 0..10 {
            p.sketch.increment(8);
        }
        assert!(p.admits(8, 2_000));
        assert!(
            p.admits(9, 500),
            "no larger than the window: always admitted"
        );
    }

    /// Every policy hands out each stored id exactly once, whatever the sequence.
    #[test]
    fn every_policy_evicts_each_object_once() {
        for kind in EvictionKind::ALL {
            let mut p = kind.build(10_000);
            let mut live: FastSet<u64> = FastSet::default();
            let mut x: u64 = 0x853c_49e6_748f_ea9b;
            for id in 0..50_000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                match x % 8 {
                    0..=3 => {
                        p.insert(id, x % 700, 1 + x % 900);
                        live.insert(id);
                    }
                    4 | 5 => {
                        if let Some(&t) = live.iter().next() {
                            p.touch(t);
                        }
                    }
                    6 => {
                        if let Some(&t) = live.iter().next() {
                            p.remove(t);
                            live.remove(&t);
                        }
                    }
                    _ => {
                        if let Some(v) = p.victim() {
                            assert!(live.remove(&v), "{}: {v} evicted twice", p.name());
                        }
                    }
                }
            }
            while let Some(v) = p.victim() {
                assert!(live.remove(&v), "{}: {v} evicted twice", p.name());
            }
            assert!(
                live.is_empty(),
                "{}: {} never evicted",
                p.name(),
                live.len()
            );
        }
    }

    #[test]
    fn removed_ids_are_never_victims() {
        for kind in EvictionKind::ALL {
            let mut p = kind.build(100);
            p.insert(1, 1, 10);
            p.insert(2, 2, 10);
            p.remove(1);
            assert_eq!(p.victim(), Some(2), "{}", p.name());
            assert_eq!(p.victim(), None, "{}", p.name());
        }
    }
}

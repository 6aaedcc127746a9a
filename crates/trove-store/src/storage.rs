//! The storage interface: what the cache core asks of a tier, and nothing more.
//!
//! Every method exists for one reason a cache has (Pingora's `Storage` and Varnish's
//! stevedore are the models). It is larger than Pingora's (20 methods to its 7): it also
//! carries what Pingora leaves to other traits or to the caller, invalidation by rule,
//! spooling to a lower tier, charging a growing body and resizing on reload.
//!
//! | method | why |
//! |---|---|
//! | [`Storage::probe`] | every request, first: memory misses but a lower tier may hold the key, so open it there ([`crate::tier`]: promote it, or send its body from a file) where blocking is allowed. No I/O itself. |
//! | [`Storage::lookup`] | every request: the variants stored for a key, **metadata first**. The body is an [`Object::body`] to open and stream ([`crate::Body::reader`]); nothing is loaded to decide. |
//! | [`Storage::insert`] | a miss: the object enters while its body still streams in, visible to waiters at once (read-while-write). Admission and the size limit may refuse it. |
//! | [`Storage::update_meta`] | a 304 or a HEAD freshens the stored head *in place*: same identity, same body, so a body still arriving is never shared by two objects. |
//! | [`Storage::touch`] | a hit feeds the eviction policy. |
//! | [`Storage::remove`] / [`Storage::remove_object`] | invalidation, purge, a failed body; the [`Removal`] reason is counted. |
//! | [`Storage::holds`] / [`Storage::recharge`] / [`Storage::wants`] | a fill in progress checks it is still wanted and charges its growing body to the budget. |
//! | [`Storage::spool_above`] / [`Storage::spool`] | a body too large for memory is written to a lower tier as it arrives (a disk tier), memory holding only a window of it. |
//! | [`Storage::resize`] | a reload changed the budget: the cache is kept, trimmed to the new size. |
//! | [`Storage::lower_stats`] | a lower tier's figures and health, for metrics and the admin API. |
//! | [`Storage::invalidations`] / [`Storage::scan`] | invalidation by rule (tags, named caches, prefixes, bans) judged lazily at lookup and swept in the background. |
//!
//! Eviction hands each victim to an [`EvictionHook`] (a lower tier may take it) and
//! [`Admission`] may refuse an object before it costs anything.

use std::sync::Arc;

use crate::object::{Object, ObjectHead};
use crate::tier::{LowerProgress, LowerStats, Probe};

/// Why an object left a store. Counted per reason in [`crate::StoreStats::removed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Removal {
    /// The eviction policy chose it to make room.
    Evicted,
    /// A newer response for the same key and variant took its place.
    Replaced,
    /// HTTP invalidation: an unsafe method's response named it (RFC 9111 §4.4).
    Invalidated,
    /// An explicit purge (`PURGE`, the admin API).
    Purged,
    /// Its body failed or came up short; never served.
    Failed,
    /// It outgrew the object size limit while arriving.
    TooLarge,
}

impl Removal {
    /// Every reason, in the order of [`crate::StoreStats::removed`].
    pub const ALL: [Removal; 6] = [
        Removal::Evicted,
        Removal::Replaced,
        Removal::Invalidated,
        Removal::Purged,
        Removal::Failed,
        Removal::TooLarge,
    ];

    /// The name metrics print.
    pub fn as_str(self) -> &'static str {
        match self {
            Removal::Evicted => "evicted",
            Removal::Replaced => "replaced",
            Removal::Invalidated => "invalidated",
            Removal::Purged => "purged",
            Removal::Failed => "failed",
            Removal::TooLarge => "too-large",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// Why a store did not take an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Larger than the store's object size limit.
    #[error("larger than the object size limit")]
    TooLarge,
    /// The admission policy turned it away.
    #[error("not admitted")]
    NotAdmitted,
}

/// Receives objects the eviction policy pushed out (a lower tier demotes them instead of
/// losing them). Called outside the store's locks but on the thread that inserted, often an
/// async runtime worker: it must not block (a disk tier queues the victim for its writer).
pub trait EvictionHook: Send + Sync {
    fn evicted(&self, obj: Arc<Object>);
}

/// Decides whether an object may enter a store at all (before anything is evicted for it).
pub trait Admission: Send + Sync {
    fn admit(&self, obj: &Object) -> bool;
}

/// Admits everything that fits.
#[derive(Debug, Default, Clone, Copy)]
pub struct AdmitAll;

impl Admission for AdmitAll {
    fn admit(&self, _obj: &Object) -> bool {
        true
    }
}

/// A storage tier (see the module docs for why each method exists).
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// Before [`Storage::lookup`], without I/O: whether a lower tier may hold `key` while
    /// memory does not, and if so a handle to open it with (see [`crate::tier`]). The
    /// default, for a store of one tier: [`Probe::Upper`], the lookup answers.
    fn probe(&self, key: &str) -> Probe {
        let _ = key;
        Probe::Upper
    }

    /// [`Storage::probe`], calling `note` at the instant it looks at a lower tier's index,
    /// with the tier's writer kept between two steps meanwhile (see [`crate::tier::Note`]).
    fn probe_noting(&self, key: &str, note: &mut dyn FnMut()) -> Probe {
        note();
        self.probe(key)
    }
    /// Every stored variant of `key`, metadata first; empty on a miss. Not a use.
    fn lookup(&self, key: &str) -> Vec<Arc<Object>>;
    /// [`Storage::lookup`] appended to `out`, so a caller that looks up on every request
    /// can reuse one list instead of allocating one each time.
    fn lookup_into(&self, key: &str, out: &mut Vec<Arc<Object>>) {
        out.extend(self.lookup(key));
    }
    /// Stores `obj` (its body may still be arriving), replacing the same key and variant.
    fn insert(&self, obj: Object) -> Result<Arc<Object>, Refused>;
    /// [`Storage::insert`] of an object built in an `Arc` nothing else holds yet (the
    /// cache core hands its drivers each object to store so): a store that keeps objects
    /// in `Arc`s keeps that one, rather than having it moved out and into another. A
    /// shared one is stored as a copy.
    fn insert_shared(&self, obj: Arc<Object>) -> Result<Arc<Object>, Refused> {
        self.insert(Arc::try_unwrap(obj).unwrap_or_else(|shared| shared.unstored_copy()))
    }
    /// Replaces the head of the stored object `obj` (same identity and body). Returns the
    /// object as now stored, or `None` if `obj` is no longer stored.
    fn update_meta(&self, obj: &Object, head: ObjectHead) -> Option<Arc<Object>>;
    /// `obj` was served.
    fn touch(&self, obj: &Object);
    /// Removes every variant of `key`; returns how many.
    fn remove(&self, key: &str, why: Removal) -> usize;
    /// Removes `obj` if it is still the stored one.
    fn remove_object(&self, obj: &Object, why: Removal) -> bool;
    /// True while `obj` (by identity, whatever its head) is stored.
    fn holds(&self, obj: &Object) -> bool;
    /// `obj`'s body grew or completed: charge its size again and evict to budget.
    fn recharge(&self, obj: &Object);
    /// True while `obj`'s body, still arriving, is to be kept whole: it is stored
    /// ([`Storage::holds`]), or a lower tier takes it once complete (a memory tier over a
    /// disk evicted it while it arrived, and demotes it when it completes). A fill that finds
    /// this false keeps only what its readers still need (the body is no longer stored).
    fn wants(&self, obj: &Object) -> bool {
        self.holds(obj)
    }
    /// The largest object this store admits (with a tier that spools, the largest it
    /// spools).
    fn max_object(&self) -> u64;
    /// A body still arriving that grows past this many bytes is written to a lower tier as
    /// it arrives ([`Storage::spool`]) rather than kept in memory; `u64::MAX` when no tier
    /// does that. An object declared this large is spooled by [`Storage::insert`] itself.
    fn spool_above(&self) -> u64 {
        u64::MAX
    }
    /// The stored `obj`, whose body is still arriving and has grown past
    /// [`Storage::spool_above`], goes on as a spooled body (see `crate::Body`): out of
    /// memory's budget, written to the lower tier as it arrives. False if no tier takes it;
    /// the caller then treats it as too large for memory.
    fn spool(&self, obj: &Arc<Object>) -> bool {
        let _ = obj;
        false
    }
    /// Counters.
    fn stats(&self) -> crate::StoreStats;
    /// The lower tier's figures (`failed` among them), or `None` when there is none.
    fn lower_stats(&self) -> Option<LowerStats> {
        None
    }
    /// A reload changed the byte budget or the object size limit: apply them, evicting to
    /// the new budget at once. False if this tier can't change them while running.
    fn resize(&self, capacity: u64, max_object: u64) -> bool {
        let _ = (capacity, max_object);
        false
    }

    /// The invalidation rules and tag index this store's objects are judged by (see
    /// [`crate::invalidation`]); `None` when the store keeps none (nothing is invalidated
    /// by rule then). A disk tier shares the memory tier's and persists its rule log.
    fn invalidations(&self) -> Option<&Arc<crate::Invalidations>> {
        None
    }

    /// Calls `visit` with every stored object, a few at a time, off the request path (the
    /// background sweep of [`crate::Invalidations::sweep`]). The default visits nothing.
    fn scan(&self, _visit: &mut dyn FnMut(&Arc<Object>)) {}

    /// True when [`Storage::scan`] visits every object (so rules a pass has checked every
    /// object against may be retired).
    fn scans(&self) -> bool {
        false
    }

    /// How far a lower tier's writer, running beside the requests, has got: the jobs it
    /// has carried out, and those queued. A replayable trace records it with each request
    /// so a replay puts its writer there too. `None` without a lower tier.
    fn lower_progress(&self) -> Option<LowerProgress> {
        None
    }
}

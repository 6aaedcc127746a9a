//! trove's storage tiers.
//!
//! The [`Storage`] trait is the interface the cache core drives (see [`storage`] for why each
//! method exists); the memory tier is its first implementation. Lower tiers (trove-disk's)
//! plug in behind the same trait ([`tier`]): a lookup's probe answers "on a lower tier, open
//! it" with a handle whose blocking calls the caller schedules, so nothing here blocks or
//! needs a runtime to run them, and a body in a file is handed back as a [`FileBody`] to
//! `sendfile`.
//!
//! The memory tier: A [`MemoryStore`] holds [`Object`]s (a response head plus a
//! [`Body`]) under a byte budget. Its map is split into shards so two cores rarely contend
//! on one lock for a lookup; which object leaves when the budget is reached is one decision
//! for the whole tier, by a swappable [`Eviction`] policy. trove ships [`Lru`], [`S3Fifo`]
//! (the default), [`Sieve`] and [`WTinyLfu`], so the server and the simulator share one
//! implementation and can be measured against each other and against libCacheSim
//! (`bench/hitratio`).
//!
//! Bodies are shared buffers that readers may follow while the writer is still appending
//! (read-while-write): a miss is stored as it streams in and every client waiting for the same
//! object is fed from the same bytes.
//!
//! Dependencies: `bytes` for cheaply cloneable body chunks (the same type hyper and tokio use,
//! so a hit is written to the socket without copying), `parking_lot` for small uncontended
//! locks, `http` for the stored head's types,
//! `xxhash-rust` (XXH3) for the stable key hashes and `foldhash` for in-memory maps (see
//! [`hash`] for why two). No async runtime: readers and writers of a body wait on a wake
//! list written here (`wake`), and I/O a lower tier needs is scheduled by that tier or by the
//! caller ([`tier`], [`Spool::read_at_then`]), so the cache core and the simulator build
//! without tokio.
//! The eviction policies are written here by hand: they are the product's core and the
//! simulator must run exactly this code.

mod body;
mod eviction;
pub mod hash;
pub mod invalidation;
mod labels;
pub mod marks;
mod memory;
mod object;
mod slab_list;
pub mod storage;
pub mod tier;
mod wake;

pub use body::{Body, BodyError, BodyReader, Spool, SpoolProgress, StreamLimits};
pub use eviction::{Eviction, EvictionKind, Lru, S3Fifo, Sieve, WTinyLfu};
pub use invalidation::{Invalidations, Journal, Verdict};
pub use labels::Labels;
pub use marks::{Mark, TierMarks};
pub use memory::{MemoryStore, StoreStats};
pub use object::{Object, ObjectHead, Prepared};
pub use storage::{Admission, AdmitAll, EvictionHook, Refused, Removal, Storage};
pub use tier::{FileBody, FileHit, FileOpen, Fill, Lower, LowerProgress, LowerStats, Note, Probe};

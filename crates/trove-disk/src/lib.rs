//! trove's disk tier: a crash-safe object store under the memory tier.
//!
//! Objects are appended as checksummed records to large regions of preallocated files
//! (never a file per object); a compact in-memory index (12 B per entry) says where each
//! one is; space is reclaimed a whole region at a time, oldest first, keeping objects that
//! were hit (FIFO with reinsertion); after any stop, `kill -9` included, the index comes
//! back from per-region summaries and a verified scan of the one region that was open,
//! while the proxy already serves. Every read verifies what it reads, so a torn or corrupt
//! record is dropped and counted, never served. The layout is written down in
//! `docs/storage-format.md`.
//!
//! | module | its one job |
//! |---|---|
//! | `format` | the bytes: region header, record, summary, footer; magic, version, XXH3; a fragment's size |
//! | `meta` | a stored head as a record's meta bytes |
//! | `labels` | an object's tags, named cache and invalidation stamps as a record's labels |
//! | `journal` | the invalidation rule log, durable before an invalidation is acknowledged |
//! | `dir` | the cache directories: lock, format marker, region files, `pread`/`pwrite` |
//! | `index` | fingerprint → packed location, 12 B per entry, sharded |
//! | `writer` | the writer thread: batches, regions, sealing, reclamation, sync |
//! | `reader` | reading a record back verified, whole or streamed |
//! | `readers` | the few threads spooled bodies are read back on, for clients behind their window |
//! | `spool` | [`DiskSpool`]: a large body written as fragments as it arrives, read back from them |
//! | `shared` | what the writer, readers and recovery share: settings, stats, the write queue and its jobs, a spool's state |
//! | `recovery` | rebuilding the index from summaries and one scan |
//! | `store` | [`DiskStore`], the queue-and-lookup face of the above, zero-copy opens included |
//! | `tier` | [`Tiered`], memory over disk, as a `trove_store::Storage`: its probe hands out a handle that promotes a key or opens its body as a file region |
//! | `zero_copy` | [`DiskBody`] (a `trove_store::FileBody`): a verified body sent from the file with `sendfile`; pins |
//!
//! Imports between these files point one way (no file imports one that imports it back):
//! `shared` holds a spool's state beside the jobs that carry it, `format` the fragment size
//! both the writer and the spools use, and `store` the zero-copy opens.
//!
//! Dependencies: `trove-store` (the storage interface it implements), `xxhash-rust` (XXH3,
//! already trove's stable hash) for checksums,
//! `rustix` for `flock` without `unsafe`, `parking_lot` for the index's shard locks. I/O
//! is plain positioned reads and writes on a dedicated thread and the caller's blocking
//! pool: at one writer per cache and reads that mostly hit the page cache, io_uring would
//! add a dependency for little.

#[doc(hidden)]
pub mod crashlog;
mod dir;
mod format;
mod index;
pub mod journal;
mod labels;
mod meta;
mod reader;
mod readers;
mod recovery;
mod shared;
mod spool;
mod store;
mod tier;
mod writer;
mod zero_copy;

pub use dir::OpenError;
pub use format::VERSION as FORMAT_VERSION;
pub use reader::{BodyStream, Loaded, LoadedBody};
pub use shared::{DiskConfig, DiskStats, Reclaim};
pub use spool::DiskSpool;
pub use store::DiskStore;
pub use tier::{Fill, SpoolConfig, Tiered, DISK_PASS_EVERY, WHOLE_LIMIT};
pub use zero_copy::{is_reused, Cached, DiskBody, OnDisk, Pin};

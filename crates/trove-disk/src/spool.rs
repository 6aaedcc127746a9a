//! A large body written to disk as it arrives, and read back from its fragments
//! (docs/storage-format.md, *Large objects*): the disk tier's [`trove_store::Spool`].
//!
//! While the body arrives, its `Body` hands every full piece (one fragment's worth) to
//! [`DiskSpool::write`], which queues it for the writer thread; the writer places it as a
//! fragment record, and once the batch holding it is written tells the body
//! (`SpoolProgress::written`), so the body can release it from memory and readers behind
//! its window read it back here. When the last piece is handed over, [`DiskSpool::finish`]
//! notes the body's length, and the tier queues the head record
//! ([`crate::DiskStore::finish_spool`], the object judged by the rules then, as any write),
//! written after every fragment: the object becomes findable only then.
//! [`DiskSpool::abandon`] (a purge, a failed body) keeps the head from ever being written;
//! the fragments leave with their regions.
//!
//! A head found on disk after a restart is read through the same type ([`DiskSpool::at_rest`]),
//! so a hit on a large object streams from its fragments and never enters memory whole.
//!
//! The first read of a fragment in this process verifies it whole: its region still holds the
//! use it was written in, its record's checksum, and that it is this body's (fingerprint,
//! spool id, number, offset, length); later reads of it read only the bytes asked for,
//! checking the region's use after the read, as `zero_copy` does for records it sends (a byte
//! that rots on disk after the first read is not caught until the next start). A read
//! returns at most 256 KiB, copied, so a slow client holds no more than that. Fragment `i`
//! holds bytes `i × piece` onward, `piece` being fixed by the region size
//! ([`crate::format::fragment_body`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use trove_store::{Spool, SpoolProgress};
use xxhash_rust::xxh3::Xxh3;

use crate::format::{
    FragmentList, FragmentMeta, Kind, Record, FRAGMENT_META_LEN, RECORD_HEADER_LEN,
};
use crate::index::Loc;
use crate::shared::{Job, Placed, Shared, SpoolState, SPOOL_ABANDONED, SPOOL_GOING};

/// The most bytes one read returns, so a reader (a slow client) holds at most this much.
const READ: u64 = crate::reader::CHUNK;

/// Where a fragment record's body starts: its key, variant and labels are empty.
const BODY_AT: u64 = (RECORD_HEADER_LEN + FRAGMENT_META_LEN) as u64;

/// A read of the data file failed: counted in `trove_disk_io_errors_total`.
fn count_io_error(shared: &Shared) {
    shared.stats.io_errors.fetch_add(1, Ordering::Relaxed);
}

/// See the module docs.
#[derive(Clone)]
pub struct DiskSpool(pub(crate) Arc<SpoolState>);

impl std::fmt::Debug for DiskSpool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskSpool")
            .field("id", &self.0.id)
            .field("piece", &self.0.piece)
            .finish()
    }
}

/// Spool ids: random per process start, then counted, so two spools never share one.
fn new_id(fp: u64) -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    xxhash_rust::xxh3::xxh3_64_with_seed(&nanos.to_le_bytes(), fp ^ n.rotate_left(32))
}

impl DiskSpool {
    /// A spool for a body arriving now (see [`crate::DiskStore::spool`]).
    pub(crate) fn arriving(shared: Arc<Shared>, key: &str, variant: &str) -> DiskSpool {
        let fingerprint = trove_store::hash::fingerprint(key, variant);
        let key_hash = trove_store::hash::key_hash(key);
        let piece = crate::format::fragment_body(shared.dir.region_size());
        DiskSpool(Arc::new(SpoolState {
            shared,
            fingerprint,
            key_hash,
            id: new_id(fingerprint),
            piece,
            finished: AtomicU64::new(u64::MAX),
            placed: Mutex::new(Placed {
                fragments: Vec::new(),
                hasher: Xxh3::new(),
            }),
            written: Mutex::new(Vec::new()),
            state: std::sync::atomic::AtomicU8::new(SPOOL_GOING),
            at: None,
            broken: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// A head's body, every fragment written already.
    pub(crate) fn at_rest(
        shared: Arc<Shared>,
        fingerprint: u64,
        key_hash: u64,
        at: Loc,
        list: FragmentList,
    ) -> DiskSpool {
        let piece = crate::format::fragment_body(shared.dir.region_size());
        let n = list.fragments.len() as u64;
        let written = list
            .fragments
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let i = i as u64;
                (
                    *f,
                    if i + 1 == n {
                        list.body_len
                    } else {
                        (i + 1) * piece
                    },
                )
            })
            .collect();
        DiskSpool(Arc::new(SpoolState {
            shared,
            fingerprint,
            key_hash,
            id: list.spool,
            piece,
            finished: AtomicU64::new(u64::MAX),
            placed: Mutex::new(Placed {
                fragments: Vec::new(),
                hasher: Xxh3::new(),
            }),
            written: Mutex::new(written),
            state: std::sync::atomic::AtomicU8::new(SPOOL_ABANDONED),
            at: Some(at),
            broken: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    fn push(&self, job: Job) {
        self.0.shared.push(job);
    }

    /// At most [`READ`] bytes from `pos`: the first read of a fragment in this process
    /// reads and verifies its whole record, later ones only the bytes asked for (see the
    /// module docs).
    fn read(&self, pos: u64) -> std::io::Result<Bytes> {
        let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string());
        let inner = &self.0;
        let shared = &inner.shared;
        let number = pos / inner.piece;
        let Some((f, end)) = inner.written.lock().get(number as usize).copied() else {
            return Err(std::io::Error::other("fragment not written"));
        };
        let start = number * inner.piece;
        if pos >= end {
            return Err(bad("past the fragment's end"));
        }
        let want = (end - pos).min(READ);
        let in_use = || {
            shared
                .seqs
                .get(f.region as usize)
                .is_some_and(|x| x.load(Ordering::Acquire) == f.seq)
        };
        if !in_use() {
            return Err(std::io::Error::other("a fragment's region was reused"));
        }
        let loc = Loc::new(f.region, f.offset, f.len as u64);
        if crate::zero_copy::is_verified(shared, loc, f.seq) {
            let at = f.offset + BODY_AT + (pos - start);
            let b = shared
                .dir
                .read_vec(f.region, at, want as usize)
                .inspect_err(|_| count_io_error(shared))?;
            // The region retires its use before a byte of it is rewritten: still in use
            // after the read, the bytes read are the verified ones.
            if (b.len() as u64) < want || !in_use() {
                return Err(std::io::Error::other("a fragment's region was reused"));
            }
            return Ok(Bytes::from(b));
        }
        let b = Bytes::from(
            shared
                .dir
                .read_vec(f.region, f.offset, f.len as usize)
                .inspect_err(|_| count_io_error(shared))?,
        );
        let r = Record::decode(&b, f.seq).map_err(|e| bad(&format!("fragment: {e}")))?;
        let m = FragmentMeta::decode(&r.meta).map_err(|e| bad(&format!("fragment: {e}")))?;
        if r.header.kind != Kind::Fragment
            || r.header.fingerprint != inner.fingerprint
            || m.spool != inner.id
            || m.number as u64 != number
            || m.offset != start
            || r.body.len() as u64 != end - start
        {
            return Err(bad("not this body's fragment"));
        }
        if !in_use() {
            return Err(std::io::Error::other("a fragment's region was reused"));
        }
        crate::zero_copy::set_verified(shared, loc, f.seq);
        // A copy: a slice would keep the whole record alive while a slow client drains it.
        let from = (pos - start) as usize;
        Ok(Bytes::copy_from_slice(&r.body[from..from + want as usize]))
    }
}

impl Spool for DiskSpool {
    fn piece(&self) -> u64 {
        self.0.piece
    }

    fn write(&self, offset: u64, piece: Vec<Bytes>, progress: SpoolProgress) -> bool {
        if !self.0.going() || self.0.shared.state.load(Ordering::Acquire) == crate::shared::FAILED {
            return false;
        }
        self.push(Job::Fragment {
            spool: Arc::clone(&self.0),
            offset,
            body: piece,
            progress,
        });
        true
    }

    fn finish(&self, len: u64) {
        self.0.finished.store(len, Ordering::Release);
    }

    fn abandon(&self) {
        let _ = self.0.state.compare_exchange(
            SPOOL_GOING,
            SPOOL_ABANDONED,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// True while every fragment written is still where it was (its region not reused).
    fn intact(&self) -> bool {
        if self.0.broken.load(Ordering::Acquire) {
            return false;
        }
        let s = &self.0.shared;
        self.0.written.lock().iter().all(|(f, _)| {
            s.seqs
                .get(f.region as usize)
                .is_some_and(|x| x.load(Ordering::Acquire) == f.seq)
        })
    }

    /// A failed read, whatever the cause (a corrupt fragment, an I/O error, a region
    /// reused), makes the body useless for every later reader too: it is marked broken (so
    /// `intact` is false and the tier's lookups drop it) and its head leaves the index, so
    /// the next request is a miss that asks the origin, rather than the same failure at the
    /// same offset on every request (issue 19, defects 1 and 2).
    /// On the tier's reader threads (`readers`), a few at a time.
    fn read_at_then(&self, pos: u64, done: Box<dyn FnOnce(std::io::Result<Bytes>) + Send>) {
        let spool = self.clone();
        crate::readers::run(Box::new(move || done(spool.read_at(pos))));
    }

    fn read_at(&self, pos: u64) -> std::io::Result<Bytes> {
        let r = self.read(pos);
        if let Err(e) = &r {
            let s = &self.0.shared;
            let first = !self.0.broken.swap(true, Ordering::AcqRel);
            if e.kind() == std::io::ErrorKind::InvalidData {
                s.stats.corrupt.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("disk tier: dropped a corrupt fragment ({e})");
            } else if first {
                tracing::warn!("disk tier: dropped a large object it could not read ({e})");
            }
            if let Some(at) = self.0.at {
                s.index.remove_if_at(self.0.fingerprint, at);
            }
        }
        r
    }
}

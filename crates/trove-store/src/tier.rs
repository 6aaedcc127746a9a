//! Lower tiers behind the storage interface: what a lookup answers when memory misses but a
//! lower tier (a disk) may hold the key, and how the caller opens it.
//!
//! [`crate::Storage::lookup`] stays synchronous and I/O-free: the cache core calls it in
//! its decisions. A tier that keeps objects where reading them may block answers
//! [`crate::Storage::probe`] first, without I/O, with [`Probe::Lower`]: a handle whose
//! calls may block, which the *caller* runs where blocking is allowed (the proxy on its
//! blocking pool, a simulator inline). trove-store itself schedules nothing, so it needs no
//! runtime. The handle can
//!
//! - **load** the key into the upper tier ([`Lower::load`], a promotion): afterwards the
//!   ordinary lookup finds it; a large body is inserted at once and filled behind it by the
//!   [`Fill`]s it returns, each blocking work for the caller to run;
//! - **open a file region** for a zero-copy send ([`Lower::open_file`], or without blocking
//!   [`Lower::open_file_now`] when the answer is in the page cache): the head and a
//!   [`FileBody`], a verified body lying in a file that the caller `sendfile`s under the
//!   tier's pin, never naming the tier.
//!
//! Promotion and demotion happen inside the tiered store; [`crate::TierMarks`] on each
//! [`crate::Object`] hold its per-object tier state (on the lower tier already, being
//! promoted), so no table keyed by id or address is needed for it.

use std::os::fd::BorrowedFd;

use bytes::Bytes;

use crate::object::ObjectHead;

/// What [`crate::Storage::probe`] says about a key, before the lookup.
pub enum Probe {
    /// The lookup answers (a hit in memory, or a miss everywhere): nothing to open.
    Upper,
    /// Not in memory, but a lower tier may hold it: open it through the handle (its calls
    /// may block; see the module docs), then look up as usual.
    Lower(Box<dyn Lower>),
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Probe::Upper => f.write_str("Upper"),
            Probe::Lower(_) => f.write_str("Lower"),
        }
    }
}

/// Called by a lower tier at the instant a read looks at its index, with its writer kept
/// between two steps meanwhile: where a replayable trace notes the writer's place
/// ([`crate::Storage::lower_progress`]), so the place it notes and what the read found
/// are of one moment. `None` notes nothing (and takes no lock).
pub type Note<'a> = Option<&'a mut dyn FnMut()>;

/// A key a lower tier may hold (see the module docs). Calls other than
/// [`Lower::open_file_now`] may block on I/O: run them where blocking is allowed. Each
/// calls its [`Note`], if given, as it looks the key up.
pub trait Lower: Send + 'static {
    /// The key's unvaried object, when its body of at least `min` bytes can be sent from a
    /// file ([`FileBody`]), without blocking: [`FileOpen::WouldBlock`] when finding out
    /// would wait for the disk (then call [`Lower::open_file`] where blocking is allowed).
    fn open_file_now(&self, min: u64, note: Note<'_>) -> FileOpen;
    /// [`Lower::open_file_now`], reading (and verifying) what it must. Blocking.
    fn open_file(&self, min: u64, note: Note<'_>) -> Option<FileHit>;
    /// Promotes the key's variants into the upper tier, verified, so a lookup now finds
    /// them. Blocking. A large body is inserted at once and filled by the returned
    /// [`Fill`]s (clients follow it as it arrives, as they follow any body being stored);
    /// run each where blocking is allowed, and don't wait for them to answer a request.
    fn load(&self, note: Note<'_>) -> Vec<Fill>;
}

/// What [`Lower::open_file_now`] found.
#[derive(Debug)]
pub enum FileOpen {
    Found(Box<FileHit>),
    /// Nothing to send from a file (no such object, varied, smaller than asked, or the tier
    /// can't).
    No,
    /// Finding out would block: ask [`Lower::open_file`] where blocking is allowed.
    WouldBlock,
}

/// A stored object whose body lies in a file, to be sent from there.
#[derive(Debug)]
pub struct FileHit {
    pub head: ObjectHead,
    pub body: Box<dyn FileBody>,
}

impl FileHit {
    /// The hit as the cache core judges and serves it: its head as an object of `key`
    /// whose body (of the right length) is never read, beside the file body to send
    /// instead.
    pub fn into_object(self, key: &str) -> (std::sync::Arc<crate::Object>, Box<dyn FileBody>) {
        let obj = crate::Object::new(
            key.to_string(),
            String::new(),
            self.head,
            crate::Body::new(Some(self.body.len())),
        );
        (std::sync::Arc::new(obj), self.body)
    }
}

/// A verified body lying in a file at an offset: the caller `sendfile(2)`s it, each call
/// under the tier's pin ([`FileBody::pinned`]), so the tier never hands the bytes of a
/// reused region to a socket.
pub trait FileBody: Send + Sync + std::fmt::Debug {
    /// Body bytes.
    fn len(&self) -> u64;
    /// True for an empty body.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The file, and the file offset of the body's first byte.
    fn file(&self) -> (BorrowedFd<'_>, u64);
    /// Runs `send` (one non-blocking system call reading the file, never an await) while
    /// the body's place in the file is pinned: the tier does not reuse it meanwhile. An
    /// error that [`is_reused`] knows when it was reused since the body was opened (send
    /// nothing more, and reset the connection: what went before may be wrong).
    fn pinned(&self, send: &mut dyn FnMut() -> std::io::Result<usize>) -> std::io::Result<usize>;
    /// Body bytes `from..to` read into memory (for a connection `sendfile` can't serve);
    /// an error if they are not all there, or ([`is_reused`]) the place was reused.
    fn read(&self, from: u64, to: u64) -> std::io::Result<Bytes>;
}

/// Blocking work a tier hands back for the caller to schedule (see [`Lower::load`]).
pub struct Fill(Box<dyn FnOnce() + Send>);

impl Fill {
    pub fn new(work: impl FnOnce() + Send + 'static) -> Fill {
        Fill(Box::new(work))
    }

    /// Does the work (blocking).
    pub fn run(self) {
        (self.0)()
    }
}

impl std::fmt::Debug for Fill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fill")
    }
}

/// A file region was reused while its body was being sent.
#[derive(Debug, thiserror::Error)]
#[error("region reclaimed while its record was being sent")]
struct Reused;

/// The error a [`FileBody`] returns when its place in the file was reused.
pub fn reused() -> std::io::Error {
    std::io::Error::other(Reused)
}

/// True for the error of [`reused`].
pub fn is_reused(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Reused>())
}

/// Where a lower tier's writer is ([`crate::Storage::lower_progress`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LowerProgress {
    /// Jobs (writes, tombstones, fragments) the writer has carried out: their records
    /// are in the file and published (what a lookup finds).
    pub done: u64,
    /// Jobs it has begun: more than `done` while their records are written but not
    /// published yet.
    pub begun: u64,
    /// Regions it has reclaimed (emptied for reuse). A region a job needs is reclaimed
    /// before the job begins, a step of its own, so with `done` this says exactly where
    /// it was: after `done` jobs, and after the reclaim for the next one or not.
    pub reclaims: u64,
    /// Jobs queued for it in all (carried out or not).
    pub queued: u64,
}

/// A lower tier's figures (a disk's), for metrics, the admin API and health: what
/// [`crate::Storage::lower_stats`] reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LowerStats {
    pub objects: u64,
    pub index_bytes: u64,
    pub capacity: u64,
    pub bytes: u64,
    pub writes: u64,
    /// Of `writes`, those synced to the device.
    pub writes_synced: u64,
    pub write_bytes: u64,
    pub writes_dropped: u64,
    pub writes_queued: u64,
    pub writes_shed: u64,
    pub writes_late: u64,
    pub write_delay_max_micros: u64,
    /// What the write queue admits now, in bytes.
    pub queue_limit: u64,
    pub hits: u64,
    pub corrupt: u64,
    pub regions_reclaimed: u64,
    pub reinserted: u64,
    pub io_errors: u64,
    pub recovered_objects: u64,
    pub recovery_micros: u64,
    pub ready: bool,
    /// The tier failed: the store serves from memory only until a restart.
    pub failed: bool,
    pub passes: u64,
    pub pass_removed: u64,
    pub regions_discarded: u64,
    pub journal_damaged: u64,
    /// Acknowledgement syncs of the invalidation journal, and the time they took.
    pub journal_syncs: u64,
    pub journal_sync_nanos: u64,
    pub journal_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_error_is_known_as_such() {
        assert!(is_reused(&reused()));
        assert!(!is_reused(&std::io::Error::other("other")));
    }
}

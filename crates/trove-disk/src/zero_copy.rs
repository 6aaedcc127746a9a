//! Disk hits sent to the client without a userspace copy: the proxy `sendfile(2)`s a
//! record's body from the data file at its offset ([`DiskBody`]), the way nginx serves a
//! cache file, instead of reading it into memory first.
//!
//! Two promises the rest of the tier makes must still hold, and this is how:
//!
//! - **Every read verifies what it reads.** Bytes that go by `sendfile` never pass through
//!   trove, so they can't be hashed on their way. The first time a record is opened for
//!   sending in this process's life, its whole body is read once through the page cache
//!   and the checksum checked (what a promotion would cost); the record is then marked
//!   *verified* (by region, `seq` and offset, so a reclaimed region's marks are void), and
//!   later hits on it read only its header and head (one small `pread`, checked against
//!   the region's current use, the fingerprint and the key) before sending. What this
//!   gives up: a byte that rots on disk *after* the first verified read of the record
//!   within this process is not caught. Records are verified again after every restart.
//! - **Never a byte of a reclaimed region: pins.** A `sendfile` into a TCP socket queues
//!   *references* to page-cache pages, sent (and re-sent) later; a region being rewritten
//!   in place would change bytes already "sent". So the writer punches a hole over a
//!   region as it reclaims it (`fallocate(PUNCH_HOLE)`, `Dir::punch`): the old pages leave
//!   the file, those still referenced by sockets keep their bytes, and the region's new
//!   records go to new pages. What remains is a `sendfile` call that reads the region
//!   *while* it is being reclaimed. A seqlock-style protocol excludes it: every call runs
//!   under a [`Pin`] ([`DiskBody::pin`]), which adds 1 to the region's pin count and then
//!   checks the region's `seq`, and drops the count when the call returned; the writer
//!   retires the region's `seq` (0) and then waits for the count to drain
//!   ([`drain_pins`]) before it punches or writes. Both sides use `SeqCst` on the count and
//!   the `seq`, so in their single total order either the pin's `seq` check comes after
//!   the retirement (it fails: nothing is sent, the connection is reset) or the pin's
//!   increment comes before the writer reads the count (the writer waits until that call
//!   returned; the decrement is a `Release` the writer's load acquires, so the call's page
//!   reads happen before the punch). Every byte a `sendfile` call queues is therefore read
//!   while the region is in the use the record was verified in, so a client is sent the
//!   whole body from the file, by one head write and one `sendfile` (nginx's two calls), and
//!   never a byte of the region's next use. A pin is held only across one non-blocking
//!   `sendfile` system call, never across an `await`, so the writer waits at most for the
//!   calls in flight (one per runtime thread; a call whose pages must come from the disk
//!   lasts that read). Connections stalled on a full socket hold no pin: their next call's
//!   check fails after a reclaim. A directory whose file system can't punch holes (probed
//!   at start-up) never uses sendfile.

use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use crate::format::{FormatError, Kind, RecordHeader, RECORD_HEADER_LEN};
use crate::index::Loc;
use crate::reader::{ReadError, CHUNK};
use crate::shared::Shared;

/// Waits until no `sendfile` call reads `region` (see the module docs); call it after the
/// region's `seq` was retired (stored 0, `SeqCst`) and before the region is punched or
/// rewritten.
pub(crate) fn drain_pins(shared: &Shared, region: u32) {
    let pins = &shared.pins[region as usize];
    let mut spins = 0u32;
    while pins.load(Ordering::SeqCst) != 0 {
        // A pin lasts one system call: spin briefly, then give the core away.
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Held across one `sendfile` call from a record's region: while it lives, the writer
/// does not punch or rewrite the region (see the module docs).
#[must_use = "a pin protects only while it is held"]
pub struct Pin<'a> {
    count: &'a std::sync::atomic::AtomicU32,
}

impl Drop for Pin<'_> {
    fn drop(&mut self) {
        // Release: the reads made under the pin happen before the writer's punch.
        self.count.fetch_sub(1, Ordering::Release);
    }
}

pub(crate) fn is_verified(shared: &Shared, loc: Loc, seq: u64) -> bool {
    let v = shared.verified[loc.region() as usize].lock();
    v.seq == seq && v.offsets.contains(&((loc.offset() / 8) as u32))
}

pub(crate) fn set_verified(shared: &Shared, loc: Loc, seq: u64) {
    let mut v = shared.verified[loc.region() as usize].lock();
    if v.seq != seq {
        v.seq = seq;
        v.offsets.clear();
    }
    v.offsets.insert((loc.offset() / 8) as u32);
}

/// A stored object found on disk whose body is to be sent from the data file.
pub struct OnDisk {
    pub head: trove_store::ObjectHead,
    pub body: DiskBody,
}

/// Where a verified body lies in the data file (see the module docs).
pub struct DiskBody {
    shared: Arc<Shared>,
    region: u32,
    seq: u64,
    /// Offset of the body's first byte in its region.
    start: u64,
    len: u64,
}

impl std::fmt::Debug for DiskBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskBody")
            .field("region", &self.region)
            .field("start", &self.start)
            .field("len", &self.len)
            .finish()
    }
}

impl DiskBody {
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The data file, and the file offset of the body's first byte.
    pub fn file(&self) -> (BorrowedFd<'_>, u64) {
        let (file, base) = self.shared.dir.file_at(self.region);
        (file, base + self.start)
    }

    /// Pins the record's region for one `sendfile` call; the error [`is_reused`] knows
    /// when the region was reclaimed since the record was opened (send nothing more,
    /// reset the connection).
    pub fn pin(&self) -> std::io::Result<Pin<'_>> {
        let count = &self.shared.pins[self.region as usize];
        count.fetch_add(1, Ordering::SeqCst);
        let pin = Pin { count };
        if self.shared.seqs[self.region as usize].load(Ordering::SeqCst) != self.seq {
            return Err(reused()); // `pin` drops the count again.
        }
        Ok(pin)
    }

    /// True while the record's region is still in the use the record was verified in:
    /// bytes read from the file before this returned true are the record's.
    pub fn intact(&self) -> bool {
        self.shared.seqs[self.region as usize].load(Ordering::SeqCst) == self.seq
    }

    /// Body bytes `from..to`, read into memory; an error if they are not all there or the
    /// region was reclaimed meanwhile.
    pub fn read(&self, from: u64, to: u64) -> std::io::Result<Bytes> {
        let n = to.saturating_sub(from).min(self.len.saturating_sub(from));
        let v = self
            .shared
            .dir
            .read_vec(self.region, self.start + from, n as usize)?;
        if (v.len() as u64) < n {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "record truncated",
            ));
        }
        if !self.intact() {
            return Err(reused());
        }
        Ok(Bytes::from(v))
    }
}

/// The error of a region reclaimed while its record was being sent: the storage
/// interface's, so the proxy knows it without naming this crate.
fn reused() -> std::io::Error {
    trove_store::tier::reused()
}

/// True for the error [`DiskBody::read`] and [`DiskBody::pin`] return when the region was
/// reclaimed.
pub use trove_store::tier::is_reused;

/// The storage interface's view of a disk body: what the proxy `sendfile`s.
impl trove_store::FileBody for DiskBody {
    fn len(&self) -> u64 {
        self.len
    }

    fn file(&self) -> (BorrowedFd<'_>, u64) {
        DiskBody::file(self)
    }

    fn pinned(&self, send: &mut dyn FnMut() -> std::io::Result<usize>) -> std::io::Result<usize> {
        let _pin = self.pin()?;
        send()
    }

    fn read(&self, from: u64, to: u64) -> std::io::Result<Bytes> {
        DiskBody::read(self, from, to)
    }
}

/// What [`crate::DiskStore::open_body_cached`] found.
pub enum Cached {
    Found(Box<OnDisk>),
    /// Nothing to send from the file (see [`crate::DiskStore::open_body`]).
    No,
    /// Finding out would wait for the disk, or the record was not verified yet: ask
    /// [`crate::DiskStore::open_body`] on a blocking pool.
    WouldBlock,
}

/// How [`open`] may read.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Blocking reads, verifying the record if it was not yet.
    Blocking,
    /// Only from the page cache, and only a record already verified.
    Cached,
}

pub(crate) enum Blocked {
    WouldBlock,
    Read(ReadError),
}

impl From<ReadError> for Blocked {
    fn from(e: ReadError) -> Blocked {
        Blocked::Read(e)
    }
}

impl From<FormatError> for Blocked {
    fn from(e: FormatError) -> Blocked {
        Blocked::Read(e.into())
    }
}

impl From<std::io::Error> for Blocked {
    fn from(e: std::io::Error) -> Blocked {
        Blocked::Read(e.into())
    }
}

fn read_head(shared: &Shared, loc: Loc, n: u64, mode: Mode) -> Result<Vec<u8>, Blocked> {
    match mode {
        Mode::Blocking => Ok(shared
            .dir
            .read_vec(loc.region(), loc.offset(), n as usize)?),
        Mode::Cached => shared
            .dir
            .read_cached(loc.region(), loc.offset(), n as usize)?
            .ok_or(Blocked::WouldBlock),
    }
}

pub(crate) fn open(
    shared: &Arc<Shared>,
    fp: u64,
    loc: Loc,
    key: &str,
    min_len: u64,
    mode: Mode,
) -> Result<Option<OnDisk>, Blocked> {
    let region = loc.region();
    let seq = shared.seqs[region as usize].load(Ordering::SeqCst);
    if seq == 0 {
        return Ok(None);
    }
    if mode == Mode::Cached && !is_verified(shared, loc, seq) {
        return Err(Blocked::WouldBlock);
    }
    let room = shared.dir.region_size() - loc.offset();
    let b = read_head(shared, loc, 4096.min(room), mode)?;
    let h = RecordHeader::decode(&b, seq, room)?;
    if h.kind != Kind::Object || h.fingerprint != fp || h.variant_len != 0 {
        return Ok(None);
    }
    // Never an empty body: a sendfile of nothing is not a response body worth a special case.
    if h.body_len < min_len.max(1) {
        return Ok(None);
    }
    let head_len = RECORD_HEADER_LEN as u64 + h.key_len as u64;
    // The labels section lies between the key (no variant here) and the meta.
    let labels_end = head_len + h.labels_len as u64;
    let meta_end = labels_end + h.meta_len as u64;
    let b = if (b.len() as u64) < meta_end {
        read_head(shared, loc, meta_end, mode)?
    } else {
        b
    };
    if (b.len() as u64) < meta_end {
        return Err(FormatError::Bounds.into());
    }
    if &b[RECORD_HEADER_LEN..head_len as usize] != key.as_bytes() {
        return Ok(None);
    }
    let b = Bytes::from(b);
    let meta = b.slice(labels_end as usize..meta_end as usize);
    let start = loc.offset() + meta_end;
    if !is_verified(shared, loc, seq) {
        let mut hasher = h.hasher();
        hasher.update(&b[RECORD_HEADER_LEN..meta_end as usize]);
        let mut buf = vec![0u8; h.body_len.min(CHUNK) as usize];
        let mut at = start;
        let mut left = h.body_len;
        while left > 0 {
            let n = left.min(CHUNK) as usize;
            let got = shared.dir.read_at(region, at, &mut buf[..n])?;
            if got < n {
                return Err(FormatError::Bounds.into());
            }
            hasher.update(&buf[..n]);
            at += n as u64;
            left -= n as u64;
        }
        if shared.seqs[region as usize].load(Ordering::SeqCst) != seq {
            return Ok(None); // Reclaimed while being verified: what was hashed is a mix.
        }
        if hasher.digest() != h.checksum {
            return Err(FormatError::Checksum.into());
        }
        set_verified(shared, loc, seq);
    }
    let mut head = crate::meta::decode(&meta).map_err(|_| ReadError::Meta)?;
    // What invalidation rules judge it by (verified with the record, or by its own sum).
    head.labels = crate::labels::decode(
        &b[head_len as usize..labels_end as usize],
        crate::reader::checked_floor(shared),
    )
    .map_err(|_| ReadError::Labels)?;
    if shared.seqs[region as usize].load(Ordering::SeqCst) != seq {
        return Ok(None); // Reclaimed while the head was read: it may be a mix.
    }
    Ok(Some(OnDisk {
        head,
        body: DiskBody {
            shared: Arc::clone(shared),
            region,
            seq,
            start,
            len: h.body_len,
        },
    }))
}

//! A response body shared between one writer (the origin fetch) and any number of readers
//! (clients), who may start reading before the writer has finished (read-while-write).
//!
//! # Memory
//!
//! A body is in one of three modes, and in each the bytes it holds are either the store's
//! (charged to its byte budget) or few:
//!
//! - *free* (the default): the object is being stored and its length is known to fit, so
//!   every byte is kept for later clients and the writer is never held back (the brief:
//!   read ahead freely while the object is being stored). The store charges the declared
//!   length up front.
//! - *paced* ([`Body::set_paced`]): the object is being stored but its length is unknown
//!   (chunked), so it may yet outgrow the store. Every byte is kept (the store charges what
//!   has arrived), but while anyone reads it the writer stays within `buffer` bytes of the
//!   *fastest* reader. Should the body outgrow the store, a lone slow reader is then
//!   within `buffer` of the writer, and nothing it still needs is lost; a reader far behind
//!   a faster one reads from the stored bytes at its own pace until then. With no reader,
//!   the fill runs freely (it is being stored for the next client).
//! - *unstored* ([`Body::set_unstored`]): the object is not, or no longer, stored (it
//!   outgrew `max_object`, or was evicted, purged or replaced while arriving). Only the
//!   last `buffer` bytes written are kept, and the writer waits while it is `read_ahead`
//!   bytes ahead of the fastest reader. A reader that falls further than `buffer` behind
//!   the writer finds its bytes released ([`BodyError::Released`]): it is *detached*, and
//!   its driver goes on with a fetch of its own or cuts its client off. With no reader left
//!   the writer is told to stop ([`BodyError::NoReaders`]), which ends the origin fetch.
//! - *spooled* ([`Body::set_spooled`]): the object is being stored by a lower tier as it
//!   arrives (a disk tier, for a body too large for memory): every full piece is handed to a
//!   [`Spool`] to write, and only a `window` of bytes behind the writer is kept in memory,
//!   plus what the spool has not written yet. The writer waits while the spool is more than
//!   the window behind it (a slow disk slows the origin read, not memory growth), never for
//!   readers: a reader behind the window reads what the spool wrote back from it (verified,
//!   on a thread the spool schedules the read on, [`Spool::read_at_then`]: the body needs
//!   no runtime), then catches up. So memory per spooled body is the window,
//!   whatever its readers' speeds. If the spool fails, the body falls back to *unstored*.
//!   A body whose bytes are all in a spool already ([`Body::from_spool`]: a disk hit too
//!   large for memory) is read from it alone.
//!
//! So outside the store a body holds at most `buffer` bytes plus the last chunk written (the
//! writer checks how far ahead it is before it appends, so it may overshoot by that chunk; a
//! reader the writer kept pace with is never detached for it).
//! Those bytes are counted in a meter ([`Body::set_unstored`]) the proxy exports as a gauge.
//!
//! # Why slow readers are detached rather than waited for
//!
//! An unstored body is the only one whose bytes must be released, and while readers of one
//! body read at different speeds only three things can happen to what the slowest still
//! needs: it stays in memory (unbounded: what this module used to do, up to `max_object`
//! per body), the writer waits for the slowest (then one slow client throttles every fast
//! one collapsed onto the same fetch), or the slow reader is detached once it is a bounded
//! distance behind. trove detaches: the fast readers go on at their own speed, memory stays
//! bounded, and the slow reader loses nothing when its response can be resumed (the proxy
//! asks the origin for the rest with `Range` and `If-Range`), or is cut off visibly when it
//! can't. Pacing the writer to the fastest reader, not the slowest, is what makes that a
//! choice about the slow reader only.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Weak};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;

use crate::wake::{Slot, WakeList};

/// Bodies at most this long are joined into one buffer when complete, so a hit is written
/// with a single vectored write.
const COALESCE_LIMIT: u64 = 1 << 20;

/// The cursor list is first pruned of dropped readers when it reaches this length.
const PRUNE_MIN: usize = 16;

/// A dropped reader's cursor, until the list is pruned.
const GONE: u64 = u64::MAX;

/// Why a body did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// The origin failed or lied about the length before the body was complete.
    #[error("origin body incomplete")]
    Incomplete,
    /// Bytes this reader needed were released: the body is no longer stored and the reader
    /// fell further behind the writer than the body keeps (it is detached).
    #[error("body bytes no longer held")]
    Released,
    /// Unstored and no reader wants the bytes any more.
    #[error("no reader left")]
    NoReaders,
}

/// How far a body's writer may run ahead, and how much it keeps, once it is not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// The writer waits while it is this many bytes ahead of the fastest reader.
    pub read_ahead: u64,
    /// Bytes kept behind the writer; a reader further behind is detached. At least
    /// `read_ahead`.
    pub buffer: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Free,
    Paced {
        buffer: u64,
    },
    Unstored(StreamLimits),
    /// `window`: bytes behind the writer kept in memory; `fallback`: the unstored limits if
    /// the spool fails.
    Spooled {
        window: u64,
        fallback: StreamLimits,
    },
}

/// Where a spooled body's bytes are written as they arrive, and read back from once they
/// have left memory (see the module docs). Implemented by a lower tier (the disk's
/// fragments), so this crate need not depend on it.
pub trait Spool: Send + Sync + std::fmt::Debug {
    /// The size of the pieces the body hands over: every piece but the last is this long.
    fn piece(&self) -> u64;
    /// Takes the piece of the body at `offset` to write, in order; once written, tells
    /// `progress` ([`SpoolProgress::written`]), or [`SpoolProgress::failed`]. False if it
    /// can't take it at all (the body then falls back to unstored).
    fn write(&self, offset: u64, piece: Vec<Bytes>, progress: SpoolProgress) -> bool;
    /// The whole body (`len` bytes) has been handed over (the tier that made the spool then
    /// makes it findable once written, when the store is told the body is complete).
    fn finish(&self, len: u64);
    /// The body failed, or is no longer wanted: nothing of it may become findable.
    fn abandon(&self);
    /// The bytes from `pos` to the end of the piece holding it, verified (blocking I/O: call
    /// it where blocking is allowed). Only bytes reported written are asked for.
    fn read_at(&self, pos: u64) -> std::io::Result<Bytes>;
    /// [`Spool::read_at`], its result handed to `done`, run where blocking is allowed: a
    /// reader of the body awaits it. The spool schedules the read (a disk tier on reader
    /// threads of its own, a few at a time), so the body needs no runtime. The default
    /// reads at once, on the caller's thread: for spools whose reads never block.
    fn read_at_then(&self, pos: u64, done: Box<dyn FnOnce(std::io::Result<Bytes>) + Send>) {
        done(self.read_at(pos))
    }
    /// False once bytes already written can no longer be read back (a disk region holding
    /// some was reused): a body read from the spool alone is then of no use.
    fn intact(&self) -> bool {
        true
    }
}

/// Pieces to hand a spool, each at its offset, with the body they are of.
type Handover = (Arc<dyn Spool>, Vec<(u64, Vec<Bytes>)>, Weak<Body>);

/// What a [`Spool`] tells its body about one piece: written, or failed. Dropped without
/// either (a job lost with a failing writer, a piece the spool skipped), it tells the body
/// the spool failed, so a body never waits for a piece nobody will write.
#[derive(Debug)]
pub struct SpoolProgress(Option<Weak<Body>>);

impl SpoolProgress {
    /// Every byte before `upto` is written and can be read back.
    pub fn written(mut self, upto: u64) {
        if let Some(b) = self.0.take().and_then(|w| w.upgrade()) {
            b.spool_written(upto);
        }
    }

    /// The spool could not write: the body falls back to unstored.
    pub fn failed(mut self) {
        if let Some(b) = self.0.take().and_then(|w| w.upgrade()) {
            b.spool_failed();
        }
    }
}

impl Drop for SpoolProgress {
    fn drop(&mut self) {
        if let Some(b) = self.0.take().and_then(|w| w.upgrade()) {
            b.spool_failed();
        }
    }
}

#[derive(Debug)]
struct State {
    /// Chunks in order; `starts[i]` is the offset of `chunks[i]`.
    chunks: VecDeque<Bytes>,
    starts: VecDeque<u64>,
    /// Total bytes appended so far.
    len: u64,
    end: Option<Result<(), BodyError>>,
    mode: Mode,
    /// One per reader, dropped ones included until the next prune.
    cursors: Vec<Weak<AtomicU64>>,
    /// Length of `cursors` at which [`Body::reader`] prunes it next: twice the live readers
    /// found by the last prune, so pruning costs O(1) amortised per reader and the list
    /// stays proportional to the live readers even when the body is never unstored.
    prune_at: usize,
    /// Bytes in `chunks`.
    held: u64,
    /// Where held bytes are counted once the body is unstored or spooled.
    meter: Option<Arc<AtomicU64>>,
    /// Spooled: where the bytes go, how many were handed to it, and how many it has written.
    spool: Option<Arc<dyn Spool>>,
    queued: u64,
    written: u64,
    /// This body, for the progress handles given to its spool.
    me: Weak<Body>,
}

/// A body's end as a byte, for [`Body::end`].
struct End;

impl End {
    const ARRIVING: u8 = 0;

    fn of(end: Option<Result<(), BodyError>>) -> u8 {
        match end {
            None => End::ARRIVING,
            Some(Ok(())) => 1,
            Some(Err(BodyError::Incomplete)) => 2,
            Some(Err(BodyError::Released)) => 3,
            Some(Err(BodyError::NoReaders)) => 4,
        }
    }

    fn read(b: u8) -> Option<Result<(), BodyError>> {
        match b {
            1 => Some(Ok(())),
            2 => Some(Err(BodyError::Incomplete)),
            3 => Some(Err(BodyError::Released)),
            4 => Some(Err(BodyError::NoReaders)),
            _ => None,
        }
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct Body {
    state: Mutex<State>,
    /// `state.end` as one byte (see [`End`]), written under the lock whenever it is, so
    /// [`Body::outcome`] (asked twice by every hit) reads it without taking the lock.
    end: AtomicU8,
    /// A spool was ever given (set under the lock with `state.spool`, never cleared), so
    /// [`Body::reads_from_disk`] (asked by every hit) answers a body that never had one
    /// without taking the lock.
    ever_spooled: AtomicBool,
    expected: Option<u64>,
    readers_wake: WakeList,
    writer_wake: WakeList,
}

impl Body {
    /// A body still to be written; `expected` is the declared length, if any.
    pub fn new(expected: Option<u64>) -> Arc<Self> {
        Arc::new(Body {
            state: Mutex::new(State {
                chunks: VecDeque::new(),
                starts: VecDeque::new(),
                len: 0,
                end: None,
                mode: Mode::Free,
                cursors: Vec::new(),
                prune_at: PRUNE_MIN,
                held: 0,
                meter: None,
                spool: None,
                queued: 0,
                written: 0,
                me: Weak::new(),
            }),
            end: AtomicU8::new(End::ARRIVING),
            ever_spooled: AtomicBool::new(false),
            expected,
            readers_wake: WakeList::default(),
            writer_wake: WakeList::default(),
        })
    }

    /// A complete body from bytes already in hand.
    pub fn complete(bytes: Bytes) -> Arc<Self> {
        let body = Body::new(Some(bytes.len() as u64));
        {
            let mut st = body.state.lock();
            st.len = bytes.len() as u64;
            st.held = st.len;
            if !bytes.is_empty() {
                st.starts.push_back(0);
                st.chunks.push_back(bytes);
            }
            st.end = Some(Ok(()));
            body.end.store(End::of(st.end), Ordering::Release);
        }
        body
    }

    /// The declared length, if the origin gave one.
    pub fn expected_len(&self) -> Option<u64> {
        self.expected
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.state.lock().len
    }

    /// True when nothing has been written.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes to charge against a store budget.
    pub fn charge(&self) -> u64 {
        let len = self.len();
        self.expected.unwrap_or(0).max(len)
    }

    /// `Some(Ok)` when complete, `Some(Err)` when failed, `None` while still arriving.
    pub fn outcome(&self) -> Option<Result<(), BodyError>> {
        End::read(self.end.load(Ordering::Acquire))
    }

    /// The whole body as one buffer, if it is complete and was coalesced.
    pub fn complete_bytes(&self) -> Option<Bytes> {
        let st = self.state.lock();
        // A spooled body may hold only its tail: whole only if every byte is held.
        if st.held != st.len {
            return None;
        }
        match (st.end, st.chunks.len()) {
            (Some(Ok(())), 0) => Some(Bytes::new()),
            (Some(Ok(())), 1) if st.is_stored() => Some(st.chunks[0].clone()),
            _ => None,
        }
    }

    /// The whole body in its pieces, if it is complete and still wholly held (a lower tier
    /// copies a stored body this way without an async reader).
    pub fn complete_chunks(&self) -> Option<Vec<Bytes>> {
        let st = self.state.lock();
        match st.end {
            Some(Ok(())) if st.is_stored() && st.spool.is_none() && st.held == st.len => {
                Some(st.chunks.iter().cloned().collect())
            }
            _ => None,
        }
    }

    /// Appends bytes. Paced, waits while the writer is too far ahead of the fastest reader;
    /// unstored, likewise, releasing what no reader within the buffer needs, and fails with
    /// [`BodyError::NoReaders`] when nobody is reading any more.
    pub async fn append(&self, bytes: Bytes) -> Result<(), BodyError> {
        if bytes.is_empty() {
            return Ok(());
        }
        loop {
            let wake = self.writer_wake.wait();
            {
                let mut st = self.state.lock();
                let ahead = match st.mode {
                    Mode::Free => break,
                    Mode::Paced { buffer } => match st.fastest_reader() {
                        None => break,
                        Some(pos) => (pos, buffer),
                    },
                    Mode::Unstored(limits) => match st.fastest_reader() {
                        None => return Err(BodyError::NoReaders),
                        Some(pos) => {
                            st.release(limits.buffer);
                            (pos, limits.read_ahead)
                        }
                    },
                    // Paced by the spool, never by readers.
                    Mode::Spooled { window, .. } => {
                        let piece = st.spool.as_ref().map_or(0, |s| s.piece());
                        (st.written, window.saturating_add(piece))
                    }
                };
                let (fastest, limit) = ahead;
                if st.len.saturating_sub(fastest) < limit.max(1) {
                    break;
                }
            }
            wake.await;
        }
        let pieces = {
            let mut st = self.state.lock();
            st.push(bytes);
            if let Mode::Unstored(limits) = st.mode {
                st.release(limits.buffer);
            }
            st.full_pieces(false)
        };
        self.readers_wake.wake_all();
        self.hand_over(pieces);
        Ok(())
    }

    /// Gives pieces to the spool, outside the lock; falls back to unstored if it refuses.
    fn hand_over(&self, pieces: Option<Handover>) {
        let Some((spool, pieces, me)) = pieces else {
            return;
        };
        for (offset, piece) in pieces {
            if !spool.write(offset, piece, SpoolProgress(Some(me.clone()))) {
                self.spool_failed();
                return;
            }
        }
    }

    /// Appends bytes at once, without waiting: for a writer that is not an async task (the
    /// simulator's synchronous driver), which never paces. Refused with
    /// [`BodyError::NoReaders`] once unstored, where a writer must wait for its readers.
    pub fn append_now(&self, bytes: Bytes) -> Result<(), BodyError> {
        {
            let mut st = self.state.lock();
            if !st.is_stored() {
                return Err(BodyError::NoReaders);
            }
            if bytes.is_empty() {
                return Ok(());
            }
            st.push(bytes);
        }
        self.readers_wake.wake_all();
        Ok(())
    }

    /// Appends `len` bytes that are counted but never held: a size-only body, for a
    /// writer whose bytes nobody reads (the simulator's origin, which replays objects of any
    /// size, up to terabytes, without allocating them). The length, the charge and the
    /// end are as if the bytes had been appended; a reader finds them released
    /// ([`BodyError::Released`]). Like [`Body::append_now`], refused once unstored.
    pub fn append_sized_now(&self, len: u64) -> Result<(), BodyError> {
        let mut st = self.state.lock();
        if !st.is_stored() {
            return Err(BodyError::NoReaders);
        }
        st.len = st.len.saturating_add(len);
        Ok(())
    }

    /// Marks the body complete (or failed). Small complete bodies are joined into one buffer.
    pub fn finish(&self, outcome: Result<(), BodyError>) {
        let spooled;
        {
            let mut st = self.state.lock();
            if st.end.is_some() {
                return;
            }
            let pieces = if outcome.is_ok() {
                st.full_pieces(true)
            } else {
                None
            };
            if pieces.is_some() {
                drop(st);
                self.hand_over(pieces);
                st = self.state.lock();
            }
            spooled = st.spool.clone();
            let coalesce = !matches!(st.mode, Mode::Spooled { .. });
            if outcome.is_ok()
                && coalesce
                && st.is_stored()
                && st.chunks.len() > 1
                && st.len <= COALESCE_LIMIT
            {
                let mut joined = BytesMut::with_capacity(st.len as usize);
                for c in &st.chunks {
                    joined.extend_from_slice(c);
                }
                st.chunks.clear();
                st.starts.clear();
                st.chunks.push_back(joined.freeze());
                st.starts.push_back(0);
            }
            st.end = Some(outcome);
            self.end.store(End::of(st.end), Ordering::Release);
            // The spool may have written the last piece already.
            st.release_if_written();
        }
        if let Some(spool) = spooled {
            match outcome {
                Ok(()) => spool.finish(self.len()),
                Err(_) => spool.abandon(),
            }
        }
        self.readers_wake.wake_all();
    }

    /// Spooled mode (see the module docs): from now on the body's pieces go to `spool` as
    /// they arrive, from its first byte (what is held now is handed over with the next
    /// append), and only `window` bytes behind the writer, plus what the spool has not
    /// written, stay in memory, counted in `meter`. If the spool fails, the body becomes
    /// unstored with `fallback`. No effect on a body already unstored or complete.
    pub fn set_spooled(
        self: &Arc<Self>,
        window: u64,
        spool: Arc<dyn Spool>,
        fallback: StreamLimits,
        meter: Option<Arc<AtomicU64>>,
    ) -> bool {
        {
            let mut st = self.state.lock();
            if !st.is_stored() || st.end.is_some() || st.spool.is_some() {
                return false;
            }
            st.mode = Mode::Spooled { window, fallback };
            st.spool = Some(spool);
            self.ever_spooled.store(true, Ordering::Release);
            st.me = Arc::downgrade(self);
            if let (None, Some(m)) = (&st.meter, meter) {
                m.fetch_add(st.held, Ordering::Relaxed);
                st.meter = Some(m);
            }
        }
        // What is held already goes first: the writer waits for it to be written before it
        // appends more.
        let pieces = self.state.lock().full_pieces(false);
        self.hand_over(pieces);
        self.writer_wake.wake_all();
        true
    }

    /// A complete body of `len` bytes, every one of them in `spool` already (a disk hit too
    /// large for memory): read from it alone, nothing held.
    pub fn from_spool(len: u64, spool: Arc<dyn Spool>) -> Arc<Self> {
        let body = Body::new(Some(len));
        {
            let mut st = body.state.lock();
            st.len = len;
            st.queued = len;
            st.written = len;
            st.mode = Mode::Spooled {
                window: 0,
                fallback: StreamLimits {
                    read_ahead: 0,
                    buffer: 0,
                },
            };
            st.spool = Some(spool);
            body.ever_spooled.store(true, Ordering::Release);
            st.end = Some(Ok(()));
            body.end.store(End::of(st.end), Ordering::Release);
        }
        body
    }

    /// False if the body is read from a spool that lost bytes already written
    /// ([`Spool::intact`]); true for any other body.
    pub fn spool_intact(&self) -> bool {
        let spool = self.state.lock().spool.clone();
        spool.is_none_or(|s| s.intact())
    }

    /// True when some of the body's bytes are read back from a spool (the disk): such a
    /// read can fail (a corrupt fragment, an I/O error) even once the body is complete, and
    /// its reader is then detached ([`BodyReader::may_detach`]).
    pub fn has_spool(&self) -> bool {
        self.state.lock().spool.is_some()
    }

    /// True for a complete body read from its spool alone (a large object at rest on disk,
    /// or one whose spool has written every byte): every byte a reader gets comes from disk,
    /// so a hit on it is a disk hit.
    pub fn reads_from_disk(&self) -> bool {
        if !self.ever_spooled.load(Ordering::Acquire) {
            return false;
        }
        let st = self.state.lock();
        st.spool.is_some() && st.end == Some(Ok(())) && st.held == 0
    }

    /// True while the body is spooled (see the module docs).
    pub fn is_spooled(&self) -> bool {
        matches!(self.state.lock().mode, Mode::Spooled { .. })
    }

    /// Tells the body's spool it is no longer wanted (a purge, a replacement): nothing of it
    /// becomes findable. The body goes on for its readers.
    pub fn abandon_spool(&self) {
        let spool = self.state.lock().spool.clone();
        if let Some(s) = spool {
            s.abandon();
        }
    }

    /// The spool has written every byte before `upto`: release what is behind the window.
    fn spool_written(&self, upto: u64) {
        {
            let mut st = self.state.lock();
            let Mode::Spooled { window, .. } = st.mode else {
                return;
            };
            st.written = st.written.max(upto.min(st.queued));
            if !st.release_if_written() {
                let keep_from = st.written.min(st.len.saturating_sub(window));
                st.release_before(keep_from);
            }
        }
        self.writer_wake.wake_all();
    }

    /// The spool failed: unstored from now on (readers behind the window are detached).
    fn spool_failed(&self) {
        let spool = {
            let mut st = self.state.lock();
            let Mode::Spooled { fallback, .. } = st.mode else {
                return;
            };
            st.mode = Mode::Unstored(fallback);
            if st.end.is_none() {
                st.release(fallback.buffer);
            }
            st.spool.take()
        };
        if let Some(s) = spool {
            s.abandon();
        }
        self.writer_wake.wake_all();
        self.readers_wake.wake_all();
    }

    /// Paced mode (see the module docs): for a body being stored whose length is unknown.
    /// While anyone reads, the writer stays within `buffer` bytes of the fastest reader.
    /// No effect once unstored.
    pub fn set_paced(&self, buffer: u64) {
        let mut st = self.state.lock();
        if st.mode == Mode::Free {
            st.mode = Mode::Paced { buffer };
        }
        drop(st);
        self.writer_wake.wake_all();
    }

    /// Unstored mode (see the module docs): the body is no longer being stored. From now on
    /// only the last `limits.buffer` bytes are kept, at once included, and the bytes held are
    /// counted in `meter` (added now, taken off as they are released or the body dropped).
    pub fn set_unstored(&self, limits: StreamLimits, meter: Option<Arc<AtomicU64>>) {
        let limits = StreamLimits {
            buffer: limits.buffer.max(limits.read_ahead),
            ..limits
        };
        let spool = {
            let mut st = self.state.lock();
            st.mode = Mode::Unstored(limits);
            st.release(limits.buffer);
            if let (None, Some(m)) = (&st.meter, meter) {
                m.fetch_add(st.held, Ordering::Relaxed);
                st.meter = Some(m);
            }
            st.spool.take()
        };
        if let Some(s) = spool {
            s.abandon();
        }
        self.writer_wake.wake_all();
        // Readers now behind the buffer must learn so.
        self.readers_wake.wake_all();
    }

    /// True once [`Body::set_unstored`] was called.
    pub fn is_unstored(&self) -> bool {
        !self.state.lock().is_stored()
    }

    /// Bytes held in memory now (all of them while stored).
    pub fn held(&self) -> u64 {
        self.state.lock().held
    }

    /// A reader starting at byte `from`.
    pub fn reader(self: &Arc<Self>, from: u64) -> BodyReader {
        let cursor = Arc::new(AtomicU64::new(from));
        {
            let mut st = self.state.lock();
            if st.cursors.len() >= st.prune_at {
                st.prune_cursors();
            }
            st.cursors.push(Arc::downgrade(&cursor));
        }
        // A paced writer waiting for a first reader, or for one further on, may go on.
        self.writer_wake.wake_all();
        BodyReader {
            body: Arc::clone(self),
            pos: from,
            cursor,
        }
    }

    /// Reader cursors currently registered, live or not yet pruned.
    #[cfg(test)]
    fn registered_cursors(&self) -> usize {
        self.state.lock().cursors.len()
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        let st = self.state.get_mut();
        if let Some(m) = &st.meter {
            m.fetch_sub(st.held, Ordering::Relaxed);
        }
    }
}

impl State {
    fn is_stored(&self) -> bool {
        !matches!(self.mode, Mode::Unstored(_))
    }

    fn push(&mut self, bytes: Bytes) {
        let at = self.len;
        self.len += bytes.len() as u64;
        self.held += bytes.len() as u64;
        if let Some(m) = &self.meter {
            m.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
        self.starts.push_back(at);
        self.chunks.push_back(bytes);
    }

    /// Spooled, whole and all written: every reader reads it back from the spool, so
    /// nothing is held. True if so.
    fn release_if_written(&mut self) -> bool {
        if self.spool.is_none() || self.end != Some(Ok(())) || self.written != self.len {
            return false;
        }
        if let Some(m) = &self.meter {
            m.fetch_sub(self.held, Ordering::Relaxed);
        }
        self.chunks.clear();
        self.starts.clear();
        self.held = 0;
        true
    }

    /// Spooled: the pieces not yet handed to the spool that are full (and the last, short
    /// one when `all`), with the spool to hand them to. Marks them handed over.
    fn full_pieces(&mut self, all: bool) -> Option<Handover> {
        let spool = self.spool.as_ref()?;
        let piece = spool.piece().max(1);
        let mut out = Vec::new();
        while self.len - self.queued >= piece || (all && self.len > self.queued) {
            let n = piece.min(self.len - self.queued);
            out.push((self.queued, self.range(self.queued, self.queued + n)));
            self.queued += n;
        }
        if out.is_empty() {
            return None;
        }
        Some((Arc::clone(spool), out, self.me.clone()))
    }

    /// The held bytes `from..to` as slices of the chunks (never released before handed over).
    fn range(&self, from: u64, to: u64) -> Vec<Bytes> {
        let mut out = Vec::new();
        let first = match self.starts.binary_search(&from) {
            Ok(i) => i,
            Err(i) => i.saturating_sub(1),
        };
        for i in first..self.chunks.len() {
            let (s, c) = (self.starts[i], &self.chunks[i]);
            let e = s + c.len() as u64;
            if s >= to {
                break;
            }
            if e <= from {
                continue;
            }
            let a = from.saturating_sub(s) as usize;
            let b = (to.min(e) - s) as usize;
            out.push(c.slice(a..b));
        }
        out
    }

    /// Forgets the cursors of dropped readers.
    fn prune_cursors(&mut self) {
        self.cursors.retain(|c| c.strong_count() > 0);
        self.prune_at = self.cursors.len().saturating_mul(2).max(PRUNE_MIN);
    }

    /// The positions of the live readers.
    fn positions(&mut self) -> impl Iterator<Item = u64> + '_ {
        self.prune_cursors();
        self.cursors
            .iter()
            .filter_map(|c| c.upgrade())
            .map(|c| c.load(Ordering::Acquire))
            .filter(|&p| p != GONE)
    }

    fn fastest_reader(&mut self) -> Option<u64> {
        self.positions().max()
    }

    /// Unstored: releases the bytes no reader within `buffer` (plus the last chunk written)
    /// of the writer still needs. The writer checks its lead before it appends, so a reader
    /// it kept pace with is at most that far behind, and is never detached.
    fn release(&mut self, buffer: u64) {
        let last = self.chunks.back().map_or(0, |c| c.len() as u64);
        let behind = self.len.saturating_sub(buffer.saturating_add(last));
        let slowest = self.positions().min().unwrap_or(self.len);
        self.release_before(slowest.max(behind));
    }

    /// Releases whole chunks ending at or before `pos`, keeping the last one (so a reader
    /// at the end still finds where it is).
    fn release_before(&mut self, pos: u64) {
        while self.chunks.len() > 1 {
            let end = self.starts[0] + self.chunks[0].len() as u64;
            if end > pos {
                break;
            }
            if let Some(c) = self.chunks.pop_front() {
                self.held -= c.len() as u64;
                if let Some(m) = &self.meter {
                    m.fetch_sub(c.len() as u64, Ordering::Relaxed);
                }
            }
            self.starts.pop_front();
        }
    }

    /// The bytes from `pos` to the end of the chunk holding it.
    fn slice_at(&self, pos: u64) -> Result<Option<Bytes>, BodyError> {
        if pos >= self.len {
            return Ok(None);
        }
        let first = match self.starts.front() {
            Some(&s) => s,
            None => return Err(BodyError::Released),
        };
        if pos < first {
            return Err(BodyError::Released);
        }
        let idx = match self.starts.binary_search(&pos) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        let off = (pos - self.starts[idx]) as usize;
        Ok(Some(self.chunks[idx].slice(off..)))
    }
}

/// One client's position in a [`Body`].
#[derive(Debug)]
pub struct BodyReader {
    body: Arc<Body>,
    pos: u64,
    cursor: Arc<AtomicU64>,
}

impl BodyReader {
    /// The next bytes, waiting for the writer if needed; `None` at the end of a complete body.
    pub async fn next(&mut self) -> Option<Result<Bytes, BodyError>> {
        let body = Arc::clone(&self.body);
        loop {
            let wake = body.readers_wake.wait();
            let from_spool = {
                let st = body.state.lock();
                match st.slice_at(self.pos) {
                    Err(BodyError::Released) if self.pos < st.written && st.spool.is_some() => {
                        st.spool.clone()
                    }
                    Err(e) => return Some(Err(e)),
                    Ok(Some(bytes)) => {
                        let paced = st.mode != Mode::Free;
                        drop(st);
                        self.advance(bytes.len() as u64, paced);
                        return Some(Ok(bytes));
                    }
                    Ok(None) => match st.end {
                        Some(Ok(())) => return None,
                        Some(Err(e)) => return Some(Err(e)),
                        None => None,
                    },
                }
            };
            if let Some(spool) = from_spool {
                // Behind the window: what the spool wrote, read back verified.
                let pos = self.pos;
                // The spool schedules the read where blocking is allowed (its tier's readers,
                // a few at a time whatever the number of readers); this task waits for it.
                let slot = Arc::new(Slot::default());
                let done = Arc::clone(&slot);
                spool.read_at_then(pos, Box::new(move |r| done.put(r)));
                return match slot.take().await {
                    Ok(bytes) if !bytes.is_empty() => {
                        self.advance(bytes.len() as u64, false);
                        Some(Ok(bytes))
                    }
                    // Unreadable or corrupt: this reader is detached, never sent wrong bytes.
                    _ => Some(Err(BodyError::Released)),
                };
            }
            wake.await;
        }
    }

    /// Bytes from the current position up to `limit` (exclusive), for range requests.
    pub async fn next_until(&mut self, limit: u64) -> Option<Result<Bytes, BodyError>> {
        if self.pos >= limit {
            return None;
        }
        let remaining = limit - self.pos;
        match self.next().await? {
            Ok(mut b) => {
                if b.len() as u64 > remaining {
                    b.truncate(remaining as usize);
                }
                Some(Ok(b))
            }
            Err(e) => Some(Err(e)),
        }
    }

    /// The offset this reader has reached.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// True while the body behind this reader is still arriving, so the reader may yet be
    /// detached (see the module docs); a complete body never releases anything.
    pub fn may_detach(&self) -> bool {
        self.body.outcome().is_none() || self.body.is_unstored() || self.body.has_spool()
    }

    fn advance(&mut self, n: u64, paced: bool) {
        self.pos += n;
        self.cursor.store(self.pos, Ordering::Release);
        if paced {
            self.body.writer_wake.wake_all();
        }
    }
}

impl Drop for BodyReader {
    fn drop(&mut self) {
        // A vanished reader may be what the writer waits on.
        self.cursor.store(GONE, Ordering::Release);
        self.body.writer_wake.wake_all();
    }
}

#[cfg(test)]
mod end_tests {
    use super::*;

    /// Every end a body can have reads back as written, lock-free.
    #[test]
    fn the_lock_free_end_mirrors_the_state() {
        for end in [
            None,
            Some(Ok(())),
            Some(Err(BodyError::Incomplete)),
            Some(Err(BodyError::Released)),
            Some(Err(BodyError::NoReaders)),
        ] {
            assert_eq!(End::read(End::of(end)), end);
        }
        let b = Body::new(Some(3));
        assert_eq!(b.outcome(), None);
        let _ = b.append_now(Bytes::from_static(b"abc"));
        b.finish(Ok(()));
        assert_eq!(b.outcome(), Some(Ok(())));
        assert_eq!(Body::complete(Bytes::new()).outcome(), Some(Ok(())));
        let f = Body::new(None);
        f.finish(Err(BodyError::Incomplete));
        assert_eq!(f.outcome(), Some(Err(BodyError::Incomplete)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reader_follows_writer_and_sees_end() {
        let body = Body::new(None);
        let mut r = body.reader(0);
        let w = Arc::clone(&body);
        let t = tokio::spawn(async move {
            for i in 0..5u8 {
                w.append(Bytes::from(vec![i; 10])).await.unwrap();
                tokio::task::yield_now().await;
            }
            w.finish(Ok(()));
        });
        let mut got = Vec::new();
        while let Some(b) = r.next().await {
            got.extend_from_slice(&b.unwrap());
        }
        t.await.unwrap();
        assert_eq!(got.len(), 50);
        assert_eq!(got[49], 4);
        assert_eq!(body.complete_bytes().unwrap().len(), 50, "coalesced");
    }

    /// A size-only body of a terabyte: its length and charge, none of its bytes.
    #[tokio::test]
    async fn a_size_only_body_counts_bytes_it_does_not_hold() {
        let tib = 1u64 << 40;
        let body = Body::new(Some(tib));
        body.append_sized_now(tib).unwrap();
        body.finish(Ok(()));
        assert_eq!((body.len(), body.charge(), body.held()), (tib, tib, 0));
        assert_eq!(body.outcome(), Some(Ok(())));
        assert!(body.complete_bytes().is_none());
        assert!(body.complete_chunks().is_none());
        let mut r = body.reader(0);
        assert_eq!(r.next().await, Some(Err(BodyError::Released)));
    }

    #[tokio::test]
    async fn late_reader_starts_midway() {
        let body = Body::complete(Bytes::from_static(b"0123456789"));
        let mut r = body.reader(4);
        assert_eq!(&r.next().await.unwrap().unwrap()[..], b"456789");
        assert!(r.next().await.is_none());
    }

    #[tokio::test]
    async fn failed_body_reports_error_to_readers() {
        let body = Body::new(Some(100));
        body.append(Bytes::from_static(b"abc")).await.unwrap();
        body.finish(Err(BodyError::Incomplete));
        let mut r = body.reader(0);
        assert_eq!(&r.next().await.unwrap().unwrap()[..], b"abc");
        assert_eq!(r.next().await.unwrap(), Err(BodyError::Incomplete));
    }

    fn limits(read_ahead: u64, buffer: u64) -> StreamLimits {
        StreamLimits { read_ahead, buffer }
    }

    #[tokio::test]
    async fn unstored_writer_waits_for_its_reader_and_releases_bytes() {
        let body = Body::new(None);
        body.set_unstored(limits(16, 16), None);
        let mut r = body.reader(0);
        body.append(Bytes::from(vec![1; 16])).await.unwrap();
        // A second append would put the writer 32 bytes ahead: it must wait.
        let w = Arc::clone(&body);
        let pending = tokio::spawn(async move { w.append(Bytes::from(vec![2; 16])).await });
        tokio::task::yield_now().await;
        assert_eq!(body.len(), 16, "writer held back");
        assert_eq!(r.next().await.unwrap().unwrap().len(), 16);
        pending.await.unwrap().unwrap();
        assert_eq!(body.len(), 32);
        assert_eq!(r.next().await.unwrap().unwrap()[0], 2);
    }

    #[tokio::test]
    async fn unstored_writer_stops_when_no_reader_is_left() {
        let body = Body::new(None);
        body.set_unstored(limits(4, 4), None);
        let r = body.reader(0);
        body.append(Bytes::from(vec![0; 4])).await.unwrap();
        drop(r);
        assert_eq!(
            body.append(Bytes::from(vec![0; 4])).await,
            Err(BodyError::NoReaders)
        );
    }

    /// A complete body too big to be coalesced, so every hit reads it through a reader:
    /// readers that come and go must not pile up in the cursor list (each was a leak
    /// outside the cache's byte budget).
    #[tokio::test]
    async fn dropped_readers_do_not_accumulate_on_a_stored_body() {
        let chunk = Bytes::from(vec![7u8; 600 * 1024]);
        let body = Body::new(Some(3 * chunk.len() as u64));
        for _ in 0..3 {
            body.append(chunk.clone()).await.unwrap();
        }
        body.finish(Ok(()));
        assert!(body.len() > COALESCE_LIMIT);
        assert!(body.complete_bytes().is_none(), "not served as one buffer");

        for _ in 0..100_000 {
            let mut r = body.reader(0);
            assert_eq!(r.next().await.unwrap().unwrap().len(), chunk.len());
        }
        let n = body.registered_cursors();
        assert!(n <= 64, "{n} cursors registered with no reader alive");

        // With readers alive the list stays proportional to them.
        let live: Vec<BodyReader> = (0..1_000).map(|_| body.reader(0)).collect();
        for _ in 0..100_000 {
            drop(body.reader(0));
        }
        let n = body.registered_cursors();
        assert!(
            n <= 2 * live.len() + 64,
            "{n} cursors for {} live readers",
            live.len()
        );
        // And every live reader still reads the whole body.
        for mut r in live {
            let mut got = 0;
            while let Some(b) = r.next().await {
                got += b.unwrap().len();
            }
            assert_eq!(got as u64, body.len());
        }
    }

    /// Issue 7: past the buffer, a fast reader goes on and the slow one is detached, and
    /// the body never holds more than the buffer plus one chunk.
    #[tokio::test]
    async fn unstored_fast_reader_goes_on_and_a_slow_one_is_detached() {
        let meter = Arc::new(AtomicU64::new(0));
        let body = Body::new(None);
        let mut slow = body.reader(0);
        let mut fast = body.reader(0);
        body.set_unstored(limits(8, 32), Some(Arc::clone(&meter)));
        let w = Arc::clone(&body);
        let writer = tokio::spawn(async move {
            for i in 0..100u8 {
                w.append(Bytes::from(vec![i; 8])).await?;
            }
            w.finish(Ok(()));
            Ok::<(), BodyError>(())
        });
        assert_eq!(slow.next().await.unwrap().unwrap()[0], 0);
        let mut got = 0;
        while let Some(b) = fast.next().await {
            let b = b.unwrap();
            assert_eq!(b[0] as usize, got / 8);
            got += b.len();
            assert!(body.held() <= 32 + 2 * 8, "{} bytes held", body.held());
            assert_eq!(meter.load(Ordering::SeqCst), body.held());
        }
        assert_eq!(got, 800, "the fast reader read everything");
        writer.await.unwrap().unwrap();
        assert_eq!(slow.next().await.unwrap(), Err(BodyError::Released));
        drop((slow, fast));
        drop(body);
        assert_eq!(
            meter.load(Ordering::SeqCst),
            0,
            "the meter gets every byte back"
        );
    }

    /// A body that leaves the store with a backlog keeps only the buffer's worth of it.
    #[tokio::test]
    async fn going_unstored_releases_the_backlog_beyond_the_buffer() {
        let meter = Arc::new(AtomicU64::new(0));
        let body = Body::new(None);
        let mut r = body.reader(0);
        for i in 0..10u8 {
            body.append(Bytes::from(vec![i; 10])).await.unwrap();
        }
        assert_eq!(body.held(), 100, "stored: everything is kept");
        body.set_unstored(limits(10, 30), Some(Arc::clone(&meter)));
        assert_eq!(body.held(), 40, "the buffer and the last chunk");
        assert_eq!(meter.load(Ordering::SeqCst), 40);
        assert_eq!(r.next().await.unwrap(), Err(BodyError::Released));
        let mut late = body.reader(60);
        assert_eq!(late.next().await.unwrap().unwrap()[0], 6);
    }

    /// Paced: the writer stays within the buffer of the fastest reader, and runs freely
    /// when nobody reads.
    #[tokio::test]
    async fn paced_writer_follows_the_fastest_reader_and_keeps_everything() {
        let body = Body::new(None);
        body.set_paced(16);
        for _ in 0..4 {
            body.append(Bytes::from(vec![1; 8])).await.unwrap(); // nobody reads: free
        }
        let mut slow = body.reader(0);
        let mut fast = body.reader(0);
        let w = Arc::clone(&body);
        let pending = tokio::spawn(async move { w.append(Bytes::from(vec![2; 8])).await });
        tokio::task::yield_now().await;
        assert_eq!(body.len(), 32, "held back by its readers");
        let mut got = 0;
        while got < 24 {
            got += fast.next().await.unwrap().unwrap().len();
        }
        pending.await.unwrap().unwrap();
        assert_eq!(body.len(), 40);
        assert_eq!(body.held(), 40, "being stored: nothing released");
        assert_eq!(slow.next().await.unwrap().unwrap()[0], 1);
    }

    /// A paced writer checks its lead before appending, so the lone reader may be up to the
    /// buffer plus one chunk behind when the body leaves the store: it must keep every byte
    /// (it was released with the chunk it was reading, and cut off, before the fix).
    #[tokio::test]
    async fn a_lone_reader_is_never_detached_when_the_body_leaves_the_store() {
        let body = Body::new(None);
        body.set_paced(16);
        let mut r = body.reader(0);
        for n in [2usize, 13, 20] {
            body.append(Bytes::from(vec![n as u8; n])).await.unwrap();
        }
        assert_eq!(body.len(), 35, "16 + one chunk past the reader");
        body.set_unstored(limits(4, 16), None);
        let mut got = 0;
        while got < 35 {
            got += r
                .next()
                .await
                .unwrap()
                .expect("no byte released under the reader")
                .len();
        }
    }
}

#[cfg(test)]
mod spool_tests {
    use super::*;

    /// A spool in memory: pieces are "written" when `release` says so.
    #[derive(Debug, Default)]
    struct MemSpool {
        piece: u64,
        pieces: Mutex<Vec<(u64, Bytes, SpoolProgress)>>,
        written: Mutex<Vec<(u64, Bytes)>>,
        finished: Mutex<Option<u64>>,
        abandoned: std::sync::atomic::AtomicBool,
        refuse: std::sync::atomic::AtomicBool,
        /// Takes pieces, then loses them (a writer that failed with jobs queued).
        lose: std::sync::atomic::AtomicBool,
    }

    impl MemSpool {
        fn new(piece: u64) -> Arc<MemSpool> {
            Arc::new(MemSpool {
                piece,
                ..MemSpool::default()
            })
        }

        /// Writes every piece handed over so far.
        fn write_all(&self) {
            let pending: Vec<_> = self.pieces.lock().drain(..).collect();
            for (off, b, p) in pending {
                let end = off + b.len() as u64;
                self.written.lock().push((off, b));
                p.written(end);
            }
        }
    }

    impl Spool for MemSpool {
        fn piece(&self) -> u64 {
            self.piece
        }
        fn write(&self, offset: u64, piece: Vec<Bytes>, progress: SpoolProgress) -> bool {
            if self.refuse.load(Ordering::SeqCst) {
                return false;
            }
            let mut joined = BytesMut::new();
            for p in &piece {
                joined.extend_from_slice(p);
            }
            assert!(joined.len() as u64 <= self.piece);
            if self.lose.load(Ordering::SeqCst) {
                return true; // `progress` dropped: never written, never failed
            }
            self.pieces.lock().push((offset, joined.freeze(), progress));
            true
        }
        fn finish(&self, len: u64) {
            *self.finished.lock() = Some(len);
        }
        fn abandon(&self) {
            self.abandoned.store(true, Ordering::SeqCst);
        }
        fn read_at(&self, pos: u64) -> std::io::Result<Bytes> {
            let w = self.written.lock();
            for (off, b) in w.iter() {
                if pos >= *off && pos < off + b.len() as u64 {
                    return Ok(b.slice((pos - off) as usize..));
                }
            }
            Err(std::io::Error::other("not written"))
        }
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8).collect()
    }

    fn limits() -> StreamLimits {
        StreamLimits {
            read_ahead: 64,
            buffer: 64,
        }
    }

    /// Pieces go to the spool in order and of the spool's size, memory keeps the window
    /// and what is not written, a reader behind the window reads the rest back from the
    /// spool, byte for byte, and the spool is told the whole length at the end.
    #[tokio::test]
    async fn a_spooled_body_keeps_a_window_and_serves_the_rest_from_its_spool() {
        let data = pattern(10_000);
        let spool = MemSpool::new(1_000);
        let meter = Arc::new(AtomicU64::new(0));
        let body = Body::new(Some(data.len() as u64));
        let mut late = body.reader(0);
        assert!(body.set_spooled(500, spool.clone(), limits(), Some(Arc::clone(&meter))));
        for c in data.chunks(300) {
            body.append(Bytes::copy_from_slice(c)).await.unwrap();
            spool.write_all();
            assert!(
                body.held() <= 500 + 1_000 + 300,
                "{} bytes held",
                body.held()
            );
            assert_eq!(meter.load(Ordering::SeqCst), body.held());
        }
        body.finish(Ok(()));
        spool.write_all();
        assert_eq!(*spool.finished.lock(), Some(10_000));
        assert_eq!(body.held(), 0, "whole and written: nothing held");
        let sizes: Vec<u64> = spool
            .written
            .lock()
            .iter()
            .map(|(_, b)| b.len() as u64)
            .collect();
        assert_eq!(sizes, vec![1_000; 10]);
        assert!(body.complete_bytes().is_none() && body.complete_chunks().is_none());
        let mut got = Vec::new();
        while let Some(b) = late.next().await {
            got.extend_from_slice(&b.unwrap());
        }
        assert!(got == data, "read back byte for byte");
        drop((late, body));
        assert_eq!(meter.load(Ordering::SeqCst), 0);
    }

    /// A body that grew in memory before it was spooled (a chunked one outgrowing memory):
    /// what it holds is handed over at once, from its first byte, so the writer, waiting
    /// for the spool to write what is held, goes on (it waited forever before the fix).
    #[tokio::test]
    async fn a_body_spooled_midway_hands_over_what_it_holds() {
        let data = pattern(5_000);
        let spool = MemSpool::new(1_000);
        let body = Body::new(None);
        body.set_paced(100);
        body.append(Bytes::copy_from_slice(&data[..3_500]))
            .await
            .unwrap();
        assert!(body.set_spooled(100, spool.clone(), limits(), None));
        assert_eq!(
            spool.pieces.lock().len(),
            3,
            "three full pieces handed over at once"
        );
        let w = Arc::clone(&body);
        let rest = Bytes::copy_from_slice(&data[3_500..]);
        let writer = tokio::spawn(async move {
            w.append(rest).await.unwrap();
            w.finish(Ok(()));
        });
        let wrote = async {
            while !writer.is_finished() {
                spool.write_all();
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), wrote)
            .await
            .expect("the writer went on");
        spool.write_all();
        let mut got = Vec::new();
        for (off, b) in spool.written.lock().iter() {
            assert_eq!(*off as usize, got.len());
            got.extend_from_slice(b);
        }
        assert!(got == data, "every byte, in order, from the first");
        assert_eq!(*spool.finished.lock(), Some(5_000));
    }

    /// The writer waits for the spool, not for readers: more than the window plus a piece
    /// ahead of what is written, it is held back until the spool catches up.
    #[tokio::test]
    async fn a_spooled_writer_waits_for_its_spool() {
        let spool = MemSpool::new(100);
        let body = Body::new(Some(1_000));
        assert!(body.set_spooled(100, spool.clone(), limits(), None));
        for _ in 0..2 {
            body.append(Bytes::from(vec![1; 100])).await.unwrap();
        }
        let w = Arc::clone(&body);
        let pending = tokio::spawn(async move { w.append(Bytes::from(vec![2; 100])).await });
        tokio::task::yield_now().await;
        assert_eq!(body.len(), 200, "held back: nothing written yet");
        spool.write_all();
        pending.await.unwrap().unwrap();
        assert_eq!(body.len(), 300);
    }

    /// A spool that refuses a piece: the body is unstored from then on (bounded, readers
    /// within the buffer go on), and the spool is abandoned so nothing becomes findable.
    #[tokio::test]
    async fn a_failed_spool_falls_back_to_unstored() {
        let spool = MemSpool::new(100);
        let body = Body::new(Some(1_000));
        let mut r = body.reader(0);
        assert!(body.set_spooled(100, spool.clone(), limits(), None));
        body.append(Bytes::from(vec![1; 100])).await.unwrap();
        spool.refuse.store(true, Ordering::SeqCst);
        body.append(Bytes::from(vec![2; 100])).await.unwrap();
        assert!(body.is_unstored());
        assert!(spool.abandoned.load(Ordering::SeqCst));
        body.finish(Ok(()));
        assert_eq!(*spool.finished.lock(), None, "never made findable");
        // The reader at 0 is behind the unstored buffer: detached, not fed wrong bytes.
        let first = r.next().await.unwrap();
        assert!(matches!(first, Err(BodyError::Released)) || first.unwrap()[0] == 1);
    }

    /// A spool that loses pieces it took (its writer failed with them queued) never tells
    /// the body they were written: the body falls back to unstored when the piece's
    /// progress is dropped, so its writer goes on instead of waiting forever.
    #[tokio::test]
    async fn a_piece_lost_by_the_spool_unstores_the_body_rather_than_hang_it() {
        let spool = MemSpool::new(100);
        spool.lose.store(true, Ordering::SeqCst);
        let body = Body::new(Some(1_000));
        let mut r = body.reader(0);
        assert!(body.set_spooled(100, spool.clone(), limits(), None));
        let w = Arc::clone(&body);
        let writer = tokio::spawn(async move {
            for i in 0..10u8 {
                w.append(Bytes::from(vec![i; 100])).await?;
            }
            w.finish(Ok(()));
            Ok::<(), BodyError>(())
        });
        let mut got = 0;
        let read = async {
            while let Some(b) = r.next().await {
                match b {
                    Ok(b) => got += b.len(),
                    Err(_) => break,
                }
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), read)
            .await
            .expect("the reader is not left waiting");
        tokio::time::timeout(std::time::Duration::from_secs(10), writer)
            .await
            .expect("the writer is not left waiting")
            .unwrap()
            .unwrap();
        assert!(body.is_unstored());
        assert!(spool.abandoned.load(Ordering::SeqCst));
        assert_eq!(*spool.finished.lock(), None);
        assert_eq!(got, 1_000, "the reader kept pace and got every byte");
    }

    /// A body wholly in its spool (a disk hit) is read from it alone, from any offset, and a
    /// spool that can't read detaches the reader rather than ending the body short.
    #[tokio::test]
    async fn a_body_from_a_spool_is_read_from_it() {
        let data = pattern(3_000);
        let spool = MemSpool::new(1_000);
        for (i, c) in data.chunks(1_000).enumerate() {
            spool
                .written
                .lock()
                .push((i as u64 * 1_000, Bytes::copy_from_slice(c)));
        }
        let body = Body::from_spool(3_000, spool.clone());
        assert_eq!(body.outcome(), Some(Ok(())));
        assert!(
            body.complete_bytes().is_none(),
            "not held: never one buffer"
        );
        let mut r = body.reader(1_500);
        let mut got = Vec::new();
        while let Some(b) = r.next().await {
            got.extend_from_slice(&b.unwrap());
        }
        assert!(got == data[1_500..]);
        spool.written.lock().clear();
        let mut r = body.reader(0);
        assert_eq!(r.next().await.unwrap(), Err(BodyError::Released));
    }
}

//! A response body shared between one writer (the origin fetch) and any number of readers
//! (clients), who may start reading before the writer has finished (read-while-write).
//!
//! Two modes:
//! - *stored* (the default): every byte is kept, so later clients can read the whole body;
//!   the writer is never held back (the brief: read ahead freely while the object is being
//!   stored).
//! - *bounded* (after [`Body::set_bounded`]): the object is no longer being stored, so bytes
//!   every live reader has passed are dropped and the writer waits while it is more than
//!   `read_ahead` bytes ahead of the slowest reader. With no reader left the writer is told
//!   to stop, which ends the origin fetch.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::Notify;

/// Bodies at most this long are joined into one buffer when complete, so a hit is written
/// with a single vectored write.
const COALESCE_LIMIT: u64 = 1 << 20;

/// The cursor list is first pruned of dropped readers when it reaches this length.
const PRUNE_MIN: usize = 16;

/// Why a body did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// The origin failed or lied about the length before the body was complete.
    #[error("origin body incomplete")]
    Incomplete,
    /// Bytes this reader needed were already released (bounded mode).
    #[error("body bytes no longer held")]
    Released,
    /// Bounded mode and no reader wants the bytes any more.
    #[error("no reader left")]
    NoReaders,
}

#[derive(Debug)]
struct State {
    /// Chunks in order; `starts[i]` is the offset of `chunks[i]`.
    chunks: VecDeque<Bytes>,
    starts: VecDeque<u64>,
    /// Total bytes appended so far.
    len: u64,
    end: Option<Result<(), BodyError>>,
    /// `Some(read_ahead)` once the body is no longer being stored.
    bounded: Option<u64>,
    /// One per reader, dropped ones included until the next prune.
    cursors: Vec<Weak<AtomicU64>>,
    /// Length of `cursors` at which [`Body::reader`] prunes it next: twice the live readers
    /// found by the last prune, so pruning costs O(1) amortised per reader and the list
    /// stays proportional to the live readers even when the body is never bounded.
    prune_at: usize,
    /// Bytes in `chunks`.
    held: u64,
    /// Where held bytes are counted once the body is not stored (see [`Body::set_meter`]).
    meter: Option<Arc<AtomicU64>>,
}

/// See the module docs.
#[derive(Debug)]
pub struct Body {
    state: Mutex<State>,
    expected: Option<u64>,
    readers_wake: Notify,
    writer_wake: Notify,
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
                bounded: None,
                cursors: Vec::new(),
                prune_at: PRUNE_MIN,
                held: 0,
                meter: None,
            }),
            expected,
            readers_wake: Notify::new(),
            writer_wake: Notify::new(),
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
        self.state.lock().end
    }

    /// The whole body as one buffer, if it is complete and was coalesced.
    pub fn complete_bytes(&self) -> Option<Bytes> {
        let st = self.state.lock();
        match (st.end, st.chunks.len()) {
            (Some(Ok(())), 0) => Some(Bytes::new()),
            (Some(Ok(())), 1) if st.bounded.is_none() => Some(st.chunks[0].clone()),
            _ => None,
        }
    }

    /// Appends bytes. In bounded mode waits while the writer is too far ahead of the slowest
    /// reader, and fails with [`BodyError::NoReaders`] when nobody is reading any more.
    pub async fn append(&self, bytes: Bytes) -> Result<(), BodyError> {
        if bytes.is_empty() {
            return Ok(());
        }
        loop {
            let wake = self.writer_wake.notified();
            tokio::pin!(wake);
            wake.as_mut().enable();
            {
                let mut st = self.state.lock();
                match st.bounded {
                    None => break,
                    Some(read_ahead) => {
                        let slowest = match st.slowest_reader() {
                            Some(pos) => pos,
                            None => return Err(BodyError::NoReaders),
                        };
                        st.release_before(slowest);
                        if st.len.saturating_sub(slowest) < read_ahead.max(1) {
                            break;
                        }
                    }
                }
            }
            wake.await;
        }
        self.state.lock().push(bytes);
        self.readers_wake.notify_waiters();
        Ok(())
    }

    /// Appends bytes at once, without waiting: for a writer that is not an async task (the
    /// simulator's synchronous driver). Refused with [`BodyError::NoReaders`] in bounded
    /// mode, where a writer must wait for its readers.
    pub fn append_now(&self, bytes: Bytes) -> Result<(), BodyError> {
        {
            let mut st = self.state.lock();
            if st.bounded.is_some() {
                return Err(BodyError::NoReaders);
            }
            if bytes.is_empty() {
                return Ok(());
            }
            st.push(bytes);
        }
        self.readers_wake.notify_waiters();
        Ok(())
    }

    /// Marks the body complete (or failed). Small complete bodies are joined into one buffer.
    pub fn finish(&self, outcome: Result<(), BodyError>) {
        {
            let mut st = self.state.lock();
            if st.end.is_some() {
                return;
            }
            if outcome.is_ok()
                && st.bounded.is_none()
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
        }
        self.readers_wake.notify_waiters();
    }

    /// Stops keeping every byte: from now on bytes all readers have passed are released and
    /// the writer may run at most `read_ahead` bytes ahead of the slowest reader.
    pub fn set_bounded(&self, read_ahead: u64) {
        self.state.lock().bounded = Some(read_ahead);
        self.writer_wake.notify_waiters();
    }

    /// Counts the bytes this body holds into `meter` from now until they are released or
    /// the body is dropped: memory outside the store's budget, for a body that left it.
    pub fn set_meter(&self, meter: Arc<AtomicU64>) {
        let mut st = self.state.lock();
        if st.meter.is_none() {
            meter.fetch_add(st.held, Ordering::Relaxed);
            st.meter = Some(meter);
        }
    }

    /// True once [`Body::set_bounded`] was called.
    pub fn is_bounded(&self) -> bool {
        self.state.lock().bounded.is_some()
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

impl State {
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

    /// Forgets the cursors of dropped readers.
    fn prune_cursors(&mut self) {
        self.cursors.retain(|c| c.strong_count() > 0);
        self.prune_at = self.cursors.len().saturating_mul(2).max(PRUNE_MIN);
    }

    fn slowest_reader(&mut self) -> Option<u64> {
        self.prune_cursors();
        self.cursors
            .iter()
            .filter_map(|c| c.upgrade())
            .map(|c| c.load(Ordering::Acquire))
            .min()
    }

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
            let wake = body.readers_wake.notified();
            tokio::pin!(wake);
            wake.as_mut().enable();
            {
                let st = body.state.lock();
                match st.slice_at(self.pos) {
                    Err(e) => return Some(Err(e)),
                    Ok(Some(bytes)) => {
                        let bounded = st.bounded.is_some();
                        drop(st);
                        self.advance(bytes.len() as u64, bounded);
                        return Some(Ok(bytes));
                    }
                    Ok(None) => match st.end {
                        Some(Ok(())) => return None,
                        Some(Err(e)) => return Some(Err(e)),
                        None => {}
                    },
                }
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

    fn advance(&mut self, n: u64, bounded: bool) {
        self.pos += n;
        self.cursor.store(self.pos, Ordering::Release);
        if bounded {
            self.body.writer_wake.notify_waiters();
        }
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

impl Drop for BodyReader {
    fn drop(&mut self) {
        // A vanished reader may be what the bounded writer waits on.
        self.cursor.store(u64::MAX, Ordering::Release);
        self.body.writer_wake.notify_waiters();
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

    #[tokio::test]
    async fn bounded_writer_waits_for_slow_reader_and_releases_bytes() {
        let body = Body::new(None);
        body.set_bounded(16);
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
    async fn bounded_writer_stops_when_no_reader_is_left() {
        let body = Body::new(None);
        body.set_bounded(4);
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
}

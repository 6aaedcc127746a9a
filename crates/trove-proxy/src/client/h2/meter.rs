//! A budget of control frames per connection, read from the frame headers the client
//! sends, so that a flood h2 only bounds in memory (PING, SETTINGS; also WINDOW_UPDATE,
//! RST_STREAM, PRIORITY and frame types h2 ignores) is closed with GOAWAY
//! ENHANCE_YOUR_CALM.
//!
//! h2 answers each PING and SETTINGS before it reads the next frame, so a flood holds no
//! more than one reply and its socket buffers, but it never ends one: each frame costs a
//! read, a reply and a wake-up for as long as the client likes. [`Metered`] sits between
//! the socket and h2 and only *reads* frame headers (the 9 bytes before each payload, after
//! the 24-byte preface) to know their types; it neither produces nor alters a byte. Each
//! control frame costs one unit of [`MAX_CONTROL_FRAMES`]; useful work earns units back
//! (one per stream accepted, one per KiB written to the client), up to the same cap, so
//! that a client making requests is never cut off however long it lives.

use bytes::Bytes;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

/// Control frames a connection may send beyond what its useful work earns (nginx's
/// figure for its own flood detection).
pub const MAX_CONTROL_FRAMES: i64 = 10_000;

/// Bytes written to the client that earn one unit back.
const EARNED_PER: u64 = 1024;

/// The 24-byte client preface (RFC 9113 §3.4), which is no frame.
const PREFACE_LEN: usize = 24;

/// A connection's control-frame budget, shared by its [`Metered`] socket and its driver.
#[derive(Debug)]
pub struct Budget {
    left: AtomicI64,
    /// The type of the frame that spent the budget.
    spent_on: AtomicU8,
    spent: Notify,
}

impl Budget {
    pub fn new() -> Budget {
        Budget {
            left: AtomicI64::new(MAX_CONTROL_FRAMES),
            spent_on: AtomicU8::new(0),
            spent: Notify::new(),
        }
    }

    /// Earns `n` units back (never past [`MAX_CONTROL_FRAMES`]).
    pub fn earn(&self, n: u64) {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let _ = self
            .left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                Some(left.saturating_add(n).min(MAX_CONTROL_FRAMES))
            });
    }

    /// Spends a unit for a frame of type `kind`; true if that spent the budget.
    fn spend(&self, kind: u8) -> bool {
        if self.left.fetch_sub(1, Ordering::Relaxed) > 0 {
            return false;
        }
        self.spent_on.store(kind, Ordering::Relaxed);
        // Stores a permit when the driver is not waiting yet.
        self.spent.notify_one();
        true
    }

    /// Completes once the budget is spent.
    pub async fn spent(&self) {
        self.spent.notified().await;
    }

    /// The name of the frame type that spent the budget.
    pub fn spent_on(&self) -> &'static str {
        match self.spent_on.load(Ordering::Relaxed) {
            0 => "DATA",
            2 => "PRIORITY",
            3 => "RST_STREAM",
            4 => "SETTINGS",
            6 => "PING",
            8 => "WINDOW_UPDATE",
            _ => "unknown",
        }
    }
}

/// Whether a frame of this type costs a unit: the control frames h2 answers or keeps
/// without a stream to show for it, and the types it ignores (RFC 9113 §5.5).
fn costs(kind: u8) -> bool {
    matches!(kind, 2 | 3 | 4 | 6 | 8) || kind > 9
}

/// The client's socket, its frame headers counted as they are read. Bytes already read
/// from it (the h2c preface, which the HTTP/1 side read before it knew) are read again
/// first.
pub struct Metered<T> {
    io: T,
    read: Bytes,
    budget: std::sync::Arc<Budget>,
    preface_left: usize,
    head: [u8; 9],
    head_len: usize,
    payload_left: usize,
    /// Bytes written not yet earned back.
    written: u64,
    /// The budget is spent: nothing more is read (the driver closes the connection).
    stopped: bool,
}

impl<T> Metered<T> {
    pub fn new(io: T, read: Bytes, budget: std::sync::Arc<Budget>) -> Metered<T> {
        Metered {
            io,
            read,
            budget,
            preface_left: PREFACE_LEN,
            head: [0; 9],
            head_len: 0,
            payload_left: 0,
            written: 0,
            stopped: false,
        }
    }

    /// Follows the frame boundaries through `bytes`, just read.
    fn scan(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let n = if self.preface_left > 0 {
                let n = self.preface_left.min(bytes.len());
                self.preface_left -= n;
                n
            } else if self.payload_left > 0 {
                let n = self.payload_left.min(bytes.len());
                self.payload_left -= n;
                n
            } else {
                let n = (9 - self.head_len).min(bytes.len());
                self.head[self.head_len..self.head_len + n].copy_from_slice(&bytes[..n]);
                self.head_len += n;
                if self.head_len == 9 {
                    self.head_len = 0;
                    let h = &self.head;
                    self.payload_left =
                        usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                    if costs(h[3]) && self.budget.spend(h[3]) {
                        self.stopped = true;
                    }
                }
                n
            };
            bytes = &bytes[n..];
        }
    }

    fn wrote(&mut self, n: usize) {
        self.written += n as u64;
        if self.written >= EARNED_PER {
            self.budget.earn(self.written / EARNED_PER);
            self.written %= EARNED_PER;
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Metered<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.stopped {
            // Not read again: the rest of the flood waits in the socket while the driver,
            // woken by the budget, sends GOAWAY (h2 reads nothing after that).
            return Poll::Pending;
        }
        let before = buf.filled().len();
        if !this.read.is_empty() {
            let n = this.read.len().min(buf.remaining());
            let replayed = this.read.split_to(n);
            buf.put_slice(&replayed);
            this.scan(&replayed);
            return Poll::Ready(Ok(()));
        }
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            this.scan(&buf.filled()[before..]);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Metered<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, b);
        if let Poll::Ready(Ok(n)) = r {
            this.wrote(n);
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            this.wrote(n);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn frame(kind: u8, len: usize) -> Vec<u8> {
        let mut f = vec![
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            kind,
            0,
            0,
            0,
            0,
            1,
        ];
        f.extend(std::iter::repeat_n(0xaa, len));
        f
    }

    fn left(b: &Budget) -> i64 {
        b.left.load(Ordering::Relaxed)
    }

    /// Frame headers are found across any split of the bytes, payloads (even ones that
    /// look like headers) are skipped, and only control frames cost.
    #[test]
    fn counts_control_frames_across_splits() {
        let mut bytes = crate::client::h2::PREFACE.to_vec();
        bytes.extend(frame(4, 12)); // SETTINGS
        bytes.extend(frame(1, 40)); // HEADERS
        bytes.extend(frame(0, 9)); // DATA whose payload could pass for a header
        bytes.extend(frame(6, 8)); // PING
        bytes.extend(frame(8, 4)); // WINDOW_UPDATE
        bytes.extend(frame(0xfa, 3)); // an unknown type
        for split in [1, 2, 5, 9, 10, 64, bytes.len()] {
            let budget = Arc::new(Budget::new());
            let mut m = Metered::new((), Bytes::new(), Arc::clone(&budget));
            for piece in bytes.chunks(split) {
                m.scan(piece);
            }
            assert_eq!(left(&budget), MAX_CONTROL_FRAMES - 4, "split {split}");
            assert_eq!((m.head_len, m.payload_left), (0, 0));
        }
    }

    /// Spent once past the cap; work earns units back, never past the cap.
    #[test]
    fn spent_after_the_cap_and_earned_back() {
        let budget = Arc::new(Budget::new());
        let mut m = Metered::new((), Bytes::new(), Arc::clone(&budget));
        m.scan(crate::client::h2::PREFACE);
        budget.earn(5);
        assert_eq!(left(&budget), MAX_CONTROL_FRAMES);
        let ping = frame(6, 8);
        for _ in 0..MAX_CONTROL_FRAMES {
            m.scan(&ping);
        }
        assert_eq!(left(&budget), 0);
        m.wrote(3000);
        assert_eq!((left(&budget), m.written), (2, 3000 - 2048));
        for _ in 0..3 {
            m.scan(&ping);
        }
        assert_eq!(left(&budget), -1);
        assert!(m.stopped);
        assert_eq!(budget.spent_on(), "PING");
        // The permit is stored: the driver sees it even though it was not waiting.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(1), budget.spent())
                .await
                .expect("spent");
        });
    }
}

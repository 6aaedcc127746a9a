//! Reading a client's request body: Content-Length or chunked (RFC 9112 §7.1), strictly.
//! Bad chunking is an error, never a guess, so a body can't smuggle a second request.
//!
//! Every body is read against a deadline that only a steady sender keeps pushing back
//! ([`BodyLimits`], Apache's mod_reqtimeout rule): it must be complete `[timeouts]
//! client_body` after its head, plus one second for every `[limits] client_body_min_rate`
//! bytes received so far. A client trickling a byte every few seconds is cut off after about
//! `client_body` with 408, whatever length it declared; an upload at the minimum rate or
//! faster is never cut, however large. Each wait for more bytes is also bounded on its own
//! (`[timeouts] client_head`), so a sender that stops outright is cut off sooner.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

use crate::client::buffers;
use crate::client::head::Framing;

/// Longest chunk-size line (size, extensions) or trailer line accepted.
const MAX_LINE: usize = 4096;
/// Most trailer bytes accepted.
const MAX_TRAILERS: usize = 16 * 1024;

/// The read half of a client connection with its buffer of bytes not yet consumed.
#[derive(Debug)]
pub struct ReadSide<R> {
    pub io: R,
    pub buf: BytesMut,
}

impl<R: AsyncRead + Unpin> ReadSide<R> {
    pub fn new(io: R) -> Self {
        ReadSide {
            io,
            buf: BytesMut::new(),
        }
    }

    /// Reads more bytes into the buffer; `Ok(0)` at end of stream.
    pub async fn fill(&mut self) -> std::io::Result<usize> {
        if self.buf.capacity() == 0 {
            self.buf = buffers::take_read();
        } else if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(buffers::READ);
        }
        self.io.read_buf(&mut self.buf).await
    }

    /// Gives the buffer back (to this thread's pool) if every byte in it has been consumed;
    /// the next [`ReadSide::fill`] takes one again.
    pub fn release_if_empty(&mut self) {
        if self.buf.is_empty() && self.buf.capacity() > 0 {
            buffers::give_read(std::mem::take(&mut self.buf));
        }
    }
}

/// Why a request body could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BodyReadError {
    #[error("client closed the connection mid-body")]
    Closed,
    #[error("client connection failed")]
    Io,
    #[error("client stopped sending the request body")]
    TimedOut,
    #[error("client sent the request body too slowly")]
    TooSlow,
    #[error("bad chunked encoding: {0}")]
    BadChunking(&'static str),
}

impl BodyReadError {
    /// The status to answer with: 408 for a body that took too long, else 400.
    pub fn status(self) -> http::StatusCode {
        match self {
            BodyReadError::TimedOut | BodyReadError::TooSlow => http::StatusCode::REQUEST_TIMEOUT,
            _ => http::StatusCode::BAD_REQUEST,
        }
    }
}

/// How long a request body may take (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// Longest wait for the next bytes.
    pub idle: Duration,
    /// Time allowed for the whole body, before the credit earned by bytes received.
    pub deadline: Duration,
    /// Each this many bytes received extends the deadline by one second.
    pub min_rate: u64,
}

impl BodyLimits {
    /// How long to wait for the next bytes of a body begun at `start` of which `received`
    /// bytes have arrived, and the deadline that wait is bounded by.
    pub(crate) fn next_wait(&self, start: Instant, received: u64) -> (Duration, Instant) {
        let deadline = self.deadline(start, received);
        let wait = self
            .idle
            .min(deadline.saturating_duration_since(Instant::now()));
        (wait, deadline)
    }

    /// The deadline once `received` bytes have arrived for a body begun at `start`.
    fn deadline(&self, start: Instant, received: u64) -> Instant {
        let credit = Duration::try_from_secs_f64(received as f64 / self.min_rate.max(1) as f64)
            .unwrap_or(Duration::MAX);
        start
            .checked_add(self.deadline.saturating_add(credit))
            .unwrap_or_else(|| start + Duration::from_secs(86_400 * 365))
    }
}

/// A client's request body as the cache path reads it, whatever carries it: HTTP/1
/// framing ([`RequestBody`]) or HTTP/2 DATA frames (`client::h2::body`). Statically
/// dispatched: the HTTP/1 path is compiled as before.
pub trait ClientBody: Send {
    /// The length the request declared, before any of it was read (`None`: unknown).
    fn declared_len(&self) -> Option<u64>;
    /// True once the whole body has been read (at once for a request without one).
    fn is_done(&self) -> bool;
    /// The next piece of body; `Ok(None)` at the end.
    fn next(
        &mut self,
    ) -> impl std::future::Future<Output = Result<Option<Bytes>, BodyReadError>> + Send;
}

impl<R: AsyncRead + Unpin + Send> ClientBody for RequestBody<'_, R> {
    fn declared_len(&self) -> Option<u64> {
        RequestBody::declared_len(self)
    }

    fn is_done(&self) -> bool {
        RequestBody::is_done(self)
    }

    fn next(
        &mut self,
    ) -> impl std::future::Future<Output = Result<Option<Bytes>, BodyReadError>> + Send {
        RequestBody::next(self)
    }
}

/// No body at all (a background revalidation's request).
#[derive(Debug, Clone, Copy)]
pub struct NoBody;

impl ClientBody for NoBody {
    fn declared_len(&self) -> Option<u64> {
        Some(0)
    }

    fn is_done(&self) -> bool {
        true
    }

    async fn next(&mut self) -> Result<Option<Bytes>, BodyReadError> {
        Ok(None)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Length(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkEnd,
    Trailers(usize),
    Done,
}

/// A request body being read from a [`ReadSide`].
#[derive(Debug)]
pub struct RequestBody<'a, R> {
    side: &'a mut ReadSide<R>,
    state: State,
    limits: BodyLimits,
    /// When the body began (its head was read); not read for a request without a body.
    start: Option<Instant>,
    /// Body bytes handed out so far.
    received: u64,
    /// The client closed its connection (or it failed) before the whole body came.
    gone: bool,
}

impl<'a, R: AsyncRead + Unpin> RequestBody<'a, R> {
    pub fn new(side: &'a mut ReadSide<R>, framing: Framing, limits: BodyLimits) -> Self {
        let state = match framing {
            Framing::None | Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::ChunkSize,
        };
        RequestBody {
            side,
            state,
            limits,
            // No clock read for the common bodyless request.
            start: (state != State::Done).then(Instant::now),
            received: 0,
            gone: false,
        }
    }

    /// The body's length as its head declared it (`None` when chunked).
    pub fn declared_len(&self) -> Option<u64> {
        match self.state {
            State::Length(n) if self.received == 0 => Some(n),
            State::Done if self.received == 0 => Some(0),
            _ => None,
        }
    }

    /// True when the client went away before sending the whole body (an aborted upload,
    /// not a malformed request).
    pub fn client_gone(&self) -> bool {
        self.gone
    }

    /// True once the whole body (and any trailers) has been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    async fn need_more(&mut self) -> Result<(), BodyReadError> {
        let start = *self.start.get_or_insert_with(Instant::now);
        // Past the deadline, bytes already waiting are still taken (the timeout polls the
        // read once first): the wait may have been ours, streaming to a slow origin.
        let (wait, deadline) = self.limits.next_wait(start, self.received);
        match tokio::time::timeout(wait, self.side.fill()).await {
            Err(_) if Instant::now() >= deadline => Err(BodyReadError::TooSlow),
            Err(_) => Err(BodyReadError::TimedOut),
            Ok(Ok(0)) => {
                self.gone = true;
                Err(BodyReadError::Closed)
            }
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => {
                self.gone = true;
                Err(BodyReadError::Io)
            }
        }
    }

    /// Takes one CRLF-terminated line from the buffer, if complete.
    fn take_line(&mut self) -> Result<Option<Bytes>, BodyReadError> {
        match self.side.buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                if i == 0 || self.side.buf[i - 1] != b'\r' {
                    return Err(BodyReadError::BadChunking("line not ended by CRLF"));
                }
                let line = self.side.buf.split_to(i + 1).freeze();
                Ok(Some(line.slice(..i - 1)))
            }
            None if self.side.buf.len() > MAX_LINE => {
                Err(BodyReadError::BadChunking("line too long"))
            }
            None => Ok(None),
        }
    }

    /// The next piece of body; `Ok(None)` at the end.
    pub async fn next(&mut self) -> Result<Option<Bytes>, BodyReadError> {
        loop {
            match self.state {
                State::Done => return Ok(None),
                State::Length(0) => {
                    self.state = State::Done;
                    return Ok(None);
                }
                State::Length(n) | State::ChunkData(n) => {
                    if self.side.buf.is_empty() {
                        self.need_more().await?;
                    }
                    let take = (self.side.buf.len() as u64).min(n) as usize;
                    let bytes = self.side.buf.split_to(take).freeze();
                    let left = n - take as u64;
                    self.received += take as u64;
                    self.state = match self.state {
                        State::Length(_) if left == 0 => State::Done,
                        State::Length(_) => State::Length(left),
                        _ if left == 0 => State::ChunkEnd,
                        _ => State::ChunkData(left),
                    };
                    return Ok(Some(bytes));
                }
                State::ChunkSize => match self.take_line()? {
                    None => self.need_more().await?,
                    Some(line) => {
                        let size = parse_chunk_size(&line)?;
                        self.state = if size == 0 {
                            State::Trailers(0)
                        } else {
                            State::ChunkData(size)
                        };
                    }
                },
                State::ChunkEnd => {
                    if self.side.buf.len() < 2 {
                        self.need_more().await?;
                        continue;
                    }
                    if &self.side.buf[..2] != b"\r\n" {
                        return Err(BodyReadError::BadChunking(
                            "chunk data not followed by CRLF",
                        ));
                    }
                    self.side.buf.advance(2);
                    self.state = State::ChunkSize;
                }
                State::Trailers(seen) => match self.take_line()? {
                    None => self.need_more().await?,
                    Some(line) if line.is_empty() => {
                        self.state = State::Done;
                        return Ok(None);
                    }
                    Some(line) => {
                        // Trailer fields are read and dropped: trove does not forward them.
                        let seen = seen + line.len() + 2;
                        if seen > MAX_TRAILERS {
                            return Err(BodyReadError::BadChunking("trailers too large"));
                        }
                        if line[0] == b' ' || line[0] == b'\t' || !line.contains(&b':') {
                            return Err(BodyReadError::BadChunking("invalid trailer field"));
                        }
                        self.state = State::Trailers(seen);
                    }
                },
            }
        }
    }

    /// Reads and discards the rest of the body, so the next request on the connection can
    /// be parsed. Gives up (returns false) after `limit` bytes.
    pub async fn drain(&mut self, limit: u64) -> bool {
        let mut seen = 0u64;
        loop {
            match self.next().await {
                Ok(Some(b)) => {
                    seen += b.len() as u64;
                    if seen > limit {
                        return false;
                    }
                }
                Ok(None) => return true,
                Err(_) => return false,
            }
        }
    }
}

/// `1*HEXDIG [ chunk-ext ]`; sizes that would overflow are refused.
fn parse_chunk_size(line: &[u8]) -> Result<u64, BodyReadError> {
    let end = line
        .iter()
        .position(|&b| b == b';' || b == b' ' || b == b'\t')
        .unwrap_or(line.len());
    let digits = &line[..end];
    if digits.is_empty() || digits.len() > 15 {
        return Err(BodyReadError::BadChunking("invalid chunk size"));
    }
    let mut n: u64 = 0;
    for &d in digits {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => return Err(BodyReadError::BadChunking("invalid chunk size")),
        };
        n = n * 16 + v as u64;
    }
    let rest = &line[end..];
    if rest.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(BodyReadError::BadChunking("invalid chunk extension"));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_all(input: &'static [u8], framing: Framing) -> Result<Vec<u8>, BodyReadError> {
        let mut side = ReadSide::new(input);
        let mut body = RequestBody::new(&mut side, framing, limits());
        let mut out = Vec::new();
        while let Some(b) = body.next().await? {
            out.extend_from_slice(&b);
        }
        Ok(out)
    }

    fn limits() -> BodyLimits {
        BodyLimits {
            idle: Duration::from_secs(5),
            deadline: Duration::from_secs(5),
            min_rate: 1024,
        }
    }

    /// mod_reqtimeout's rule in virtual time: each `min_rate` bytes buys one more second.
    #[tokio::test(start_paused = true)]
    async fn the_deadline_moves_only_with_bytes_received() {
        let l = BodyLimits {
            idle: Duration::from_secs(60),
            deadline: Duration::from_secs(10),
            min_rate: 100,
        };
        let t0 = Instant::now();
        assert_eq!(l.deadline(t0, 0), t0 + Duration::from_secs(10));
        assert_eq!(l.deadline(t0, 250), t0 + Duration::from_millis(12_500));
        assert!(l.deadline(t0, u64::MAX) > t0 + Duration::from_secs(86_400));
    }

    /// A body trickled a byte at a time (each read well within the idle timeout) is cut
    /// off once the deadline passes, with 408.
    #[tokio::test(start_paused = true)]
    async fn a_trickled_body_is_cut_off_at_the_deadline() {
        let (mut client, server) = tokio::io::duplex(1024);
        let mut side = ReadSide::new(server);
        let l = BodyLimits {
            idle: Duration::from_secs(30),
            deadline: Duration::from_secs(10),
            min_rate: 1024,
        };
        let trickle = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            loop {
                if client.write_all(b"x").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        });
        let start = Instant::now();
        let mut body = RequestBody::new(&mut side, Framing::Length(100_000), l);
        let err = loop {
            match body.next().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("the body can't be complete"),
                Err(e) => break e,
            }
        };
        assert_eq!(err, BodyReadError::TooSlow);
        assert_eq!(err.status(), http::StatusCode::REQUEST_TIMEOUT);
        let took = start.elapsed();
        assert!(
            took >= Duration::from_secs(10) && took < Duration::from_secs(11),
            "{took:?}"
        );
        trickle.abort();
    }

    #[tokio::test]
    async fn chunked_body_with_extensions_and_trailers() {
        let got = read_all(
            b"3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n",
            Framing::Chunked,
        )
        .await
        .unwrap();
        assert_eq!(got, b"abcde");
    }

    #[tokio::test]
    async fn bad_chunking_is_an_error() {
        assert!(read_all(b"zz\r\nabc\r\n0\r\n\r\n", Framing::Chunked)
            .await
            .is_err());
        assert!(read_all(b"3\r\nabcX\r\n0\r\n\r\n", Framing::Chunked)
            .await
            .is_err());
        assert!(read_all(b"3\nabc\r\n0\r\n\r\n", Framing::Chunked)
            .await
            .is_err());
        assert!(read_all(b"ffffffffffffffffff\r\n", Framing::Chunked)
            .await
            .is_err());
    }

    #[tokio::test]
    async fn short_body_is_closed_error() {
        assert_eq!(
            read_all(b"abc", Framing::Length(5)).await,
            Err(BodyReadError::Closed)
        );
        assert_eq!(
            read_all(b"abcde", Framing::Length(5)).await.unwrap(),
            b"abcde"
        );
    }
}

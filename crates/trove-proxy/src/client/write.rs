//! Writing responses to a client: the status line and head, then the body framed by
//! Content-Length, chunked coding (HTTP/1.1 clients) or connection close (HTTP/1.0).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderMap, StatusCode, Version};
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// How the body that follows a head is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutFraming {
    /// No body follows (HEAD, 204, 304); `Content-Length` is still sent when known, as the
    /// GET would have had it.
    NoBody {
        content_length: Option<u64>,
    },
    Length(u64),
    Chunked,
    /// HTTP/1.0 client and unknown length: the body ends when the connection closes.
    Close,
}

impl OutFraming {
    /// Chooses framing for a body of `len` bytes (if known) to a client of `version`.
    pub fn for_body(len: Option<u64>, version: Version) -> Self {
        match len {
            Some(n) => OutFraming::Length(n),
            None if version == Version::HTTP_11 => OutFraming::Chunked,
            None => OutFraming::Close,
        }
    }
}

/// What a [`ClientWriter`] writes to: any byte sink, and for a plain TCP connection the
/// socket itself, which bodies on disk are `sendfile`d to.
pub trait Sink: AsyncWrite + Unpin {
    /// The TCP socket under this writer, if there is one.
    fn tcp(&self) -> Option<&tokio::net::TcpStream> {
        None
    }
}

impl Sink for tokio::net::tcp::OwnedWriteHalf {
    fn tcp(&self) -> Option<&tokio::net::TcpStream> {
        Some(self.as_ref())
    }
}

impl Sink for Vec<u8> {}

/// Why sending a body from disk failed.
#[derive(Debug)]
pub enum DiskSendError {
    /// The record's region was reclaimed while it was sent: the connection was reset so
    /// the client can't take what it got for the whole body.
    Reused,
    /// The client or the file failed (or the client took too long).
    Io(std::io::Error),
}

/// The write half of a client connection, counting bytes sent.
#[derive(Debug)]
pub struct ClientWriter<W> {
    pub io: W,
    pub sent: u64,
    head: BytesMut,
    /// Longest a single write may wait for the client to accept bytes.
    timeout: std::time::Duration,
}

fn timed_out() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "client did not accept bytes in time",
    )
}

/// Encodes a response head. Hop-by-hop fields must already be gone from `headers`.
pub fn encode_head(
    out: &mut BytesMut,
    status: StatusCode,
    headers: &HeaderMap,
    wire: &[u8],
    framing: OutFraming,
    keep_alive: bool,
    client_version: Version,
) {
    out.reserve(256 + headers.len() * 48 + wire.len());
    out.put_slice(b"HTTP/1.1 ");
    out.put_slice(status.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(status.canonical_reason().unwrap_or("Unknown").as_bytes());
    out.put_slice(b"\r\n");
    for (name, value) in headers {
        out.put_slice(name.as_str().as_bytes());
        out.put_slice(b": ");
        out.put_slice(value.as_bytes());
        out.put_slice(b"\r\n");
    }
    out.put_slice(wire);
    let mut itoa = itoa::Buffer::new();
    match framing {
        OutFraming::NoBody {
            content_length: Some(n),
        }
        | OutFraming::Length(n) => {
            out.put_slice(b"content-length: ");
            out.put_slice(itoa.format(n).as_bytes());
            out.put_slice(b"\r\n");
        }
        OutFraming::Chunked => out.put_slice(b"transfer-encoding: chunked\r\n"),
        OutFraming::NoBody {
            content_length: None,
        }
        | OutFraming::Close => {}
    }
    let keep_alive = keep_alive && framing != OutFraming::Close;
    if !keep_alive {
        out.put_slice(b"connection: close\r\n");
    } else if client_version == Version::HTTP_10 {
        out.put_slice(b"connection: keep-alive\r\n");
    }
    out.put_slice(b"\r\n");
}

impl<W: AsyncWrite + Unpin> ClientWriter<W> {
    pub fn new(io: W, timeout: std::time::Duration) -> Self {
        ClientWriter {
            io,
            timeout,
            sent: 0,
            // Taken on first use: an idle connection holds no buffer.
            head: BytesMut::new(),
        }
    }

    /// Gives back the buffer heads are encoded in (an idle connection holds none; the next
    /// head takes one again, see [`crate::client::buffers`]).
    pub fn release_buffer(&mut self) {
        if self.head.capacity() > 0 {
            crate::client::buffers::give_head(std::mem::take(&mut self.head));
        }
    }

    /// The head buffer, emptied, taken from the thread's pool if this connection gave its
    /// own back.
    fn head_buffer(&mut self) -> &mut BytesMut {
        if self.head.capacity() == 0 {
            self.head = crate::client::buffers::take_head();
        }
        self.head.clear();
        &mut self.head
    }

    /// Writes a head and (optionally) the first or only body bytes in one vectored write.
    // The arguments are the parts of one response head; a struct would only be unpacked here.
    #[allow(clippy::too_many_arguments)]
    pub async fn send_head(
        &mut self,
        status: StatusCode,
        headers: &HeaderMap,
        wire: &[u8],
        framing: OutFraming,
        keep_alive: bool,
        client_version: Version,
        body: Option<Bytes>,
    ) -> std::io::Result<()> {
        encode_head(
            self.head_buffer(),
            status,
            headers,
            wire,
            framing,
            keep_alive,
            client_version,
        );
        let head = self.head.split().freeze();
        match body {
            Some(b) if !b.is_empty() => {
                if framing == OutFraming::Chunked {
                    let mut buf = head
                        .chain(chunk_prefix(b.len()))
                        .chain(b)
                        .chain(&b"\r\n"[..]);
                    self.sent += buf.remaining() as u64;
                    tokio::time::timeout(self.timeout, self.io.write_all_buf(&mut buf))
                        .await
                        .map_err(|_| timed_out())?
                } else {
                    let mut buf = head.chain(b);
                    self.sent += buf.remaining() as u64;
                    tokio::time::timeout(self.timeout, self.io.write_all_buf(&mut buf))
                        .await
                        .map_err(|_| timed_out())?
                }
            }
            _ => {
                self.sent += head.len() as u64;
                let mut buf = head;
                tokio::time::timeout(self.timeout, self.io.write_all_buf(&mut buf))
                    .await
                    .map_err(|_| timed_out())?
            }
        }
    }

    /// Writes body bytes, chunk-coded when `chunked`.
    pub async fn send_body(&mut self, b: Bytes, chunked: bool) -> std::io::Result<()> {
        if b.is_empty() {
            return Ok(());
        }
        if chunked {
            let mut buf = chunk_prefix(b.len()).chain(b).chain(&b"\r\n"[..]);
            self.sent += buf.remaining() as u64;
            tokio::time::timeout(self.timeout, self.io.write_all_buf(&mut buf))
                .await
                .map_err(|_| timed_out())?
        } else {
            self.sent += b.len() as u64;
            let mut b = b;
            tokio::time::timeout(self.timeout, self.io.write_all_buf(&mut b))
                .await
                .map_err(|_| timed_out())?
        }
    }

    /// Ends a chunked body.
    pub async fn finish_chunked(&mut self) -> std::io::Result<()> {
        self.sent += 5;
        tokio::time::timeout(self.timeout, self.io.write_all(b"0\r\n\r\n"))
            .await
            .map_err(|_| timed_out())?
    }

    /// Sends an interim `100 Continue`.
    pub async fn send_continue(&mut self) -> std::io::Result<()> {
        tokio::time::timeout(
            self.timeout,
            self.io.write_all(b"HTTP/1.1 100 Continue\r\n\r\n"),
        )
        .await
        .map_err(|_| timed_out())?
    }

    /// Writes an interim (1xx) response head; `headers` are already fit to forward.
    pub async fn send_interim(
        &mut self,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> std::io::Result<()> {
        let mut out = BytesMut::with_capacity(64 + headers.len() * 48);
        out.put_slice(b"HTTP/1.1 ");
        out.put_slice(status.as_str().as_bytes());
        out.put_u8(b' ');
        out.put_slice(status.canonical_reason().unwrap_or("Unknown").as_bytes());
        out.put_slice(b"\r\n");
        for (name, value) in headers {
            out.put_slice(name.as_str().as_bytes());
            out.put_slice(b": ");
            out.put_slice(value.as_bytes());
            out.put_slice(b"\r\n");
        }
        out.put_slice(b"\r\n");
        tokio::time::timeout(self.timeout, self.io.write_all(&out))
            .await
            .map_err(|_| timed_out())??;
        self.sent += out.len() as u64;
        Ok(())
    }

    pub async fn flush(&mut self) -> std::io::Result<()> {
        self.io.flush().await
    }
}

impl<W: Sink> ClientWriter<W> {
    /// Writes a head announcing `len` body bytes, then that body from disk: with
    /// `sendfile(2)` on a TCP socket (the head sent on its own first, see below), else read
    /// and written. Each `sendfile` call runs under
    /// the tier's pin (`trove_store::FileBody::pinned`; see `trove_disk::zero_copy` for why
    /// that keeps every byte sent the record's).
    #[allow(clippy::too_many_arguments)]
    pub async fn send_disk(
        &mut self,
        status: StatusCode,
        headers: &HeaderMap,
        wire: &[u8],
        keep_alive: bool,
        client_version: Version,
        body: &dyn trove_store::FileBody,
    ) -> Result<(), DiskSendError> {
        let len = body.len();
        encode_head(
            self.head_buffer(),
            status,
            headers,
            wire,
            OutFraming::Length(len),
            keep_alive,
            client_version,
        );
        let head = self.head.split().freeze();
        let timeout = self.timeout;
        let Some(tcp) = self.io.tcp() else {
            self.sent += head.len() as u64;
            let mut h = head;
            tokio::time::timeout(timeout, self.io.write_all_buf(&mut h))
                .await
                .map_err(|_| DiskSendError::Io(timed_out()))?
                .map_err(DiskSendError::Io)?;
            let mut at = 0;
            while at < len {
                let to = (at + (256 << 10)).min(len);
                let b = body.read(at, to).map_err(disk_error)?;
                self.send_body(b, false).await.map_err(DiskSendError::Io)?;
                at = to;
            }
            return Ok(());
        };
        // The head goes out at once, not held back with MSG_MORE to share the body's first
        // segment: measured (BENCHMARKS.md, "100 KB disk hits at par"), a corked head made
        // BBR's pacing arm a timer on nearly every send and cut 100 KB disk hits to 0.65 of
        // nginx's; sent at once, as nginx does, they run at 1.01-1.03 of nginx's.
        let mut done = 0;
        while done < head.len() {
            let n = tokio::time::timeout(
                timeout,
                tcp.async_io(tokio::io::Interest::WRITABLE, || {
                    rustix::net::send(tcp, &head[done..], rustix::net::SendFlags::NOSIGNAL)
                        .map_err(std::io::Error::from)
                }),
            )
            .await
            .map_err(|_| DiskSendError::Io(timed_out()))?
            .map_err(DiskSendError::Io)?;
            done += n;
        }
        self.sent += head.len() as u64;
        let (file, base) = body.file();
        let mut offset = base;
        let end = base + len;
        while offset < end {
            let want = (end - offset).min(1 << 30) as usize;
            let n = tokio::time::timeout(
                timeout,
                tcp.async_io(tokio::io::Interest::WRITABLE, || {
                    // Under a pin for the call only, never across an await: see
                    // `trove_disk::zero_copy`, "Pins".
                    body.pinned(&mut || {
                        rustix::fs::sendfile(tcp, file, Some(&mut offset), want)
                            .map_err(std::io::Error::from)
                    })
                }),
            )
            .await
            .map_err(|_| DiskSendError::Io(timed_out()))?
            .map_err(|e| {
                if trove_store::tier::is_reused(&e) {
                    reset(tcp);
                    DiskSendError::Reused
                } else {
                    DiskSendError::Io(e)
                }
            })?;
            if n == 0 {
                return Err(DiskSendError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "data file shorter than the record",
                )));
            }
            self.sent += n as u64;
        }
        Ok(())
    }
}

/// A disk read's error: [`DiskSendError::Reused`] when the record's place was reused.
pub fn disk_error(e: std::io::Error) -> DiskSendError {
    if trove_store::tier::is_reused(&e) {
        DiskSendError::Reused
    } else {
        DiskSendError::Io(e)
    }
}

/// Makes the coming close a reset (`SO_LINGER` 0): what is still queued for the client
/// is dropped, not delivered.
fn reset(tcp: &tokio::net::TcpStream) {
    let _ = rustix::net::sockopt::set_socket_linger(tcp, Some(std::time::Duration::ZERO));
}

fn chunk_prefix(len: usize) -> Bytes {
    Bytes::from(format!("{len:x}\r\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_for_http10_keep_alive_says_so() {
        let mut out = BytesMut::new();
        let mut h = HeaderMap::new();
        h.insert("x-a", "1".parse().unwrap());
        encode_head(
            &mut out,
            StatusCode::OK,
            &h,
            b"",
            OutFraming::Length(3),
            true,
            Version::HTTP_10,
        );
        let s = std::str::from_utf8(&out).unwrap();
        assert_eq!(
            s,
            "HTTP/1.1 200 OK\r\nx-a: 1\r\ncontent-length: 3\r\nconnection: keep-alive\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn chunked_body_is_framed() {
        let mut w = ClientWriter::new(Vec::new(), std::time::Duration::from_secs(5));
        w.send_head(
            StatusCode::OK,
            &HeaderMap::new(),
            b"",
            OutFraming::Chunked,
            true,
            Version::HTTP_11,
            Some(Bytes::from_static(b"hello")),
        )
        .await
        .unwrap();
        w.finish_chunked().await.unwrap();
        let s = String::from_utf8(w.io).unwrap();
        assert!(
            s.ends_with("transfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
            "{s}"
        );
    }
}

//! What a client connection runs over: TCP, or TLS over TCP (a listener with `tls`). One
//! type for each half, so the connection loop, the request path and the reply writer are
//! compiled once and never ask which it is. The few places that must know ask here:
//! `sendfile` needs the TCP socket itself (a TLS connection's bodies are read and
//! encrypted instead), and an idle connection waits for readiness on the socket, which for
//! TLS means asking rustls first whether it holds decrypted bytes (see
//! [`ClientRead::readable`]).
//!
//! A TLS connection's halves share the stream behind a mutex, taken only for the length of
//! one poll (tokio's own `split` does the same), so the read half can also reach the socket
//! and rustls's state to wait for readiness without a buffer.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use crate::client::write::Sink;

type Tls = TlsStream<TcpStream>;

/// A whole client connection, before it is split, and after a tunnel puts it together.
pub enum ClientStream {
    Plain(TcpStream),
    Tls(Box<Tls>),
}

/// One half of a TLS connection: the stream, shared with the other half.
pub struct TlsHalf(Arc<Mutex<Box<Tls>>>);

/// The read half of a client connection.
pub enum ClientRead {
    Plain(OwnedReadHalf),
    Tls(TlsHalf),
}

/// The write half of a client connection.
pub enum ClientWrite {
    Plain(OwnedWriteHalf),
    Tls(TlsHalf),
}

impl ClientStream {
    /// Whether TLS's ALPN chose HTTP/2 (`h2`).
    pub fn negotiated_h2(&self) -> bool {
        match self {
            ClientStream::Plain(_) => false,
            ClientStream::Tls(s) => s.get_ref().1.alpn_protocol() == Some(b"h2"),
        }
    }

    /// Sends small writes at once (no Nagle): a response's head and its body, or an HTTP/2
    /// frame, must not wait for the client's delayed ACK of the one before.
    pub fn set_nodelay(&self) {
        let _ = match self {
            ClientStream::Plain(s) => s.set_nodelay(true),
            ClientStream::Tls(s) => s.get_ref().0.set_nodelay(true),
        };
    }

    /// The two halves, each driven on its own.
    pub fn split(self) -> (ClientRead, ClientWrite) {
        self.set_nodelay();
        match self {
            ClientStream::Plain(s) => {
                let (r, w) = s.into_split();
                (ClientRead::Plain(r), ClientWrite::Plain(w))
            }
            ClientStream::Tls(s) => {
                let shared = Arc::new(Mutex::new(s));
                (
                    ClientRead::Tls(TlsHalf(Arc::clone(&shared))),
                    ClientWrite::Tls(TlsHalf(shared)),
                )
            }
        }
    }
}

impl ClientRead {
    /// Polls whether the client may have sent something: the socket's readiness, which needs
    /// no buffer, so an idle connection can give its buffer back while it waits. A TLS
    /// connection may hold bytes already decrypted (or records read but not yet decrypted)
    /// that the socket no longer shows: rustls is asked first, and those count as ready.
    /// Polled by hand (one task only waits on a connection): no future at all, where
    /// tokio's `readable()` is some 180 bytes that every idle connection's task would carry.
    pub fn poll_readable(&self, cx: &mut std::task::Context<'_>) -> Poll<io::Result<()>> {
        match self {
            ClientRead::Plain(r) => r.as_ref().poll_read_ready(cx),
            ClientRead::Tls(h) => {
                let mut s = h.0.lock();
                let (tcp, conn) = s.get_mut();
                match conn.process_new_packets() {
                    Ok(st) if st.plaintext_bytes_to_read() == 0 && !st.peer_has_closed() => {}
                    // Something to read, an end, or an error the next read reports.
                    _ => return Poll::Ready(Ok(())),
                }
                tcp.poll_read_ready(cx)
            }
        }
    }

    /// The connection put back together from its halves (for a tunnel).
    pub fn reunite(self, w: ClientWrite) -> Option<ClientStream> {
        match (self, w) {
            (ClientRead::Plain(r), ClientWrite::Plain(w)) => {
                r.reunite(w).ok().map(ClientStream::Plain)
            }
            (ClientRead::Tls(r), ClientWrite::Tls(w)) if Arc::ptr_eq(&r.0, &w.0) => {
                drop(w);
                Arc::try_unwrap(r.0)
                    .ok()
                    .map(|m| ClientStream::Tls(m.into_inner()))
            }
            _ => None,
        }
    }
}

impl AsyncRead for TlsHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut **self.0.lock()).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsHalf {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut **self.0.lock()).poll_write(cx, b)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut **self.0.lock()).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.lock().is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut **self.0.lock()).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut **self.0.lock()).poll_shutdown(cx)
    }
}

impl AsyncRead for ClientRead {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientRead::Plain(r) => Pin::new(r).poll_read(cx, buf),
            ClientRead::Tls(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

macro_rules! write_both {
    ($ty:ty, $($variant:ident),+) => {
        impl AsyncWrite for $ty {
            fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    $(Self::$variant(w) => Pin::new(w).poll_write(cx, b),)+
                }
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[io::IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    $(Self::$variant(w) => Pin::new(w).poll_write_vectored(cx, bufs),)+
                }
            }

            fn is_write_vectored(&self) -> bool {
                match self {
                    $(Self::$variant(w) => w.is_write_vectored(),)+
                }
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $(Self::$variant(w) => Pin::new(w).poll_flush(cx),)+
                }
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $(Self::$variant(w) => Pin::new(w).poll_shutdown(cx),)+
                }
            }
        }
    };
}

write_both!(ClientWrite, Plain, Tls);
write_both!(ClientStream, Plain, Tls);

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ClientStream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl Sink for ClientWrite {
    /// Only a cleartext connection's socket: bytes `sendfile`d past TLS would go out
    /// unencrypted.
    fn tcp(&self) -> Option<&TcpStream> {
        match self {
            ClientWrite::Plain(w) => Some(w.as_ref()),
            ClientWrite::Tls(_) => None,
        }
    }
}

//! What a client connection runs over: TCP, or TLS over TCP (a listener with `tls`). One
//! type for each half, so the connection loop, the request path and the reply writer are
//! compiled once and never ask which it is. The few places that must know ask here:
//! `sendfile` needs the TCP socket itself (a TLS connection's bodies are read and
//! encrypted instead), and an idle connection waits for readiness on the bare socket only
//! in cleartext (see [`ClientRead::readable`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};
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

/// The read half of a client connection.
pub enum ClientRead {
    Plain(OwnedReadHalf),
    Tls(ReadHalf<Box<Tls>>),
}

/// The write half of a client connection.
pub enum ClientWrite {
    Plain(OwnedWriteHalf),
    Tls(WriteHalf<Box<Tls>>),
}

impl ClientStream {
    /// The two halves, each driven on its own.
    pub fn split(self) -> (ClientRead, ClientWrite) {
        match self {
            ClientStream::Plain(s) => {
                let _ = s.set_nodelay(true);
                let (r, w) = s.into_split();
                (ClientRead::Plain(r), ClientWrite::Plain(w))
            }
            ClientStream::Tls(s) => {
                let _ = s.get_ref().0.set_nodelay(true);
                let (r, w) = tokio::io::split(s);
                (ClientRead::Tls(r), ClientWrite::Tls(w))
            }
        }
    }
}

impl ClientRead {
    /// Waits until the client may have sent something. On a cleartext connection this is
    /// the socket's readiness, which needs no buffer, so an idle connection can give its
    /// buffer back while it waits. A TLS connection may hold decrypted bytes the socket
    /// no longer shows, so it reports ready at once and its reader waits in `read`.
    pub async fn readable(&self) -> io::Result<()> {
        match self {
            ClientRead::Plain(r) => r.readable().await,
            ClientRead::Tls(_) => Ok(()),
        }
    }

    /// The connection put back together from its halves (for a tunnel).
    pub fn reunite(self, w: ClientWrite) -> Option<ClientStream> {
        match (self, w) {
            (ClientRead::Plain(r), ClientWrite::Plain(w)) => {
                r.reunite(w).ok().map(ClientStream::Plain)
            }
            (ClientRead::Tls(r), ClientWrite::Tls(w)) if r.is_pair_of(&w) => {
                Some(ClientStream::Tls(r.unsplit(w)))
            }
            _ => None,
        }
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

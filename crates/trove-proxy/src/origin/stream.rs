//! A connection to an origin, cleartext or TLS: one type, so hyper's client and the
//! upgrade tunnel are built once for both (no second copy of the client code per kind).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// See the module docs.
pub enum OriginStream {
    Plain(TcpStream),
    /// Boxed: rustls's connection state is a few KiB, and most origins are cleartext.
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for OriginStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            OriginStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            OriginStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for OriginStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            OriginStream::Plain(s) => Pin::new(s).poll_write(cx, b),
            OriginStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, b),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            OriginStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            OriginStream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            OriginStream::Plain(s) => s.is_write_vectored(),
            OriginStream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            OriginStream::Plain(s) => Pin::new(s).poll_flush(cx),
            OriginStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            OriginStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            OriginStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

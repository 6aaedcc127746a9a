//! The TLS handshake of a client connection on a listener with `tls`, before the
//! connection is served like any other.
//!
//! Bounded twice: in time, by `[timeouts] client_head` from accept to the end of the
//! handshake (a client that opens a connection and never sends its ClientHello, or sends it
//! a byte at a time, is closed as a slowloris is), and in CPU, by [`MAX_HANDSHAKES`] at once
//! for the whole proxy: a burst of new connections queues for a permit (within the same
//! timeout) instead of starving the requests of connections already up. A connection
//! waiting for a permit holds only its socket.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use trove_tls::{HandshakeError, ServerTls};

use crate::client::transport::ClientStream;

/// Handshakes under way at once, per proxy. A full handshake costs a core about 0.1 to
/// 1 ms (the key exchange and the signature), so this is a queue of some tenths of a second
/// of CPU at most, and a bound on the memory of half-done sessions.
pub const MAX_HANDSHAKES: usize = 256;

/// The permits of [`MAX_HANDSHAKES`].
pub fn permits() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(MAX_HANDSHAKES))
}

/// Runs the server side of the handshake; `None` (counted by reason) if it failed or took
/// longer than `timeout`.
pub async fn accept(
    tls: &ServerTls,
    tcp: TcpStream,
    permits: &Semaphore,
    timeout: Duration,
) -> Option<ClientStream> {
    let counters = tls.counters();
    let run = async {
        let _permit = permits.acquire().await.ok()?;
        Some(tls.acceptor().accept(tcp).await)
    };
    let failed = |e: HandshakeError| {
        counters.failed(e.reason);
        tracing::debug!(error = %e, "client TLS handshake failed");
        None
    };
    match tokio::time::timeout(timeout, run).await {
        Err(_) => failed(HandshakeError::timeout()),
        Ok(None) => None,
        Ok(Some(Err(e))) => failed(HandshakeError::from_io(&e)),
        Ok(Some(Ok(stream))) => {
            counters.handshakes.fetch_add(1, Ordering::Relaxed);
            if stream.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                counters.resumed.fetch_add(1, Ordering::Relaxed);
            }
            Some(ClientStream::Tls(Box::new(stream)))
        }
    }
}

//! The kit's TLS origin: a scripted origin behind rustls. Only the TLS tests include it
//! (`#[path = "kit/tls.rs"] mod kit_tls;`), so crates that borrow the kit need no TLS crates.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};

use crate::kit::{origin_conn, Action, Handler, Origin, OriginIo, SeenRequest};

impl OriginIo for tokio_rustls::server::TlsStream<TcpStream> {
    fn tcp(&self) -> &TcpStream {
        self.get_ref().0
    }
}

/// An origin that speaks only TLS, with `config`'s certificate: each connection's
/// handshake first (a failed one is counted as a connection and closed), then the same
/// scripted exchange as [`super::Origin::start`].
pub async fn start_tls(
    config: Arc<rustls::ServerConfig>,
    handler: impl Fn(&SeenRequest, usize) -> Action + Send + Sync + 'static,
) -> Origin {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let connections = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handler: Arc<Handler> = Arc::new(handler);
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let (h2, c2, s2) = (hits.clone(), connections.clone(), seen.clone());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            c2.fetch_add(1, Ordering::SeqCst);
            let (handler, hits, seen) = (handler.clone(), h2.clone(), s2.clone());
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(stream).await {
                    origin_conn(tls, handler, hits, seen).await
                }
            });
        }
    });
    Origin {
        addr,
        hits,
        connections,
        seen,
    }
}

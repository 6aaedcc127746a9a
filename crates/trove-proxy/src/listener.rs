//! Listening sockets: accept, check the ACL and the connection limit, hand the connection
//! to [`crate::client::conn::serve`].

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::client::conn::{self, ConnInfo};
use crate::settings::{Mode, Settings};
use crate::state::Shared;

/// A started proxy: its bound addresses and shared state.
pub struct Running {
    pub shared: Arc<Shared>,
    pub addrs: Vec<(Mode, SocketAddr)>,
}

/// Binds every listener and starts accepting. Must be called inside a tokio runtime.
pub async fn start(settings: Settings) -> std::io::Result<Running> {
    settings
        .validate()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // Bind every listener first: the destination guard must know their addresses (port 0
    // is only known once bound) before the first request is accepted.
    let mut bound = Vec::new();
    for l in &settings.listeners {
        let listener = TcpListener::bind(l.addr).await.map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot listen on {}: {e}", l.addr))
        })?;
        let addr = listener.local_addr()?;
        bound.push((listener, l.mode, addr));
    }
    let own: Vec<SocketAddr> = bound.iter().map(|(_, _, a)| *a).collect();
    let shared = Arc::new(Shared::new(settings, &own)?);
    let mut addrs = Vec::new();
    for (listener, mode, addr) in bound {
        addrs.push((mode, addr));
        tokio::spawn(accept_loop(listener, mode, Arc::clone(&shared)));
    }
    Ok(Running { shared, addrs })
}

async fn accept_loop(listener: TcpListener, mode: Mode, shared: Arc<Shared>) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors and the like: back off briefly rather than spin.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let open = shared.metrics.client_open.load(Ordering::Relaxed);
        if open >= shared.settings.limits.max_client_connections as i64 {
            shared.metrics.shed.fetch_add(1, Ordering::Relaxed);
            drop(stream);
            continue;
        }
        let info = ConnInfo {
            peer,
            mode,
            allowed: shared.acl.allows(peer.ip()),
        };
        tokio::spawn(conn::serve(stream, info, Arc::clone(&shared)));
    }
}

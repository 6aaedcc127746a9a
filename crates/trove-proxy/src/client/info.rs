//! What the listener knows about a client connection.

use std::net::SocketAddr;

use crate::settings::Mode;

/// What the listener knows about a connection.
#[derive(Debug, Clone, Copy)]
pub struct ConnInfo {
    pub peer: SocketAddr,
    pub mode: Mode,
    /// False when the client is outside the ACL: every request is answered 403.
    pub allowed: bool,
    /// The connection came over TLS (a listener with `tls`): logged as `https://`, and told
    /// to origins in `X-Forwarded-Proto` and `Forwarded`.
    pub tls: bool,
    /// The listener serves HTTP/2 too (`http2 = true`): on cleartext, a connection opening
    /// with the HTTP/2 preface is handed to `client::h2`.
    pub http2: bool,
}

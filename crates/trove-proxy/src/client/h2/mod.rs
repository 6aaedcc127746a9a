//! HTTP/2 to clients (RFC 9113), over TLS when ALPN chose `h2`, or in cleartext with prior
//! knowledge (`h2c`) on a listener with `http2 = true`.
//!
//! A thin front end over the one cache path: each stream becomes the same
//! [`RequestHead`](crate::client::head::RequestHead) an HTTP/1 request does
//! ([`head`]), is resolved and handled by the same `cache::handle`, its reply is written by
//! the same `client::respond::write_to` (to a stream instead of a connection,
//! [`respond`]), and it is logged, traced and counted by the same `client::exchange`.
//! Collapsed fetches, Range, 304, HEAD, PURGE, ACLs, the destination guard and
//! `Cache-Status` therefore behave as they do for HTTP/1.
//!
//! Framing, HPACK and flow control are the `h2` crate's (hyper's own), used directly rather
//! than through hyper's server for the reasons `client` gives for HTTP/1: trove decides
//! what is refused and logs it, and it needs h2's pieces one by one — the capacity a stream
//! was granted (so a slow stream holds no more than its window and the send buffer), the
//! reset and GOAWAY calls, and the builder's limits ([`conn`]).

pub mod body;
mod conn;
pub mod head;
mod meter;
pub mod respond;
mod stream;

pub use conn::{serve, serve_prefixed};

/// What an HTTP/2 client sends first (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether `buf`, not empty, could be the start of the HTTP/2 preface.
pub fn may_be_preface(buf: &[u8]) -> bool {
    let n = buf.len().min(PREFACE.len());
    n > 0 && buf[..n] == PREFACE[..n]
}

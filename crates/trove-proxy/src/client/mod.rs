//! The client side: parsing requests, reading request bodies, writing responses, and the
//! per-connection loop that ties them together.
//!
//! Written here rather than on hyper's server because a proxy's front door is where it must
//! be strictest: hyper accepts a request carrying both Content-Length and Transfer-Encoding
//! (it drops the former), does not honour `Proxy-Connection`, and answers malformed heads by
//! itself, out of sight of the access log. httparse (hyper's own parser) does the byte-level
//! parsing; the framing rules, keep-alive decisions and response writing are trove's.

pub mod body;
pub mod buffers;
pub mod conn;
pub mod exchange;
pub mod h2;
pub mod head;
pub mod info;
pub mod respond;
pub mod transport;
pub mod write;

//! The origin side: a pool of persistent connections shared by all clients (the proxy as a
//! connection cache, seed 003), and sending one request with timeouts.
//!
//! hyper's client connection is used for the wire protocol: it is well tested against real
//! servers, tolerates what RFC 9112 lets a recipient tolerate (obs-fold in responses is
//! replaced by spaces), and reports truncated or over-long bodies as errors. The pool around
//! it is trove's own, because the proxy needs per-origin limits and reuse counters that
//! hyper-util's pool does not give.

mod abandon;
mod error;
pub mod failures;
mod fetch;
mod interim;
mod pool;
mod request_body;
mod stream;

pub use abandon::abandon;
pub use error::Failed;
pub use fetch::{send, OriginError, OriginRequest, OriginResponse};
pub use interim::{Forwarded, Interim, InterimHead, InterimSlot};
pub use pool::{OriginView, Overload, Pool, PoolLimits, Reachability, UploadSlot};
pub use request_body::{body_channel, OriginRequestBody};
pub use stream::OriginStream;

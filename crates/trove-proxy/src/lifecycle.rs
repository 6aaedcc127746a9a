//! The proxy's life after start: graceful stop, and the generations a reload makes.
//!
//! **Stop** ([`Lifecycle::begin_stop`], called by [`crate::Running::stop`]): the acceptors
//! close their sockets; a connection waiting for its next request closes (within
//! [`IDLE_CHECK`] if it is in its first seconds of idleness, at once after); a request in
//! flight is answered with `Connection: close`. The caller waits for the last connection
//! within its bound, then writes out the access log.
//!
//! **Reload** ([`crate::Running::reload`]): the new settings become a new [`Shared`]
//! generation that carries over what must outlive a reload — the store and its objects, the
//! metrics, fetches in progress, the pool, resolver and log when their settings are unchanged
//! — and rebuilds the rest (routes, ACLs, limits, timeouts, the destination guard). The old
//! generation points at the new one: every connection moves to the newest generation as each
//! next request arrives, so no connection is closed and no request is lost, and a
//! connection's ACL verdict is taken again against the new ACL at that moment. A request in
//! flight finishes under the generation it started in.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// How long a connection that just became idle waits before it looks at whether the proxy
/// is stopping; after that it is told at once.
pub const IDLE_CHECK: Duration = Duration::from_secs(2);

/// Shared by every generation of one proxy.
#[derive(Debug, Default)]
pub struct Lifecycle {
    stopping: AtomicBool,
    stop: Notify,
}

impl Lifecycle {
    /// True once a graceful stop has begun.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Begins a graceful stop: new requests are refused by closing, idle connections close.
    pub fn begin_stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.stop.notify_waiters();
    }

    /// A wait for the stop, to [`enable`](tokio::sync::futures::Notified::enable) and then
    /// check [`Lifecycle::stopping`] before waiting on (the parts of [`Lifecycle::stopped`],
    /// for a caller that polls it by hand beside other things).
    pub fn stop_notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.stop.notified()
    }

    /// Resolves once a stop has begun.
    pub async fn stopped(&self) {
        let notified = self.stop.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.stopping() {
            return;
        }
        notified.await;
    }
}

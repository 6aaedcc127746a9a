//! Collapsed forwarding: concurrent misses for one key wait for the first one's response
//! head instead of each going to the origin. If that response is stored, they are served
//! from its body as it streams in; if not (private, uncacheable, an error), each goes to
//! the origin itself, because an unstored response must never be shared.
//!
//! [`KeyLocks`] is a named lock per key (Pingora's `CacheKeyLock`): one table for fetches
//! and one for background revalidations, so neither needs a prefixed key in a shared map.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;
use trove_store::Object;

/// What the first fetch produced, for those waiting on it.
#[derive(Debug, Clone)]
pub enum Collapsed {
    Stored(Arc<Object>),
    NotShared,
}

/// A fetch in progress that others may join.
#[derive(Debug)]
pub struct InFlight {
    rx: watch::Receiver<Option<Collapsed>>,
}

impl InFlight {
    /// Waits for the leader's outcome.
    pub async fn wait(&self) -> Collapsed {
        let mut rx = self.rx.clone();
        let result = match rx.wait_for(|v| v.is_some()).await {
            Ok(v) => v.clone().unwrap_or(Collapsed::NotShared),
            Err(_) => Collapsed::NotShared,
        };
        result
    }
}

/// The keys being worked on, each with whoever waits for it.
#[derive(Debug, Default)]
pub struct KeyLocks {
    map: Mutex<HashMap<String, Arc<InFlight>>>,
}

/// Held by the request that fetches. Publishing (or dropping, on any early exit) wakes the
/// waiters and removes the entry so new requests look in the store again.
pub struct Leader {
    locks: Arc<KeyLocks>,
    key: String,
    tx: Option<watch::Sender<Option<Collapsed>>>,
}

impl Leader {
    pub fn publish(mut self, outcome: Collapsed) {
        self.finish(outcome);
    }

    fn finish(&mut self, outcome: Collapsed) {
        if let Some(tx) = self.tx.take() {
            self.locks.map.lock().remove(&self.key);
            let _ = tx.send(Some(outcome));
        }
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.finish(Collapsed::NotShared);
    }
}

/// Either this request leads the work for a key, or it joins work in progress.
pub enum Role {
    Leader(Leader),
    Follower(Arc<InFlight>),
}

impl KeyLocks {
    /// Leads the work for `key`, or joins it.
    pub fn join(self: &Arc<Self>, key: &str) -> Role {
        let mut map = self.map.lock();
        if let Some(f) = map.get(key) {
            return Role::Follower(Arc::clone(f));
        }
        let (tx, rx) = watch::channel(None);
        map.insert(key.to_string(), Arc::new(InFlight { rx }));
        Role::Leader(Leader {
            locks: Arc::clone(self),
            key: key.to_string(),
            tx: Some(tx),
        })
    }
}

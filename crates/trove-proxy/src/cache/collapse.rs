//! Collapsed forwarding: concurrent misses for one key wait for the first one's response
//! head instead of each going to the origin. If that response is stored, they are served
//! from its body as it streams in; if not (private, uncacheable, an error), each goes to
//! the origin itself, because an unstored response must never be shared.

use std::sync::Arc;

use tokio::sync::watch;
use trove_store::Object;

use crate::state::Shared;

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

/// Held by the request that fetches. Publishing (or dropping, on any early exit) wakes the
/// waiters and removes the entry so new requests look in the store again.
pub struct Leader {
    shared: Arc<Shared>,
    key: String,
    tx: Option<watch::Sender<Option<Collapsed>>>,
}

impl Leader {
    pub fn publish(mut self, outcome: Collapsed) {
        self.finish(outcome);
    }

    fn finish(&mut self, outcome: Collapsed) {
        if let Some(tx) = self.tx.take() {
            self.shared.inflight.lock().remove(&self.key);
            let _ = tx.send(Some(outcome));
        }
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.finish(Collapsed::NotShared);
    }
}

/// Either this request leads the fetch for `key`, or it joins one in progress.
pub enum Role {
    Leader(Leader),
    Follower(Arc<InFlight>),
}

pub fn join(shared: &Arc<Shared>, key: &str) -> Role {
    let mut map = shared.inflight.lock();
    if let Some(f) = map.get(key) {
        return Role::Follower(Arc::clone(f));
    }
    let (tx, rx) = watch::channel(None);
    map.insert(key.to_string(), Arc::new(InFlight { rx }));
    Role::Leader(Leader {
        shared: Arc::clone(shared),
        key: key.to_string(),
        tx: Some(tx),
    })
}

//! URLs whose last response could not be stored (Varnish calls this hit-for-miss). Their
//! misses skip collapsing and keep the client's Range and validators, since there is no
//! whole response to fetch for the store. Entries expire, and a storable response clears
//! its URL's entry at once.

use std::time::{Duration, Instant};

use crate::state::Shared;

/// How long a URL is remembered as uncacheable.
const TTL: Duration = Duration::from_secs(120);
/// Most URLs remembered; past this the memo starts over (it is only an optimisation).
const CAPACITY: usize = 65_536;

pub fn remember(shared: &Shared, key: &str) {
    let mut memo = shared.uncacheable.lock();
    if memo.len() >= CAPACITY {
        let now = Instant::now();
        memo.retain(|_, t| now.duration_since(*t) < TTL);
        if memo.len() >= CAPACITY {
            memo.clear();
        }
    }
    memo.insert(key.to_string(), Instant::now());
}

pub fn forget(shared: &Shared, key: &str) {
    let mut memo = shared.uncacheable.lock();
    if !memo.is_empty() {
        memo.remove(key);
    }
}

pub fn remembered(shared: &Shared, key: &str) -> bool {
    let mut memo = shared.uncacheable.lock();
    match memo.get(key) {
        Some(t) if t.elapsed() < TTL => true,
        Some(_) => {
            memo.remove(key);
            false
        }
        None => false,
    }
}

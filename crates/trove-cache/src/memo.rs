//! URLs whose last response could not be stored (Varnish calls this hit-for-miss). Their
//! misses skip collapsing and keep the client's Range and validators, since there is no
//! whole response to fetch for the store. Entries expire, and a storable response clears
//! its URL's entry at once. Time is passed in, so the simulator runs it in virtual time.

use std::time::{Duration, SystemTime};

use trove_store::hash::{fast_map, FastMap};

/// How long a URL is remembered as uncacheable.
pub const TTL: Duration = Duration::from_secs(120);
/// Most URLs remembered; past this the memo starts over (it is only an optimisation).
const CAPACITY: usize = 65_536;

/// The memo. Wrap it in a lock to share it.
#[derive(Debug)]
pub struct PassMemo {
    entries: FastMap<String, SystemTime>,
}

impl Default for PassMemo {
    fn default() -> Self {
        PassMemo {
            entries: fast_map(),
        }
    }
}

/// Past the TTL, or remembered "in the future" (the wall clock stepped back): forget it.
fn expired(at: SystemTime, now: SystemTime) -> bool {
    now.duration_since(at).map_or(true, |d| d >= TTL)
}

impl PassMemo {
    pub fn remember(&mut self, key: &str, now: SystemTime) {
        if self.entries.len() >= CAPACITY {
            self.entries.retain(|_, t| !expired(*t, now));
            if self.entries.len() >= CAPACITY {
                self.entries.clear();
            }
        }
        self.entries.insert(key.to_string(), now);
    }

    pub fn forget(&mut self, key: &str) {
        if !self.entries.is_empty() {
            self.entries.remove(key);
        }
    }

    pub fn remembered(&mut self, key: &str, now: SystemTime) -> bool {
        match self.entries.get(key) {
            Some(t) if !expired(*t, now) => true,
            Some(_) => {
                self.entries.remove(key);
                false
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_in_virtual_time() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut m = PassMemo::default();
        m.remember("k", t0);
        assert!(m.remembered("k", t0 + Duration::from_secs(119)));
        assert!(!m.remembered("k", t0 + TTL));
        m.remember("k", t0);
        m.forget("k");
        assert!(!m.remembered("k", t0));
    }
}

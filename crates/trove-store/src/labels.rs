//! What an object carries for invalidation ([`Labels`]): its tags, its named cache, and
//! the sequence-number stamps the invalidation index checks it by. Kept apart from the
//! index (`invalidation`) because every stored object holds one, whatever the tier.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What an object carries for invalidation: its tags, its named cache and its stamps.
#[derive(Debug, Default)]
pub struct Labels {
    /// Stable hashes of its tags (`invalidation::tag_hash`).
    pub tags: Arc<[u64]>,
    /// The hash of its named cache (`invalidation::cache_hash`), if any.
    pub cache: Option<u64>,
    /// The invalidation sequence number current when the request that produced this
    /// response was sent (0: older than every rule).
    pub born: u64,
    /// The newest rule this object was checked against.
    pub(crate) checked: AtomicU64,
    /// The newest soft rule that matched it (0: none).
    pub(crate) soft: AtomicU64,
    /// When that soft rule was made, in milliseconds since the epoch.
    pub(crate) soft_at: AtomicU64,
}

impl Clone for Labels {
    fn clone(&self) -> Self {
        Labels {
            tags: Arc::clone(&self.tags),
            cache: self.cache,
            born: self.born,
            checked: AtomicU64::new(self.checked.load(Ordering::Relaxed)),
            soft: AtomicU64::new(self.soft.load(Ordering::Relaxed)),
            soft_at: AtomicU64::new(self.soft_at.load(Ordering::Relaxed)),
        }
    }
}

impl Labels {
    /// Labels with these tag and cache hashes, stamped `born`.
    pub fn new(tags: Vec<u64>, cache: Option<u64>, born: u64) -> Labels {
        Labels {
            tags: tags.into(),
            cache,
            born,
            ..Labels::default()
        }
    }

    /// Labels read back from a persistent tier: besides the tags, cache and `born`, the
    /// newest rule the object had been checked against (`checked`) and its soft mark
    /// (`soft`: the rule's seq, `soft_at`: its time in ms since the epoch; 0 for none).
    pub fn restored(
        tags: Vec<u64>,
        cache: Option<u64>,
        born: u64,
        checked: u64,
        soft: u64,
        soft_at: u64,
    ) -> Labels {
        Labels {
            tags: tags.into(),
            cache,
            born,
            checked: AtomicU64::new(checked),
            soft: AtomicU64::new(soft),
            soft_at: AtomicU64::new(soft_at),
        }
    }

    /// The newest rule this object has been checked against (0: none).
    pub fn checked(&self) -> u64 {
        self.checked.load(Ordering::Relaxed)
    }

    /// The newest soft rule that matched it and that rule's time in ms since the epoch
    /// (`(0, 0)`: none).
    pub fn soft_mark(&self) -> (u64, u64) {
        (
            self.soft.load(Ordering::Relaxed),
            self.soft_at.load(Ordering::Relaxed),
        )
    }

    /// True when the object carries the tag or named cache hashed `h`.
    pub fn carries(&self, h: u64) -> bool {
        self.cache == Some(h) || self.tags.contains(&h)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tags.is_empty() && self.cache.is_none()
    }

    /// The same labels, stamped `born` (a revalidation sent at `born` confirmed the object).
    pub fn reborn(&self, born: u64) -> Labels {
        let mut l = self.clone();
        l.born = l.born.max(born);
        l
    }
}

//! A stored object's marks with respect to lower tiers ([`TierMarks`]), kept on the object
//! itself so a tiered store needs no table keyed by id or address for them.

use std::sync::atomic::{AtomicU8, Ordering};

/// One mark a tiered store keeps on an object (see [`TierMarks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mark {
    /// This snapshot is on the lower tier, or queued for it: evicting it writes nothing.
    OnLower = 1,
    /// Being promoted from the lower tier: an eviction within its own insert writes
    /// nothing (it is there already).
    Promoting = 2,
}

/// A stored object's state with respect to lower tiers, kept on the object (a snapshot:
/// [`crate::Storage::update_meta`]'s new one starts unmarked, its head not yet written
/// below). Atomic: set and read without the store's locks.
#[derive(Debug, Default)]
pub struct TierMarks(AtomicU8);

impl TierMarks {
    /// Sets `m`; true if it was not set.
    pub fn set(&self, m: Mark) -> bool {
        self.0.fetch_or(m as u8, Ordering::AcqRel) & m as u8 == 0
    }

    /// Clears `m`; true if it was set.
    pub fn clear(&self, m: Mark) -> bool {
        self.0.fetch_and(!(m as u8), Ordering::AcqRel) & m as u8 != 0
    }

    pub fn has(&self, m: Mark) -> bool {
        self.0.load(Ordering::Acquire) & m as u8 != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_set_and_clear_one_at_a_time() {
        let m = TierMarks::default();
        assert!(m.set(Mark::OnLower));
        assert!(!m.set(Mark::OnLower), "already set");
        assert!(m.set(Mark::Promoting));
        assert!(m.clear(Mark::OnLower));
        assert!(!m.has(Mark::OnLower));
        assert!(m.has(Mark::Promoting));
        assert!(!m.clear(Mark::OnLower));
    }
}

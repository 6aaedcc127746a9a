//! What the bus has done, counted: the caller exports these as metrics.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters shared by a bus and its consumers.
#[derive(Debug, Default)]
pub(crate) struct Live {
    pub published: AtomicU64,
    pub duplicates: AtomicU64,
    pub delivered: AtomicU64,
    pub rejected_malformed: AtomicU64,
    pub rejected_forged: AtomicU64,
    pub gaps: AtomicU64,
    pub reopened: AtomicU64,
    /// The highest stream sequence this node has seen (published, delivered or read in the
    /// stream's state).
    pub last_stream_seq: AtomicU64,
    /// The highest sequence this node acknowledged as applied.
    pub last_applied: AtomicU64,
}

impl Live {
    pub fn add(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub fn raise(c: &AtomicU64, to: u64) {
        c.fetch_max(to, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Counters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Counters {
            published: get(&self.published),
            duplicates: get(&self.duplicates),
            delivered: get(&self.delivered),
            rejected_malformed: get(&self.rejected_malformed),
            rejected_forged: get(&self.rejected_forged),
            gaps: get(&self.gaps),
            reopened: get(&self.reopened),
            last_stream_seq: get(&self.last_stream_seq),
        }
    }
}

/// A snapshot of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Messages JetStream acknowledged as stored for this node's publishes.
    pub published: u64,
    /// Publishes JetStream recognised as retries of a stored message (stored once).
    pub duplicates: u64,
    /// Messages handed to the caller by this node's consumers.
    pub delivered: u64,
    /// Messages (and applied announcements) skipped because they were not trove-bus messages.
    pub rejected_malformed: u64,
    /// Messages (and applied announcements) skipped because their signature was missing or wrong.
    pub rejected_forged: u64,
    /// Gaps reported: messages dropped by retention before this node applied them.
    pub gaps: u64,
    /// Times a consumer was reopened after its server connection or consumer was lost.
    pub reopened: u64,
    /// The highest stream sequence this node has seen (published, delivered or read in the
    /// stream's state), without a round trip.
    pub last_stream_seq: u64,
}

impl Counters {
    /// Every rejected message, malformed or forged.
    pub fn rejected(&self) -> u64 {
        self.rejected_malformed + self.rejected_forged
    }
}

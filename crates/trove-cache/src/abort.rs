//! When every client of a fetch has gone: finish it or stop? (Seed 003 §IV.C: aborted
//! transfers made a proxy *increase* origin traffic unless it stopped fetching or read only
//! a little ahead; Squid's `quick_abort_min/max/pct` are the knobs.)
//!
//! A fetch that is being stored and fits finishes: the next client will want it. Any other
//! finishes only if little is left (`min_left`: draining it keeps the origin connection for
//! reuse and costs less than a new one) or most of it is done (`done_pct`); otherwise it
//! stops at once. Bytes read from the origin that no client received are counted as wasted.

use serde::Deserialize;

/// The abort policy (config `[cache.abort]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AbortPolicy {
    /// Finish when at most this many bytes remain.
    pub min_left: u64,
    /// Finish when at least this percentage of the body has arrived.
    pub done_pct: u8,
}

impl Default for AbortPolicy {
    fn default() -> Self {
        AbortPolicy {
            min_left: 16 << 10,
            done_pct: 95,
        }
    }
}

/// Finish the fetch, or stop it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterAbort {
    Finish,
    Stop,
}

impl AfterAbort {
    pub fn as_str(self) -> &'static str {
        match self {
            AfterAbort::Finish => "finish",
            AfterAbort::Stop => "stop",
        }
    }
}

/// Whether the fetch is filling a stored object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storing {
    /// Being stored, and it fits the store.
    Yes,
    No,
}

impl AbortPolicy {
    /// The last client of a fetch went away after `received` of `expected` bytes
    /// (`None`: length unknown).
    pub fn decide(&self, storing: Storing, received: u64, expected: Option<u64>) -> AfterAbort {
        if storing == Storing::Yes {
            return AfterAbort::Finish;
        }
        let Some(total) = expected else {
            return AfterAbort::Stop;
        };
        let left = total.saturating_sub(received);
        let done_enough =
            u128::from(received) * 100 >= u128::from(total) * u128::from(self.done_pct);
        if left <= self.min_left || (self.done_pct <= 100 && done_enough) {
            AfterAbort::Finish
        } else {
            AfterAbort::Stop
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squid_like_quick_abort() {
        let p = AbortPolicy::default();
        let mb = 1 << 20;
        assert_eq!(p.decide(Storing::No, mb, Some(10 * mb)), AfterAbort::Stop);
        assert_eq!(
            p.decide(Storing::No, 96 * mb / 10, Some(10 * mb)),
            AfterAbort::Finish
        );
        assert_eq!(
            p.decide(Storing::No, 10, Some(16 << 10)),
            AfterAbort::Finish,
            "little left"
        );
        assert_eq!(p.decide(Storing::No, mb, None), AfterAbort::Stop);
        assert_eq!(p.decide(Storing::Yes, 1, None), AfterAbort::Finish);
        let never = AbortPolicy {
            min_left: 0,
            done_pct: 101,
        };
        assert_eq!(never.decide(Storing::No, 99, Some(100)), AfterAbort::Stop);
    }
}

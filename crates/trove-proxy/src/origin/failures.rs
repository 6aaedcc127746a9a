//! Which upstream failed, and why: counted per upstream and reason for the metrics
//! (`trove_origin_failures_total{upstream,reason}`), and told on standard error at most once
//! per upstream every [`LOG_EVERY`], with how many more failed in between — enough for an
//! operator to see a dead origin at once without a flood when it stays dead.
//!
//! A forward proxy's upstreams are whatever clients ask for, so the table is bounded: past
//! [`MAX_UPSTREAMS`] names, failures are counted under `upstream="other"`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use trove_cache::OriginFailure;

use super::error::OriginError;

/// At most one line per upstream this often.
pub const LOG_EVERY: Duration = Duration::from_secs(10);
/// Most upstreams counted by name.
pub const MAX_UPSTREAMS: usize = 1024;

/// The reasons counted, in a fixed order.
const REASONS: [OriginFailure; 8] = [
    OriginFailure::DnsError,
    OriginFailure::DnsTimeout,
    OriginFailure::ConnectionRefused,
    OriginFailure::ConnectionTimeout,
    OriginFailure::Timeout,
    OriginFailure::ConnectionClosed,
    OriginFailure::ProtocolError,
    // Shed requests never reached an origin and are not recorded here; this slot keeps
    // the array total over the enum.
    OriginFailure::Overloaded(trove_cache::ShedReason::QueueWait),
];

fn reason_index(f: OriginFailure) -> usize {
    match f {
        OriginFailure::DnsError => 0,
        OriginFailure::DnsTimeout => 1,
        OriginFailure::ConnectionRefused => 2,
        OriginFailure::ConnectionTimeout => 3,
        OriginFailure::Timeout => 4,
        OriginFailure::ConnectionClosed => 5,
        OriginFailure::ProtocolError => 6,
        OriginFailure::Overloaded(_) => 7,
    }
}

#[derive(Debug, Default)]
struct Entry {
    counts: [u64; REASONS.len()],
    last_logged: Option<Instant>,
    unlogged: u64,
}

/// Failures by upstream.
#[derive(Debug, Default)]
pub struct UpstreamFailures {
    table: Mutex<HashMap<Box<str>, Entry>>,
}

impl UpstreamFailures {
    /// Counts a failure of `upstream` (its authority), and says so on standard error unless
    /// it did within [`LOG_EVERY`].
    pub fn record(&self, upstream: &str, error: &OriginError) {
        let reason = error.failure();
        let now = Instant::now();
        let mut table = self.table.lock();
        let name: &str = if table.contains_key(upstream) || table.len() < MAX_UPSTREAMS {
            upstream
        } else {
            "other"
        };
        let entry = table.entry(name.into()).or_default();
        entry.counts[reason_index(reason)] += 1;
        let due = entry
            .last_logged
            .is_none_or(|t| now.duration_since(t) >= LOG_EVERY);
        if !due {
            entry.unlogged += 1;
            return;
        }
        let more = std::mem::take(&mut entry.unlogged);
        entry.last_logged = Some(now);
        drop(table);
        if more > 0 {
            tracing::warn!(
                "origin {upstream} failed ({}): {error}; {more} more failures since the last report",
                reason.as_str()
            );
        } else {
            tracing::warn!("origin {upstream} failed ({}): {error}", reason.as_str());
        }
    }

    /// `(upstream, reason, count)` for every non-zero count, sorted.
    pub fn counts(&self) -> Vec<(String, &'static str, u64)> {
        let table = self.table.lock();
        let mut out: Vec<_> = table
            .iter()
            .flat_map(|(name, e)| {
                REASONS
                    .iter()
                    .zip(e.counts)
                    .filter(|(_, n)| *n > 0)
                    .map(|(r, n)| (name.to_string(), r.as_str(), n))
            })
            .collect();
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_by_upstream_and_reason_and_bounded() {
        let f = UpstreamFailures::default();
        f.record("a:81", &OriginError::Closed);
        f.record("a:81", &OriginError::Closed);
        f.record("a:81", &OriginError::ResponseTimeout);
        f.record(
            "b",
            &OriginError::Resolve(std::io::Error::other("no such name")),
        );
        assert_eq!(
            f.counts(),
            vec![
                ("a:81".to_string(), "connection-closed", 2),
                ("a:81".to_string(), "timeout", 1),
                ("b".to_string(), "dns-error", 1),
            ]
        );
        for i in 0..MAX_UPSTREAMS + 10 {
            f.record(&format!("h{i}"), &OriginError::Closed);
        }
        let c = f.counts();
        let names: std::collections::HashSet<_> = c.iter().map(|(n, _, _)| n.clone()).collect();
        assert_eq!(
            names.len(),
            MAX_UPSTREAMS + 1,
            "the named ones and \"other\""
        );
        assert!(
            c.contains(&("other".to_string(), "connection-closed", 12)),
            "{:?}",
            &c[..3]
        );
    }
}

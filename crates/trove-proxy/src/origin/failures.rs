//! Which upstream failed, and why: counted per upstream and reason for the metrics
//! (`trove_origin_failures_total{upstream,reason}`), and told on standard error at most once
//! per upstream every [`LOG_EVERY`], with how many more failed in between — enough for an
//! operator to see a dead origin at once without a flood when it stays dead. The last answer
//! and the last failure of each upstream give its health on the status page.
//!
//! A forward proxy's upstreams are whatever clients ask for, so the table is bounded: past
//! [`MAX_UPSTREAMS`] names, failures are counted under `upstream="other"`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use trove_cache::OriginFailure;
use trove_tls::TlsFailure;

use super::error::OriginError;
use crate::upstream::Upstream;

/// At most one line per upstream this often.
pub const LOG_EVERY: Duration = Duration::from_secs(10);
/// Most upstreams counted by name.
pub const MAX_UPSTREAMS: usize = 1024;

/// The reasons counted, in a fixed order: the core's, then a TLS handshake's.
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

/// Counted reasons: the core's, then each TLS handshake failure by its own name.
const COUNTED: usize = REASONS.len() + TlsFailure::ALL.len();

fn reason_name(i: usize) -> &'static str {
    match i.checked_sub(REASONS.len()) {
        Some(t) => TlsFailure::ALL[t].as_str(),
        None => REASONS[i].as_str(),
    }
}

/// Where a failure is counted: a TLS handshake's by its precise reason (`tls-expired`,
/// `tls-unknown-issuer`, ...), anything else by the core's name for it.
fn error_index(e: &OriginError) -> usize {
    match e {
        OriginError::Tls(h) => REASONS.len() + h.reason.index(),
        _ => reason_index(e.failure()),
    }
}

fn reason_index(f: OriginFailure) -> usize {
    match f {
        // Counted by `error_index` under their precise reasons; these slots stay empty.
        OriginFailure::TlsCertificate | OriginFailure::TlsProtocol => 6,
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
    counts: [u64; COUNTED],
    last_logged: Option<Instant>,
    unlogged: u64,
    last_ok: Option<Instant>,
    /// When, and the counted reason's index.
    last_failure: Option<(Instant, usize)>,
}

/// Failures by upstream.
#[derive(Debug, Default)]
pub struct UpstreamFailures {
    table: Mutex<HashMap<Upstream, Entry>>,
}

/// One upstream's health, as the status page shows it.
#[derive(Debug, Clone)]
pub struct Health {
    pub upstream: String,
    pub failures: u64,
    /// How long ago it last answered.
    pub last_ok: Option<std::time::Duration>,
    /// How long ago it last failed, and why.
    pub last_failure: Option<(std::time::Duration, &'static str)>,
}

impl Health {
    /// Failing: its last failure is newer than its last answer, and within a minute.
    pub fn failing(&self) -> bool {
        match (self.last_failure, self.last_ok) {
            (Some((f, _)), Some(ok)) => f < ok && f < Duration::from_secs(60),
            (Some((f, _)), None) => f < Duration::from_secs(60),
            _ => false,
        }
    }
}

/// How an upstream is named in the metrics and on the page (the overflow entry as `other`).
fn name(u: &Upstream) -> String {
    if u.port == 0 {
        "other".into()
    } else {
        u.authority()
    }
}

fn other() -> Upstream {
    Upstream::http("other", 0)
}

impl UpstreamFailures {
    fn entry<'a>(table: &'a mut HashMap<Upstream, Entry>, upstream: &Upstream) -> &'a mut Entry {
        if !table.contains_key(upstream) {
            let key = if table.len() < MAX_UPSTREAMS {
                upstream.clone()
            } else {
                other()
            };
            return table.entry(key).or_default();
        }
        table.get_mut(upstream).expect("present")
    }

    /// `upstream` answered.
    pub fn record_ok(&self, upstream: &Upstream) {
        let now = Instant::now();
        Self::entry(&mut self.table.lock(), upstream).last_ok = Some(now);
    }

    /// Counts a failure of `upstream`, and says so on standard error unless it did within
    /// [`LOG_EVERY`].
    pub fn record(&self, upstream: &Upstream, error: &OriginError) {
        let index = error_index(error);
        let reason = reason_name(index);
        let now = Instant::now();
        let mut table = self.table.lock();
        let entry = Self::entry(&mut table, upstream);
        entry.counts[index] += 1;
        entry.last_failure = Some((now, index));
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
        let name = upstream.authority();
        if more > 0 {
            tracing::warn!(
                "origin {name} failed ({reason}): {error}; {more} more failures since the last report"
            );
        } else {
            tracing::warn!("origin {name} failed ({reason}): {error}");
        }
    }

    /// Every upstream's health, by name.
    pub fn health(&self) -> Vec<Health> {
        let now = Instant::now();
        let table = self.table.lock();
        let mut out: Vec<Health> = table
            .iter()
            .map(|(u, e)| Health {
                upstream: name(u),
                failures: e.counts.iter().sum(),
                last_ok: e.last_ok.map(|t| now.duration_since(t)),
                last_failure: e
                    .last_failure
                    .map(|(t, r)| (now.duration_since(t), reason_name(r))),
            })
            .collect();
        out.sort_by(|a, b| a.upstream.cmp(&b.upstream));
        out
    }

    /// `(upstream, reason, count)` for every non-zero count, sorted.
    pub fn counts(&self) -> Vec<(String, &'static str, u64)> {
        let table = self.table.lock();
        let mut out: Vec<_> = table
            .iter()
            .flat_map(|(u, e)| {
                let name = name(u);
                e.counts
                    .into_iter()
                    .enumerate()
                    .filter(|(_, n)| *n > 0)
                    .map(move |(r, n)| (name.clone(), reason_name(r), n))
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
        let up = |h: &str, port| Upstream::http(h, port);
        let f = UpstreamFailures::default();
        f.record(&up("a", 81), &OriginError::Closed);
        f.record(&up("a", 81), &OriginError::Closed);
        f.record(&up("a", 81), &OriginError::ResponseTimeout);
        f.record(
            &up("b", 80),
            &OriginError::Resolve(std::io::Error::other("no such name")),
        );
        let h = f.health();
        assert!(h[0].failing() && h[1].failing(), "{h:?}");
        f.record_ok(&up("a", 81));
        assert!(!f.health()[0].failing());
        assert_eq!(
            f.counts(),
            vec![
                ("a:81".to_string(), "connection-closed", 2),
                ("a:81".to_string(), "timeout", 1),
                ("b".to_string(), "dns-error", 1),
            ]
        );
        for i in 0..MAX_UPSTREAMS + 10 {
            f.record(&up(&format!("h{i}"), 80), &OriginError::Closed);
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

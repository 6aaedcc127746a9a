//! The last minutes of the proxy's counters, sampled every [`EVERY`] by a background task,
//! for the status page's charts and recent percentiles. A ring of [`KEEP`] samples (15
//! minutes): a few KiB, whatever the traffic.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use trove_cache::Outcome;

use crate::metrics::{Metrics, BUCKETS};

/// How often the counters are sampled.
pub const EVERY: Duration = Duration::from_secs(5);
/// How many samples are kept.
pub const KEEP: usize = 180;

/// The counters at one moment (cumulative since start).
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    /// Seconds since start.
    pub at: f64,
    pub requests: u64,
    pub hits: u64,
    pub cacheable: u64,
    pub bytes_sent: u64,
    pub bytes_cacheable: u64,
    pub bytes_from_cache: u64,
    pub bytes_from_origins: u64,
    pub origin_errors: u64,
    /// Client TLS handshakes completed, and failed.
    pub tls_handshakes: u64,
    pub tls_failures: u64,
    pub hit_times: [u64; BUCKETS.len() + 1],
    pub miss_times: [u64; BUCKETS.len() + 1],
}

impl Sample {
    /// Reads the counters now.
    pub fn take(m: &Metrics, at: f64) -> Sample {
        let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let mut s = Sample {
            at,
            bytes_sent: g(&m.bytes_to_clients),
            bytes_cacheable: g(&m.bytes_cacheable),
            bytes_from_cache: g(&m.bytes_from_cache),
            bytes_from_origins: g(&m.bytes_from_origins),
            origin_errors: g(&m.origin_errors),
            tls_handshakes: g(&m.tls.handshakes),
            tls_failures: m.tls.failures.iter().map(g).sum(),
            hit_times: m.hit_time.snapshot(),
            miss_times: m.miss_time.snapshot(),
            ..Sample::default()
        };
        for o in Outcome::ALL {
            let n = m.count(o);
            s.requests += n;
            if o.is_hit() {
                s.hits += n;
            }
            if o.is_cacheable_traffic() {
                s.cacheable += n;
            }
        }
        s
    }
}

/// What happened between two samples, per second.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rates {
    pub at: f64,
    pub requests: f64,
    pub hits: f64,
    pub bytes_sent: f64,
    pub bytes_from_origins: f64,
    pub origin_errors: f64,
    pub tls_handshakes: f64,
    pub tls_failures: f64,
}

/// Since start, and the samples of the last minutes.
#[derive(Debug)]
pub struct History {
    pub started: Instant,
    pub started_wall: SystemTime,
    samples: Mutex<VecDeque<Sample>>,
}

impl Default for History {
    fn default() -> Self {
        History {
            started: Instant::now(),
            started_wall: SystemTime::now(),
            samples: Mutex::new(VecDeque::with_capacity(KEEP)),
        }
    }
}

impl History {
    /// Samples `metrics` every [`EVERY`] until either is dropped. Call inside a runtime.
    pub fn start_sampling(history: &Arc<History>, metrics: &Arc<Metrics>) {
        let (h, m): (Weak<History>, Weak<Metrics>) =
            (Arc::downgrade(history), Arc::downgrade(metrics));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(EVERY);
            loop {
                tick.tick().await;
                let (Some(h), Some(m)) = (h.upgrade(), m.upgrade()) else {
                    break;
                };
                h.record(Sample::take(&m, h.started.elapsed().as_secs_f64()));
            }
        });
    }

    pub fn record(&self, s: Sample) {
        let mut q = self.samples.lock();
        if q.len() == KEEP {
            q.pop_front();
        }
        q.push_back(s);
    }

    /// The samples kept, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.lock().iter().copied().collect()
    }

    /// Per-second rates between consecutive samples.
    pub fn rates(&self) -> Vec<Rates> {
        let s = self.samples();
        s.windows(2)
            .map(|w| {
                let (a, b) = (&w[0], &w[1]);
                let dt = (b.at - a.at).max(1e-3);
                let per = |x: u64, y: u64| y.saturating_sub(x) as f64 / dt;
                Rates {
                    at: b.at,
                    requests: per(a.requests, b.requests),
                    hits: per(a.hits, b.hits),
                    bytes_sent: per(a.bytes_sent, b.bytes_sent),
                    bytes_from_origins: per(a.bytes_from_origins, b.bytes_from_origins),
                    origin_errors: per(a.origin_errors, b.origin_errors),
                    tls_handshakes: per(a.tls_handshakes, b.tls_handshakes),
                    tls_failures: per(a.tls_failures, b.tls_failures),
                }
            })
            .collect()
    }

    /// The sample about `ago` before the newest one (the oldest kept if not that old).
    pub fn back(&self, ago: Duration) -> Option<Sample> {
        let q = self.samples.lock();
        let newest = q.back()?.at;
        q.iter()
            .find(|s| newest - s.at <= ago.as_secs_f64())
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_samples_and_gives_rates() {
        let h = History::default();
        for i in 0..KEEP + 5 {
            h.record(Sample {
                at: i as f64 * 5.0,
                requests: i as u64 * 100,
                hits: i as u64 * 90,
                ..Sample::default()
            });
        }
        let s = h.samples();
        assert_eq!(s.len(), KEEP);
        assert_eq!(s[0].requests, 500);
        let r = h.rates();
        assert_eq!(r.len(), KEEP - 1);
        assert!((r[0].requests - 20.0).abs() < 1e-9);
        assert!((r[0].hits - 18.0).abs() < 1e-9);
        let minute = h.back(Duration::from_secs(60)).unwrap();
        assert_eq!(minute.at, (KEEP + 4) as f64 * 5.0 - 60.0);
    }

    /// Client TLS handshakes and failures are sampled, for the status page's rates.
    #[test]
    fn tls_handshakes_and_failures_have_rates() {
        let m = Metrics::default();
        let h = History::default();
        h.record(Sample::take(&m, 0.0));
        m.tls.handshakes.fetch_add(50, Ordering::Relaxed);
        m.tls.failures[0].fetch_add(5, Ordering::Relaxed);
        h.record(Sample::take(&m, 5.0));
        let r = h.rates();
        assert!((r[0].tls_handshakes - 10.0).abs() < 1e-9, "{r:?}");
        assert!((r[0].tls_failures - 1.0).abs() < 1e-9, "{r:?}");
    }
}

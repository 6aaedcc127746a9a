//! Latency accounting: means of each part exactly, and the distribution in log-spaced bins
//! (50 per decade from 0.1 ms to 10⁴ s) for the median and the report's chart, so a replay
//! of any length keeps a fixed few kilobytes.

use serde::Serialize;

const PER_DECADE: f64 = 50.0;
const MIN_LOG: f64 = -4.0;
const BINS: usize = 400;

#[derive(Debug, Clone)]
pub struct Latencies {
    n: u64,
    total: f64,
    connect: f64,
    request_response: f64,
    transfer: f64,
    bins: Vec<u64>,
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies {
            n: 0,
            total: 0.0,
            connect: 0.0,
            request_response: 0.0,
            transfer: 0.0,
            bins: vec![0; BINS],
        }
    }
}

/// Means and median, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Summary {
    pub requests: u64,
    pub mean: f64,
    pub median: f64,
    pub p90: f64,
    pub mean_connect: f64,
    pub mean_request_response: f64,
    pub mean_transfer: f64,
}

fn bin(v: f64) -> usize {
    if v <= 0.0 {
        return 0;
    }
    let b = ((v.log10() - MIN_LOG) * PER_DECADE).floor();
    b.clamp(0.0, (BINS - 1) as f64) as usize
}

fn upper(i: usize) -> f64 {
    10f64.powf(MIN_LOG + (i + 1) as f64 / PER_DECADE)
}

impl Latencies {
    pub fn add(&mut self, total: f64, connect: f64, request_response: f64, transfer: f64) {
        self.n += 1;
        self.total += total;
        self.connect += connect;
        self.request_response += request_response;
        self.transfer += transfer;
        self.bins[bin(total)] += 1;
    }

    fn quantile(&self, q: f64) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        let want = (q * self.n as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.bins.iter().enumerate() {
            seen += c;
            if seen >= want {
                // The geometric middle of the bin.
                return 10f64.powf(MIN_LOG + (i as f64 + 0.5) / PER_DECADE);
            }
        }
        upper(BINS - 1)
    }

    pub fn summary(&self) -> Summary {
        let n = self.n.max(1) as f64;
        Summary {
            requests: self.n,
            mean: self.total / n,
            median: self.quantile(0.5),
            p90: self.quantile(0.9),
            mean_connect: self.connect / n,
            mean_request_response: self.request_response / n,
            mean_transfer: self.transfer / n,
        }
    }

    /// Non-empty bins as (upper bound, count).
    pub fn histogram(&self) -> Vec<(f64, u64)> {
        self.bins
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| (upper(i), *c))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_exact_median_within_a_bin() {
        let mut l = Latencies::default();
        for v in [0.1, 0.2, 0.3, 0.4, 10.0] {
            l.add(v, v / 2.0, v / 4.0, v / 4.0);
        }
        let s = l.summary();
        assert!((s.mean - 2.2).abs() < 1e-12);
        assert!((s.mean_connect - 1.1).abs() < 1e-12);
        assert!((s.median / 0.3 - 1.0).abs() < 0.05, "{}", s.median);
        assert_eq!(l.histogram().iter().map(|b| b.1).sum::<u64>(), 5);
    }
}

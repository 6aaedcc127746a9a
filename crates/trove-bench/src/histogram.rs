//! A log-linear latency histogram: 32 buckets per power of two (at most ~3% relative error),
//! constant-time recording, mergeable across robot threads. Means are exact (kept as a sum).

/// Sub-buckets per power of two, as a bit count.
const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;
/// Enough buckets for values up to 2^63.
const BUCKETS: usize = ((64 - SUB_BITS as usize) + 1) << SUB_BITS;

/// Counts of values (microseconds, by convention) in log-linear buckets.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    n: u64,
    sum: f64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            n: 0,
            sum: 0.0,
            max: 0,
        }
    }
}

fn index(v: u64) -> usize {
    if v < SUB {
        v as usize
    } else {
        let e = 63 - v.leading_zeros(); // e >= SUB_BITS
        (((e - SUB_BITS + 1) as u64) << SUB_BITS | ((v >> (e - SUB_BITS)) & (SUB - 1))) as usize
    }
}

/// The middle of bucket `i`'s value range.
fn value(i: usize) -> f64 {
    let i = i as u64;
    if i < SUB {
        return i as f64;
    }
    let e = (i >> SUB_BITS) as u32 + SUB_BITS - 1;
    let lo = ((i & (SUB - 1)) | SUB) << (e - SUB_BITS);
    let width = 1u64 << (e - SUB_BITS);
    lo as f64 + (width as f64 - 1.0) / 2.0
}

impl Histogram {
    /// Records one value.
    pub fn record(&mut self, v: u64) {
        self.counts[index(v)] += 1;
        self.n += 1;
        self.sum += v as f64;
        self.max = self.max.max(v);
    }

    /// Adds another histogram's counts to this one.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.n += other.n;
        self.sum += other.sum;
        self.max = self.max.max(other.max);
    }

    /// Number of values recorded.
    pub fn count(&self) -> u64 {
        self.n
    }

    /// Exact mean, or None when empty.
    pub fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / self.n as f64)
    }

    /// Largest value recorded.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The `q` quantile (0..=1), within a bucket's precision; None when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(value(i).min(self.max as f64));
            }
        }
        Some(self.max as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_monotone() {
        let mut last = 0;
        for v in (0..100_000u64).chain([1 << 40, u64::MAX / 2]) {
            let i = index(v);
            assert!(i >= last, "{v}");
            assert!(i < BUCKETS);
            last = i;
        }
        for v in [0u64, 31, 32, 100, 1000, 123_456, 9_999_999] {
            let mid = value(index(v));
            assert!(
                (mid - v as f64).abs() <= v as f64 * 0.04 + 0.5,
                "{v} -> {mid}"
            );
        }
    }

    #[test]
    fn quantiles_and_mean() {
        let mut h = Histogram::default();
        for v in 1..=10_000u64 {
            h.record(v);
        }
        assert_eq!(h.mean(), Some(5000.5));
        let med = h.quantile(0.5).unwrap();
        assert!((med - 5000.0).abs() < 5000.0 * 0.04, "{med}");
        let p99 = h.quantile(0.99).unwrap();
        assert!((p99 - 9900.0).abs() < 9900.0 * 0.04, "{p99}");
        let mut g = Histogram::default();
        g.record(20_000);
        h.merge(&g);
        assert_eq!(h.count(), 10_001);
        assert_eq!(h.max(), 20_000);
        assert_eq!(Histogram::default().quantile(0.5), None);
    }
}

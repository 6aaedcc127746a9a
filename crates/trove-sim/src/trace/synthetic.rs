//! A synthetic trace from `trove bench`'s workload model (PolyMix-2, DataComm-1 or a workload
//! file): the same object model (an object id fixes size, content type and cachability), the
//! same working set and recurrence, Poisson arrivals following the phases' load levels, and
//! the same mapping of objects to servers and URLs as the benchmark's robots use. Nothing is
//! copied: `trove_bench::model`, `workload` and `origin::object_path` generate it.
//!
//! Two things a log has and a benchmark run has not are added as switchable assumptions:
//! about `abort_fraction` of the transfers stop at a uniformly drawn point of the body (seed
//! 003 §IV.B found 11% aborted in the modem trace), chosen in proportion to the object's
//! size — a request aborts with probability `min(1, abort_fraction × size / mean size)` —
//! because people give up on long downloads: the paper's aborted transfers averaged 66 KB of
//! `Content-Length` against 6 KB for completed ones. And requests pick one of the workload's
//! robots as their client.

use std::fmt::Write as _;

use rand::Rng;
use rand_distr::{Distribution, Exp};
use trove_bench::model::{mix64, Model, SplitMix64};
use trove_bench::origin::object_path;
use trove_bench::workload::{Schedule, WorkingObjects, Workload};

use super::{Record, Skipped, TraceReader};

/// How to generate the trace.
#[derive(Debug, Clone)]
pub struct SyntheticSpec {
    pub workload: Workload,
    /// Requests to generate (the trace ends earlier if the phases do).
    pub requests: u64,
    /// Fraction of transfers aborted by the client part-way.
    pub abort_fraction: f64,
    /// Seed of the arrival, choice and abort draws (the object model has the workload's).
    pub seed: u64,
}

pub struct SyntheticReader {
    spec: SyntheticSpec,
    model: Model,
    schedule: Schedule,
    ws: WorkingObjects,
    rng: SplitMix64,
    robots: u64,
    next_oid: u64,
    t: f64,
    issued: u64,
    client: String,
    url: String,
    skipped: Skipped,
    kinds: Vec<(String, String)>,
    mean_size: f64,
}

impl SyntheticReader {
    pub fn new(spec: SyntheticSpec) -> Self {
        let w = &spec.workload;
        let robots = ((w.peak_rate / w.robots.rate).round() as u64).max(1);
        let kinds = w
            .content
            .iter()
            .map(|k| (k.mime.clone(), k.ext.clone()))
            .collect();
        let total: f64 = w.content.iter().map(|k| k.share).sum();
        let mean_size = w
            .content
            .iter()
            .map(|k| k.share / total * k.size.mean())
            .sum::<f64>()
            .max(1.0);
        SyntheticReader {
            mean_size,
            model: w.model(),
            schedule: Schedule::new(w),
            ws: WorkingObjects::new(w.working_set.freeze_after_s),
            rng: SplitMix64::new(mix64(spec.seed ^ 0x7e0f_51ee)),
            robots,
            next_oid: 1,
            t: 0.0,
            issued: 0,
            client: String::with_capacity(24),
            url: String::with_capacity(96),
            skipped: Skipped::default(),
            kinds,
            spec,
        }
    }

    /// The next arrival time after `self.t`, by thinning against the peak rate (exact under
    /// the phases' linear ramps); `None` after the last phase.
    fn next_arrival(&mut self) -> Option<f64> {
        let peak = self.spec.workload.peak_rate;
        if peak <= 0.0 {
            return None;
        }
        let exp = Exp::new(peak).ok()?;
        loop {
            self.t += exp.sample(&mut self.rng);
            let m = self.schedule.at(self.t)?;
            if self.rng.gen::<f64>() * peak <= m.rate {
                return Some(self.t);
            }
        }
    }
}

impl TraceReader for SyntheticReader {
    fn next_record(&mut self) -> Option<Record<'_>> {
        if self.issued >= self.spec.requests {
            return None;
        }
        let t = self.next_arrival()?;
        self.issued += 1;
        let w = &self.spec.workload;
        let oid = match self
            .ws
            .revisit(w.recurrence, w.popularity, w.zipf_exponent, &mut self.rng)
        {
            Some(oid) => oid,
            None => {
                let oid = self.next_oid;
                self.next_oid += 1;
                // The replay completes every request, so it is remembered at once.
                self.ws.remember(oid, t);
                oid
            }
        };
        let spec = self.model.spec(oid);
        let (mime, ext) = &self.kinds[spec.kind];
        let server = mix64(oid) % u64::from(w.servers.count);
        let robot = self.rng.gen_range(0..self.robots);
        self.client.clear();
        let _ = write!(self.client, "robot-{robot}");
        self.url.clear();
        let _ = write!(
            self.url,
            "http://s{server}.bench.invalid{}",
            object_path(w.seed, oid, ext)
        );
        let p_abort = self.spec.abort_fraction * spec.size as f64 / self.mean_size;
        let bytes = if self.rng.gen::<f64>() < p_abort {
            (self.rng.gen::<f64>() * spec.size as f64) as u64
        } else {
            spec.size
        };
        Some(Record {
            time: t,
            client: &self.client,
            method: "GET",
            url: &self.url,
            status: 200,
            result: "",
            bytes,
            object_size: Some(spec.size),
            content_type: if spec.cachable { mime } else { UNCACHABLE },
            id: None,
        })
    }

    fn skipped(&self) -> &Skipped {
        &self.skipped
    }

    fn position(&self) -> u64 {
        self.issued
    }
}

/// The content type a synthetic record carries for an object the model marks uncachable:
/// the replay's origin answers it `private, no-cache`, as the benchmark's servers do.
pub const UNCACHABLE: &str = "application/x-uncachable";

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(n: u64) -> SyntheticReader {
        SyntheticReader::new(SyntheticSpec {
            workload: Workload::builtin("polymix-2").unwrap(),
            requests: n,
            abort_fraction: 0.0,
            seed: 1,
        })
    }

    #[test]
    fn polymix2_offers_its_recurrence_and_sizes() {
        let mut r = reader(200_000);
        let mut seen = std::collections::HashSet::new();
        let (mut n, mut revisits, mut last) = (0u64, 0u64, 0.0);
        while let Some(rec) = r.next_record() {
            assert!(rec.time >= last);
            last = rec.time;
            n += 1;
            if !seen.insert(rec.url.to_string()) {
                revisits += 1;
            }
            assert_eq!(Some(rec.bytes), rec.object_size);
        }
        assert_eq!(n, 200_000);
        let rec = revisits as f64 / n as f64;
        // PolyMix-2's recurrence is 0.6875 (55% offered hits / 80% cachable); the first
        // requests find an empty working set.
        assert!((rec - 0.6875).abs() < 0.01, "{rec}");
    }

    #[test]
    fn aborts_are_about_the_fraction_asked_and_fall_on_large_objects() {
        let mut r = SyntheticReader::new(SyntheticSpec {
            workload: Workload::builtin("polymix-2").unwrap(),
            requests: 200_000,
            abort_fraction: 0.11,
            seed: 3,
        });
        let (mut n, mut aborted, mut ab_size, mut ok_size) = (0u64, 0u64, 0f64, 0f64);
        while let Some(rec) = r.next_record() {
            n += 1;
            let size = rec.object_size.unwrap() as f64;
            if rec.bytes < rec.object_size.unwrap() {
                aborted += 1;
                ab_size += size;
            } else {
                ok_size += size;
            }
        }
        let f = aborted as f64 / n as f64;
        // Sizes over the cap (1 / 0.11 of the mean) always abort, so a little under 11%.
        assert!((0.07..0.12).contains(&f), "{f}");
        let (ab_mean, ok_mean) = (ab_size / aborted as f64, ok_size / (n - aborted) as f64);
        assert!(ab_mean > 3.0 * ok_mean, "{ab_mean} vs {ok_mean}");
    }

    #[test]
    fn the_same_seed_gives_the_same_trace() {
        let (mut a, mut b) = (reader(1000), reader(1000));
        while let Some(x) = a.next_record() {
            let x = (x.time, x.url.to_string(), x.client.to_string());
            let y = b.next_record().unwrap();
            assert_eq!(x, (y.time, y.url.to_string(), y.client.to_string()));
        }
    }
}

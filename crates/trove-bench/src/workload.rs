//! Workloads: the content mix, robots, servers, working set and phases of a run.
//!
//! A workload is a TOML file (see `workloads/polymix-2.toml`); PolyMix-2 and DataComm-1 are built
//! in. Unknown keys are rejected so a typo cannot silently fall back to a default.

use std::collections::VecDeque;

use rand::Rng;
use rand_distr::{Distribution, Zipf};
use serde::{Deserialize, Serialize};

use crate::model::{ContentKind, Model};

const POLYMIX_2: &str = include_str!("../workloads/polymix-2.toml");
const DATACOMM_1: &str = include_str!("../workloads/datacomm-1.toml");

/// The built-in workloads: (name, TOML text).
pub const BUILTINS: &[(&str, &str)] = &[("polymix-2", POLYMIX_2), ("datacomm-1", DATACOMM_1)];

/// How revisited objects are chosen from the working set.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Popularity {
    /// Every object in the working set equally likely (PolyMix-2).
    Uniform,
    /// Zipf over recency rank: the most recently introduced object is the most popular.
    Zipf,
}

/// Robot (client) parameters.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Robots {
    /// Mean request rate of one robot, req/s; the robot count is peak rate / this.
    pub rate: f64,
    /// Connections one robot may have open at once to one server (or to the proxy).
    pub conn_limit: u32,
    /// A robot closes a connection after a Zipf(n)-distributed number of requests (0: never).
    pub conn_requests_zipf: u64,
}

/// Origin server parameters.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Servers {
    /// Number of origin servers (each its own listening port).
    pub count: u32,
    /// Mean server think time before each reply, seconds.
    pub think_mean_s: f64,
    /// Standard deviation of the think time, seconds.
    pub think_sd_s: f64,
    /// A server closes a connection after a Zipf(n)-distributed number of replies (0: never).
    pub conn_replies_zipf: u64,
    /// A server closes a connection idle this long, seconds.
    pub idle_timeout_s: f64,
}

/// Working-set parameters.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WorkingSet {
    /// The working set grows until this time, then keeps its size (in objects).
    pub freeze_after_s: f64,
}

/// One phase of a run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    /// Name used in reports (inc1, top1, ...).
    pub name: String,
    /// Length, seconds.
    pub duration_s: f64,
    /// Load level at the start, as a fraction of the peak rate.
    pub from: f64,
    /// Load level at the end; the level ramps linearly.
    pub to: f64,
    /// Best effort: each robot sends its next request when the previous one completes.
    #[serde(default)]
    pub best_effort: bool,
}

/// A complete workload.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Name used in reports.
    pub name: String,
    /// Seed of the object model: the same seed gives the same objects.
    pub seed: u64,
    /// Request rate at load level 1.0, all robots together, req/s.
    pub peak_rate: f64,
    /// Probability that a request revisits an object requested before.
    pub recurrence: f64,
    /// How revisits choose among the working set.
    pub popularity: Popularity,
    /// Exponent for Zipf popularity.
    #[serde(default = "one")]
    pub zipf_exponent: f64,
    /// Robot parameters.
    pub robots: Robots,
    /// Server parameters.
    pub servers: Servers,
    /// Working-set parameters.
    pub working_set: WorkingSet,
    /// The content mix.
    pub content: Vec<ContentKind>,
    /// The phases, run in order.
    #[serde(rename = "phase")]
    pub phases: Vec<Phase>,
}

fn one() -> f64 {
    1.0
}

impl Workload {
    /// A built-in workload by name.
    pub fn builtin(name: &str) -> anyhow::Result<Workload> {
        let (_, text) = BUILTINS
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                let names: Vec<_> = BUILTINS.iter().map(|(n, _)| *n).collect();
                anyhow::anyhow!(
                    "no built-in workload {name:?} (built in: {})",
                    names.join(", ")
                )
            })?;
        Workload::parse(text)
    }

    /// A built-in name or a path to a TOML file.
    pub fn load(name_or_path: &str) -> anyhow::Result<Workload> {
        if BUILTINS
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name_or_path))
        {
            return Workload::builtin(name_or_path);
        }
        let text = std::fs::read_to_string(name_or_path).map_err(|e| {
            let names: Vec<_> = BUILTINS.iter().map(|(n, _)| *n).collect();
            anyhow::anyhow!(
                "workload {name_or_path:?} is neither built in ({}) nor a readable file: {e}",
                names.join(", ")
            )
        })?;
        Workload::parse(&text).map_err(|e| anyhow::anyhow!("workload file {name_or_path}: {e}"))
    }

    /// Parses and validates TOML text.
    pub fn parse(text: &str) -> anyhow::Result<Workload> {
        let w: Workload = toml::from_str(text)?;
        w.validate()?;
        Ok(w)
    }

    /// Checks the parameters make sense; every error names the field.
    pub fn validate(&self) -> anyhow::Result<()> {
        use anyhow::ensure;
        ensure!(self.peak_rate >= 0.0, "peak_rate must not be negative");
        ensure!(
            (0.0..=1.0).contains(&self.recurrence),
            "recurrence must be within 0..=1"
        );
        ensure!(self.zipf_exponent > 0.0, "zipf_exponent must be positive");
        ensure!(self.robots.rate > 0.0, "robots.rate must be positive");
        ensure!(
            self.robots.conn_limit >= 1,
            "robots.conn_limit must be >= 1"
        );
        ensure!(self.servers.count >= 1, "servers.count must be >= 1");
        ensure!(
            self.servers.think_mean_s >= 0.0 && self.servers.think_sd_s >= 0.0,
            "servers think time must not be negative"
        );
        ensure!(
            self.servers.idle_timeout_s > 0.0,
            "servers.idle_timeout_s must be positive"
        );
        ensure!(
            !self.phases.is_empty(),
            "a workload needs at least one [[phase]]"
        );
        for p in &self.phases {
            ensure!(p.duration_s >= 0.0, "phase {}: negative duration", p.name);
            ensure!(
                p.from >= 0.0 && p.to >= 0.0,
                "phase {}: negative load level",
                p.name
            );
        }
        Model::new(self.seed, &self.content)?;
        Ok(())
    }

    /// The compiled object model.
    pub fn model(&self) -> Model {
        Model::new(self.seed, &self.content).expect("validated workload")
    }

    /// The offered document hit ratio the parameters give: recurrence x cachable fraction.
    pub fn offered_hit_ratio(&self) -> f64 {
        self.recurrence * self.model().cachable_fraction()
    }

    /// Shortens every phase and the working-set freeze by `scale`, and the peak rate likewise.
    pub fn scaled(mut self, scale: f64) -> Workload {
        for p in &mut self.phases {
            p.duration_s *= scale;
        }
        self.working_set.freeze_after_s *= scale;
        self.peak_rate *= scale;
        self
    }

    /// Total length of the phases, seconds.
    pub fn duration_s(&self) -> f64 {
        self.phases.iter().map(|p| p.duration_s).sum()
    }
}

/// Where a moment of the run falls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Moment {
    /// Index of the phase.
    pub phase: usize,
    /// Request rate at this moment, req/s.
    pub rate: f64,
    /// When this phase ends, seconds since the start.
    pub phase_end: f64,
}

/// The phases laid out on the run's time line.
#[derive(Debug, Clone)]
pub struct Schedule {
    starts: Vec<f64>,
    phases: Vec<Phase>,
    peak_rate: f64,
}

impl Schedule {
    /// Lays out `w`'s phases from time 0.
    pub fn new(w: &Workload) -> Schedule {
        let mut t = 0.0;
        let mut starts = Vec::new();
        for p in &w.phases {
            starts.push(t);
            t += p.duration_s;
        }
        Schedule {
            starts,
            phases: w.phases.clone(),
            peak_rate: w.peak_rate,
        }
    }

    /// The phases.
    pub fn phases(&self) -> &[Phase] {
        &self.phases
    }

    /// Start of phase `i`, seconds.
    pub fn start(&self, i: usize) -> f64 {
        self.starts[i]
    }

    /// End of the last phase, seconds.
    pub fn end(&self) -> f64 {
        self.starts.last().copied().unwrap_or(0.0)
            + self.phases.last().map_or(0.0, |p| p.duration_s)
    }

    /// The phase and rate at `t` seconds since the start, or None after the end.
    pub fn at(&self, t: f64) -> Option<Moment> {
        let i = self
            .starts
            .iter()
            .zip(&self.phases)
            .position(|(s, p)| t < s + p.duration_s)?;
        let p = &self.phases[i];
        let frac = if p.duration_s > 0.0 {
            (t - self.starts[i]) / p.duration_s
        } else {
            0.0
        };
        let level = p.from + (p.to - p.from) * frac.clamp(0.0, 1.0);
        Some(Moment {
            phase: i,
            rate: level * self.peak_rate,
            phase_end: self.starts[i] + p.duration_s,
        })
    }
}

/// The set of objects that may be revisited: those whose first request completed, growing
/// until the freeze time and then sliding (the oldest leaves as a new one enters). The
/// robots and `trove sim`'s synthetic traces choose objects through this one type.
#[derive(Debug, Clone)]
pub struct WorkingObjects {
    oids: VecDeque<u64>,
    cap: Option<usize>,
    freeze_at: f64,
}

impl WorkingObjects {
    /// An empty set that stops growing at `freeze_at` seconds into the run.
    pub fn new(freeze_at: f64) -> Self {
        WorkingObjects {
            oids: VecDeque::new(),
            cap: None,
            freeze_at,
        }
    }

    /// With probability `recurrence`, an object of the set chosen by `popularity`; `None`
    /// means a new object (also when the set is still empty).
    pub fn revisit(
        &self,
        recurrence: f64,
        popularity: Popularity,
        zipf_s: f64,
        rng: &mut impl Rng,
    ) -> Option<u64> {
        if rng.gen::<f64>() >= recurrence {
            return None;
        }
        let n = self.oids.len();
        if n == 0 {
            return None;
        }
        let i = match popularity {
            Popularity::Uniform => rng.gen_range(0..n),
            Popularity::Zipf => {
                let rank = Zipf::new(n as u64, zipf_s).map_or(1.0, |z| z.sample(rng)) as usize;
                n - rank.clamp(1, n)
            }
        };
        Some(self.oids[i])
    }

    /// `oid`'s first request completed at `t` seconds into the run.
    pub fn remember(&mut self, oid: u64, t: f64) {
        if self.cap.is_none() && t >= self.freeze_at {
            self.cap = Some(self.oids.len().max(1));
        }
        self.oids.push_back(oid);
        if let Some(cap) = self.cap {
            while self.oids.len() > cap {
                self.oids.pop_front();
            }
        }
    }

    /// Objects in the set.
    pub fn len(&self) -> usize {
        self.oids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.oids.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse_and_offer_55_percent() {
        for (name, _) in BUILTINS {
            let w = Workload::builtin(name).unwrap();
            let offered = w.offered_hit_ratio();
            assert!((offered - 0.55).abs() < 0.001, "{name}: {offered}");
        }
        let w = Workload::builtin("polymix-2").unwrap();
        assert_eq!(w.phases.len(), 7);
        assert_eq!(w.duration_s(), 14.0 * 3600.0);
    }

    #[test]
    fn scale_shortens_time_and_rate() {
        let w = Workload::builtin("polymix-2").unwrap().scaled(0.01);
        assert!((w.duration_s() - 504.0).abs() < 1e-6);
        assert!((w.peak_rate - 200.0).abs() < 1e-9);
        assert!((w.working_set.freeze_after_s - 144.0).abs() < 1e-9);
    }

    #[test]
    fn schedule_ramps_linearly() {
        let w = Workload::builtin("polymix-2").unwrap();
        let s = Schedule::new(&w);
        let m = s.at(1800.0).unwrap();
        assert_eq!(m.phase, 0);
        assert!((m.rate - w.peak_rate / 2.0).abs() < 1e-6);
        assert_eq!(s.at(3600.0).unwrap().phase, 1);
        assert_eq!(s.at(s.end()), None);
    }

    #[test]
    fn bad_input_is_named() {
        let text = Workload::builtin("datacomm-1").unwrap();
        let mut t = toml::to_string(&text).unwrap();
        t = t.replace("recurrence = 0.6875", "recurrence = 1.5");
        let e = Workload::parse(&t).unwrap_err().to_string();
        assert!(e.contains("recurrence"), "{e}");
        let e = Workload::parse("name = \"x\"\nsed = 1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sed"), "{e}");
        let e = Workload::load("no-such-workload").unwrap_err().to_string();
        assert!(e.contains("polymix-2"), "{e}");
    }
}

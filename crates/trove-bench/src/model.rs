//! The object model: an object id fixes everything about the object.
//!
//! Web Polygraph's central idea (seed 000 §4) is that an *oid* determines the response's content
//! type, size and cachability, so robots and servers agree on every object without talking. Here a
//! seeded hash of (workload seed, oid) seeds a tiny deterministic generator that draws the content
//! kind, the size and the cachability from the workload's distributions. The generator is our own
//! SplitMix64 rather than `rand`'s `StdRng` because `StdRng`'s output may change between `rand`
//! releases, and a changed object model would silently make old reports incomparable.
//!
//! Bodies are a 64-byte pattern repeated to the object's size. The pattern starts with the oid in
//! hex, so a body that belongs to another object, a shifted body or a flipped byte are all caught
//! by [`verify_chunk`], and generating it costs a memcpy.

use rand::{Rng, RngCore};
use rand_distr::{Distribution, Exp, LogNormal};
use serde::{Deserialize, Serialize};

/// The largest object the model produces: long lognormal tails are cut here so one draw cannot
/// dominate a run (Polygraph's PolyMix-2 sizes range up to about 5 MB).
pub const MAX_OBJECT_SIZE: u64 = 16 << 20;

/// Length of the repeated body pattern.
pub const PATTERN_LEN: usize = 64;

/// SplitMix64: a small, fast, well-mixed generator whose output is fixed forever.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }
}

/// One round of the SplitMix64 finaliser: a good 64-bit mixing function.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl RngCore for SplitMix64 {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.0)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

/// A size distribution, in bytes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "dist", rename_all = "lowercase")]
pub enum SizeDist {
    /// Exponential with the given mean.
    Exp { mean: f64 },
    /// Lognormal with the given mean and standard deviation (of the sizes, not of their logs).
    Lognormal { mean: f64, sd: f64 },
    /// Every object has this size.
    Const { size: f64 },
}

impl SizeDist {
    /// The distribution's mean before rounding and the [`MAX_OBJECT_SIZE`] cut.
    pub fn mean(&self) -> f64 {
        match *self {
            SizeDist::Exp { mean } | SizeDist::Lognormal { mean, .. } => mean,
            SizeDist::Const { size } => size,
        }
    }
}

/// One content kind of a workload's mix (PolyMix-2 has image, HTML, download and other).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ContentKind {
    /// Short name used in reports.
    pub name: String,
    /// Share of all objects, as a fraction; shares are normalised so they need not sum to 1.
    pub share: f64,
    /// Probability that an object of this kind is cachable.
    pub cachable: f64,
    /// Reply size distribution.
    pub size: SizeDist,
    /// `Content-Type` sent by the servers.
    #[serde(default = "default_mime")]
    pub mime: String,
    /// File extension used in URLs (helps proxies that key policies on extensions).
    #[serde(default = "default_ext")]
    pub ext: String,
}

fn default_mime() -> String {
    "application/octet-stream".into()
}
fn default_ext() -> String {
    "bin".into()
}

#[derive(Debug, Clone)]
enum Sampler {
    Exp(Exp<f64>),
    Lognormal(LogNormal<f64>),
    Const(f64),
}

impl Sampler {
    fn new(d: &SizeDist) -> anyhow::Result<Self> {
        Ok(match *d {
            SizeDist::Exp { mean } => {
                anyhow::ensure!(mean > 0.0, "exp mean must be positive, got {mean}");
                Sampler::Exp(Exp::new(1.0 / mean)?)
            }
            SizeDist::Lognormal { mean, sd } => {
                anyhow::ensure!(mean > 0.0 && sd >= 0.0, "lognormal needs mean > 0, sd >= 0");
                // Parameters of the underlying normal from the mean and sd of the sizes.
                let sigma2 = (1.0 + (sd * sd) / (mean * mean)).ln();
                let mu = mean.ln() - sigma2 / 2.0;
                Sampler::Lognormal(LogNormal::new(mu, sigma2.sqrt())?)
            }
            SizeDist::Const { size } => Sampler::Const(size),
        })
    }
    fn sample(&self, rng: &mut SplitMix64) -> f64 {
        match self {
            Sampler::Exp(d) => d.sample(rng),
            Sampler::Lognormal(d) => d.sample(rng),
            Sampler::Const(v) => *v,
        }
    }
}

/// What an oid fixes about its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectSpec {
    /// The object id.
    pub oid: u64,
    /// Index into the model's content kinds.
    pub kind: usize,
    /// Body length in bytes.
    pub size: u64,
    /// Whether servers mark the response cachable.
    pub cachable: bool,
}

/// A compiled content mix: maps oids to object specs.
#[derive(Debug, Clone)]
pub struct Model {
    seed: u64,
    kinds: Vec<ContentKind>,
    cumulative: Vec<f64>,
    samplers: Vec<Sampler>,
}

impl Model {
    /// Compiles a mix; fails on empty mixes, negative shares or bad distribution parameters.
    pub fn new(seed: u64, kinds: &[ContentKind]) -> anyhow::Result<Self> {
        anyhow::ensure!(!kinds.is_empty(), "the content mix is empty");
        let total: f64 = kinds.iter().map(|k| k.share).sum();
        anyhow::ensure!(total > 0.0, "content shares sum to zero");
        let mut acc = 0.0;
        let mut cumulative = Vec::new();
        let mut samplers = Vec::new();
        for k in kinds {
            anyhow::ensure!(k.share >= 0.0, "content kind {}: negative share", k.name);
            anyhow::ensure!(
                (0.0..=1.0).contains(&k.cachable),
                "content kind {}: cachable must be within 0..=1",
                k.name
            );
            acc += k.share / total;
            cumulative.push(acc);
            samplers.push(
                Sampler::new(&k.size)
                    .map_err(|e| anyhow::anyhow!("content kind {}: {e}", k.name))?,
            );
        }
        Ok(Model {
            seed,
            kinds: kinds.to_vec(),
            cumulative,
            samplers,
        })
    }

    /// The content kinds, in workload order.
    pub fn kinds(&self) -> &[ContentKind] {
        &self.kinds
    }

    /// The fraction of objects that are cachable, from the mix's parameters.
    pub fn cachable_fraction(&self) -> f64 {
        let total: f64 = self.kinds.iter().map(|k| k.share).sum();
        self.kinds
            .iter()
            .map(|k| k.share / total * k.cachable)
            .sum()
    }

    /// The object that `oid` names. Pure: the same (seed, oid) always gives the same answer.
    pub fn spec(&self, oid: u64) -> ObjectSpec {
        let mut rng = SplitMix64::new(mix64(self.seed ^ mix64(oid)));
        let u: f64 = rng.gen();
        let kind = self
            .cumulative
            .iter()
            .position(|&c| u < c)
            .unwrap_or(self.kinds.len() - 1);
        let raw = self.samplers[kind].sample(&mut rng);
        let size = (raw.round() as u64).clamp(1, MAX_OBJECT_SIZE);
        let cachable = rng.gen::<f64>() < self.kinds[kind].cachable;
        ObjectSpec {
            oid,
            kind,
            size,
            cachable,
        }
    }
}

/// The 64-byte pattern the body of `oid` repeats: the oid in hex, a dash, 46 pseudo-random
/// letters and a newline (so a body is readable with `head`).
pub fn pattern(oid: u64) -> [u8; PATTERN_LEN] {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut p = [0u8; PATTERN_LEN];
    let hex = format!("{oid:016x}");
    p[..16].copy_from_slice(hex.as_bytes());
    p[16] = b'-';
    let mut rng = SplitMix64::new(mix64(oid ^ 0x5eed_b0d1));
    for b in &mut p[17..PATTERN_LEN - 1] {
        *b = ALPHABET[(rng.next_u32() & 31) as usize];
    }
    p[PATTERN_LEN - 1] = b'\n';
    p
}

/// `len` bytes of `oid`'s body, starting at body offset 0 (the generator for whole bodies and
/// for the repeated block servers stream large bodies from).
pub fn body_block(oid: u64, len: usize) -> Vec<u8> {
    let p = pattern(oid);
    let mut v = Vec::with_capacity(len);
    while v.len() + PATTERN_LEN <= len {
        v.extend_from_slice(&p);
    }
    v.extend_from_slice(&p[..len - v.len()]);
    v
}

/// Checks that `chunk` is the body of the object with pattern `pat` at body offset `offset`.
/// Returns the body offset of the first wrong byte, if any.
pub fn verify_chunk(pat: &[u8; PATTERN_LEN], offset: u64, chunk: &[u8]) -> Option<u64> {
    let mut pos = (offset % PATTERN_LEN as u64) as usize;
    let mut i = 0;
    // Align to the pattern, then compare whole 64-byte blocks (fast path), then the tail.
    while i < chunk.len() && pos != 0 {
        if chunk[i] != pat[pos] {
            return Some(offset + i as u64);
        }
        i += 1;
        pos = (pos + 1) % PATTERN_LEN;
    }
    while i + PATTERN_LEN <= chunk.len() {
        if chunk[i..i + PATTERN_LEN] != pat[..] {
            let j = (0..PATTERN_LEN)
                .find(|&j| chunk[i + j] != pat[j])
                .unwrap_or(0);
            return Some(offset + (i + j) as u64);
        }
        i += PATTERN_LEN;
    }
    for (j, &b) in chunk[i..].iter().enumerate() {
        if b != pat[j] {
            return Some(offset + (i + j) as u64);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Workload;

    fn polymix() -> Model {
        let w = Workload::builtin("polymix-2").unwrap();
        Model::new(w.seed, &w.content).unwrap()
    }

    #[test]
    fn same_oid_same_object() {
        let m = polymix();
        for oid in 0..1000 {
            assert_eq!(m.spec(oid), m.spec(oid));
        }
        let other = Model::new(99, m.kinds()).unwrap();
        let differ = (0..1000).filter(|&o| other.spec(o) != m.spec(o)).count();
        assert!(differ > 900, "the seed must change the objects: {differ}");
    }

    /// PolyMix-2 (seed 000 §4.1): shares 65/15/0.5/19.5 %, cachable 80/90/95/72 %, sizes
    /// exp(4.5 KB), exp(8.5 KB), logn(300 KB, 300 KB), logn(25 KB, 10 KB); 80% cachable overall.
    #[test]
    fn polymix2_distributions_match_their_parameters() {
        let m = polymix();
        let n = 400_000u64;
        let k = m.kinds().len();
        let (mut count, mut cach, mut bytes) = (vec![0u64; k], vec![0u64; k], vec![0f64; k]);
        for oid in 0..n {
            let s = m.spec(oid);
            count[s.kind] += 1;
            cach[s.kind] += s.cachable as u64;
            bytes[s.kind] += s.size as f64;
        }
        let total_cach: u64 = cach.iter().sum();
        let overall = total_cach as f64 / n as f64;
        assert!((overall - 0.80).abs() < 0.005, "overall cachable {overall}");
        assert!((m.cachable_fraction() - 0.80015).abs() < 1e-9);
        for (i, kind) in m.kinds().iter().enumerate() {
            let share = count[i] as f64 / n as f64;
            // Three standard errors of a binomial proportion, at least 0.2 points.
            let tol = (3.0 * (kind.share * (1.0 - kind.share) / n as f64).sqrt()).max(0.002);
            assert!(
                (share - kind.share).abs() < tol,
                "{}: share {share}",
                kind.name
            );
            let c = cach[i] as f64 / count[i] as f64;
            let tol = 4.0 * (kind.cachable * (1.0 - kind.cachable) / count[i] as f64).sqrt();
            assert!(
                (c - kind.cachable).abs() < tol,
                "{}: cachable {c}",
                kind.name
            );
            let mean = bytes[i] / count[i] as f64;
            let want = kind.size.mean();
            // Means within 3%, or 10% for the 0.5% download kind (2,000 heavy-tailed samples).
            let rel = if count[i] < 10_000 { 0.10 } else { 0.03 };
            assert!(
                (mean - want).abs() / want < rel,
                "{}: mean size {mean} want {want}",
                kind.name
            );
        }
    }

    #[test]
    fn datacomm1_sizes_and_cachability() {
        let w = Workload::builtin("datacomm-1").unwrap();
        let m = Model::new(w.seed, &w.content).unwrap();
        let n = 200_000u64;
        let (mut sum, mut cach) = (0f64, 0u64);
        for oid in 0..n {
            let s = m.spec(oid);
            sum += s.size as f64;
            cach += s.cachable as u64;
        }
        let mean = sum / n as f64;
        assert!(
            (mean - 13.0 * 1024.0).abs() / (13.0 * 1024.0) < 0.02,
            "{mean}"
        );
        let c = cach as f64 / n as f64;
        assert!((c - 0.80).abs() < 0.006, "{c}");
    }

    #[test]
    fn bodies_verify_and_corruption_is_found() {
        let oid = 0xdead_beef;
        let body = body_block(oid, 10_000);
        assert!(body.starts_with(b"00000000deadbeef-"));
        let pat = pattern(oid);
        assert_eq!(verify_chunk(&pat, 0, &body), None);
        // Verifying in odd-sized pieces gives the same answer.
        let mut off = 0;
        for piece in body.chunks(77) {
            assert_eq!(verify_chunk(&pat, off, piece), None);
            off += piece.len() as u64;
        }
        for at in [0usize, 1, 63, 64, 5000, 9999] {
            let mut bad = body.clone();
            bad[at] ^= 1;
            assert_eq!(verify_chunk(&pat, 0, &bad), Some(at as u64), "flip at {at}");
        }
        // Another object's body is caught at its first byte that differs.
        assert!(verify_chunk(&pattern(oid + 1), 0, &body).is_some());
    }
}

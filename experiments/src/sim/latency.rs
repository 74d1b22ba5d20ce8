//! Link latency models: how long one message takes from process `from` to process `to`.
//!
//! The simulator asks a [`LatencyModel`] for every message it sends, passing the run's one
//! seeded RNG, so random models stay reproducible. Processes are named by their simulator
//! index (`u32`), not by `NodeId`, so the trait is generic: the election simulator and the
//! super-peer experiments share it, and any other model (for example the Internet latency
//! model of `overlay::latency`, coordinates or a measured matrix) plugs in by implementing
//! one method and handing a `Box<dyn LatencyModel>` to the engine.
//!
//! Built-in models ([`LatencySpec`] parses them from text):
//! - `const:5ms`: every message takes exactly 5 ms. Links are FIFO.
//! - `range:1ms..50ms`: uniform in the closed range, drawn per message (so messages on one
//!   link may overtake each other).
//! - `matrix:FILE[,jitter=0.1]`: a K x K matrix of one-way delays in milliseconds between K
//!   *sites* (CSV, one row per line); every process is placed on a uniformly random site when
//!   the model is built. A full N x N matrix is impractical at N = 100,000, hence sites. The
//!   optional jitter adds a uniform `[0, jitter x base]` per message.
//! - `internet` (or `internet:metric`): the seeded Internet model of `overlay::latency`
//!   (cities, regions, access links, detours; `metric` = its triangle-inequality variant):
//!   each message takes half of one sampled RTT between the two processes
//!   (`LatencyModel::sample_one_way`). The model's placement seed is drawn from the run's RNG.

use rand::{Rng, RngCore};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::sim::units::{fmt_duration, parse_duration};

/// One-way delay between two simulated processes.
pub trait LatencyModel: Send {
    /// The delay of one message from `from` to `to`, drawn with `rng` if the model is random.
    fn delay(&mut self, from: u32, to: u32, rng: &mut dyn RngCore) -> Duration;
    /// A short description for reports.
    fn describe(&self) -> String;
}

/// Every message takes the same time.
#[derive(Debug, Clone, Copy)]
pub struct Constant(pub Duration);

impl LatencyModel for Constant {
    #[inline]
    fn delay(&mut self, _from: u32, _to: u32, _rng: &mut dyn RngCore) -> Duration {
        self.0
    }
    fn describe(&self) -> String {
        format!("const:{}", fmt_duration(self.0))
    }
}

/// Uniform in `[lo, hi]`, per message.
#[derive(Debug, Clone, Copy)]
pub struct Uniform {
    lo_us: u64,
    hi_us: u64,
}

impl Uniform {
    /// `lo <= hi` is required; swapped bounds are put in order.
    pub fn new(lo: Duration, hi: Duration) -> Uniform {
        let (a, b) = (lo.as_micros() as u64, hi.as_micros() as u64);
        Uniform { lo_us: a.min(b), hi_us: a.max(b) }
    }
}

impl LatencyModel for Uniform {
    #[inline]
    fn delay(&mut self, _from: u32, _to: u32, rng: &mut dyn RngCore) -> Duration {
        Duration::from_micros(rng.gen_range(self.lo_us..=self.hi_us))
    }
    fn describe(&self) -> String {
        format!(
            "range:{}..{}",
            fmt_duration(Duration::from_micros(self.lo_us)),
            fmt_duration(Duration::from_micros(self.hi_us))
        )
    }
}

/// A site-to-site delay matrix; each process lives on one site.
#[derive(Debug, Clone)]
pub struct SiteMatrix {
    sites: usize,
    /// Row-major `sites x sites` one-way delays in microseconds.
    delay_us: Vec<u64>,
    /// Site of each process.
    site_of: Vec<u16>,
    jitter: f64,
    source: String,
}

/// Why a matrix could not be built.
#[derive(Debug, thiserror::Error)]
pub enum MatrixError {
    #[error("cannot read latency matrix {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("latency matrix {path}: {reason}")]
    Bad { path: String, reason: String },
    #[error("internet latency model: {0}")]
    Internet(String),
}

impl SiteMatrix {
    /// Build from rows of milliseconds. Every row must have as many entries as there are rows.
    pub fn new(
        rows: Vec<Vec<f64>>,
        processes: usize,
        jitter: f64,
        source: String,
        rng: &mut dyn RngCore,
    ) -> Result<SiteMatrix, MatrixError> {
        let bad = |reason: String| MatrixError::Bad { path: source.clone(), reason };
        let k = rows.len();
        if k == 0 || k > u16::MAX as usize {
            return Err(bad(format!("needs 1..=65535 rows, got {k}")));
        }
        let mut delay_us = Vec::with_capacity(k * k);
        for (i, r) in rows.iter().enumerate() {
            if r.len() != k {
                return Err(bad(format!("row {} has {} entries, expected {k}", i + 1, r.len())));
            }
            for &ms in r {
                if !ms.is_finite() || ms < 0.0 {
                    return Err(bad(format!("row {}: delay {ms} is not a non-negative number", i + 1)));
                }
                delay_us.push((ms * 1e3).round() as u64);
            }
        }
        if !(0.0..=10.0).contains(&jitter) {
            return Err(bad(format!("jitter {jitter} must be in 0..=10")));
        }
        let site_of = (0..processes).map(|_| rng.gen_range(0..k) as u16).collect();
        Ok(SiteMatrix { sites: k, delay_us, site_of, jitter, source })
    }

    /// Read a CSV file (comma or whitespace separated milliseconds, `#` comments).
    pub fn from_file(
        path: &str,
        processes: usize,
        jitter: f64,
        rng: &mut dyn RngCore,
    ) -> Result<SiteMatrix, MatrixError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| MatrixError::Io { path: path.to_string(), source })?;
        let mut rows = Vec::new();
        for (ln, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let row: Result<Vec<f64>, _> = line
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|s| !s.is_empty())
                .map(|s| s.parse::<f64>())
                .collect();
            rows.push(
                row.map_err(|e| MatrixError::Bad { path: path.to_string(), reason: format!("line {}: {e}", ln + 1) })?,
            );
        }
        SiteMatrix::new(rows, processes, jitter, path.to_string(), rng)
    }

    pub fn sites(&self) -> usize {
        self.sites
    }
}

impl LatencyModel for SiteMatrix {
    fn delay(&mut self, from: u32, to: u32, rng: &mut dyn RngCore) -> Duration {
        let s = |p: u32| self.site_of.get(p as usize).copied().unwrap_or(0) as usize;
        let base = self.delay_us[s(from) * self.sites + s(to)];
        let extra =
            if self.jitter > 0.0 && base > 0 { rng.gen_range(0..=((base as f64 * self.jitter) as u64)) } else { 0 };
        Duration::from_micros(base + extra)
    }
    fn describe(&self) -> String {
        format!("matrix:{} ({} sites, jitter {})", self.source, self.sites, self.jitter)
    }
}

/// The Internet latency model of `overlay::latency`, plugged in through [`LatencyModel`].
pub struct Internet {
    model: overlay::latency::LatencyModel,
    metric: bool,
}

impl Internet {
    /// Place `processes` processes with the model's default (or metric) configuration.
    pub fn generate(processes: usize, metric: bool, seed: u64) -> Result<Internet, overlay::latency::LatencyError> {
        let cfg =
            if metric { overlay::latency::ModelConfig::metric() } else { overlay::latency::ModelConfig::default() };
        Ok(Internet { model: overlay::latency::LatencyModel::generate(processes, &cfg, seed)?, metric })
    }
}

impl LatencyModel for Internet {
    fn delay(&mut self, from: u32, to: u32, rng: &mut dyn RngCore) -> Duration {
        let n = self.model.len() as u32;
        if from >= n || to >= n {
            return Duration::ZERO;
        }
        self.model.sample_one_way(from as usize, to as usize, rng)
    }
    fn describe(&self) -> String {
        format!("internet{} ({} processes)", if self.metric { ":metric" } else { "" }, self.model.len())
    }
}

/// A latency model named in text (command line or config file).
#[derive(Debug, Clone, PartialEq)]
pub enum LatencySpec {
    Constant(Duration),
    Range(Duration, Duration),
    Matrix { path: PathBuf, jitter: f64 },
    Internet { metric: bool },
}

/// Why a latency spec did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad latency {input:?}: {reason} (expected const:5ms, range:1ms..50ms, matrix:FILE[,jitter=0.1], internet or internet:metric)")]
pub struct LatencySpecError {
    pub input: String,
    pub reason: String,
}

impl FromStr for LatencySpec {
    type Err = LatencySpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason: String| LatencySpecError { input: s.to_string(), reason };
        match s.trim() {
            "internet" => return Ok(LatencySpec::Internet { metric: false }),
            "internet:metric" => return Ok(LatencySpec::Internet { metric: true }),
            _ => {}
        }
        let (kind, rest) = s.trim().split_once(':').ok_or_else(|| err("missing kind".into()))?;
        match kind {
            "const" => Ok(LatencySpec::Constant(parse_duration(rest).map_err(|e| err(e.to_string()))?)),
            "range" => {
                let (a, b) = rest.split_once("..").ok_or_else(|| err("range needs lo..hi".into()))?;
                let lo = parse_duration(a).map_err(|e| err(e.to_string()))?;
                let hi = parse_duration(b).map_err(|e| err(e.to_string()))?;
                if lo > hi {
                    return Err(err("lower bound above upper bound".into()));
                }
                Ok(LatencySpec::Range(lo, hi))
            }
            "matrix" => {
                let mut parts = rest.split(',');
                let path = parts.next().unwrap_or("").trim();
                if path.is_empty() {
                    return Err(err("missing file".into()));
                }
                let mut jitter = 0.0;
                for p in parts {
                    match p.trim().split_once('=') {
                        Some(("jitter", v)) => {
                            jitter = v.parse().map_err(|_| err(format!("bad jitter {v:?}")))?;
                            if !(0.0..=10.0).contains(&jitter) {
                                return Err(err("jitter must be in 0..=10".into()));
                            }
                        }
                        _ => return Err(err(format!("unknown option {p:?}"))),
                    }
                }
                Ok(LatencySpec::Matrix { path: PathBuf::from(path), jitter })
            }
            other => Err(err(format!("unknown kind {other:?}"))),
        }
    }
}

impl fmt::Display for LatencySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LatencySpec::Constant(d) => write!(f, "const:{}", fmt_duration(*d)),
            LatencySpec::Range(a, b) => write!(f, "range:{}..{}", fmt_duration(*a), fmt_duration(*b)),
            LatencySpec::Matrix { path, jitter } => write!(f, "matrix:{},jitter={jitter}", path.display()),
            LatencySpec::Internet { metric: false } => f.write_str("internet"),
            LatencySpec::Internet { metric: true } => f.write_str("internet:metric"),
        }
    }
}

impl serde::Serialize for LatencySpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> serde::Deserialize<'de> for LatencySpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl LatencySpec {
    /// Build the model for `processes` processes (the matrix places them on sites with `rng`).
    pub fn build(&self, processes: usize, rng: &mut dyn RngCore) -> Result<Box<dyn LatencyModel>, MatrixError> {
        Ok(match self {
            LatencySpec::Constant(d) => Box::new(Constant(*d)),
            LatencySpec::Range(a, b) => Box::new(Uniform::new(*a, *b)),
            LatencySpec::Matrix { path, jitter } => {
                Box::new(SiteMatrix::from_file(&path.to_string_lossy(), processes, *jitter, rng)?)
            }
            LatencySpec::Internet { metric } => Box::new(
                Internet::generate(processes, *metric, rng.next_u64())
                    .map_err(|e| MatrixError::Internet(e.to_string()))?,
            ),
        })
    }

    /// The largest one-way delay the built-in models can produce, if known (used to size
    /// default windows); `None` for a matrix.
    pub fn upper_bound(&self) -> Option<Duration> {
        match self {
            LatencySpec::Constant(d) => Some(*d),
            LatencySpec::Range(_, b) => Some(*b),
            LatencySpec::Matrix { .. } | LatencySpec::Internet { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn parse_specs() {
        assert_eq!("const:5ms".parse(), Ok(LatencySpec::Constant(Duration::from_millis(5))));
        assert_eq!(
            "range:1ms..50ms".parse(),
            Ok(LatencySpec::Range(Duration::from_millis(1), Duration::from_millis(50)))
        );
        assert!(matches!("matrix:m.csv,jitter=0.2".parse(), Ok(LatencySpec::Matrix { jitter, .. }) if jitter == 0.2));
        for bad in ["5ms", "const:5", "range:5ms", "range:9ms..1ms", "matrix:", "gauss:1ms", "matrix:x,foo=1"] {
            assert!(bad.parse::<LatencySpec>().is_err(), "{bad} should not parse");
        }
        assert_eq!("internet".parse(), Ok(LatencySpec::Internet { metric: false }));
        assert_eq!("internet:metric".parse(), Ok(LatencySpec::Internet { metric: true }));
        let s: LatencySpec = "range:1ms..50ms".parse().unwrap();
        assert_eq!(s.to_string().parse::<LatencySpec>(), Ok(s));
    }

    #[test]
    fn uniform_stays_in_range_and_is_seeded() {
        let mut m = Uniform::new(Duration::from_millis(1), Duration::from_millis(3));
        let draw = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut m = m;
            (0..100).map(|_| m.delay(0, 1, &mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for _ in 0..1000 {
            let d = m.delay(0, 1, &mut rng);
            assert!(d >= Duration::from_millis(1) && d <= Duration::from_millis(3));
        }
    }

    #[test]
    fn internet_model_plugs_in() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut m = LatencySpec::Internet { metric: false }.build(50, &mut rng).unwrap();
        let d = m.delay(0, 1, &mut rng);
        assert!(d > Duration::ZERO && d < Duration::from_secs(5), "{d:?}");
        assert_eq!(m.delay(0, 99, &mut rng), Duration::ZERO);
    }

    #[test]
    fn matrix_uses_sites() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let rows = vec![vec![0.0, 10.0], vec![20.0, 0.0]];
        let mut m = SiteMatrix::new(rows, 50, 0.0, "t".into(), &mut rng).unwrap();
        for a in 0..50u32 {
            for b in 0..50u32 {
                let d = m.delay(a, b, &mut rng).as_millis();
                assert!([0, 10, 20].contains(&d));
            }
        }
        assert!(SiteMatrix::new(vec![vec![1.0]], 1, 0.0, "t".into(), &mut rng).is_ok());
        assert!(SiteMatrix::new(vec![vec![1.0, 2.0]], 1, 0.0, "t".into(), &mut rng).is_err());
        assert!(SiteMatrix::new(vec![vec![-1.0]], 1, 0.0, "t".into(), &mut rng).is_err());
    }
}

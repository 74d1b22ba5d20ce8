//! Summary statistics of a sample of measurements: count, mean, spread and percentiles.
//!
//! One implementation for every report of the project (the simulator's super-peer measures,
//! the swarm's super-peer, coordinate and steady-state reports), so that a "p95" means the same
//! thing everywhere. Pure computation: no I/O, no clock, no randomness.
//!
//! Choices (the seeds say nothing about statistics; these are the conventions the reports
//! already used, kept so that earlier results stay comparable):
//! - **Percentiles are nearest-rank on the sorted sample without interpolation**: the value at
//!   index `round((n - 1) * q)` (ties round half away from zero), so every reported percentile
//!   is a measured value, `q = 0` is the minimum and `q = 1` the maximum. A fraction `q` outside
//!   `[0, 1]` (or NaN) has no percentile (`None`).
//! - **NaN is rejected** when a [`Sample`] is built ([`StatsError::NaN`]): it has no place in an
//!   order, and a NaN that reached a report is a bug to see, not a value to average.
//!   Infinities are ordered values and are kept.
//! - **Spread is the population standard deviation** (divide by `n`): the samples are whole
//!   populations (every attached node, every cluster), not draws from one.
//! - **An empty sample has no statistics** (`None`); [`Summary`] of an empty sample is all
//!   zeros with `count: 0`, as the swarm report always printed it.
//! - The mean sums the values in ascending order (the order the reports summed them before).
//!
//! Crates considered instead (no dependency added): `statrs` pulls in `nalgebra` for this, and
//! the small percentile crates interpolate between ranks, which would change every reported
//! number; a hand-written 100 lines with tests is the smaller thing to keep.

use serde::Serialize;
use thiserror::Error;

/// Why a sample was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum StatsError {
    /// Value number `index` (in input order) is NaN.
    #[error("sample value #{index} is NaN")]
    NaN { index: usize },
}

/// A sample sorted ascending with no NaN: what every statistic here is computed from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    sorted: Vec<f64>,
}

impl Sample {
    /// Sorts `values`; an error if any of them is NaN.
    pub fn new(mut values: Vec<f64>) -> Result<Sample, StatsError> {
        if let Some(index) = values.iter().position(|v| v.is_nan()) {
            return Err(StatsError::NaN { index });
        }
        values.sort_by(f64::total_cmp);
        Ok(Sample { sorted: values })
    }

    /// [`Sample::new`] from any iterator of values.
    pub fn collect(values: impl IntoIterator<Item = f64>) -> Result<Sample, StatsError> {
        Sample::new(values.into_iter().collect())
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// The values, ascending.
    pub fn sorted(&self) -> &[f64] {
        &self.sorted
    }

    pub fn min(&self) -> Option<f64> {
        self.sorted.first().copied()
    }

    pub fn max(&self) -> Option<f64> {
        self.sorted.last().copied()
    }

    pub fn sum(&self) -> f64 {
        self.sorted.iter().sum()
    }

    pub fn mean(&self) -> Option<f64> {
        (!self.is_empty()).then(|| self.sum() / self.len() as f64)
    }

    /// Population standard deviation.
    pub fn std_dev(&self) -> Option<f64> {
        let mean = self.mean()?;
        let var = self.sorted.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / self.len() as f64;
        Some(var.sqrt())
    }

    /// Coefficient of variation (standard deviation over mean); `None` when empty or when the
    /// mean is not positive.
    pub fn cv(&self) -> Option<f64> {
        let mean = self.mean()?;
        (mean > 0.0).then(|| self.std_dev().unwrap_or(0.0) / mean)
    }

    /// The nearest-rank percentile at fraction `q` in `[0, 1]` (see the module doc).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.is_empty() || !(0.0..=1.0).contains(&q) {
            return None;
        }
        let i = ((self.len() - 1) as f64 * q).round() as usize;
        self.sorted.get(i.min(self.len() - 1)).copied()
    }

    /// The median ([`Sample::quantile`] at 0.5).
    pub fn median(&self) -> Option<f64> {
        self.quantile(0.5)
    }

    /// Count, mean, p50, p95 and max.
    pub fn summary(&self) -> Summary {
        if self.is_empty() {
            return Summary::default();
        }
        let q = |f| self.quantile(f).unwrap_or(f64::NAN);
        Summary { count: self.len(), mean: self.mean().unwrap_or(f64::NAN), p50: q(0.5), p95: q(0.95), max: q(1.0) }
    }
}

/// Count, mean, median, 95th percentile and maximum of a sample; all zeros when it is empty.
/// Serialised with these field names (the swarm report's JSON reads them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Summary {
    pub count: usize,
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub max: f64,
}

impl Summary {
    /// The summary of `values`; an error if one is NaN.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Result<Summary, StatsError> {
        Ok(Sample::collect(values)?.summary())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_sample_has_no_statistics() {
        let s = Sample::new(vec![]).unwrap();
        assert!(s.is_empty());
        assert_eq!((s.min(), s.max(), s.mean(), s.std_dev(), s.cv()), (None, None, None, None, None));
        assert_eq!(s.quantile(0.5), None);
        assert_eq!(Summary::of([]).unwrap(), Summary::default());
        assert_eq!(Summary::default().count, 0);
    }

    #[test]
    fn one_value_is_every_statistic() {
        let s = Sample::new(vec![7.5]).unwrap();
        for q in [0.0, 0.5, 0.95, 1.0] {
            assert_eq!(s.quantile(q), Some(7.5));
        }
        assert_eq!((s.mean(), s.std_dev(), s.cv()), (Some(7.5), Some(0.0), Some(0.0)));
        assert_eq!(s.summary(), Summary { count: 1, mean: 7.5, p50: 7.5, p95: 7.5, max: 7.5 });
    }

    #[test]
    fn nan_is_rejected_with_its_position() {
        assert_eq!(Sample::new(vec![1.0, 2.0, f64::NAN, 3.0]), Err(StatsError::NaN { index: 2 }));
        assert!(Summary::of([f64::NAN]).is_err());
        // Infinities are ordered values.
        let s = Sample::new(vec![f64::INFINITY, 1.0, f64::NEG_INFINITY]).unwrap();
        assert_eq!(s.sorted(), &[f64::NEG_INFINITY, 1.0, f64::INFINITY]);
    }

    #[test]
    fn known_percentiles_are_nearest_rank() {
        // 1..=101 shuffled: index round(100 q) holds the value 1 + round(100 q).
        let values: Vec<f64> = (0..101).map(|i| ((i * 37) % 101 + 1) as f64).collect();
        let s = Sample::new(values).unwrap();
        assert_eq!(s.sorted()[0], 1.0);
        assert_eq!(s.quantile(0.0), Some(1.0));
        assert_eq!(s.quantile(0.5), Some(51.0));
        assert_eq!(s.quantile(0.9), Some(91.0));
        assert_eq!(s.quantile(0.95), Some(96.0));
        assert_eq!(s.quantile(1.0), Some(101.0));
        assert_eq!(s.mean(), Some(51.0));
        // Four values: (n - 1) q = 1.5 rounds up to index 2, 2.85 to 3.
        let s = Sample::collect([40.0, 10.0, 30.0, 20.0]).unwrap();
        assert_eq!((s.median(), s.quantile(0.95), s.quantile(0.25)), (Some(30.0), Some(40.0), Some(20.0)));
        assert_eq!((s.min(), s.max()), (Some(10.0), Some(40.0)));
        // Out-of-range fractions have no percentile.
        assert_eq!((s.quantile(-0.1), s.quantile(1.1), s.quantile(f64::NAN)), (None, None, None));
    }

    #[test]
    fn spread_is_the_population_standard_deviation() {
        let s = Sample::collect([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!((s.mean(), s.std_dev()), (Some(5.0), Some(2.0)));
        assert_eq!(s.cv(), Some(0.4));
        // A mean that is not positive has no coefficient of variation.
        assert_eq!(Sample::collect([0.0, 0.0]).unwrap().cv(), None);
        assert_eq!(Sample::collect([-1.0, -3.0]).unwrap().cv(), None);
    }

    #[test]
    fn summary_fields_and_json_names() {
        let s = Summary::of([3.0, 1.0, 2.0, 4.0]).unwrap();
        assert_eq!(s, Summary { count: 4, mean: 2.5, p50: 3.0, p95: 4.0, max: 4.0 });
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, r#"{"count":4,"mean":2.5,"p50":3.0,"p95":4.0,"max":4.0}"#);
    }
}

//! Aggregates over the seeds of one (algorithm, N) cell: best, worst and average of the
//! message count and of the time to agreement, and the average count of every message kind.

use crate::lab::scenario::Outcome;
use overlay::election::Algorithm;
use overlay::stats::Sample;
use serde::Serialize;
use std::collections::BTreeMap;

/// Minimum, maximum and mean of a series ([`overlay::stats`]); all zeros when it is empty.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Stat {
    pub best: f64,
    pub worst: f64,
    pub avg: f64,
    pub count: usize,
}

impl Stat {
    /// The series are message counts and times, never NaN: a NaN is a bug, logged, and the
    /// series is reported empty.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Stat {
        let s = Sample::collect(values).unwrap_or_else(|e| {
            tracing::error!("summary: {e}; series reported empty");
            Sample::default()
        });
        match (s.min(), s.max(), s.mean()) {
            (Some(best), Some(worst), Some(avg)) => Stat { best, worst, avg, count: s.len() },
            _ => Stat::default(),
        }
    }
}

/// The summary of one (algorithm, N) cell.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub algorithm: Algorithm,
    pub nodes: usize,
    pub seeds: usize,
    /// Runs where safety, agreement and liveness held.
    pub ok: usize,
    pub safety_violations: usize,
    pub liveness_violations: usize,
    pub messages: Stat,
    /// Time to agreement in milliseconds (runs with a decision only).
    pub agreement_ms: Stat,
    /// Average serialised bytes per run, if counted.
    pub bytes_avg: Option<f64>,
    /// Average count per message kind.
    pub kinds_avg: BTreeMap<String, f64>,
    /// Delivered messages per wall-clock second over all runs of the cell.
    pub delivered_per_sec: f64,
}

impl Summary {
    pub fn of(runs: &[Outcome]) -> Option<Summary> {
        let first = runs.first()?;
        let k = runs.len() as f64;
        let mut kinds: BTreeMap<String, f64> = BTreeMap::new();
        for r in runs {
            for (kind, c) in r.metrics.sent.to_map() {
                *kinds.entry(kind).or_insert(0.0) += c as f64 / k;
            }
        }
        let bytes: Vec<u64> = runs.iter().filter_map(|r| r.metrics.sent_bytes).collect();
        let wall: f64 = runs.iter().map(|r| r.wall_secs).sum();
        let delivered: u64 = runs.iter().map(|r| r.metrics.delivered).sum();
        Some(Summary {
            algorithm: first.algorithm,
            nodes: first.nodes,
            seeds: runs.len(),
            ok: runs.iter().filter(|r| r.ok()).count(),
            safety_violations: runs.iter().filter(|r| !r.verdict.safety || !r.verdict.agreement).count(),
            liveness_violations: runs.iter().filter(|r| !r.verdict.liveness).count(),
            messages: Stat::of(runs.iter().map(|r| r.messages as f64)),
            agreement_ms: Stat::of(runs.iter().filter_map(|r| r.agreement_us).map(|us| us as f64 / 1e3)),
            bytes_avg: (!bytes.is_empty()).then(|| bytes.iter().sum::<u64>() as f64 / bytes.len() as f64),
            kinds_avg: kinds,
            delivered_per_sec: if wall > 0.0 { delivered as f64 / wall } else { 0.0 },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_basics() {
        let s = Stat::of([3.0, 1.0, 2.0]);
        assert_eq!((s.best, s.worst, s.avg, s.count), (1.0, 3.0, 2.0, 3));
        assert_eq!(Stat::of(Vec::<f64>::new()).count, 0);
        assert_eq!(Stat::of([f64::NAN, 1.0]).count, 0, "NaN is refused, not averaged");
    }
}

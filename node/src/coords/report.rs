//! How well an in-process swarm's Vivaldi coordinates predict the emulated latency: the
//! `coords` part of the `peerage swarm --latency internet` report.
//!
//! Every node's coordinate is read from its status snapshot (`Snapshot::coordinate`); node
//! `i` of the swarm is node `i` of the latency model (`latency_transport::LatencyNet`). The
//! error of a pair is `|predicted − true| / true` with `true` the model's jitter-free base RTT,
//! as in `overlay/examples/vivaldi_error.rs` (docs/RESULTS.md, "Vivaldi over the Internet
//! latency model"), so the two are comparable. All pairs are used up to [`MAX_PAIRS`]; above
//! that a fixed stride of pairs (deterministic, no RNG).
//!
//! A sampler task reads the snapshots every `period` while the swarm runs. Choices: a node
//! counts once it has a coordinate (also before its first sample: a node stuck at the origin
//! is part of the error); crashed nodes are left out (the runner marks their snapshot).
//!
//! Besides the full coordinate's error, the report gives the error of the super-peer
//! [`Point`] made from it (Euclidean components + height, no adjustment term): that is what
//! super-peer selection predicts with (`node/src/coords/driver.rs`, "No adjustment term").

use crate::net::latency_transport::{LatencyNet, LatenessReport};
use crate::runtime::status::Probe;
use overlay::coords::Coordinate;
use overlay::stats::Sample;
use overlay::superpeer::Point;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Most pairs evaluated per sample.
pub const MAX_PAIRS: usize = 200_000;

/// Accuracy at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct CoordsPoint {
    /// Seconds since the swarm started.
    pub t_s: f64,
    /// Nodes with a coordinate / with at least one accepted sample.
    pub nodes: usize,
    pub nodes_sampled: usize,
    pub pairs: usize,
    pub median_rel_error: f64,
    pub p90_rel_error: f64,
    pub mean_rel_error: f64,
    pub median_abs_error_ms: f64,
    /// The same pairs predicted by the super-peer [`Point`]s (no adjustment term).
    pub point_median_rel_error: f64,
    pub point_p90_rel_error: f64,
    /// Vivaldi samples accepted so far, summed over nodes.
    pub samples: u64,
    /// Ping samples dropped by the lateness gate so far, summed over nodes.
    pub dropped_late: u64,
    /// Ping samples dropped by the scheduling gate so far, summed over nodes.
    pub dropped_stall: u64,
    /// Moves of the application-level coordinate (what super-peer selection sees) so far,
    /// summed over nodes (`node/src/coords/driver.rs`, "Application coordinate"); compare `samples`.
    pub app_updates: u64,
    /// The nodes' event-loop lateness at their last tick, ms: median and largest.
    pub loop_lateness_ms_p50_max: [f64; 2],
}

/// The `coords` section of the swarm report.
#[derive(Debug, Clone, Serialize)]
pub struct CoordsReport {
    pub model: String,
    pub model_seed: u64,
    /// True (model) RTT over the evaluated pairs, ms: p10, median, p90.
    pub true_rtt_ms_p10_p50_p90: [f64; 3],
    pub period_s: f64,
    pub series: Vec<CoordsPoint>,
    pub last: Option<CoordsPoint>,
    /// Lowest median relative error of the super-peer Points seen.
    pub best_point_median_rel_error: Option<f64>,
    /// Lowest median relative error seen.
    pub best_median_rel_error: Option<f64>,
    /// First time the median came within 10 % of the last value (converged).
    pub converged_s: Option<f64>,
    /// First time the median was at most 0.10 (the target for Vivaldi's median relative error).
    pub median_le_0_10_s: Option<f64>,
    /// How late the emulated links released bytes against the model.
    pub emulation_lateness: LatenessReport,
}

/// A sample of pair errors for [`overlay::stats`]; a NaN error (a bug) empties it.
fn sample(v: Vec<f64>) -> Sample {
    Sample::new(v).unwrap_or_else(|e| {
        tracing::warn!("coordinate report: {e}; sample left out");
        Sample::default()
    })
}

/// The pairs `(i, j)` with `i < j < n` in row order, every `stride`-th of them (the
/// `stride`-th, the `2 stride`-th, ...), so that about `max` at most are visited.
pub fn sampled_pairs(n: usize, max: usize) -> impl Iterator<Item = (usize, usize)> {
    let total = n * n.saturating_sub(1) / 2;
    let stride = total.div_ceil(max.max(1)).max(1);
    (0..n)
        .flat_map(move |i| ((i + 1)..n).map(move |j| (i, j)))
        .enumerate()
        .filter(move |(k, _)| (k + 1) % stride == 0)
        .map(|(_, pair)| pair)
}

/// Pair errors of the given (model index, coordinate) list; `None` with fewer than 2 nodes.
/// Also returns the sorted true RTTs (ms) of the pairs.
pub fn pair_errors(net: &LatencyNet, coords: &[(usize, Coordinate)]) -> Option<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let n = coords.len();
    if n < 2 {
        return None;
    }
    let (mut rel, mut abs, mut truth) = (Vec::new(), Vec::new(), Vec::new());
    for (i, j) in sampled_pairs(n, MAX_PAIRS) {
        let (a, ca) = coords[i];
        let (b, cb) = coords[j];
        let true_ms = net.model().rtt_ms(a, b);
        let Ok(pred) = ca.distance_secs(&cb) else { continue };
        if true_ms <= 0.0 {
            continue;
        }
        let pred_ms = pred * 1000.0;
        rel.push((pred_ms - true_ms).abs() / true_ms);
        abs.push((pred_ms - true_ms).abs());
        truth.push(true_ms);
    }
    for v in [&mut rel, &mut abs, &mut truth] {
        v.sort_by(|x, y| x.total_cmp(y));
    }
    Some((rel, abs, truth))
}

/// Relative errors of the super-peer [`Point`]s made from the coordinates, over the same
/// pairs as [`pair_errors`], sorted.
pub fn point_rel_errors(net: &LatencyNet, coords: &[(usize, Coordinate)]) -> Vec<f64> {
    let n = coords.len();
    let points: Vec<Point> = coords.iter().map(|(_, c)| Point::from(c)).collect();
    let mut rel = Vec::new();
    for (i, j) in sampled_pairs(n, MAX_PAIRS) {
        let true_ms = net.model().rtt_ms(coords[i].0, coords[j].0);
        if true_ms <= 0.0 {
            continue;
        }
        rel.push((points[i].rtt(&points[j]) * 1000.0 - true_ms).abs() / true_ms);
    }
    rel.sort_by(|x, y| x.total_cmp(y));
    rel
}

/// Reads every node's coordinate periodically until stopped.
pub struct CoordsSampler {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<(Vec<CoordsPoint>, [f64; 3])>,
    net: Arc<LatencyNet>,
    period: Duration,
}

impl CoordsSampler {
    /// `probes[i]` is model node `i`'s snapshot.
    pub fn start(net: Arc<LatencyNet>, probes: Vec<Arc<Probe>>, t0: Instant, period: Duration) -> CoordsSampler {
        let (stop, mut rx) = watch::channel(false);
        let task_net = net.clone();
        let task = tokio::spawn(async move {
            let mut series = Vec::new();
            let mut truth_q = [f64::NAN; 3];
            loop {
                let mut coords = Vec::with_capacity(probes.len());
                let (mut sampled, mut samples, mut dropped_late, mut dropped_stall, mut app_updates) = (0, 0, 0, 0, 0);
                let mut loop_late = Vec::with_capacity(probes.len());
                for (i, p) in probes.iter().enumerate() {
                    let s = p.get();
                    if s.fatal.is_some() {
                        continue;
                    }
                    if let Some(c) = s.coordinate {
                        coords.push((i, c));
                        samples += s.vivaldi_samples;
                        dropped_late += s.vivaldi_dropped_late;
                        dropped_stall += s.vivaldi_dropped_stall;
                        app_updates += s.app_coordinate_updates;
                        loop_late.push(s.loop_lateness_ms);
                        if s.vivaldi_samples > 0 {
                            sampled += 1;
                        }
                    }
                }
                let nodes = coords.len();
                let loop_late_max = loop_late.iter().copied().fold(0.0, f64::max);
                let loop_late = sample(loop_late);
                // The pair loop is CPU work on the runtime: run it off the async workers.
                let net2 = task_net.clone();
                let res = tokio::task::spawn_blocking(move || {
                    pair_errors(&net2, &coords).map(|e| (e, point_rel_errors(&net2, &coords)))
                })
                .await
                .ok()
                .flatten();
                if let Some(((rel, abs, truth), point)) = res {
                    let (rel, abs, truth, point) = (sample(rel), sample(abs), sample(truth), sample(point));
                    let q = |s: &Sample, q: f64| s.quantile(q).unwrap_or(f64::NAN);
                    if !rel.is_empty() {
                        truth_q = [q(&truth, 0.1), q(&truth, 0.5), q(&truth, 0.9)];
                        series.push(CoordsPoint {
                            t_s: t0.elapsed().as_secs_f64(),
                            nodes,
                            nodes_sampled: sampled,
                            pairs: rel.len(),
                            median_rel_error: q(&rel, 0.5),
                            p90_rel_error: q(&rel, 0.9),
                            mean_rel_error: rel.mean().unwrap_or(f64::NAN),
                            median_abs_error_ms: q(&abs, 0.5),
                            point_median_rel_error: q(&point, 0.5),
                            point_p90_rel_error: q(&point, 0.9),
                            samples,
                            dropped_late,
                            dropped_stall,
                            app_updates,
                            loop_lateness_ms_p50_max: [q(&loop_late, 0.5), loop_late_max],
                        });
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(period) => {}
                    r = rx.changed() => if r.is_err() || *rx.borrow() { break },
                }
            }
            (series, truth_q)
        });
        CoordsSampler { stop, task, net, period }
    }

    /// Stop sampling (after one last sample) and summarise.
    pub async fn finish(self) -> Option<CoordsReport> {
        let _ = self.stop.send(true);
        let (series, truth) = self.task.await.ok()?;
        let last = series.last().cloned();
        let best = series.iter().map(|p| p.median_rel_error).min_by(|a, b| a.total_cmp(b));
        let best_point = series.iter().map(|p| p.point_median_rel_error).min_by(|a, b| a.total_cmp(b));
        let converged = last
            .as_ref()
            .and_then(|l| series.iter().find(|p| p.median_rel_error <= l.median_rel_error * 1.1).map(|p| p.t_s));
        let le_target = series.iter().find(|p| p.median_rel_error <= 0.10).map(|p| p.t_s);
        Some(CoordsReport {
            model: "internet".into(),
            model_seed: self.net.seed(),
            true_rtt_ms_p10_p50_p90: truth,
            period_s: self.period.as_secs_f64(),
            series,
            last,
            best_median_rel_error: best,
            best_point_median_rel_error: best_point,
            converged_s: converged,
            median_le_0_10_s: le_target,
            emulation_lateness: self.net.lateness(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use overlay::coords::VivaldiConfig;

    #[test]
    fn perfect_and_origin_coordinates() {
        let net = LatencyNet::internet(30, 3).unwrap();
        // Everyone at the origin with the minimum height predicts ~0: relative error ~1.
        let origin = Coordinate::initial(&VivaldiConfig::default());
        let coords: Vec<_> = (0..30).map(|i| (i, origin)).collect();
        let (rel, _, truth) = pair_errors(&net, &coords).unwrap();
        assert_eq!(rel.len(), 30 * 29 / 2);
        let (rel, truth) = (Sample::new(rel).unwrap(), Sample::new(truth).unwrap());
        assert!(rel.median().unwrap() > 0.99, "{:?}", rel.median());
        assert!(truth.median().unwrap() > 1.0);
        // Two nodes placed exactly at their RTT: zero error.
        let rtt_s = net.model().rtt_ms(0, 1) / 1000.0;
        let a = Coordinate::new(&[0.0, 0.0], 0.0, 0.5, 0.0).unwrap();
        let b = Coordinate::new(&[rtt_s, 0.0], 0.0, 0.5, 0.0).unwrap();
        let (rel, abs, _) = pair_errors(&net, &[(0, a), (1, b)]).unwrap();
        assert!(rel[0] < 1e-9 && abs[0] < 1e-6, "{rel:?}");
        assert!(pair_errors(&net, &[(0, a)]).is_none());
        // The Point of a coordinate without adjustment predicts the same; an adjustment term
        // (which the Point drops) shows up as Point error only.
        let point = point_rel_errors(&net, &[(0, a), (1, b)]);
        assert!(point.len() == 1 && point[0] < 1e-6, "{point:?}");
        let b_adj = Coordinate::new(&[rtt_s * 0.5, 0.0], 0.0, 0.5, rtt_s * 0.5).unwrap();
        let (rel, _, _) = pair_errors(&net, &[(0, a), (1, b_adj)]).unwrap();
        let point = point_rel_errors(&net, &[(0, a), (1, b_adj)]);
        assert!(rel[0] < 1e-6 && (point[0] - 0.5).abs() < 1e-3, "coordinate {rel:?}, point {point:?}");
    }
}

//! The measures of seed 000's four super-peer requirements, on the TRUE (model) latency, for
//! one placement. `scripts/superpeers_check.py` recomputes every one of them from the
//! per-node file ([`super::output`]) with the same definitions.
//!
//! - Low-latency access: TRUE RTT from every attached normal node to its super peer (mean,
//!   p50, p95, max; nearest-rank percentiles, `overlay::stats::Sample`), and how many normal
//!   nodes are unattached.
//! - Even distribution: cluster sizes (mean, population stddev, CV, min, max) and, for every
//!   super peer, the TRUE RTT to its nearest other super peer (mean and CV; exact, by
//!   [`super::assign::Nearest`]).
//! - Predefined portion: the super-peer share.
//! - Bounded load: the largest cluster against the cap, and the number of clusters over it.

use super::assign::{Geometry, Nearest};
use super::world::World;
use overlay::stats::Sample;
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct Measures {
    pub super_peers: u64,
    pub share: f64,
    pub unattached: u64,
    pub rtt_mean_ms: f64,
    pub rtt_p50_ms: f64,
    pub rtt_p95_ms: f64,
    pub rtt_max_ms: f64,
    pub cluster_mean: f64,
    pub cluster_stddev: f64,
    pub cluster_cv: f64,
    pub cluster_min: u64,
    pub cluster_max: u64,
    pub cap: u64,
    pub clusters_over_cap: u64,
    pub nearest_sp_mean_ms: f64,
    pub nearest_sp_cv: f64,
}

/// A placement's measures and the per-head facts behind them.
pub struct Measured {
    pub m: Measures,
    /// Members of each node's cluster, by head node (0 for a non-head).
    pub size: Vec<u32>,
    /// Each head's TRUE RTT to its nearest other head, in the order of `heads`.
    pub nearest: Vec<f64>,
}

/// Measures an assignment: `heads` are the super peers, `head_of[i]` is node `i`'s head
/// (itself for a head; `u32::MAX` for unattached). Percentiles and CVs of an empty set are
/// NaN, means 0; the smallest cluster of none is 0.
pub fn measure(w: &World, geo: &Geometry, heads: &[u32], head_of: &[u32], cap: u64) -> Measured {
    let n = w.len();
    let mut size = vec![0u32; n];
    let mut rtts = Vec::with_capacity(n);
    let mut unattached = 0;
    for (i, &h) in head_of.iter().enumerate().take(n) {
        if h == i as u32 {
            continue;
        }
        if h == u32::MAX {
            unattached += 1;
            continue;
        }
        size[h as usize] += 1;
        rtts.push(w.rtt_ms(i as u32, h));
    }
    let rtts = sample_of(rtts, "RTT to super peer");
    let sizes = sample_of(heads.iter().map(|&h| size[h as usize] as f64).collect(), "cluster size");
    let index = Nearest::new(geo, heads);
    let mut buf = Vec::new();
    let nearest: Vec<f64> = heads
        .iter()
        .map(|&h| {
            index.query(w, h, 1, &mut buf);
            buf.first().map_or(f64::NAN, |x| x.1)
        })
        .collect();
    let nn = sample_of(nearest.iter().copied().filter(|d| d.is_finite()).collect(), "RTT to nearest other super peer");
    let nan = f64::NAN;
    Measured {
        m: Measures {
            super_peers: heads.len() as u64,
            share: heads.len() as f64 / n.max(1) as f64,
            unattached,
            rtt_mean_ms: rtts.mean().unwrap_or(0.0),
            rtt_p50_ms: rtts.median().unwrap_or(nan),
            rtt_p95_ms: rtts.quantile(0.95).unwrap_or(nan),
            rtt_max_ms: rtts.max().unwrap_or(nan),
            cluster_mean: sizes.mean().unwrap_or(0.0),
            cluster_stddev: sizes.std_dev().unwrap_or(0.0),
            cluster_cv: sizes.cv().unwrap_or(nan),
            cluster_min: sizes.min().map_or(0, |m| m as u64),
            cluster_max: sizes.max().map_or(0, |m| m as u64),
            cap,
            clusters_over_cap: sizes.sorted().iter().filter(|&&s| s > cap as f64).count() as u64,
            nearest_sp_mean_ms: nn.mean().unwrap_or(0.0),
            nearest_sp_cv: nn.cv().unwrap_or(nan),
        },
        size,
        nearest,
    }
}

/// The model's latencies are finite: a NaN is a bug, logged, and its statistics come out empty.
fn sample_of(values: Vec<f64>, what: &str) -> Sample {
    Sample::new(values).unwrap_or_else(|e| {
        tracing::error!("super-peer measures: {what}: {e}; statistics left empty");
        Sample::default()
    })
}

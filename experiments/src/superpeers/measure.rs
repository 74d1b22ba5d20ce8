//! The measures of seed 000's four super-peer requirements, on the TRUE (model) latency.
//!
//! - Low-latency access: TRUE RTT from every attached normal node to its super peer (mean,
//!   p50, p95, max), plus how many normal nodes are unattached.
//! - Even distribution: cluster sizes (mean, stddev, CV, min, max) and, for each super peer,
//!   the TRUE RTT to its nearest other super peer (mean and CV over a sample of at most 1,000
//!   super peers, each compared with all others).
//! - Predefined portion: the super-peer share.
//! - Bounded load: the largest cluster against the cap, and the number of clusters over it.

use super::world::World;
use overlay::stats::Sample;
use rand::seq::SliceRandom;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct Measures {
    pub nodes: u64,
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

/// Measures an assignment: `heads` are the super peers (cluster heads), `head_of[i]` is node
/// `i`'s head (itself for a head; `u32::MAX` for unattached or dead nodes, `dead[i]` true for
/// dead ones, which are skipped). Percentiles and CVs of an empty set are NaN, means 0.
pub fn measure(w: &World, heads: &[u32], head_of: &[u32], cap: u64, rng: &mut dyn RngCore) -> Measures {
    let n = w.len();
    let mut size = vec![0u64; n];
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
    let mut sample: Vec<u32> = heads.to_vec();
    let mut r = ChaCha8Rng::seed_from_u64(rng.next_u64());
    sample.shuffle(&mut r);
    sample.truncate(1000);
    let nn: Vec<f64> = sample
        .iter()
        .map(|&a| heads.iter().filter(|&&b| b != a).map(|&b| w.rtt_ms(a, b)).fold(f64::INFINITY, f64::min))
        .filter(|d| d.is_finite())
        .collect();
    let nn = sample_of(nn, "RTT to nearest other super peer");
    let nan = f64::NAN;
    Measures {
        nodes: n as u64,
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
        cluster_min: sizes.min().map_or(1e18 as u64, |m| m as u64),
        cluster_max: sizes.max().map_or(0, |m| m as u64),
        cap,
        clusters_over_cap: sizes.sorted().iter().filter(|&&s| s > cap as f64).count() as u64,
        nearest_sp_mean_ms: nn.mean().unwrap_or(0.0),
        nearest_sp_cv: nn.cv().unwrap_or(nan),
    }
}

/// The model's latencies are finite: a NaN is a bug, logged, and its statistics come out empty.
fn sample_of(values: Vec<f64>, what: &str) -> Sample {
    Sample::new(values).unwrap_or_else(|e| {
        tracing::error!("super-peer measures: {what}: {e}; statistics left empty");
        Sample::default()
    })
}

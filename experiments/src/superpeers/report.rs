//! The summary rows of `peerage-lab superpeers`, the targets, and the summary over seeds.
//!
//! One [`SummaryRow`] per population size, seed and method (protocols and yardsticks). The
//! ratios divide by the yardsticks of [`super::yardstick`] only: `x_kmedian` by the
//! capacitated k-median's mean, `x_random` by the mean over the random draws.
//!
//! **Targets** (for the protocols, per seed, [`Verdict`]): mean RTT at most
//! [`TARGET_X_KMEDIAN`] x the k-median; at most [`TARGET_X_RANDOM`] x random, judged only on
//! seeds where the lower bound allows it (bound <= 0.6 x random: some placement may meet it);
//! no cluster over the cap and no node unattached.
//!
//! **Over seeds** ([`SeedsRow`]): per method, the mean of each seed's mean RTT with its sample
//! standard deviation, 95 % confidence interval (Student's t, [`super::yardstick::ci95`]),
//! smallest and largest; the ratios' mean and spread; and for protocols the share of eligible
//! seeds meeting each target.

use super::measure::Measures;
use super::yardstick::ci95;
use serde::Serialize;

/// Tokens (and prefix) should cost at most this times the capacitated k-median.
pub const TARGET_X_KMEDIAN: f64 = 1.10;
/// ... and at most this times the mean of random placements.
pub const TARGET_X_RANDOM: f64 = 0.6;

/// One method on one seed. Time in ms. For `random` the measures are over the draws: the mean
/// of each mean, percentile, cluster statistic and nearest-super-peer figure; the largest
/// `unattached`, `clusters_over_cap` and `cluster_max`; the smallest `cluster_min`; and the
/// certified assignment gap is the largest of any draw.
#[derive(Clone, Debug, Serialize)]
pub struct SummaryRow {
    pub nodes: usize,
    pub seed: u64,
    pub method: String,
    /// `protocol` or `yardstick`.
    pub kind: String,
    #[serde(flatten)]
    pub m: MeasuresF,
    /// Random draws behind the row (random only).
    pub draws: Option<u32>,
    pub rtt_mean_ci95_lo: Option<f64>,
    pub rtt_mean_ci95_hi: Option<f64>,
    /// Certified gap of the assignment to its optimum, ms (yardsticks only).
    pub assign_gap_ms: Option<f64>,
    pub x_kmedian: f64,
    pub x_random: f64,
    /// Lower bound on any placement's mean: the larger of the two below, ms.
    pub bound_ms: f64,
    pub bound_floor_ms: f64,
    pub bound_lagrangian_ms: Option<f64>,
    pub bound_x_random: f64,
    pub vivaldi_err_p50: f64,
    pub vivaldi_err_p90: f64,
    pub convergence_s: Option<f64>,
    pub messages_per_node: Option<f64>,
    pub lookup_messages_per_node: Option<f64>,
    pub token_moves: Option<u64>,
    pub max_members_seen: Option<u64>,
}

/// [`Measures`] with every field a float (the random row holds means over draws).
#[derive(Clone, Debug, Serialize)]
pub struct MeasuresF {
    pub super_peers: f64,
    pub share: f64,
    pub unattached: f64,
    pub rtt_mean_ms: f64,
    pub rtt_p50_ms: f64,
    pub rtt_p95_ms: f64,
    pub rtt_max_ms: f64,
    pub cluster_mean: f64,
    pub cluster_stddev: f64,
    pub cluster_cv: f64,
    pub cluster_min: f64,
    pub cluster_max: f64,
    pub cap: f64,
    pub clusters_over_cap: f64,
    pub nearest_sp_mean_ms: f64,
    pub nearest_sp_cv: f64,
}

impl From<&Measures> for MeasuresF {
    fn from(m: &Measures) -> MeasuresF {
        MeasuresF {
            super_peers: m.super_peers as f64,
            share: m.share,
            unattached: m.unattached as f64,
            rtt_mean_ms: m.rtt_mean_ms,
            rtt_p50_ms: m.rtt_p50_ms,
            rtt_p95_ms: m.rtt_p95_ms,
            rtt_max_ms: m.rtt_max_ms,
            cluster_mean: m.cluster_mean,
            cluster_stddev: m.cluster_stddev,
            cluster_cv: m.cluster_cv,
            cluster_min: m.cluster_min as f64,
            cluster_max: m.cluster_max as f64,
            cap: m.cap as f64,
            clusters_over_cap: m.clusters_over_cap as f64,
            nearest_sp_mean_ms: m.nearest_sp_mean_ms,
            nearest_sp_cv: m.nearest_sp_cv,
        }
    }
}

/// The random row's measures from its draws (see [`SummaryRow`]).
pub fn over_draws(d: &[&Measures]) -> MeasuresF {
    let mean = |f: &dyn Fn(&Measures) -> f64| d.iter().map(|m| f(m)).sum::<f64>() / d.len().max(1) as f64;
    let max = |f: &dyn Fn(&Measures) -> u64| d.iter().map(|m| f(m)).max().unwrap_or(0) as f64;
    MeasuresF {
        super_peers: mean(&|m| m.super_peers as f64),
        share: mean(&|m| m.share),
        unattached: max(&|m| m.unattached),
        rtt_mean_ms: mean(&|m| m.rtt_mean_ms),
        rtt_p50_ms: mean(&|m| m.rtt_p50_ms),
        rtt_p95_ms: mean(&|m| m.rtt_p95_ms),
        rtt_max_ms: mean(&|m| m.rtt_max_ms),
        cluster_mean: mean(&|m| m.cluster_mean),
        cluster_stddev: mean(&|m| m.cluster_stddev),
        cluster_cv: mean(&|m| m.cluster_cv),
        cluster_min: d.iter().map(|m| m.cluster_min).min().unwrap_or(0) as f64,
        cluster_max: max(&|m| m.cluster_max),
        cap: mean(&|m| m.cap as f64),
        clusters_over_cap: max(&|m| m.clusters_over_cap),
        nearest_sp_mean_ms: mean(&|m| m.nearest_sp_mean_ms),
        nearest_sp_cv: mean(&|m| m.nearest_sp_cv),
    }
}

/// One protocol's targets on one seed.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub kmedian_met: bool,
    /// Whether the lower bound lets any placement meet `x_random` (bound <= 0.6 x random).
    pub random_eligible: bool,
    pub random_met: bool,
    pub load_met: bool,
}

impl Verdict {
    pub fn of(r: &SummaryRow) -> Verdict {
        Verdict {
            kmedian_met: r.x_kmedian <= TARGET_X_KMEDIAN,
            random_eligible: r.bound_x_random <= TARGET_X_RANDOM,
            random_met: r.x_random <= TARGET_X_RANDOM,
            load_met: r.m.clusters_over_cap == 0.0 && r.m.unattached == 0.0,
        }
    }
}

/// One method over the seeds of one population size.
#[derive(Clone, Debug, Serialize)]
pub struct SeedsRow {
    pub nodes: usize,
    pub seeds: String,
    pub method: String,
    pub runs: usize,
    pub rtt_mean_ms: f64,
    pub rtt_sd_ms: f64,
    pub rtt_ci95_lo: f64,
    pub rtt_ci95_hi: f64,
    pub rtt_min_ms: f64,
    pub rtt_max_ms: f64,
    pub x_kmedian_mean: f64,
    pub x_kmedian_sd: f64,
    pub x_kmedian_max: f64,
    pub x_random_mean: f64,
    pub x_random_sd: f64,
    pub x_random_max: f64,
    pub super_peers_mean: f64,
    /// Protocols only: seeds meeting each target, and the seeds where it can be met at all.
    pub kmedian_met: Option<usize>,
    pub random_met: Option<usize>,
    pub random_eligible: Option<usize>,
    pub load_met: Option<usize>,
}

/// The rows over seeds, one per method, in the order methods first appear in `rows`.
pub fn over_seeds(nodes: usize, seeds: &str, rows: &[SummaryRow]) -> Vec<SeedsRow> {
    let mut methods: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.nodes == nodes) {
        if !methods.contains(&r.method.as_str()) {
            methods.push(&r.method);
        }
    }
    methods
        .into_iter()
        .map(|m| {
            let rs: Vec<&SummaryRow> = rows.iter().filter(|r| r.nodes == nodes && r.method == m).collect();
            let col = |f: &dyn Fn(&SummaryRow) -> f64| rs.iter().map(|r| f(r)).collect::<Vec<f64>>();
            let (mean, sd, lo, hi) = ci95(&col(&|r| r.m.rtt_mean_ms));
            let (xk, xk_sd, _, _) = ci95(&col(&|r| r.x_kmedian));
            let (xr, xr_sd, _, _) = ci95(&col(&|r| r.x_random));
            let max = |v: Vec<f64>| v.into_iter().fold(f64::NEG_INFINITY, f64::max);
            let min = |v: Vec<f64>| v.into_iter().fold(f64::INFINITY, f64::min);
            let protocol = rs.iter().all(|r| r.kind == "protocol");
            let verdicts: Vec<Verdict> = rs.iter().map(|r| Verdict::of(r)).collect();
            let count = |f: &dyn Fn(&Verdict) -> bool| protocol.then(|| verdicts.iter().filter(|v| f(v)).count());
            SeedsRow {
                nodes,
                seeds: seeds.to_string(),
                method: m.to_string(),
                runs: rs.len(),
                rtt_mean_ms: mean,
                rtt_sd_ms: sd,
                rtt_ci95_lo: lo,
                rtt_ci95_hi: hi,
                rtt_min_ms: min(col(&|r| r.m.rtt_mean_ms)),
                rtt_max_ms: max(col(&|r| r.m.rtt_mean_ms)),
                x_kmedian_mean: xk,
                x_kmedian_sd: xk_sd,
                x_kmedian_max: max(col(&|r| r.x_kmedian)),
                x_random_mean: xr,
                x_random_sd: xr_sd,
                x_random_max: max(col(&|r| r.x_random)),
                super_peers_mean: col(&|r| r.m.super_peers).iter().sum::<f64>() / rs.len().max(1) as f64,
                kmedian_met: count(&|v| v.kmedian_met),
                random_met: count(&|v| v.random_eligible && v.random_met),
                random_eligible: count(&|v| v.random_eligible),
                load_met: count(&|v| v.load_met),
            }
        })
        .collect()
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.filter(|x| x.is_finite()).map_or("-".into(), |x| format!("{x:.digits$}"))
}

/// Prints one seed's rows as a table.
pub fn print_rows(n: usize, seed: u64, rows: &[SummaryRow]) {
    println!("\nN = {n}, seed {seed} (TRUE RTT, ms; yardsticks assigned optimally with the cap)");
    println!(
        "{:<8} {:>7} {:>8} {:>15} {:>7} {:>7} {:>7} {:>6} {:>9} {:>8} {:>7} {:>8} {:>8} {:>6} {:>8}",
        "method",
        "SPs",
        "mean",
        "95% CI",
        "p50",
        "p95",
        "max",
        "CV",
        "min/max",
        "overcap",
        "unatt.",
        "xkmedian",
        "xrandom",
        "conv s",
        "msg/node"
    );
    for r in rows {
        let ci = match (r.rtt_mean_ci95_lo, r.rtt_mean_ci95_hi) {
            (Some(lo), Some(hi)) if lo.is_finite() && hi.is_finite() => format!("{lo:.2}-{hi:.2}"),
            _ => "-".into(),
        };
        println!(
            "{:<8} {:>7} {:>8.2} {:>15} {:>7.1} {:>7.1} {:>7.1} {:>6.2} {:>9} {:>8} {:>7} {:>8.3} {:>8.3} {:>6} {:>8}",
            r.method,
            if r.method == "random" { format!("{:.0}", r.m.super_peers) } else { format!("{}", r.m.super_peers) },
            r.m.rtt_mean_ms,
            ci,
            r.m.rtt_p50_ms,
            r.m.rtt_p95_ms,
            r.m.rtt_max_ms,
            r.m.cluster_cv,
            format!("{}/{}", r.m.cluster_min, r.m.cluster_max),
            r.m.clusters_over_cap,
            r.m.unattached,
            r.x_kmedian,
            r.x_random,
            opt(r.convergence_s, 0),
            opt(r.messages_per_node, 1),
        );
    }
}

/// Prints the rows over seeds, with the targets' counts.
pub fn print_seeds(rows: &[SeedsRow]) {
    let Some(first) = rows.first() else { return };
    println!("\nN = {}, over seeds {} ({} runs; TRUE RTT, ms)", first.nodes, first.seeds, first.runs);
    println!(
        "{:<8} {:>8} {:>7} {:>15} {:>15} {:>15} {:>15} {:>12} {:>12} {:>8}",
        "method", "mean", "sd", "95% CI", "min-max", "xkmedian", "xrandom", "<=1.10xkmed", "<=0.6xrand", "load ok"
    );
    for r in rows {
        let share = |met: Option<usize>, of: usize| met.map_or("-".into(), |m| format!("{m}/{of}"));
        println!(
            "{:<8} {:>8.2} {:>7.2} {:>15} {:>15} {:>15} {:>15} {:>12} {:>12} {:>8}",
            r.method,
            r.rtt_mean_ms,
            r.rtt_sd_ms,
            if r.rtt_ci95_lo.is_finite() { format!("{:.2}-{:.2}", r.rtt_ci95_lo, r.rtt_ci95_hi) } else { "-".into() },
            format!("{:.2}-{:.2}", r.rtt_min_ms, r.rtt_max_ms),
            format!("{:.3} sd {}", r.x_kmedian_mean, opt(Some(r.x_kmedian_sd), 3)),
            format!("{:.3} sd {}", r.x_random_mean, opt(Some(r.x_random_sd), 3)),
            share(r.kmedian_met, r.runs),
            share(r.random_met, r.random_eligible.unwrap_or(0)),
            share(r.load_met, r.runs),
        );
    }
}

//! Small known geometries and a round-based driver for Vivaldi clients.
//!
//! These are the test fixtures of Serf's `coordinate/performance_test.go` (our own
//! implementation of the same set-ups): a line, a square grid, two clusters ("split"), a
//! circle with one node above the centre ("height"), and random RTTs. [`simulate`] runs
//! `cycles` rounds in which every node samples one uniformly random other node (Serf's
//! `Simulate`); [`evaluate`] returns the average and maximum relative error
//! `|predicted − true| / true` over all pairs (Serf's `Evaluate`).
//!
//! All RTTs here are exact (no jitter), so the latency filter is a no-op on them.

use super::{VivaldiClient, VivaldiConfig, VivaldiConfigError};
use crate::id::NodeId;
use crate::latency::sample::standard_normal;
use rand::{Rng, RngCore};
use std::sync::Arc;

/// A full RTT matrix (seconds) for a small number of nodes.
#[derive(Clone, Debug)]
pub struct Truth {
    n: usize,
    rtt: Vec<f64>,
}

impl Truth {
    /// Builds a symmetric matrix from `f(i, j)` for `i < j`.
    pub fn from_fn(n: usize, mut f: impl FnMut(usize, usize) -> f64) -> Truth {
        let mut rtt = vec![0.0; n * n];
        for i in 0..n {
            for j in i + 1..n {
                let v = f(i, j);
                rtt[i * n + j] = v;
                rtt[j * n + i] = v;
            }
        }
        Truth { n, rtt }
    }

    /// Nodes on a line, `spacing` seconds apart.
    pub fn line(n: usize, spacing: f64) -> Truth {
        Truth::from_fn(n, |i, j| (j - i) as f64 * spacing)
    }

    /// Nodes on a `√n × √n` grid, `spacing` seconds apart.
    pub fn grid(n: usize, spacing: f64) -> Truth {
        let side = ((n as f64).sqrt() as usize).max(1);
        Truth::from_fn(n, |i, j| {
            let (x1, y1) = ((i % side) as f64, (i / side) as f64);
            let (x2, y2) = ((j % side) as f64, (j / side) as f64);
            ((x2 - x1).powi(2) + (y2 - y1).powi(2)).sqrt() * spacing
        })
    }

    /// Two clusters: `lan` inside a cluster, `lan + wan` across (Serf's split).
    pub fn split(n: usize, lan: f64, wan: f64) -> Truth {
        let split = n / 2;
        Truth::from_fn(n, |i, j| if (i <= split) != (j <= split) { lan + wan } else { lan })
    }

    /// Node 0 at distance `2 · radius` from everyone; the others on a circle of `radius`.
    pub fn circle(n: usize, radius: f64) -> Truth {
        Truth::from_fn(n, |i, j| {
            if i == 0 {
                2.0 * radius
            } else {
                let t = |k: usize| 2.0 * std::f64::consts::PI * k as f64 / n as f64;
                let (x1, y1) = (t(i).cos(), t(i).sin());
                let (x2, y2) = (t(j).cos(), t(j).sin());
                ((x2 - x1).powi(2) + (y2 - y1).powi(2)).sqrt() * radius
            }
        })
    }

    /// Independent normal RTTs (`mean`, `deviation`), floored at 1 ms.
    pub fn random(n: usize, mean: f64, deviation: f64, rng: &mut dyn RngCore) -> Truth {
        Truth::from_fn(n, |_, _| (mean + deviation * standard_normal(rng)).max(0.001))
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True when there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// RTT between `i` and `j`, seconds.
    pub fn rtt(&self, i: usize, j: usize) -> f64 {
        self.rtt[i * self.n + j]
    }
}

/// Average and maximum relative error over all pairs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    pub error_avg: f64,
    pub error_max: f64,
}

/// `n` fresh clients sharing `config`.
pub fn clients(n: usize, config: VivaldiConfig) -> Result<Vec<VivaldiClient>, VivaldiConfigError> {
    let config = Arc::new(config);
    (0..n).map(|_| VivaldiClient::new(config.clone())).collect()
}

/// The id used for scenario node `i`.
pub fn node_id(i: usize) -> NodeId {
    NodeId::from_u64(i as u64)
}

/// Runs `cycles` rounds; in each, every node samples one random other node. Returns the
/// number of refused updates (zero for a valid truth).
pub fn simulate(clients: &mut [VivaldiClient], truth: &Truth, cycles: usize, rng: &mut dyn RngCore) -> usize {
    let n = clients.len().min(truth.len());
    let mut refused = 0;
    if n < 2 {
        return 0;
    }
    for _ in 0..cycles {
        for i in 0..n {
            let j = rng.gen_range(0..n);
            if j == i {
                continue;
            }
            let theirs = *clients[j].coordinate();
            if clients[i].update_secs(&node_id(j), &theirs, truth.rtt(i, j), rng).is_err() {
                refused += 1;
            }
        }
    }
    refused
}

/// Relative prediction error over all pairs.
pub fn evaluate(clients: &[VivaldiClient], truth: &Truth) -> Stats {
    evaluate_where(clients, truth, |_, _| true)
}

/// Relative prediction error over the pairs `i < j` for which `keep(i, j)` holds.
pub fn evaluate_where(clients: &[VivaldiClient], truth: &Truth, keep: impl Fn(usize, usize) -> bool) -> Stats {
    let n = clients.len().min(truth.len());
    let (mut sum, mut max, mut count) = (0.0, 0.0f64, 0usize);
    for i in 0..n {
        for j in i + 1..n {
            if !keep(i, j) {
                continue;
            }
            let actual = truth.rtt(i, j);
            let est = clients[i].coordinate().distance_secs(clients[j].coordinate()).unwrap_or(f64::INFINITY);
            let err = (est - actual).abs() / actual;
            sum += err;
            max = max.max(err);
            count += 1;
        }
    }
    Stats { error_avg: if count > 0 { sum / count as f64 } else { 0.0 }, error_max: max }
}

/// Serf's performance test set, against Serf's own thresholds (`performance_test.go`).
///
/// Serf checks one run with one fixed seed, and its bars sit just above what that run gave.
/// Our RNG is another, so one run of ours is another draw: across seeds our results scatter
/// around Serf's bars (some seeds above, some below; see docs/results/coordinates.md). The tests therefore
/// run [`SEEDS`] seeds starting at the base seed and hold the **median over seeds** of the
/// average and maximum error to Serf's bars times [`SLACK`]. An implementation bug (a wrong
/// sign, a missing height or adjustment term) is an order of magnitude off, so these fail.
/// The base seed is printed and replays from `PEERAGE_SEED`.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::coords::Coordinate;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    const SEEDS: u64 = 7;
    const SLACK: f64 = 1.5;

    fn base_seed(test: &str) -> u64 {
        let seed = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1u64);
        eprintln!("{test}: base seed {seed} (replay with PEERAGE_SEED={seed})");
        seed
    }

    fn run(truth: &Truth, config: VivaldiConfig, cycles: usize, rng: &mut ChaCha8Rng) -> (Vec<VivaldiClient>, Stats) {
        let mut cs = clients(truth.len(), config).unwrap();
        assert_eq!(simulate(&mut cs, truth, cycles, rng), 0);
        let stats = evaluate(&cs, truth);
        (cs, stats)
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    }

    /// Runs `make` over the seeds; returns the median average and median maximum error.
    fn over_seeds(test: &str, mut one: impl FnMut(&mut ChaCha8Rng) -> Stats) -> (f64, f64) {
        let base = base_seed(test);
        let runs: Vec<Stats> = (0..SEEDS).map(|k| one(&mut ChaCha8Rng::seed_from_u64(base.wrapping_add(k)))).collect();
        for (k, s) in runs.iter().enumerate() {
            eprintln!("{test} seed {}: avg {:.3e} max {:.3e}", base.wrapping_add(k as u64), s.error_avg, s.error_max);
        }
        let m =
            (median(runs.iter().map(|s| s.error_avg).collect()), median(runs.iter().map(|s| s.error_max).collect()));
        eprintln!("{test}: median over seeds avg {:.3e} max {:.3e}", m.0, m.1);
        m
    }

    fn check(test: &str, (avg, max): (f64, f64), serf_avg: f64, serf_max: f64) {
        assert!(
            avg <= SLACK * serf_avg && max <= SLACK * serf_max,
            "{test}: median avg {avg:.3e} (Serf bar {serf_avg:.1e}), median max {max:.3e} (Serf bar {serf_max:.1e})"
        );
    }

    /// Our defaults (with the outlier gate) and Serf's exact algorithm, both held to Serf's bars.
    fn configs(dims: usize) -> [(&'static str, VivaldiConfig); 2] {
        [
            ("peerage", VivaldiConfig { dimensionality: dims, ..VivaldiConfig::default() }),
            ("serf", VivaldiConfig::serf(dims)),
        ]
    }

    #[test]
    fn line_converges() {
        for (name, cfg) in configs(8) {
            let m = over_seeds(&format!("line/{name}"), |r| run(&Truth::line(10, 0.010), cfg.clone(), 1000, r).1);
            check("line", m, 0.0031, 0.0130);
        }
    }

    #[test]
    fn grid_converges() {
        for (name, cfg) in configs(8) {
            let m = over_seeds(&format!("grid/{name}"), |r| run(&Truth::grid(25, 0.010), cfg.clone(), 1000, r).1);
            check("grid", m, 0.0016, 0.0230);
        }
    }

    #[test]
    fn split_converges() {
        for (name, cfg) in configs(8) {
            let m =
                over_seeds(&format!("split/{name}"), |r| run(&Truth::split(25, 0.001, 0.010), cfg.clone(), 1000, r).1);
            check("split", m, 0.000060, 0.00048);
        }
    }

    #[test]
    fn height_lifts_the_centre_node() {
        let radius = 0.100;
        for (name, config) in configs(2) {
            let (mut centre, mut others) = (vec![], vec![]);
            let m = over_seeds(&format!("height/{name}"), |r| {
                let (cs, s) = run(&Truth::circle(25, radius), config.clone(), 1000, r);
                centre.push(cs[0].coordinate().height);
                others.push(cs[1..].iter().map(|c| c.coordinate().height).fold(0.0, f64::max));
                s
            });
            // Serf's height bars (centre node lifted to >= 0.97 radius, the ring flat within
            // 0.03 radius), on the median over seeds.
            let (c, o) = (median(centre), median(others));
            eprintln!("height/{name}: median centre height {c:.4}, median highest ring node {o:.4}");
            assert!(c >= 0.97 * radius, "centre height {c}");
            assert!(o <= 0.03 * radius, "ring height {o}");
            check("height", m, 0.0028, 0.064);
        }
    }

    #[test]
    fn random_rtts_within_serf_bounds() {
        for (name, cfg) in configs(8) {
            let m = over_seeds(&format!("random/{name}"), |r| {
                let truth = Truth::random(25, 0.100, 0.010, r);
                run(&truth, cfg.clone(), 1000, r).1
            });
            check("random", m, 0.075, 0.33);
        }
    }

    #[test]
    fn vanilla_vivaldi_also_converges_on_a_grid() {
        let m = over_seeds("vanilla-grid", |r| run(&Truth::grid(25, 0.010), VivaldiConfig::vanilla(2), 1000, r).1);
        assert!(m.0 <= 0.01, "{m:?}");
    }

    #[test]
    fn gravity_pulls_a_drifted_system_back() {
        let base = base_seed("drift");
        let dist = 0.500;
        let start = [[0.0, 0.0], [0.0, dist], [dist, dist], [dist, dist]];
        // A square: all sides `dist`, the 0-2 diagonal √2·dist.
        let truth =
            Truth::from_fn(4, |i, j| if i % 2 == 0 && j % 2 == 0 { std::f64::consts::SQRT_2 * dist } else { dist });
        let centre_error = |cs: &[VivaldiClient]| {
            let mut mid = [0.0f64; 2];
            for (k, m) in mid.iter_mut().enumerate() {
                let xs = cs.iter().map(|c| c.coordinate().vec()[k]);
                let lo = xs.clone().fold(f64::INFINITY, f64::min);
                let hi = xs.fold(f64::NEG_INFINITY, f64::max);
                *m = lo + (hi - lo) / 2.0;
            }
            (mid[0] * mid[0] + mid[1] * mid[1]).sqrt()
        };
        // Ratio of the centre's distance from the origin after 10,000 more cycles to the one
        // after the first 1,000 (Serf's drift test), with and without gravity.
        let ratio = |gravity_rho: f64, seed: u64| {
            let mut r = ChaCha8Rng::seed_from_u64(seed);
            let mut cs =
                clients(4, VivaldiConfig { dimensionality: 2, gravity_rho, ..VivaldiConfig::default() }).unwrap();
            for (c, v) in cs.iter_mut().zip(start) {
                let mut coord: Coordinate = *c.coordinate();
                coord.set_vec(&v).unwrap();
                c.set_coordinate(coord).unwrap();
            }
            simulate(&mut cs, &truth, 1000, &mut r);
            let baseline = centre_error(&cs);
            simulate(&mut cs, &truth, 10_000, &mut r);
            let after = centre_error(&cs);
            eprintln!("drift seed {seed} rho {gravity_rho}: centre error {baseline:.4} -> {after:.4}");
            after / baseline
        };
        let with: Vec<f64> = (0..SEEDS).map(|k| ratio(150.0, base.wrapping_add(k))).collect();
        let without: Vec<f64> = (0..SEEDS).map(|k| ratio(0.0, base.wrapping_add(k))).collect();
        let (w, wo) = (median(with), median(without));
        eprintln!("drift: median ratio with gravity {w:.3}, without {wo:.3}");
        // Serf's bar: the centre comes at least 20 % closer to the origin.
        assert!(w <= 0.8, "gravity did not pull the centre back: ratio {w}");
        // Without gravity the centre stays put: the test can tell the difference.
        assert!(wo > 0.95, "without gravity the centre should stay put: ratio {wo}");
    }

    /// A grid where a tenth of the pairs take a detour (RTT × 2.5, violating the triangle
    /// inequality). Serf's algorithm lets the detoured pairs drag the coordinates; the outlier
    /// gate should keep the clean pairs' error clearly lower.
    #[test]
    fn outlier_gate_shields_clean_pairs_from_detours() {
        let detoured = |i: usize, j: usize| crate::latency::sample::pair_unit(i as u64, j as u64, 99, 0) < 0.1;
        let grid = Truth::grid(25, 0.010);
        let truth = Truth::from_fn(25, |i, j| grid.rtt(i, j) * if detoured(i, j) { 2.5 } else { 1.0 });
        let clean = |cfg: VivaldiConfig, name: &str| {
            over_seeds(name, |r| {
                let mut cs = clients(25, cfg.clone()).unwrap();
                simulate(&mut cs, &truth, 2000, r);
                evaluate_where(&cs, &truth, |i, j| !detoured(i, j))
            })
        };
        let (gate, _) = clean(VivaldiConfig::default(), "detour-gate");
        let (serf, _) = clean(VivaldiConfig::serf(8), "detour-serf");
        eprintln!("clean-pair average error: gate {gate:.4}, Serf {serf:.4}");
        assert!(gate < 0.7 * serf, "gate {gate} vs Serf {serf}");
    }

    /// After convergence every RTT doubles (a real change, not an outlier): the gate must
    /// open again and the coordinates must follow.
    #[test]
    fn outlier_gate_reopens_after_a_real_change() {
        let before = Truth::grid(25, 0.010);
        let after = Truth::from_fn(25, |i, j| 2.0 * before.rtt(i, j));
        let (avg, max) = over_seeds("reopen", |r| {
            let mut cs = clients(25, VivaldiConfig::default()).unwrap();
            simulate(&mut cs, &before, 1000, r);
            simulate(&mut cs, &after, 1000, r);
            let gated: u64 = cs.iter().map(|c| c.stats().outliers).sum();
            let total: u64 = cs.iter().map(|c| c.stats().updates).sum();
            assert!(gated < total / 4, "gate stayed shut: {gated} of {total} gated");
            evaluate(&cs, &after)
        });
        check("reopen", (avg, max), 0.0016, 0.0230);
    }
}

//! The yardsticks every protocol row is judged by, all on the TRUE RTT with the cap, and the
//! lower bound on what any placement can do. Global knowledge; no protocol reads them.
//!
//! - **random**: the mean over `draws` draws of `k` uniformly random heads, each attached by
//!   the optimal capacitated assignment ([`assign::optimal`]), with a 95 % confidence
//!   interval of that mean (Student's t over the draws, [`ci95`]);
//! - **kmeans**: the k-means heads of [`baseline::kmeans`] with the same assignment;
//! - **kmedian**: the capacitated k-median search of [`kmedian::solve`] (capacitated
//!   k-medoids from the k-means heads and from the first random draw's, and up to
//!   [`kmedian::MAX_NODES`] from the Lagrangian relaxation's head sets);
//! - **bound**: the larger of the relaxation's bound (up to [`kmedian::MAX_NODES`]) and the
//!   nearest-node floor ([`assign::floor_bound`], any N): no placement of `k` heads has a
//!   lower mean RTT.
//!
//! Every assignment carries its certified gap ([`assign::Assigned::gap_ms`]); the rows report
//! the largest.

use super::assign::{self, Geometry};
use super::baseline;
use super::kmedian;
use super::measure::{measure, Measured, Measures};
use super::world::World;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::time::Instant;

/// A placement: heads, every node's head, its measures and its assignment's certified gap.
pub struct Placement {
    pub heads: Vec<u32>,
    pub head_of: Vec<u32>,
    pub measured: Measured,
    pub gap_ms: f64,
}

/// One random draw's measures (a row of the `random_draws` file).
#[derive(Clone, Debug, Serialize)]
pub struct DrawRow {
    pub nodes: usize,
    pub seed: u64,
    pub draw: u32,
    #[serde(flatten)]
    pub m: Measures,
    pub assign_gap_ms: f64,
}

/// What [`compute`] found.
pub struct Yardsticks {
    /// Every random draw's measures, in draw order.
    pub draws: Vec<DrawRow>,
    /// The first draw in full (its per-node rows are written).
    pub random_first: Placement,
    pub kmeans: Placement,
    pub kmedian: Placement,
    pub kmedian_start: String,
    /// (start, mean after assignment, after k-medoids), ms.
    pub kmedian_starts: Vec<(String, f64, f64)>,
    /// The relaxation's bound on the mean, ms (up to [`kmedian::MAX_NODES`]).
    pub bound_lagrangian_ms: Option<f64>,
    /// The nearest-node floor, ms, and every node's nearest-node RTT behind it.
    pub bound_floor_ms: f64,
    pub nearest_other: Vec<f64>,
    pub seconds_random: f64,
    pub seconds_kmedian: f64,
}

impl Yardsticks {
    /// The lower bound on the mean RTT of any placement, ms.
    pub fn bound_ms(&self) -> f64 {
        self.bound_lagrangian_ms.map_or(self.bound_floor_ms, |b| b.max(self.bound_floor_ms))
    }
}

/// Settings.
pub struct Params {
    pub k: usize,
    pub cap: u64,
    pub draws: u32,
    pub kmeans_iters: usize,
    pub kmedian_iters: usize,
    pub seed: u64,
    pub jobs: usize,
}

/// What [`compute`] is doing, for a progress bar.
pub enum Step<'a> {
    Draw,
    Stage(&'a str),
}

fn draw_seed(seed: u64, d: u32) -> u64 {
    seed ^ 0x7261_6e64_6f6d ^ (d as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn place(w: &World, geo: &Geometry, heads: Vec<u32>, cap: u64) -> Result<Placement, assign::AssignError> {
    let t = Instant::now();
    let a = assign::optimal(w, geo, &heads, cap)?;
    tracing::debug!(
        heads = heads.len(),
        bids = a.bids,
        extended = a.extended,
        gap_ms = a.gap_ms(),
        secs = t.elapsed().as_secs_f64(),
        "assignment"
    );
    let measured = measure(w, geo, &heads, &a.head_of, cap);
    Ok(Placement { gap_ms: a.gap_ms(), head_of: a.head_of, heads, measured })
}

/// One random draw's row, and its placement when it is kept for the per-node files.
type DrawResult = anyhow::Result<(DrawRow, Option<Placement>)>;

/// Computes every yardstick (module doc). `progress` is called from the worker threads.
pub fn compute(w: &World, geo: &Geometry, p: &Params, progress: &(dyn Fn(Step) + Sync)) -> anyhow::Result<Yardsticks> {
    let n = w.len();
    let t0 = Instant::now();
    // Random draws on `jobs` threads; draw d always uses the same generator.
    let jobs = p.jobs.max(1).min(p.draws.max(1) as usize);
    let mut results: Vec<(u32, DrawResult)> = Vec::new();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs)
            .map(|t| {
                scope.spawn(move || {
                    let mut out = Vec::new();
                    for d in (t as u32..p.draws).step_by(jobs) {
                        let mut rng = ChaCha8Rng::seed_from_u64(draw_seed(p.seed, d));
                        let heads = baseline::random_heads(n, p.k, &mut rng);
                        let r = place(w, geo, heads, p.cap).map_err(anyhow::Error::from).map(|pl| {
                            let row = DrawRow {
                                nodes: n,
                                seed: p.seed,
                                draw: d,
                                m: pl.measured.m.clone(),
                                assign_gap_ms: pl.gap_ms,
                            };
                            (row, (d == 0).then_some(pl))
                        });
                        progress(Step::Draw);
                        out.push((d, r));
                    }
                    out
                })
            })
            .collect();
        for h in handles {
            match h.join() {
                Ok(v) => results.extend(v),
                Err(_) => results.push((u32::MAX, Err(anyhow::anyhow!("a random-draw thread panicked")))),
            }
        }
    });
    results.sort_by_key(|r| r.0);
    let mut draws = Vec::with_capacity(results.len());
    let mut first = None;
    for (_, r) in results {
        let (row, pl) = r?;
        draws.push(row);
        if pl.is_some() {
            first = pl;
        }
    }
    let random_first = first.ok_or_else(|| anyhow::anyhow!("no random draw (--random-draws must be at least 1)"))?;
    let seconds_random = t0.elapsed().as_secs_f64();

    progress(Step::Stage("k-means"));
    let mut krng = ChaCha8Rng::seed_from_u64(p.seed ^ 0x6b6d_6561_6e73);
    let km_heads = baseline::kmeans(w, p.k, p.kmeans_iters, &mut krng, || {});
    let kmeans = place(w, geo, km_heads.clone(), p.cap)?;

    progress(Step::Stage("nearest-node floor"));
    let nearest_other = assign::nearest_other(w, geo, p.jobs);
    let bound_floor_ms = assign::floor_bound(&nearest_other, p.k);

    let t1 = Instant::now();
    let kp = kmedian::Params { k: p.k, cap: p.cap, iterations: p.kmedian_iters, seed: p.seed ^ 0x6b6d };
    let starts = vec![("kmeans".to_string(), km_heads), ("random".to_string(), random_first.heads.clone())];
    let out = kmedian::solve(w, geo, &kp, starts, |stage| progress(Step::Stage(stage)))?;
    let measured = measure(w, geo, &out.heads, &out.head_of, p.cap);
    let kmedian = Placement { heads: out.heads, head_of: out.head_of, measured, gap_ms: out.assign_gap_ms };
    Ok(Yardsticks {
        draws,
        random_first,
        kmeans,
        kmedian,
        kmedian_start: out.best_start,
        kmedian_starts: out.starts,
        bound_lagrangian_ms: out.bound_mean_ms,
        bound_floor_ms,
        nearest_other,
        seconds_random,
        seconds_kmedian: t1.elapsed().as_secs_f64(),
    })
}

/// The two-sided 95 % quantile of Student's t with `df` degrees of freedom: a table up to
/// 30, then the Cornish-Fisher expansion (within 10^-4 there). `scripts/superpeers_check.py`
/// uses the same numbers.
pub fn t975(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::NAN,
        1..=30 => T[df - 1],
        _ => {
            let (z, d) = (1.959964f64, df as f64);
            z + (z.powi(3) + z) / (4.0 * d) + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * d * d)
        }
    }
}

/// Mean, sample standard deviation and the 95 % confidence interval of the mean of `v`
/// (NaN where undefined: no values, or one value for the spread).
pub fn ci95(v: &[f64]) -> (f64, f64, f64, f64) {
    let n = v.len();
    if n == 0 {
        return (f64::NAN, f64::NAN, f64::NAN, f64::NAN);
    }
    let mean = v.iter().sum::<f64>() / n as f64;
    if n == 1 {
        return (mean, f64::NAN, f64::NAN, f64::NAN);
    }
    let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
    let h = t975(n - 1) * sd / (n as f64).sqrt();
    (mean, sd, mean - h, mean + h)
}

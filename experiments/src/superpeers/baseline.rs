//! The baselines, computed with global knowledge (no protocol, no messages):
//!
//! - **random**: `W` super peers chosen uniformly at random;
//! - **k-means** (the centralised yardstick): k-means++ seeding (on a uniform sample of at
//!   most `2·10^8 / W` nodes, to keep seeding at `O(S·W)`), then Lloyd iterations on all nodes
//!   in the Euclidean part of the Vivaldi coordinates (a k-d tree finds each node's nearest
//!   centroid), then each centroid snapped to the member minimising distance-to-centroid plus
//!   its own height (a super peer's access delay is paid by all its members).
//!
//! Both use the same **capacity-constrained assignment** as the yardstick for clusters: nodes in
//! random order each take the super peer with the lowest *predicted* RTT (coordinates, heights
//! included) that still has room (the cap), among their 16, then 128 nearest, then all.
//! The measures then use the TRUE RTT, as for the protocols.
//!
//! Session 4: members of the protocol attach by measured RTT, so [`assign_measured`] offers
//! the baselines the same rule (rows `random-m`, `kmeans-m`), so that a comparison with
//! them does not move the goalposts.

use super::world::World;
use kiddo::{KdTree, SquaredEuclidean};
use overlay::superpeer::point::DIMS;
use rand::seq::SliceRandom;
use rand::{Rng, RngCore};

/// Super peers and every node's head (itself for a head).
pub struct Assignment {
    pub heads: Vec<u32>,
    pub head_of: Vec<u32>,
}

fn key(w: &World, i: u32) -> [f32; DIMS] {
    w.points[i as usize].x
}

fn tree_of(w: &World, heads: &[u32]) -> KdTree<f32, DIMS> {
    let mut t: KdTree<f32, DIMS> = KdTree::with_capacity(heads.len().max(1));
    for (slot, &h) in heads.iter().enumerate() {
        t.add(&key(w, h), slot as u64);
    }
    t
}

/// Capacity-constrained nearest assignment (see the module doc).
pub fn assign(w: &World, heads: &[u32], cap: u64, rng: &mut dyn RngCore) -> Vec<u32> {
    assign_by(w, heads, cap, rng, |i, h| w.points[i as usize].rtt(&w.points[h as usize]))
}

/// The attachment rule of the protocol since session 4, offered to any placement: nodes in
/// random order each take, among the heads with room that are nearest by the coordinates (16,
/// then 128, then all), the one with the lowest MEASURED RTT, here the TRUE RTT (a ping's
/// smallest sample tends to it; the protocol measures a few candidates and keeps one
/// sample's minimum, so this is at least as good for the baseline).
pub fn assign_measured(w: &World, heads: &[u32], cap: u64, rng: &mut dyn RngCore) -> Vec<u32> {
    assign_by(w, heads, cap, rng, |i, h| w.rtt_ms(i, h))
}

/// Greedy capacity-constrained assignment by `cost(node, head)` over the coordinate-nearest
/// candidate heads (see [`assign`]).
fn assign_by(w: &World, heads: &[u32], cap: u64, rng: &mut dyn RngCore, cost: impl Fn(u32, u32) -> f64) -> Vec<u32> {
    let n = w.len();
    let mut head_of = vec![u32::MAX; n];
    let mut load = vec![0u64; heads.len()];
    for &h in heads {
        head_of[h as usize] = h;
    }
    if heads.is_empty() {
        return head_of;
    }
    let tree = tree_of(w, heads);
    let mut order: Vec<u32> = (0..n as u32).filter(|&i| head_of[i as usize] == u32::MAX).collect();
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(rng.next_u64());
    order.shuffle(&mut r);
    for i in order {
        let mut done = false;
        for qty in [16usize, 128] {
            let mut c: Vec<(f64, usize)> = tree
                .nearest_n::<SquaredEuclidean>(&key(w, i), qty.min(heads.len()))
                .into_iter()
                .map(|nb| (cost(i, heads[nb.item as usize]), nb.item as usize))
                .collect();
            c.sort_by(|a, b| a.0.total_cmp(&b.0));
            if let Some(&(_, s)) = c.iter().find(|(_, s)| load[*s] < cap) {
                load[s] += 1;
                head_of[i as usize] = heads[s];
                done = true;
                break;
            }
        }
        if !done {
            let best = (0..heads.len())
                .filter(|&s| load[s] < cap)
                .map(|s| (cost(i, heads[s]), s))
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(_, s)| s);
            if let Some(s) = best {
                load[s] += 1;
                head_of[i as usize] = heads[s];
            }
        }
    }
    head_of
}

use rand::SeedableRng;

/// `k` random super peers.
pub fn random(w: &World, k: usize, cap: u64, rng: &mut dyn RngCore) -> Assignment {
    let n = w.len();
    let mut all: Vec<u32> = (0..n as u32).collect();
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(rng.next_u64());
    all.shuffle(&mut r);
    all.truncate(k.min(n));
    let head_of = assign(w, &all, cap, rng);
    Assignment { heads: all, head_of }
}

fn sq(a: &[f32; DIMS], b: &[f32; DIMS]) -> f32 {
    let mut s = 0.0;
    for i in 0..DIMS {
        let d = a[i] - b[i];
        s += d * d;
    }
    s
}

/// The centralised k-means yardstick (see the module doc). `progress` after each iteration.
#[expect(clippy::needless_range_loop, reason = "parallel arrays indexed by node, centre and dimension")]
pub fn kmeans(
    w: &World,
    k: usize,
    cap: u64,
    iters: usize,
    rng: &mut dyn RngCore,
    mut progress: impl FnMut(),
) -> Assignment {
    let n = w.len();
    let k = k.clamp(1, n.max(1));
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(rng.next_u64());
    // k-means++ on a sample.
    let s_max = (200_000_000 / k).max(k).min(n);
    let mut sample: Vec<u32> = (0..n as u32).collect();
    sample.shuffle(&mut r);
    sample.truncate(s_max);
    let pts: Vec<[f32; DIMS]> = sample.iter().map(|&i| key(w, i)).collect();
    let mut centres: Vec<[f32; DIMS]> = Vec::with_capacity(k);
    centres.push(pts[r.gen_range(0..pts.len())]);
    let mut d2: Vec<f32> = pts.iter().map(|p| sq(p, &centres[0])).collect();
    while centres.len() < k {
        let total: f64 = d2.iter().map(|&x| x as f64).sum();
        let pick = if total > 0.0 {
            let mut t = r.gen::<f64>() * total;
            let mut idx = d2.len() - 1;
            for (i, &x) in d2.iter().enumerate() {
                t -= x as f64;
                if t <= 0.0 {
                    idx = i;
                    break;
                }
            }
            idx
        } else {
            r.gen_range(0..pts.len())
        };
        let c = pts[pick];
        centres.push(c);
        for (i, p) in pts.iter().enumerate() {
            let d = sq(p, &c);
            if d < d2[i] {
                d2[i] = d;
            }
        }
    }
    // Lloyd on all nodes.
    let mut label = vec![0u32; n];
    for _ in 0..iters {
        let mut t: KdTree<f32, DIMS> = KdTree::with_capacity(k);
        for (c, p) in centres.iter().enumerate() {
            t.add(p, c as u64);
        }
        let mut sum = vec![[0f64; DIMS]; k];
        let mut cnt = vec![0u64; k];
        for i in 0..n {
            let c = t.nearest_one::<SquaredEuclidean>(&key(w, i as u32)).item as usize;
            label[i] = c as u32;
            cnt[c] += 1;
            for d in 0..DIMS {
                sum[c][d] += w.points[i].x[d] as f64;
            }
        }
        for c in 0..k {
            if cnt[c] > 0 {
                for d in 0..DIMS {
                    centres[c][d] = (sum[c][d] / cnt[c] as f64) as f32;
                }
            }
        }
        progress();
    }
    // Snap each centroid to its best member.
    let mut best: Vec<(f64, u32)> = vec![(f64::INFINITY, u32::MAX); k];
    for i in 0..n {
        let c = label[i] as usize;
        let score = (sq(&key(w, i as u32), &centres[c]) as f64).sqrt() + w.points[i].h as f64;
        if score < best[c].0 {
            best[c] = (score, i as u32);
        }
    }
    let mut heads: Vec<u32> = best.iter().filter(|b| b.1 != u32::MAX).map(|b| b.1).collect();
    let mut is_head = vec![false; n];
    for &h in &heads {
        is_head[h as usize] = true;
    }
    while heads.len() < k {
        let i = r.gen_range(0..n as u32);
        if !is_head[i as usize] {
            is_head[i as usize] = true;
            heads.push(i);
        }
    }
    let head_of = assign(w, &heads, cap, rng);
    Assignment { heads, head_of }
}

/// A floor under the mean latency of *any* super-peer placement and assignment: the mean,
/// over a uniform sample of `sample` nodes, of the TRUE RTT to the nearest other node of the
/// whole population. Every normal node's super peer is some other node, so no selection
/// (protocol, random, k-means or any other, whatever the cap) can average below this; it
/// shows how far "x random" targets are reachable on a latency model at all. The sample is
/// drawn with its own generator seeded by `seed`, so it leaves the run's RNG untouched.
///
/// **Exact, with pruning** (session 5): the model's RTT of a pair is at least the sum of the
/// two access delays (`LatencyModel::rtt_ms` adds a non-negative propagation to them and
/// multiplies by a detour factor of at least 1, and rounding is monotone), so after the
/// picked node's own city has given a first nearest RTT, the rest of the population is
/// scanned in ascending access delay and the scan stops once that sum reaches the best RTT
/// found. The minimum is over the same set as the full scan, so the result is the same
/// number ([`floor_nearest_node_full`], compared in the tests); at N = 10^6 it evaluates a few
/// per cent of the 2,000 x N pairs.
pub fn floor_nearest_node(w: &World, sample: usize, seed: u64) -> f64 {
    let n = w.len();
    if n < 2 {
        return f64::NAN;
    }
    let picks = floor_picks(n, sample, seed);
    let access: Vec<f64> = (0..n).map(|i| w.model.access_ms(i)).collect();
    let mut by_access: Vec<u32> = (0..n as u32).collect();
    by_access.sort_unstable_by(|&a, &b| access[a as usize].total_cmp(&access[b as usize]).then(a.cmp(&b)));
    let mut by_city: rustc_hash::FxHashMap<usize, Vec<u32>> = rustc_hash::FxHashMap::default();
    for i in 0..n {
        by_city.entry(w.model.city_of(i)).or_default().push(i as u32);
    }
    let total: f64 = picks
        .iter()
        .map(|&i| {
            let own = by_city.get(&w.model.city_of(i as usize)).map_or(&[][..], |v| &v[..]);
            let mut best = own.iter().filter(|&&j| j != i).map(|&j| w.rtt_ms(i, j)).fold(f64::INFINITY, f64::min);
            let a = access[i as usize];
            for &j in &by_access {
                if a + access[j as usize] >= best {
                    break;
                }
                if j != i {
                    best = best.min(w.rtt_ms(i, j));
                }
            }
            best
        })
        .sum();
    total / picks.len() as f64
}

/// [`floor_nearest_node`] by a full scan of every pair (the definition; for the tests).
pub fn floor_nearest_node_full(w: &World, sample: usize, seed: u64) -> f64 {
    let n = w.len();
    if n < 2 {
        return f64::NAN;
    }
    let picks = floor_picks(n, sample, seed);
    let total: f64 = picks
        .iter()
        .map(|&i| (0..n as u32).filter(|&j| j != i).map(|j| w.rtt_ms(i, j)).fold(f64::INFINITY, f64::min))
        .sum();
    total / picks.len() as f64
}

fn floor_picks(n: usize, sample: usize, seed: u64) -> Vec<u32> {
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..sample.min(n)).map(|_| r.gen_range(0..n as u32)).collect()
}

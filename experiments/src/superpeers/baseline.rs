//! The placements of the yardsticks that need no search on the TRUE RTT, computed with
//! global knowledge (no protocol, no messages):
//!
//! - **random**: `k` distinct nodes drawn uniformly ([`random_heads`]);
//! - **k-means**: k-means++ seeding (on a uniform sample of at most `2·10^8 / k` nodes, to keep
//!   seeding at `O(S·k)`), then Lloyd iterations on all nodes in the Euclidean part of the
//!   Vivaldi coordinates (a k-d tree finds each node's nearest centroid), then each centroid
//!   snapped to the member minimising distance-to-centroid plus its own height (a super
//!   peer's access delay is paid by all its members) ([`kmeans`]).
//!
//! Members are then attached to these heads by the optimal capacitated assignment on the
//! TRUE RTT ([`super::assign::optimal`]), the same for every yardstick.

use super::world::World;
use kiddo::{KdTree, SquaredEuclidean};
use overlay::superpeer::point::DIMS;
use rand::seq::SliceRandom;
use rand::{Rng, RngCore, SeedableRng};

fn key(w: &World, i: u32) -> [f32; DIMS] {
    w.points[i as usize].x
}

/// `k` distinct nodes drawn uniformly by `rng`.
pub fn random_heads(n: usize, k: usize, rng: &mut impl Rng) -> Vec<u32> {
    rand::seq::index::sample(rng, n, k.min(n)).into_iter().map(|i| i as u32).collect()
}

fn sq(a: &[f32; DIMS], b: &[f32; DIMS]) -> f32 {
    let mut s = 0.0;
    for i in 0..DIMS {
        let d = a[i] - b[i];
        s += d * d;
    }
    s
}

/// k-means heads (see the module doc): `k` distinct nodes. `progress` after each iteration.
#[expect(clippy::needless_range_loop, reason = "parallel arrays indexed by node, centre and dimension")]
pub fn kmeans(w: &World, k: usize, iters: usize, rng: &mut dyn RngCore, mut progress: impl FnMut()) -> Vec<u32> {
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
    heads
}

//! The capacitated k-median on the TRUE RTT: the strongest yardstick of `peerage-lab
//! superpeers`, and a lower bound on what any placement can achieve.
//!
//! Every method faces the **capacitated k-median** problem: choose exactly `k` heads among
//! the `N` nodes and assign every other node to a head with at most `cap` members, minimising
//! the mean RTT of the normal nodes to their head (a head is its own super peer and is not
//! counted, as in [`super::measure`]). It is attacked with the textbook tools, on the TRUE RTT
//! (access delays of both ends, route inflation, per-pair noise and detours included), which
//! no protocol can see:
//!
//! - **Assignment** for a fixed set of heads: [`super::assign::optimal`] (auction with a
//!   certified gap, any N). [`assign_exact`] is the exact cycle-cancelling solution of the same
//!   transportation problem for small worlds (the tests compare the two): a greedy start, then
//!   negative cycles on the graph of heads (edge `s -> t` weighs the cheapest
//!   `d(i, t) - d(i, s)` over the members `i` of `s`, plus free edges through a "room" node)
//!   are cancelled until none is left.
//! - **Capacitated k-medoids** ([`refine`]): each cluster's head moves to the member with the
//!   least total RTT to the cluster ([`medoid`], pruned by the model's lower bound), then the
//!   assignment again, while the total drops by more than 0.01 %.
//! - **Lower bound** ([`lagrangian`], N <= [`MAX_NODES`]): Lagrangian relaxation of the
//!   "every node is a head or assigned once" constraints with multipliers `λ_i`. For fixed `λ`
//!   the relaxed problem splits by head: opening `j` is worth `v_j = -λ_j + Σ` of the `cap`
//!   most negative `d(i, j) - λ_i`, and the `k` smallest `v_j` are opened, so
//!   `L(λ) = Σ λ_i + Σ_{k smallest} v_j` <= the optimum for every `λ`. `λ` is improved by
//!   subgradient steps (Polyak step toward the best placement found, halved after stalls).
//!   To keep memory at `O(N·m)` each `λ_i` is capped at `T_i`, its RTT to its `m`-th nearest
//!   node (`m = max(3·cap, 64)`): pairs with `d(i, j) >= T_i` then never enter a `v_j`, so
//!   dropping them is exact and the bound stays valid (only possibly looser). Building the
//!   lists costs `N²` RTT evaluations, hence the limit.
//! - **Search** ([`solve`]): the given starts (k-means' and random heads) and, up to
//!   [`MAX_NODES`], the head sets the relaxation opens at its best iterations, each refined
//!   by k-medoids; the best is the yardstick. Its distance to the bound says how far from the
//!   optimum it can be.
//!
//! Choices where the literature leaves room: the number of subgradient iterations
//! ([`Params::iterations`]), `m`, and k-medoids as the only local search (no open/close swap
//! search: the relaxation's own head sets stand in for it).

use super::assign::{self, AssignError, Geometry};
use super::world::World;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Largest population for which the relaxation runs (its lists cost `N²` RTT evaluations).
pub const MAX_NODES: usize = 20_000;

/// Settings of the search.
#[derive(Clone, Debug)]
pub struct Params {
    pub k: usize,
    pub cap: u64,
    /// Subgradient iterations of the relaxation.
    pub iterations: usize,
    pub seed: u64,
}

/// The outcome: the best placement found, its exact assignment, and the bound.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub heads: Vec<u32>,
    pub head_of: Vec<u32>,
    /// Mean TRUE RTT of the normal nodes to their head in the best placement, ms.
    pub best_mean_ms: f64,
    /// The certified gap of that placement's assignment ([`assign::Assigned::gap_ms`]), ms.
    pub assign_gap_ms: f64,
    /// Lower bound on that mean for any placement of `k` heads with the cap, ms (the
    /// relaxation's; none above [`MAX_NODES`]).
    pub bound_mean_ms: Option<f64>,
    /// Which start gave the best placement.
    pub best_start: String,
    /// Mean of each start after exact assignment, before and after the medoid refinement.
    pub starts: Vec<(String, f64, f64)>,
}

/// Why the search was refused.
#[derive(Debug, thiserror::Error)]
pub enum KMedianError {
    #[error("capacitated k-median: {k} heads with cap {cap} cannot hold the other {rest} nodes")]
    Infeasible { k: usize, cap: u64, rest: usize },
    #[error("capacitated k-median: {0}")]
    Assign(#[from] AssignError),
}

/// Exact capacitated assignment of every non-head to `heads` on the TRUE RTT (see the module
/// doc). Returns `head_of` (itself for a head) and the total RTT, ms.
pub fn assign_exact(w: &World, heads: &[u32], cap: u64) -> Result<(Vec<u32>, f64), KMedianError> {
    let n = w.len();
    let k = heads.len();
    let rest = n - k;
    if (k as u64) * cap < rest as u64 || k == 0 {
        return Err(KMedianError::Infeasible { k, cap, rest });
    }
    let mut is_head = vec![u32::MAX; n];
    for (s, &h) in heads.iter().enumerate() {
        is_head[h as usize] = s as u32;
    }
    let clients: Vec<u32> = (0..n as u32).filter(|&i| is_head[i as usize] == u32::MAX).collect();
    // d[c * k + s]: RTT of client c to head s.
    let mut d = vec![0f32; clients.len() * k];
    for (c, &i) in clients.iter().enumerate() {
        for (s, &h) in heads.iter().enumerate() {
            d[c * k + s] = w.rtt_ms(i, h) as f32;
        }
    }
    // Greedy start: decreasing regret (second best minus best), best head with room.
    let mut order: Vec<(f32, usize)> = (0..clients.len())
        .map(|c| {
            let row = &d[c * k..(c + 1) * k];
            let (mut a, mut b) = (f32::INFINITY, f32::INFINITY);
            for &x in row {
                if x < a {
                    b = a;
                    a = x;
                } else if x < b {
                    b = x;
                }
            }
            (if b.is_finite() { b - a } else { 0.0 }, c)
        })
        .collect();
    order.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
    let mut load = vec![0u64; k];
    let mut at = vec![0u32; clients.len()];
    let mut idx: Vec<usize> = (0..k).collect();
    for &(_, c) in &order {
        let row = &d[c * k..(c + 1) * k];
        idx.sort_by(|&a, &b| row[a].total_cmp(&row[b]));
        // Feasible by the check above: some head has room.
        let s = idx.iter().copied().find(|&s| load[s] < cap).unwrap_or(0);
        load[s] += 1;
        at[c] = s as u32;
    }
    // Cycle cancelling on the condensed graph of heads, node k is the "room" node.
    let kk = k + 1;
    let mut wgt = vec![f64::INFINITY; kk * kk];
    let mut who = vec![u32::MAX; k * k];
    let mut dist = vec![0f64; kk];
    let mut pred = vec![usize::MAX; kk];
    // Each cancelled cycle lowers the total by more than the tolerance, so this ends; the
    // cap only guards against float surprises.
    for _ in 0..1_000_000 {
        wgt.iter_mut().for_each(|x| *x = f64::INFINITY);
        who.iter_mut().for_each(|x| *x = u32::MAX);
        for (c, &s) in at.iter().enumerate() {
            let s = s as usize;
            let row = &d[c * k..(c + 1) * k];
            let base = row[s];
            for t in 0..k {
                if t == s {
                    continue;
                }
                let delta = (row[t] - base) as f64;
                if delta < wgt[s * kk + t] {
                    wgt[s * kk + t] = delta;
                    who[s * k + t] = c as u32;
                }
            }
        }
        for t in 0..k {
            if load[t] < cap {
                wgt[t * kk + k] = 0.0;
            }
            wgt[k * kk + t] = 0.0;
        }
        // Bellman-Ford from a virtual source joined to every node at weight 0.
        dist.iter_mut().for_each(|x| *x = 0.0);
        pred.iter_mut().for_each(|x| *x = usize::MAX);
        let mut last = usize::MAX;
        for _ in 0..kk {
            last = usize::MAX;
            for u in 0..kk {
                let du = dist[u];
                for v in 0..kk {
                    let e = wgt[u * kk + v];
                    if e.is_finite() && du + e < dist[v] - 1e-7 {
                        dist[v] = du + e;
                        pred[v] = u;
                        last = v;
                    }
                }
            }
            if last == usize::MAX {
                break;
            }
        }
        if last == usize::MAX {
            break;
        }
        // Walk back kk steps to land on the cycle, then collect it.
        let mut v = last;
        for _ in 0..kk {
            if pred[v] == usize::MAX {
                break;
            }
            v = pred[v];
        }
        let mut cyc = vec![v];
        let mut u = pred[v];
        while u != v && u != usize::MAX && cyc.len() <= kk {
            cyc.push(u);
            u = pred[u];
        }
        if u != v {
            break; // no cycle after all (cannot happen after kk passes; stop safely)
        }
        cyc.reverse(); // edges cyc[i] -> cyc[i+1] (and last -> first)
        let len = cyc.len();
        let weight: f64 = (0..len).map(|e| wgt[cyc[e] * kk + cyc[(e + 1) % len]]).sum();
        #[expect(clippy::neg_cmp_op_on_partial_ord, reason = "a NaN weight ends the cancelling too")]
        if !(weight < -1e-6) {
            break;
        }
        let mut moves: Vec<(usize, usize, usize)> = Vec::with_capacity(len);
        for e in 0..len {
            let (s, t) = (cyc[e], cyc[(e + 1) % len]);
            if s == k || t == k {
                continue; // the free edges through the room node
            }
            moves.push((who[s * k + t] as usize, s, t));
        }
        for (c, s, t) in moves {
            at[c] = t as u32;
            load[s] -= 1;
            load[t] += 1;
        }
    }
    let mut head_of = vec![u32::MAX; n];
    let mut total = 0f64;
    for &h in heads {
        head_of[h as usize] = h;
    }
    for (c, &i) in clients.iter().enumerate() {
        let s = at[c] as usize;
        head_of[i as usize] = heads[s];
        total += w.rtt_ms(i, heads[s]);
    }
    Ok((head_of, total))
}

/// Capacitated k-medoids from `heads` (module doc): returns the improved heads and their
/// assignment.
pub fn refine(
    w: &World,
    geo: &Geometry,
    heads: Vec<u32>,
    cap: u64,
) -> Result<(Vec<u32>, assign::Assigned), KMedianError> {
    refine_by(w, geo, heads, cap, |cluster| medoid(w, geo, cluster))
}

/// [`refine`] with each cluster's new head chosen by `medoid_of(cluster)` (the cluster's
/// nodes, its head first): [`super::diagnose`] also chooses it by the predicted RTT, to show
/// what the coordinates' error costs a placement. The assignment is always on the TRUE RTT,
/// and a step is kept only if it lowers the TRUE total.
pub fn refine_by(
    w: &World,
    geo: &Geometry,
    mut heads: Vec<u32>,
    cap: u64,
    medoid_of: impl Fn(&[u32]) -> u32,
) -> Result<(Vec<u32>, assign::Assigned), KMedianError> {
    let n = w.len();
    let mut best = assign::optimal(w, geo, &heads, cap)?;
    for _ in 0..30 {
        let mut slot = vec![u32::MAX; n];
        for (s, &h) in heads.iter().enumerate() {
            slot[h as usize] = s as u32;
        }
        let mut clusters: Vec<Vec<u32>> = heads.iter().map(|&h| vec![h]).collect();
        for (i, &h) in best.head_of.iter().enumerate() {
            if h != u32::MAX && h != i as u32 {
                clusters[slot[h as usize] as usize].push(i as u32);
            }
        }
        let new_heads: Vec<u32> = clusters.iter().map(|c| medoid_of(c)).collect();
        if new_heads == heads {
            break;
        }
        let next = assign::optimal(w, geo, &new_heads, cap)?;
        if next.total_ms >= best.total_ms * (1.0 - 1e-4) {
            if next.total_ms < best.total_ms {
                (heads, best) = (new_heads, next);
            }
            break;
        }
        (heads, best) = (new_heads, next);
    }
    Ok((heads, best))
}

/// The node of `cluster` with the least total TRUE RTT to the others (ties: the first).
/// Candidates are tried in order of the model's lower bound on that total
/// ([`Geometry::lower_bound`]) and the search stops once the bound reaches the best total.
pub fn medoid(w: &World, geo: &Geometry, cluster: &[u32]) -> u32 {
    let mut by_bound: Vec<(f64, usize)> = cluster
        .iter()
        .enumerate()
        .map(|(a, &c)| (cluster.iter().filter(|&&m| m != c).map(|&m| geo.lower_bound(m, c)).sum::<f64>(), a))
        .collect();
    by_bound.sort_unstable_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    let mut best = (f64::INFINITY, usize::MAX);
    for &(lb, a) in &by_bound {
        if lb >= best.0 {
            break;
        }
        let c = cluster[a];
        let cost: f64 = cluster.iter().map(|&m| w.rtt_ms(m, c)).sum();
        if cost < best.0 || (cost == best.0 && a < best.1) {
            best = (cost, a);
        }
    }
    cluster.get(best.1).copied().unwrap_or(cluster[0])
}

/// The relaxation's candidate lists: for every head `j`, the nodes `i` with `d(i, j) < T_i`.
struct Lists {
    cols: Vec<Vec<(u32, f32)>>,
    thr: Vec<f32>,
}

#[expect(clippy::needless_range_loop, reason = "a row of the RTT matrix indexed by node")]
fn lists(w: &World, m: usize, mut progress: impl FnMut(usize)) -> Lists {
    let n = w.len();
    let mut cols: Vec<Vec<(u32, f32)>> = vec![Vec::new(); n];
    let mut thr = vec![0f32; n];
    let mut row = vec![0f32; n];
    let mut tmp = vec![0f32; n];
    for i in 0..n {
        for j in 0..n {
            row[j] = if j == i { f32::INFINITY } else { at_most(w.rtt_ms(i as u32, j as u32)) };
        }
        tmp.copy_from_slice(&row);
        let m = m.min(n - 1).max(1);
        let (_, t, _) = tmp.select_nth_unstable_by(m - 1, |a, b| a.total_cmp(b));
        let t = *t;
        thr[i] = t;
        for (j, &x) in row.iter().enumerate() {
            if x < t {
                cols[j].push((i as u32, x));
            }
        }
        if i % 256 == 0 {
            progress(i);
        }
    }
    Lists { cols, thr }
}

/// `x` as the largest `f32` not above it. The lists hold RTTs rounded down, never up: the
/// relaxation of slightly smaller costs bounds the true optimum too, where rounding to the
/// nearest `f32` could lift a tight bound above it (by 1.5e-6 ms on a 10-node world).
fn at_most(x: f64) -> f32 {
    let f = x as f32;
    if f as f64 <= x {
        return f;
    }
    // The next f32 toward minus infinity (`f32::next_down` is newer than the MSRV).
    if f > 0.0 {
        f32::from_bits(f.to_bits() - 1)
    } else if f < 0.0 {
        f32::from_bits(f.to_bits() + 1)
    } else {
        -f32::from_bits(1)
    }
}

/// The members head `j` would take in `L(λ)`: the (at most `cap`) nodes of its column with
/// the most negative reduced cost `d_ij - λ_i`, into `buf` as `(reduced cost, node)`.
fn negative_reduced_costs(col: &[(u32, f32)], lambda: &[f64], cap: usize, buf: &mut Vec<(f64, u32)>) {
    buf.clear();
    for &(i, dij) in col {
        let r = dij as f64 - lambda[i as usize];
        if r < 0.0 {
            buf.push((r, i));
        }
    }
    if buf.len() > cap {
        buf.select_nth_unstable_by(cap - 1, |a, b| a.0.total_cmp(&b.0));
        buf.truncate(cap);
    }
}

/// One evaluation of `L(λ)`: the bound, the opened heads and the subgradient.
fn evaluate(
    l: &Lists,
    lambda: &[f64],
    k: usize,
    cap: usize,
    cover: &mut [i32],
    buf: &mut Vec<(f64, u32)>,
) -> (f64, Vec<u32>) {
    let n = lambda.len();
    let mut v = vec![(0f64, 0u32); n];
    for j in 0..n {
        negative_reduced_costs(&l.cols[j], lambda, cap, buf);
        v[j] = (-lambda[j] + buf.iter().map(|x| x.0).sum::<f64>(), j as u32);
    }
    let k = k.min(n);
    v.select_nth_unstable_by(k - 1, |a, b| a.0.total_cmp(&b.0));
    let open: Vec<u32> = v[..k].iter().map(|x| x.1).collect();
    let bound = lambda.iter().sum::<f64>() + v[..k].iter().map(|x| x.0).sum::<f64>();
    // Subgradient: 1 - (head) - (times assigned).
    cover.iter_mut().for_each(|c| *c = 1);
    for &j in &open {
        cover[j as usize] -= 1;
        negative_reduced_costs(&l.cols[j as usize], lambda, cap, buf);
        for &(_, i) in buf.iter() {
            cover[i as usize] -= 1;
        }
    }
    (bound, open)
}

/// The relaxation (module doc): the best bound on the TOTAL RTT and the head sets it opened
/// at the iterations where the bound improved (at most `keep`, latest last).
fn lagrangian(l: &Lists, k: usize, cap: usize, ub: f64, iterations: usize, keep: usize) -> (f64, Vec<Vec<u32>>) {
    let n = l.cols.len();
    // Start: every node's RTT to its nearest other node (capped at T_i).
    let mut lambda: Vec<f64> = vec![f64::INFINITY; n];
    for col in &l.cols {
        for &(i, d) in col {
            let x = &mut lambda[i as usize];
            *x = x.min(d as f64);
        }
    }
    for (i, x) in lambda.iter_mut().enumerate() {
        if !x.is_finite() {
            *x = l.thr[i] as f64;
        }
    }
    let mut best = f64::NEG_INFINITY;
    let mut sets: Vec<Vec<u32>> = Vec::new();
    let mut theta = 2.0;
    let mut stall = 0;
    let mut cover = vec![0i32; n];
    let mut buf = Vec::new();
    for _ in 0..iterations {
        let (b, open) = evaluate(l, &lambda, k, cap, &mut cover, &mut buf);
        if b > best + 1e-9 {
            best = b;
            stall = 0;
            sets.push(open);
            if sets.len() > keep {
                sets.remove(0);
            }
        } else {
            stall += 1;
            if stall >= 15 {
                theta /= 2.0;
                stall = 0;
            }
        }
        let norm: f64 = cover.iter().map(|&c| (c as f64) * (c as f64)).sum();
        if norm == 0.0 || theta < 1e-4 {
            break;
        }
        let step = theta * (ub - b).max(1e-9) / norm;
        for i in 0..n {
            lambda[i] = (lambda[i] + step * cover[i] as f64).min(l.thr[i] as f64);
        }
    }
    (best, sets)
}

/// Runs the whole search (module doc) from the named `starts` (each `k` distinct heads).
/// `progress(stage)` reports the phase.
pub fn solve(
    w: &World,
    geo: &Geometry,
    p: &Params,
    starts: Vec<(String, Vec<u32>)>,
    mut progress: impl FnMut(&str),
) -> Result<Outcome, KMedianError> {
    let n = w.len();
    let k = p.k.clamp(1, n);
    let rest = n - k;
    if (k as u64) * p.cap < rest as u64 {
        return Err(KMedianError::Infeasible { k, cap: p.cap, rest });
    }
    let cap = p.cap as usize;
    let mut tried: Vec<(String, f64, f64)> = Vec::new();
    let mut best: Option<(String, Vec<u32>, assign::Assigned)> = None;
    let mut consider = |name: String, heads: Vec<u32>, best: &mut Option<(String, Vec<u32>, assign::Assigned)>| {
        let before = assign::optimal(w, geo, &heads, p.cap)?;
        let (h, a) = refine(w, geo, heads, p.cap)?;
        tried.push((name.clone(), before.mean_ms(), a.mean_ms()));
        if best.as_ref().is_none_or(|b| a.total_ms < b.2.total_ms) {
            *best = Some((name, h, a));
        }
        Ok::<(), KMedianError>(())
    };
    for (name, heads) in starts {
        progress(&format!("{name} start"));
        consider(name, heads, &mut best)?;
    }
    let mut bound = None;
    if n <= MAX_NODES {
        progress("candidate lists");
        let m = (3 * cap).max(64);
        let l = lists(w, m, |_| {});
        progress("relaxation");
        let ub = best.as_ref().map_or(f64::INFINITY, |b| b.2.total_ms);
        let (b, sets) = lagrangian(&l, k, cap, ub, p.iterations, 3);
        drop(l);
        bound = Some(b / rest.max(1) as f64);
        let mut r = ChaCha8Rng::seed_from_u64(p.seed);
        for (e, mut s) in sets.into_iter().enumerate() {
            progress("relaxation start");
            // A relaxation's open set has exactly k distinct heads; shuffle only to make the
            // slot order independent of node indices.
            s.shuffle(&mut r);
            consider(format!("lagrangian-{e}"), s, &mut best)?;
        }
    }
    let (name, heads, a) = best.ok_or(KMedianError::Infeasible { k, cap: p.cap, rest })?;
    Ok(Outcome {
        heads,
        best_mean_ms: a.mean_ms(),
        assign_gap_ms: a.gap_ms(),
        head_of: a.head_of,
        bound_mean_ms: bound,
        best_start: name,
        starts: tried,
    })
}

#[cfg(test)]
mod tests {
    use super::at_most;

    #[test]
    fn rtts_are_rounded_down_to_the_nearest_f32() {
        for x in [0.0, 1e-3, 0.1, 1.0 / 3.0, 67.787_095_312_614_68, 1e6 + 0.3, -2.7] {
            let f = at_most(x);
            assert!(f64::from(f) <= x, "{x} became {f}");
            // The next f32 up is above x: f is the largest f32 not above it.
            let up = if f >= 0.0 { f32::from_bits(f.to_bits() + 1) } else { f32::from_bits(f.to_bits() - 1) };
            let up = if f == 0.0 && f.is_sign_negative() { f32::from_bits(1) } else { up };
            assert!(f64::from(up) > x || f64::from(f) == x, "{x}: {f} is not the largest f32 below it");
        }
    }
}

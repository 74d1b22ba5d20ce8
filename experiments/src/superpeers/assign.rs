//! The capacitated assignment every yardstick uses: given a set of heads, attach every other
//! node to a head with room (at most `cap` members each) so that the total TRUE RTT is as low
//! as it can be, and prove how far from that optimum the answer is. Works at N = 10^6.
//!
//! - **Nearest targets by TRUE RTT, exactly** ([`Nearest`]): the latency model
//!   (`overlay::latency`) gives every pair `rtt >= α·chord + access(a) + access(b)`, where
//!   `chord` is the straight-line distance of the two nodes' unit vectors on the globe and
//!   `α = 2·R / v · inflation_min · (1 - pair_noise)` (the great circle is at least the chord,
//!   the route inflation at least its minimum, the detour factor at least 1). Targets are
//!   grouped by city and sorted by access delay; a query walks the cities in order of a
//!   city-level bound and each city's targets in order of access, and evaluates the model's
//!   RTT only where the bound does not already rule a target out. It returns the `l` nearest
//!   targets and a threshold `T`: every target not returned is at least `T` away.
//! - **Auction** (Bertsekas' forward auction for the transportation problem): every node
//!   bids for the head with the lowest RTT + price among its candidates, a full head gives
//!   its cheapest slot to a higher bid and prices rise by the bid's margin plus `ε`. A node
//!   whose candidates all cost more than its threshold `T` gets a longer list first, so no
//!   head is left out of anyone's choice.
//! - **Certificate**: for any prices `p >= 0`, `L(p) = Σ_i min_h (d(i, h) + p_h) - cap·Σ_h p_h`
//!   is a lower bound on the optimal total (Lagrangian relaxation of the caps); with the
//!   auction's final prices (a full head's lowest slot price, 0 for a head with room) and
//!   `min_h` taken as `min(T_i, min over i's candidates)` it is computed exactly.
//!   [`Assigned::gap_ms`] is the distance to it: the assignment is optimal within that.
//!   The tests check the auction against the exact cycle-cancelling assignment of
//!   [`super::kmedian::assign_exact`] on small worlds.
//!
//! Choices: `ε` = 0.1 ms. The auction's own guarantee is `ε` per node; the certified gap
//! that is reported is far smaller (N = 10^5, seed 1: 0.003-0.004 ms a node, 0.05-0.08 % of
//! the mean). A smaller `ε` lengthens the price wars of crowded cities, where many nodes value
//! their heads alike: 0.01 ms takes 1.6 times as long for a random draw and twice as long for
//! the k-median's search, for gaps of 0.0001 ms (docs/results/superpeers-lab.md). First lists of 8
//! candidates, quadrupled when needed.

use super::world::World;

/// ms per unit of chord on the unit sphere, and the per-city geometry, of one world.
pub struct Geometry {
    xyz: Vec<[f64; 3]>,
    access: Vec<f32>,
    city: Vec<u16>,
    alpha: f64,
    /// Per city: centre (a unit vector of one of its nodes) and the largest chord from it to
    /// any of its nodes.
    centre: Vec<[f64; 3]>,
    radius: Vec<f64>,
    cities: usize,
}

fn chord(a: &[f64; 3], b: &[f64; 3]) -> f64 {
    ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt()
}

/// A bound made a little smaller than computed, so that float rounding (positions recomputed
/// from longitude and latitude, f32 storage) never lets it exceed the model's RTT.
fn safe(lb: f64) -> f64 {
    lb * (1.0 - 1e-6) - 1e-6
}

impl Geometry {
    pub fn new(w: &World) -> Geometry {
        let n = w.len();
        let cfg = w.model.config();
        let alpha = 2.0 * overlay::latency::model::EARTH_RADIUS_KM / cfg.fibre_km_per_ms
            * cfg.inflation_min
            * (1.0 - cfg.pair_noise);
        let mut xyz = Vec::with_capacity(n);
        let mut access = Vec::with_capacity(n);
        let mut city = Vec::with_capacity(n);
        for i in 0..n {
            let (lon, lat) = w.model.position(i);
            let (la, lo) = (lat.to_radians(), lon.to_radians());
            xyz.push([la.cos() * lo.cos(), la.cos() * lo.sin(), la.sin()]);
            access.push(w.model.access_ms(i) as f32);
            city.push(w.model.city_of(i) as u16);
        }
        let cities = city.iter().map(|&c| c as usize + 1).max().unwrap_or(0);
        let mut centre = vec![[f64::NAN; 3]; cities];
        let mut radius = vec![0f64; cities];
        for i in 0..n {
            let c = city[i] as usize;
            if centre[c][0].is_nan() {
                centre[c] = xyz[i];
            }
            radius[c] = radius[c].max(chord(&centre[c], &xyz[i]));
        }
        Geometry { xyz, access, city, alpha, centre, radius, cities }
    }

    /// The model's lower bound on the RTT of a pair (module doc), made safe against rounding.
    pub fn lower_bound(&self, a: u32, b: u32) -> f64 {
        let (a, b) = (a as usize, b as usize);
        safe(self.alpha * chord(&self.xyz[a], &self.xyz[b]) + self.access[a] as f64 + self.access[b] as f64)
    }

    fn access(&self, i: u32) -> f64 {
        self.access[i as usize] as f64
    }
}

/// An index of target nodes (heads, or every node) for exact nearest-by-TRUE-RTT queries.
pub struct Nearest<'g> {
    geo: &'g Geometry,
    /// Targets grouped by city, each group by ascending access delay.
    by_city: Vec<u32>,
    start: Vec<u32>,
    min_access: Vec<f64>,
    /// Per city of a querying node: the cities with targets, by ascending city-level bound
    /// (without the querying node's own access), as `(bound, city)`.
    order: Vec<Vec<(f64, u16)>>,
}

impl<'g> Nearest<'g> {
    pub fn new(geo: &'g Geometry, targets: &[u32]) -> Nearest<'g> {
        let cities = geo.cities;
        let mut count = vec![0u32; cities + 1];
        for &t in targets {
            count[geo.city[t as usize] as usize + 1] += 1;
        }
        for c in 0..cities {
            count[c + 1] += count[c];
        }
        let start = count;
        let mut fill = start.clone();
        let mut by_city = vec![0u32; targets.len()];
        for &t in targets {
            let c = geo.city[t as usize] as usize;
            by_city[fill[c] as usize] = t;
            fill[c] += 1;
        }
        let mut min_access = vec![f64::INFINITY; cities];
        for c in 0..cities {
            let part = &mut by_city[start[c] as usize..start[c + 1] as usize];
            part.sort_unstable_by(|&a, &b| geo.access[a as usize].total_cmp(&geo.access[b as usize]).then(a.cmp(&b)));
            if let Some(&first) = part.first() {
                min_access[c] = geo.access(first);
            }
        }
        let with_targets: Vec<usize> = (0..cities).filter(|&c| start[c + 1] > start[c]).collect();
        let order = (0..cities)
            .map(|c| {
                if geo.centre[c][0].is_nan() {
                    return Vec::new();
                }
                let mut o: Vec<(f64, u16)> = with_targets
                    .iter()
                    .map(|&d| {
                        let gap = (chord(&geo.centre[c], &geo.centre[d]) - geo.radius[c] - geo.radius[d]).max(0.0);
                        (safe(geo.alpha * gap + min_access[d]), d as u16)
                    })
                    .collect();
                o.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                o
            })
            .collect();
        Nearest { geo, by_city, start, min_access, order }
    }

    /// The `l` targets nearest to node `i` by TRUE RTT (ascending, ties by index), `i` itself
    /// excluded, into `out` as `(target, rtt)`; returns the threshold `T` (module doc):
    /// every target not in `out` is at least `T` away (infinite when `out` holds them all).
    pub fn query(&self, w: &World, i: u32, l: usize, out: &mut Vec<(u32, f64)>) -> f64 {
        out.clear();
        if l == 0 {
            return 0.0;
        }
        let g = self.geo;
        let pi = &g.xyz[i as usize];
        let ai = g.access(i);
        let kth = |out: &Vec<(u32, f64)>| if out.len() == l { out[l - 1].1 } else { f64::INFINITY };
        for &(city_lb, c) in &self.order[g.city[i as usize] as usize] {
            if city_lb + ai >= kth(out) {
                break;
            }
            let c = c as usize;
            let near = safe(g.alpha * (chord(pi, &g.centre[c]) - g.radius[c]).max(0.0) + ai);
            if near + self.min_access[c] >= kth(out) {
                continue;
            }
            for &j in &self.by_city[self.start[c] as usize..self.start[c + 1] as usize] {
                let aj = g.access(j);
                if safe(near + aj) >= kth(out) {
                    break;
                }
                if j == i || g.lower_bound(i, j) >= kth(out) {
                    continue;
                }
                let d = w.rtt_ms(i, j);
                if d < kth(out) {
                    let at = out.partition_point(|x| x.1 < d || (x.1 == d && x.0 < j));
                    out.insert(at, (j, d));
                    out.truncate(l);
                }
            }
        }
        kth(out)
    }
}

/// Why no assignment exists.
#[derive(Debug, thiserror::Error)]
pub enum AssignError {
    #[error("{heads} heads with cap {cap} cannot hold the other {clients} nodes")]
    NoRoom { heads: usize, cap: u64, clients: usize },
}

/// A capacitated assignment and its certificate.
#[derive(Clone, Debug)]
pub struct Assigned {
    /// Every node's head (itself for a head).
    pub head_of: Vec<u32>,
    /// Normal nodes (all nodes but the heads).
    pub clients: usize,
    /// Total TRUE RTT of the normal nodes to their heads, ms.
    pub total_ms: f64,
    /// Lower bound on the total of any capacitated assignment to these heads, ms.
    pub bound_ms: f64,
    /// Bids the auction made, and candidate lists it lengthened (its work).
    pub bids: u64,
    pub extended: u64,
}

impl Assigned {
    /// Mean RTT of the normal nodes, ms.
    pub fn mean_ms(&self) -> f64 {
        self.total_ms / self.clients.max(1) as f64
    }
    /// How far the mean may be above the optimal assignment's, ms (at least 0).
    pub fn gap_ms(&self) -> f64 {
        ((self.total_ms - self.bound_ms) / self.clients.max(1) as f64).max(0.0)
    }
}

const FIRST_LIST: usize = 8;
const NONE: u32 = u32::MAX;

/// The optimal capacitated assignment of every non-head to `heads` on the TRUE RTT, within
/// the certified gap (module doc).
pub fn optimal(w: &World, geo: &Geometry, heads: &[u32], cap: u64) -> Result<Assigned, AssignError> {
    let n = w.len();
    let k = heads.len();
    let mut slot_of = vec![NONE; n];
    for (s, &h) in heads.iter().enumerate() {
        slot_of[h as usize] = s as u32;
    }
    let clients: Vec<u32> = (0..n as u32).filter(|&i| slot_of[i as usize] == NONE).collect();
    if k == 0 || (k as u64).saturating_mul(cap) < clients.len() as u64 {
        return Err(AssignError::NoRoom { heads: k, cap, clients: clients.len() });
    }
    let cap_us = cap.min(clients.len() as u64) as usize;
    let index = Nearest::new(geo, heads);
    // Candidate lists ([`Lists`]).
    let first = FIRST_LIST.min(k);
    let mut cand: Vec<(u32, f32)> = Vec::with_capacity(clients.len() * first);
    let mut start = vec![0u32; clients.len()];
    let mut len = vec![0u32; clients.len()];
    let mut thr = vec![0f32; clients.len()];
    let mut buf = Vec::new();
    let mut fill =
        |c: usize, l: usize, cand: &mut Vec<(u32, f32)>, start: &mut [u32], len: &mut [u32], thr: &mut [f32]| {
            let t = index.query(w, clients[c], l, &mut buf);
            start[c] = cand.len() as u32;
            len[c] = buf.len() as u32;
            // Stored as f32: the threshold rounded down, so that it stays a bound. A list of
            // every head leaves nothing outside it.
            thr[c] = if t.is_finite() && buf.len() < k { (safe(t) as f32).min(t as f32) } else { f32::INFINITY };
            cand.extend(buf.iter().map(|&(h, d)| (slot_of[h as usize], d as f32)));
        };
    for c in 0..clients.len() {
        fill(c, first, &mut cand, &mut start, &mut len, &mut thr);
    }
    // Auction (module doc). A full head's `cap` members form a min-heap of (price, client)
    // in heap[s * cap ..]: a bidder for a full head pays more than the root's price and takes
    // its place; a head with room takes a bidder at no price.
    let mut a = Auction {
        cap: cap_us,
        heap: vec![(0.0, NONE); k * cap_us],
        load: vec![0; k],
        price: vec![0.0; k],
        at: vec![NONE; clients.len()],
        queue: (0..clients.len() as u32).rev().collect(),
        bids: 0,
        extended: 0,
    };
    let mut lists = Lists { cand, start, len, thr };
    a.run(&mut lists, EPS_MS, &mut |c: usize, l: &mut Lists| {
        let want = (l.len[c] as usize * 4).min(k);
        fill(c, want, &mut l.cand, &mut l.start, &mut l.len, &mut l.thr);
    });
    // Certificate: p_s = a full head's entry price, 0 for a head with room.
    let p: Vec<f64> = (0..k).map(|s| a.entry(s)).collect();
    let mut bound = -(cap as f64) * p.iter().sum::<f64>();
    let mut head_of = vec![NONE; n];
    for &h in heads {
        head_of[h as usize] = h;
    }
    let mut total = 0.0;
    for (c, &i) in clients.iter().enumerate() {
        let best =
            lists.list(c).iter().map(|&(s, d)| safe(d as f64) + p[s as usize]).fold(lists.thr[c] as f64, f64::min);
        bound += best;
        let h = heads[a.at[c] as usize];
        head_of[i as usize] = h;
        total += w.rtt_ms(i, h);
    }
    Ok(Assigned {
        head_of,
        clients: clients.len(),
        total_ms: total,
        bound_ms: bound,
        bids: a.bids,
        extended: a.extended,
    })
}

/// ε, ms: every bid is at least this much above the price it meets, and the assignment is
/// within ε per node of the optimum (module doc, "Choices").
pub const EPS_MS: f64 = 0.1;

/// Candidate lists, flat: client c's is cand[start[c]..start[c] + len[c]], as (slot, rtt);
/// a longer list is appended at the end. `thr[c]`: every head not in it is at least this far.
struct Lists {
    cand: Vec<(u32, f32)>,
    start: Vec<u32>,
    len: Vec<u32>,
    thr: Vec<f32>,
}

impl Lists {
    fn list(&self, c: usize) -> &[(u32, f32)] {
        &self.cand[self.start[c] as usize..(self.start[c] + self.len[c]) as usize]
    }
}

struct Auction {
    cap: usize,
    heap: Vec<(f64, u32)>,
    load: Vec<usize>,
    /// Every head's entry price, kept beside the heaps: a bid reads the prices of its whole
    /// candidate list, and the heaps' roots are far apart in memory.
    price: Vec<f64>,
    at: Vec<u32>,
    queue: Vec<u32>,
    bids: u64,
    extended: u64,
}

impl Auction {
    /// What a bidder pays to enter head s.
    fn entry(&self, s: usize) -> f64 {
        self.price[s]
    }

    /// Bids until every client holds a place.
    fn run(&mut self, l: &mut Lists, eps: f64, extend: &mut impl FnMut(usize, &mut Lists)) {
        while let Some(c) = self.queue.pop() {
            let c = c as usize;
            loop {
                let (mut v1, mut s1, mut v2) = (f64::INFINITY, NONE, f64::INFINITY);
                for &(s, d) in l.list(c) {
                    let v = d as f64 + self.entry(s as usize);
                    if v < v1 {
                        v2 = v1;
                        v1 = v;
                        s1 = s;
                    } else if v < v2 {
                        v2 = v;
                    }
                }
                let t = l.thr[c] as f64;
                if (v1 > t || s1 == NONE) && t.is_finite() {
                    // A head outside the list may be cheaper: look further.
                    self.extended += 1;
                    extend(c, l);
                    continue;
                }
                let s = s1 as usize;
                let v2 = v2.min(t);
                let bid = self.entry(s) + if v2.is_finite() { v2 - v1 } else { 0.0 } + eps;
                self.bids += 1;
                let h = &mut self.heap[s * self.cap..(s + 1) * self.cap];
                if self.load[s] < self.cap {
                    let at = self.load[s];
                    h[at] = (bid, c as u32);
                    up(h, at);
                    self.load[s] += 1;
                } else {
                    let old = h[0].1;
                    h[0] = (bid, c as u32);
                    down(h, 0);
                    self.at[old as usize] = NONE;
                    self.queue.push(old);
                }
                if self.load[s] == self.cap {
                    self.price[s] = self.heap[s * self.cap].0;
                }
                self.at[c] = s as u32;
                break;
            }
        }
    }
}

fn up(h: &mut [(f64, u32)], mut i: usize) {
    while i > 0 {
        let parent = (i - 1) / 2;
        if h[parent].0 <= h[i].0 {
            break;
        }
        h.swap(parent, i);
        i = parent;
    }
}

fn down(h: &mut [(f64, u32)], mut i: usize) {
    loop {
        let (l, r) = (2 * i + 1, 2 * i + 2);
        let mut m = i;
        if l < h.len() && h[l].0 < h[m].0 {
            m = l;
        }
        if r < h.len() && h[r].0 < h[m].0 {
            m = r;
        }
        if m == i {
            return;
        }
        h.swap(i, m);
        i = m;
    }
}

/// Every node's TRUE RTT to its nearest other node, exactly (a query of [`Nearest`] over all
/// nodes; `jobs` threads).
pub fn nearest_other(w: &World, geo: &Geometry, jobs: usize) -> Vec<f64> {
    let n = w.len();
    let all: Vec<u32> = (0..n as u32).collect();
    let index = Nearest::new(geo, &all);
    let mut out = vec![f64::INFINITY; n];
    let per = n.div_ceil(jobs.max(1)).max(1);
    std::thread::scope(|scope| {
        for (part, slice) in out.chunks_mut(per).enumerate() {
            let index = &index;
            scope.spawn(move || {
                let mut buf = Vec::new();
                for (k, o) in slice.iter_mut().enumerate() {
                    index.query(w, (part * per + k) as u32, 1, &mut buf);
                    *o = buf.first().map_or(f64::INFINITY, |x| x.1);
                }
            });
        }
    });
    out
}

/// A lower bound on the mean RTT of the normal nodes of ANY placement of `k` heads (any cap):
/// a normal node's head is some other node, so it pays at least its nearest-node RTT, and at
/// best the `k` nodes with the largest such RTT are the heads and pay nothing.
pub fn floor_bound(nearest: &[f64], k: usize) -> f64 {
    let n = nearest.len();
    if k >= n {
        return 0.0;
    }
    let mut v: Vec<f64> = nearest.to_vec();
    v.sort_unstable_by(|a, b| a.total_cmp(b));
    v[..n - k].iter().sum::<f64>() / (n - k) as f64
}

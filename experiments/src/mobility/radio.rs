//! The radio: who is in range of whom, and what a frame over a link costs.
//!
//! - **Range.** Two nodes are linked while they are at most `range` metres apart (the unit
//!   disk model of ns-2's two-ray ground propagation with a fixed receive threshold, the
//!   usual model of MANET simulations of the paper's time). The graph is taken from the
//!   positions every tick of the driver ([`Graph::build`], a grid of cells of side `range`, so
//!   O(N x degree)); it is the ground truth the experiment measures against.
//! - **Loss grows with distance.** One transmission attempt over `d` metres fails with
//!   probability `edge_loss x (d / range)^4`: rare close by, `edge_loss` at the edge, the
//!   fourth power being two-ray ground's path-loss exponent (received power falls as d^-4,
//!   so the signal-to-noise margin shrinks fast towards the edge).
//! - **Unicast is 802.11 DCF with acknowledgements**: a frame is tried up to [`RETRY_LIMIT`]
//!   times (dot11ShortRetryLimit); each attempt takes [`AIRTIME`] plus a random backoff of
//!   `U[0, CW] x` [`SLOT`], CW doubling from [`CW_MIN`] to [`CW_MAX`] after each failure. So
//!   delay and loss are both functions of the link's length: near the edge frames take
//!   retries (longer) and are sometimes lost after all of them. The sender learns of a frame
//!   that no attempt delivered (the missing MAC acknowledgement, as ns-2's link-layer
//!   feedback reports it to routing), including a frame to a node that moved out of range.
//! - **Broadcast is one attempt** without acknowledgement (the neighbour-discovery hellos).
//!
//! Not modelled: contention and collisions between different senders (each node has its
//! own transmit queue, see the driver), capture, and interference from nodes out of range.

use super::waypoint::Point;
use rand::Rng;
use serde::Serialize;
use std::time::Duration;

/// One attempt's airtime: a small frame at 2 Mb/s with PHY header, SIFS, the MAC
/// acknowledgement and DIFS (802.11 DSSS, the WaveLAN card of ns-2's wireless model).
pub const AIRTIME: Duration = Duration::from_micros(1_000);
/// The backoff slot of 802.11 DSSS.
pub const SLOT: Duration = Duration::from_micros(20);
/// Contention window bounds, in slots.
pub const CW_MIN: u32 = 31;
pub const CW_MAX: u32 = 1023;
/// Attempts per unicast frame.
pub const RETRY_LIMIT: u32 = 7;

/// The radio's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Radio {
    /// Metres.
    pub range: f64,
    /// Probability that one attempt fails at the edge of the range.
    pub edge_loss: f64,
}

/// What became of one unicast frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Acknowledged by the receiver.
    pub delivered: bool,
    /// Time from the first attempt's start to delivery, or to the sender giving up.
    pub airtime: Duration,
}

impl Radio {
    /// The probability that one attempt over `d` metres fails (1 out of range).
    pub fn attempt_loss(&self, d: f64) -> f64 {
        if d > self.range {
            return 1.0;
        }
        (self.edge_loss * (d / self.range).powi(4)).clamp(0.0, 1.0)
    }

    /// Send one unicast frame over `d` metres (`None`: the receiver is out of range).
    pub fn unicast(&self, d: Option<f64>, rng: &mut impl Rng) -> Frame {
        let p = d.map_or(1.0, |d| self.attempt_loss(d));
        let mut airtime = Duration::ZERO;
        let mut cw = CW_MIN;
        for _ in 0..RETRY_LIMIT {
            airtime += AIRTIME + SLOT * rng.gen_range(0..=cw);
            if p < 1.0 && !rng.gen_bool(p) {
                return Frame { delivered: true, airtime };
            }
            cw = (cw * 2 + 1).min(CW_MAX);
        }
        Frame { delivered: false, airtime }
    }

    /// Whether a broadcast over `d` metres is heard (one attempt).
    pub fn broadcast_heard(&self, d: f64, rng: &mut impl Rng) -> bool {
        let p = self.attempt_loss(d);
        p < 1.0 && !rng.gen_bool(p)
    }
}

/// Who is in range of whom at one instant: an undirected graph in CSR form, each neighbour
/// list sorted, with the distance of every link.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Graph {
    offsets: Vec<u32>,
    adj: Vec<u32>,
    dist: Vec<f32>,
}

impl Graph {
    /// The graph of `pos` in a `width x height` area: nodes at most `range` apart are linked.
    pub fn build(pos: &[Point], range: f64, width: f64, height: f64) -> Graph {
        let n = pos.len();
        let cols = ((width / range).ceil() as usize).max(1);
        let rows = ((height / range).ceil() as usize).max(1);
        let cell = |p: Point| -> (usize, usize) {
            let cx = ((p.x / range) as usize).min(cols - 1);
            let cy = ((p.y / range) as usize).min(rows - 1);
            (cx, cy)
        };
        // Counting sort of the nodes by cell.
        let mut start = vec![0u32; cols * rows + 1];
        for &p in pos {
            let (cx, cy) = cell(p);
            start[cy * cols + cx + 1] += 1;
        }
        for k in 1..start.len() {
            start[k] += start[k - 1];
        }
        let mut fill = start.clone();
        let mut members = vec![0u32; n];
        for (i, &p) in pos.iter().enumerate() {
            let (cx, cy) = cell(p);
            let c = cy * cols + cx;
            members[fill[c] as usize] = i as u32;
            fill[c] += 1;
        }
        let mut offsets = Vec::with_capacity(n + 1);
        let mut adj = Vec::new();
        let mut dist = Vec::new();
        let mut row: Vec<(u32, f32)> = Vec::new();
        offsets.push(0);
        for (i, &p) in pos.iter().enumerate() {
            let (cx, cy) = cell(p);
            row.clear();
            for y in cy.saturating_sub(1)..=(cy + 1).min(rows - 1) {
                for x in cx.saturating_sub(1)..=(cx + 1).min(cols - 1) {
                    let c = y * cols + x;
                    for &j in &members[start[c] as usize..start[c + 1] as usize] {
                        if j as usize != i {
                            let d = p.dist(pos[j as usize]);
                            if d <= range {
                                row.push((j, d as f32));
                            }
                        }
                    }
                }
            }
            row.sort_unstable_by_key(|&(j, _)| j);
            adj.extend(row.iter().map(|&(j, _)| j));
            dist.extend(row.iter().map(|&(_, d)| d));
            offsets.push(adj.len() as u32);
        }
        Graph { offsets, adj, dist }
    }

    /// `n` nodes and no link.
    pub fn empty(n: usize) -> Graph {
        Graph { offsets: vec![0; n + 1], adj: Vec::new(), dist: Vec::new() }
    }

    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of links.
    pub fn links(&self) -> usize {
        self.adj.len() / 2
    }

    pub fn neighbours(&self, i: u32) -> &[u32] {
        &self.adj[self.offsets[i as usize] as usize..self.offsets[i as usize + 1] as usize]
    }

    pub fn degree(&self, i: u32) -> usize {
        self.neighbours(i).len()
    }

    /// The neighbours of `i` with the length of each link.
    pub fn links_of(&self, i: u32) -> impl Iterator<Item = (u32, f64)> + '_ {
        let r = self.offsets[i as usize] as usize..self.offsets[i as usize + 1] as usize;
        self.adj[r.clone()].iter().zip(&self.dist[r]).map(|(&j, &d)| (j, d as f64))
    }

    /// The length of link `a`-`b`, if they are in range.
    pub fn distance(&self, a: u32, b: u32) -> Option<f64> {
        let base = self.offsets[a as usize] as usize;
        self.neighbours(a).binary_search(&b).ok().map(|k| self.dist[base + k] as f64)
    }

    /// Links that differ between `self` and `other`, each counted once (every link, if the
    /// node counts differ).
    pub fn changes_from(&self, other: &Graph) -> usize {
        if self.len() != other.len() {
            return self.links() + other.links();
        }
        let mut changed = 0;
        for i in 0..self.len() as u32 {
            let (a, b) = (self.neighbours(i), other.neighbours(i));
            let (mut x, mut y) = (0, 0);
            while x < a.len() || y < b.len() {
                match (a.get(x), b.get(y)) {
                    (Some(p), Some(q)) if p == q => {
                        x += 1;
                        y += 1;
                    }
                    (Some(p), Some(q)) if p < q => {
                        changed += (*p > i) as usize;
                        x += 1;
                    }
                    (Some(_), Some(q)) => {
                        changed += (*q > i) as usize;
                        y += 1;
                    }
                    (Some(p), None) => {
                        changed += (*p > i) as usize;
                        x += 1;
                    }
                    (None, Some(q)) => {
                        changed += (*q > i) as usize;
                        y += 1;
                    }
                    (None, None) => break,
                }
            }
        }
        changed
    }

    /// The connected component of every node, numbered from 0 in order of their lowest node.
    pub fn components(&self) -> (Vec<u32>, usize) {
        let n = self.len();
        let mut comp = vec![u32::MAX; n];
        let mut stack = Vec::new();
        let mut count = 0u32;
        for s in 0..n {
            if comp[s] != u32::MAX {
                continue;
            }
            comp[s] = count;
            stack.push(s as u32);
            while let Some(v) = stack.pop() {
                for &w in self.neighbours(v) {
                    if comp[w as usize] == u32::MAX {
                        comp[w as usize] = count;
                        stack.push(w);
                    }
                }
            }
            count += 1;
        }
        (comp, count as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn the_graph_links_exactly_the_pairs_in_range() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let pos: Vec<Point> =
            (0..300).map(|_| Point { x: rng.gen_range(0.0..1000.0), y: rng.gen_range(0.0..700.0) }).collect();
        let g = Graph::build(&pos, 120.0, 1000.0, 700.0);
        let mut links = 0;
        for a in 0..300u32 {
            for b in 0..300u32 {
                let d = pos[a as usize].dist(pos[b as usize]);
                let want = a != b && d <= 120.0;
                assert_eq!(g.distance(a, b).is_some(), want, "{a}-{b} at {d} m");
                if want {
                    links += 1;
                    assert!((g.distance(a, b).unwrap() - d).abs() < 1e-3);
                }
            }
        }
        assert_eq!(g.links() * 2, links);
        assert_eq!(g.changes_from(&g), 0);
        // Moving one node far away changes exactly its links.
        let mut moved = pos.clone();
        moved[7] = Point { x: 5000.0, y: 5000.0 };
        let h = Graph::build(&moved, 120.0, 1000.0, 700.0);
        assert_eq!(h.changes_from(&g), g.degree(7));
        assert_eq!(g.changes_from(&h), g.degree(7));
    }

    #[test]
    fn components_follow_the_links() {
        let p = |x| Point { x, y: 0.0 };
        let g = Graph::build(&[p(0.0), p(50.0), p(300.0), p(90.0), p(500.0), p(560.0)], 60.0, 1000.0, 10.0);
        let (comp, count) = g.components();
        assert_eq!(count, 3);
        assert_eq!(comp, vec![0, 0, 1, 0, 2, 2]);
    }

    #[test]
    fn loss_and_delay_grow_with_distance() {
        let radio = Radio { range: 250.0, edge_loss: 0.5 };
        assert_eq!(radio.attempt_loss(300.0), 1.0);
        assert!((radio.attempt_loss(250.0) - 0.5).abs() < 1e-12);
        assert!(radio.attempt_loss(125.0) < 0.04);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut mean = |d: Option<f64>| {
            let frames: Vec<Frame> = (0..20_000).map(|_| radio.unicast(d, &mut rng)).collect();
            let lost = frames.iter().filter(|f| !f.delivered).count() as f64 / frames.len() as f64;
            let us = frames.iter().map(|f| f.airtime.as_micros() as f64).sum::<f64>() / frames.len() as f64;
            (lost, us)
        };
        let (near_lost, near_us) = mean(Some(10.0));
        let (edge_lost, edge_us) = mean(Some(250.0));
        let (gone_lost, gone_us) = mean(None);
        assert_eq!(near_lost, 0.0);
        assert!(edge_lost > 0.002 && edge_lost < 0.02, "0.5^7 = 0.8 %, got {edge_lost}");
        assert_eq!(gone_lost, 1.0);
        assert!(near_us < edge_us && edge_us < gone_us, "{near_us} {edge_us} {gone_us}");
        // Near: one attempt, 1 ms + 15.5 slots on average.
        assert!((near_us - 1_310.0).abs() < 20.0, "{near_us}");
    }
}

//! Network topologies for the echo election (Vasudevan et al., seed 000: "the nodes in its
//! range"), stored compactly as an undirected graph in CSR form (offsets + sorted neighbour
//! lists, `u32` indices): 4 bytes per edge end plus 4 bytes per process.
//!
//! Generators (all draw from the run's one seeded RNG):
//! - [`Topology::random_regular`]: the configuration (pairing) model: every process gets
//!   `degree` stubs, stubs are shuffled and paired; self-loops and repeated pairs are dropped,
//!   so a few processes end with a slightly lower degree (the usual practical variant).
//! - [`Topology::geometric`]: a random geometric graph: processes uniform in the unit square,
//!   joined when closer than `r = sqrt(avg_degree / (pi N))` (expected degree `avg_degree`),
//!   found with a grid of cell size `r`, so building is O(N x degree).
//! - [`Topology::complete`]: every pair (small N only; for tests).
//!
//! Both random generators then make the graph connected, as the brief asks: the components
//! are found and component `c` is joined to component `c + 1` by one edge between random
//! members. That adds at most (components - 1) edges. Choice written down here because the
//! seeds do not say how the ad hoc network looks.

use rand::seq::SliceRandom;
use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// An undirected simple graph over processes `0..n`.
#[derive(Debug, Clone, Default)]
pub struct Topology {
    offsets: Vec<u32>,
    adj: Vec<u32>,
}

/// Which topology to build (command line: `regular:4`, `geometric:8`, `complete`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TopologySpec {
    RandomRegular { degree: u32 },
    Geometric { avg_degree: f64 },
    Complete,
}

/// A topology spec that did not parse or cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad topology {input:?}: {reason} (expected regular:D, geometric:D or complete)")]
pub struct TopologySpecError {
    pub input: String,
    pub reason: String,
}

impl FromStr for TopologySpec {
    type Err = TopologySpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason: &str| TopologySpecError { input: s.to_string(), reason: reason.into() };
        let t = s.trim();
        if t == "complete" {
            return Ok(TopologySpec::Complete);
        }
        let (kind, arg) = t.split_once(':').ok_or_else(|| err("missing degree"))?;
        match kind {
            "regular" => {
                let degree: u32 = arg.parse().map_err(|_| err("degree must be a whole number"))?;
                if !(1..=1000).contains(&degree) {
                    return Err(err("degree must be in 1..=1000"));
                }
                Ok(TopologySpec::RandomRegular { degree })
            }
            "geometric" => {
                let d: f64 = arg.parse().map_err(|_| err("average degree must be a number"))?;
                if !(d.is_finite() && d > 0.0 && d <= 1000.0) {
                    return Err(err("average degree must be in (0, 1000]"));
                }
                Ok(TopologySpec::Geometric { avg_degree: d })
            }
            _ => Err(err("unknown kind")),
        }
    }
}

impl fmt::Display for TopologySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopologySpec::RandomRegular { degree } => write!(f, "regular:{degree}"),
            TopologySpec::Geometric { avg_degree } => write!(f, "geometric:{avg_degree}"),
            TopologySpec::Complete => f.write_str("complete"),
        }
    }
}

impl Serialize for TopologySpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for TopologySpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

impl TopologySpec {
    /// Build the topology for `n` processes.
    pub fn build(&self, n: usize, rng: &mut dyn RngCore) -> Topology {
        match *self {
            TopologySpec::RandomRegular { degree } => Topology::random_regular(n, degree, rng),
            TopologySpec::Geometric { avg_degree } => Topology::geometric(n, avg_degree, rng),
            TopologySpec::Complete => Topology::complete(n),
        }
    }
}

impl Topology {
    /// Build from an edge list (duplicates and self-loops dropped).
    pub fn from_edges(n: usize, edges: &[(u32, u32)]) -> Topology {
        let mut deg = vec![0u32; n + 1];
        for &(a, b) in edges {
            if a != b {
                deg[a as usize] += 1;
                deg[b as usize] += 1;
            }
        }
        let mut offsets = vec![0u32; n + 1];
        for i in 0..n {
            offsets[i + 1] = offsets[i] + deg[i];
        }
        let mut fill = offsets.clone();
        let mut adj = vec![0u32; offsets[n] as usize];
        for &(a, b) in edges {
            if a != b {
                adj[fill[a as usize] as usize] = b;
                fill[a as usize] += 1;
                adj[fill[b as usize] as usize] = a;
                fill[b as usize] += 1;
            }
        }
        // Sort and deduplicate each list, then compact.
        let mut out_off = vec![0u32; n + 1];
        let mut out = Vec::with_capacity(adj.len());
        for i in 0..n {
            let list = &mut adj[offsets[i] as usize..offsets[i + 1] as usize];
            list.sort_unstable();
            let mut last = None;
            for &v in list.iter() {
                if Some(v) != last {
                    out.push(v);
                    last = Some(v);
                }
            }
            out_off[i + 1] = out.len() as u32;
        }
        Topology { offsets: out_off, adj: out }
    }

    /// Every pair of processes.
    pub fn complete(n: usize) -> Topology {
        let mut edges = Vec::new();
        for a in 0..n as u32 {
            for b in a + 1..n as u32 {
                edges.push((a, b));
            }
        }
        Topology::from_edges(n, &edges)
    }

    /// The configuration model with `degree` stubs per process, then made connected.
    pub fn random_regular(n: usize, degree: u32, rng: &mut dyn RngCore) -> Topology {
        let d = (degree as usize).min(n.saturating_sub(1));
        let mut stubs: Vec<u32> = (0..n as u32).flat_map(|i| std::iter::repeat_n(i, d)).collect();
        stubs.shuffle(rng);
        let edges: Vec<(u32, u32)> = stubs.chunks_exact(2).map(|c| (c[0], c[1])).collect();
        let mut edges = edges;
        connect_components(n, &mut edges, rng);
        Topology::from_edges(n, &edges)
    }

    /// A random geometric graph in the unit square with expected degree `avg_degree`, then
    /// made connected.
    pub fn geometric(n: usize, avg_degree: f64, rng: &mut dyn RngCore) -> Topology {
        if n < 2 {
            return Topology::from_edges(n, &[]);
        }
        let r = (avg_degree / (std::f64::consts::PI * n as f64)).sqrt().min(1.5);
        let pts: Vec<(f64, f64)> = (0..n).map(|_| (rng.gen::<f64>(), rng.gen::<f64>())).collect();
        let cells = ((1.0 / r).floor() as usize).clamp(1, 4096);
        let cell = |x: f64| ((x * cells as f64) as usize).min(cells - 1);
        let mut grid: Vec<Vec<u32>> = vec![Vec::new(); cells * cells];
        for (i, &(x, y)) in pts.iter().enumerate() {
            grid[cell(y) * cells + cell(x)].push(i as u32);
        }
        let mut edges = Vec::new();
        let r2 = r * r;
        for (i, &(x, y)) in pts.iter().enumerate() {
            let (cx, cy) = (cell(x) as isize, cell(y) as isize);
            for dy in -1..=1isize {
                for dx in -1..=1isize {
                    let (gx, gy) = (cx + dx, cy + dy);
                    if gx < 0 || gy < 0 || gx >= cells as isize || gy >= cells as isize {
                        continue;
                    }
                    for &j in &grid[gy as usize * cells + gx as usize] {
                        if (j as usize) <= i {
                            continue;
                        }
                        let (px, py) = pts[j as usize];
                        if (px - x).powi(2) + (py - y).powi(2) <= r2 {
                            edges.push((i as u32, j));
                        }
                    }
                }
            }
        }
        connect_components(n, &mut edges, rng);
        Topology::from_edges(n, &edges)
    }

    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Number of undirected edges.
    pub fn edges(&self) -> usize {
        self.adj.len() / 2
    }
    /// Neighbours of `i`, ascending.
    #[inline]
    pub fn neighbours(&self, i: u32) -> &[u32] {
        let i = i as usize;
        if i + 1 >= self.offsets.len() {
            return &[];
        }
        &self.adj[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
    /// True if `a` and `b` are joined.
    #[inline]
    pub fn has_edge(&self, a: u32, b: u32) -> bool {
        self.neighbours(a).binary_search(&b).is_ok()
    }
    /// Component label of every process, counting only processes with `keep(i)` and edges
    /// with `edge_ok(a, b)`; dropped processes get `u32::MAX`.
    pub fn components(&self, keep: impl Fn(u32) -> bool, edge_ok: impl Fn(u32, u32) -> bool) -> Vec<u32> {
        let n = self.len();
        let mut label = vec![u32::MAX; n];
        let mut next = 0u32;
        let mut stack = Vec::new();
        for s in 0..n as u32 {
            if label[s as usize] != u32::MAX || !keep(s) {
                continue;
            }
            label[s as usize] = next;
            stack.push(s);
            while let Some(u) = stack.pop() {
                for &v in self.neighbours(u) {
                    if label[v as usize] == u32::MAX && keep(v) && edge_ok(u, v) {
                        label[v as usize] = next;
                        stack.push(v);
                    }
                }
            }
            next += 1;
        }
        label
    }
    /// Bytes used by the graph.
    pub fn heap_bytes(&self) -> usize {
        (self.offsets.capacity() + self.adj.capacity()) * 4
    }
}

/// Join component `c` to component `c + 1` with one random edge each, until connected.
fn connect_components(n: usize, edges: &mut Vec<(u32, u32)>, rng: &mut dyn RngCore) {
    if n < 2 {
        return;
    }
    let g = Topology::from_edges(n, edges);
    let label = g.components(|_| true, |_, _| true);
    let comps = label.iter().copied().max().map_or(0, |m| m as usize + 1);
    if comps <= 1 {
        return;
    }
    let mut members: Vec<Vec<u32>> = vec![Vec::new(); comps];
    for (i, &c) in label.iter().enumerate() {
        members[c as usize].push(i as u32);
    }
    for c in 0..comps - 1 {
        let a = members[c][rng.gen_range(0..members[c].len())];
        let b = members[c + 1][rng.gen_range(0..members[c + 1].len())];
        edges.push((a, b));
    }
}

/// The largest BFS distance from `src` (a lower bound on the diameter, at least half of it).
pub fn eccentricity(t: &Topology, src: u32) -> u32 {
    let n = t.len();
    if n == 0 {
        return 0;
    }
    let mut dist = vec![u32::MAX; n];
    let mut q = std::collections::VecDeque::new();
    dist[src as usize] = 0;
    q.push_back(src);
    let mut far = 0;
    while let Some(u) = q.pop_front() {
        let d = dist[u as usize];
        far = far.max(d);
        for &v in t.neighbours(u) {
            if dist[v as usize] == u32::MAX {
                dist[v as usize] = d + 1;
                q.push_back(v);
            }
        }
    }
    far
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn connected(t: &Topology) -> bool {
        t.components(|_| true, |_, _| true).iter().all(|&c| c == 0)
    }

    #[test]
    fn regular_is_connected_simple_and_near_degree() {
        for seed in 0..20 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let n = 3 + seed as usize * 7;
            let t = Topology::random_regular(n, 4, &mut rng);
            assert_eq!(t.len(), n);
            assert!(connected(&t), "seed {seed}");
            for i in 0..n as u32 {
                assert!(!t.neighbours(i).contains(&i));
                for &j in t.neighbours(i) {
                    assert!(t.has_edge(j, i));
                }
            }
            let avg = 2.0 * t.edges() as f64 / n as f64;
            assert!(avg <= 4.5, "avg degree {avg}");
            if n >= 20 {
                assert!(avg >= 3.5, "avg degree {avg}");
            }
        }
    }

    #[test]
    fn geometric_is_connected() {
        for seed in 0..10 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let t = Topology::geometric(500, 6.0, &mut rng);
            assert!(connected(&t));
            let avg = 2.0 * t.edges() as f64 / 500.0;
            assert!(avg > 3.0 && avg < 9.0, "avg degree {avg}");
        }
    }

    #[test]
    fn specs_parse_and_components_respect_filters() {
        assert_eq!("regular:4".parse(), Ok(TopologySpec::RandomRegular { degree: 4 }));
        assert_eq!("complete".parse(), Ok(TopologySpec::Complete));
        for bad in ["regular:0", "regular:x", "geometric:-1", "ring:3", "regular"] {
            assert!(bad.parse::<TopologySpec>().is_err(), "{bad}");
        }
        // A path 0-1-2-3; dropping 1 splits it.
        let t = Topology::from_edges(4, &[(0, 1), (1, 2), (2, 3), (2, 3)]);
        assert_eq!(t.edges(), 3);
        let l = t.components(|i| i != 1, |_, _| true);
        assert_eq!(l[1], u32::MAX);
        assert_ne!(l[0], l[2]);
        assert_eq!(l[2], l[3]);
        let l = t.components(|_| true, |a, b| !(a.min(b) == 2 && a.max(b) == 3));
        assert_eq!(l[0], l[2]);
        assert_ne!(l[2], l[3]);
    }
}

//! The per-node rows of `peerage swarm --superpeers`, in the columns of the lab's node and
//! pair files (`overlay::superpeer::record`, written with `peerage-records`), so that
//! `scripts/swarm_superpeers_check.py` recomputes the report's placement figures from them.
//!
//! One [`Placement`] per measurement ([`super::report::measure`], from the same status
//! snapshots as the figures): at convergence, and after the kill when there is one.
//! - One [`NodeRow`] per live node (a crashed node has none). `id` and `head` are node
//!   indices: node i of the swarm is node i of the latency model. `role`: `head` (a super
//!   peer, or with tokens a provisional holder), `member` (attached to a node that is a head
//!   now) or `unattached`. `rtt_true_ms`: the latency model's RTT to the head (empty without
//!   latency emulation); `rtt_pred_ms`: what the node's super-peer point and its head's
//!   predict; `rtt_measured_ms`: the node's last ping to its head; `cluster_size`: the members
//!   naming the head; `nearest_head_ms` (every head, with the model): the TRUE RTT to the
//!   nearest other head. The coordinate is the super-peer point (components and height, ms),
//!   NaN where a node reports no valid point.
//! - [`PairRow`]s behind the Vivaldi error (with the model only): the pairs of live nodes
//!   with a point, in index order, every k-th so that at most [`MAX_PAIRS`] are kept
//!   (deterministic, as in `node/src/coords/report.rs`); TRUE RTT from the model, predicted
//!   from the two points. The report's `vivaldi_err_p50`/`_p90` are their nearest-rank
//!   percentiles of the relative error ([`PairRow::relative_error`]).
//!
//! Files beside the report `STEM.json` (N nodes, seed S): `STEM_nN_sS_nodes.csv.gz` and
//! `STEM_nN_sS_pairs.csv.gz` at convergence, `STEM_nN_sS_nodes_after_kill.csv.gz` and
//! `STEM_nN_sS_pairs_after_kill.csv.gz` after the kill.

use crate::coords::report::sampled_pairs;
use crate::net::latency_transport::LatencyNet;
use crate::superpeer::report::SuperPeerReport;
use overlay::superpeer::record::{NodeRow, PairRow, Role};
use overlay::superpeer::Point;
use peerage_records::CsvGz;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Most Vivaldi pairs kept per placement.
pub const MAX_PAIRS: usize = 20_000;

const _: () = assert!(overlay::superpeer::point::DIMS == overlay::superpeer::record::COORD_DIMS);

/// The rows of one measurement (module doc).
#[derive(Debug, Clone, Default)]
pub struct Placement {
    pub nodes: Vec<NodeRow>,
    pub pairs: Vec<PairRow>,
}

/// What one node's row is made of, besides the points and the model.
pub struct NodeFacts {
    pub index: usize,
    /// The head's index (the node's own for a head); `None` when unattached.
    pub head: Option<usize>,
    pub measured_ms: Option<f64>,
    pub cluster_size: Option<u64>,
    pub nearest_head_ms: Option<f64>,
}

/// One node's row (module doc).
pub fn node_row(f: NodeFacts, points: &HashMap<usize, Point>, net: Option<&LatencyNet>) -> NodeRow {
    let i = f.index;
    let role = match f.head {
        None => Role::Unattached,
        Some(h) if h == i => Role::Head,
        Some(_) => Role::Member,
    };
    let member_head = f.head.filter(|_| role == Role::Member);
    let mut row = NodeRow {
        rtt_true_ms: member_head.and_then(|h| net.map(|n| n.model().rtt_ms(i, h))),
        rtt_pred_ms: member_head
            .and_then(|h| Some(1000.0 * points.get(&i)?.rtt(points.get(&h)?)))
            .filter(|v| v.is_finite()),
        rtt_measured_ms: f.measured_ms.filter(|_| role == Role::Member),
        cluster_size: f.cluster_size.filter(|_| role != Role::Unattached),
        nearest_head_ms: f.nearest_head_ms.filter(|_| role == Role::Head),
        ..NodeRow::new(i.to_string(), role, f.head.map(|h| h.to_string()))
    };
    match points.get(&i) {
        Some(p) => {
            let x: Vec<f64> = p.x.iter().map(|&v| 1000.0 * f64::from(v)).collect();
            row.set_coord(&x, 1000.0 * f64::from(p.h));
        }
        None => row.set_coord(&[f64::NAN; overlay::superpeer::record::COORD_DIMS], f64::NAN),
    }
    row
}

/// The Vivaldi pairs over the nodes with a point (module doc).
pub fn pairs(net: &LatencyNet, points: &HashMap<usize, Point>) -> Vec<PairRow> {
    let mut with: Vec<(usize, &Point)> = points.iter().map(|(i, p)| (*i, p)).collect();
    with.sort_by_key(|(i, _)| *i);
    sampled_pairs(with.len(), MAX_PAIRS)
        .map(|(x, y)| {
            let ((a, pa), (b, pb)) = (with[x], with[y]);
            PairRow {
                a: a.to_string(),
                b: b.to_string(),
                rtt_true_ms: net.model().rtt_ms(a, b),
                rtt_pred_ms: 1000.0 * pa.rtt(pb),
            }
        })
        .collect()
}

/// The path of one file beside the report `out` (module doc).
pub fn path(out: &Path, n: usize, seed: u64, what: &str) -> PathBuf {
    let mut s = out.with_extension("").into_os_string();
    s.push(format!("_n{n}_s{seed}_{what}.csv.gz"));
    PathBuf::from(s)
}

fn write_rows<T: serde::Serialize>(path: &Path, rows: &[T]) -> anyhow::Result<()> {
    let mut out = CsvGz::create(path)?;
    for r in rows {
        out.row(r)?;
    }
    out.finish()?;
    Ok(())
}

/// Writes the report's placements beside `out` and returns the files written.
pub fn write(out: &Path, n: usize, seed: u64, report: &SuperPeerReport) -> anyhow::Result<Vec<PathBuf>> {
    let mut phases = vec![("", &report.at_convergence.placement)];
    if let Some(k) = &report.kill {
        phases.push(("_after_kill", &k.after.placement));
    }
    let mut written = Vec::new();
    for (suffix, p) in phases {
        let nodes = path(out, n, seed, &format!("nodes{suffix}"));
        write_rows(&nodes, &p.nodes)?;
        written.push(nodes);
        let pairs = path(out, n, seed, &format!("pairs{suffix}"));
        write_rows(&pairs, &p.pairs)?;
        written.push(pairs);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_carry_n_and_seed() {
        let p = path(Path::new("out/r.json"), 30, 7, "nodes_after_kill");
        assert_eq!(p, PathBuf::from("out/r_n30_s7_nodes_after_kill.csv.gz"));
        assert_eq!(path(Path::new("r"), 1, 2, "pairs"), PathBuf::from("r_n1_s2_pairs.csv.gz"));
    }

    #[test]
    fn rows_by_role_and_pairs_from_the_model() {
        let net = LatencyNet::internet(4, 3).unwrap();
        let points: HashMap<usize, Point> =
            [(0, Point::new(&[0.0], 0.001)), (1, Point::new(&[0.010], 0.002)), (2, Point::new(&[0.020], 0.0))]
                .into_iter()
                .collect();
        let facts = |index, head, size| NodeFacts {
            index,
            head,
            measured_ms: Some(9.0),
            cluster_size: size,
            nearest_head_ms: Some(5.0),
        };
        let head = node_row(facts(0, Some(0), Some(1)), &points, Some(&net));
        assert_eq!((head.role, head.rtt_true_ms, head.rtt_measured_ms), (Role::Head, None, None));
        assert_eq!((head.cluster_size, head.nearest_head_ms), (Some(1), Some(5.0)));
        let member = node_row(facts(1, Some(0), Some(1)), &points, Some(&net));
        assert_eq!(member.role, Role::Member);
        assert_eq!(member.rtt_true_ms, Some(net.model().rtt_ms(1, 0)));
        assert!((member.rtt_pred_ms.unwrap() - 13.0).abs() < 1e-3);
        assert_eq!((member.rtt_measured_ms, member.nearest_head_ms), (Some(9.0), None));
        assert!((member.x0 - 10.0).abs() < 1e-3 && (member.height_ms - 2.0).abs() < 1e-3);
        let lone = node_row(facts(3, None, None), &points, None);
        assert_eq!((lone.role, lone.head, lone.cluster_size), (Role::Unattached, None, None));
        assert!(lone.x0.is_nan() && lone.height_ms.is_nan());
        let ps = pairs(&net, &points);
        assert_eq!(ps.len(), 3);
        assert_eq!((ps[0].a.as_str(), ps[0].b.as_str()), ("0", "1"));
        assert_eq!(ps[2].rtt_true_ms, net.model().rtt_ms(1, 2));
    }
}

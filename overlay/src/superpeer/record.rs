//! The rows of the per-node files a super-peer placement is written as, by the lab
//! (`peerage-lab superpeers`) and by the node (`peerage swarm --superpeers`), so that both
//! write the same columns and one script reads both.
//!
//! A placement is one [`NodeRow`] per node: who the node is, its role, its head, the TRUE and
//! the predicted RTT to that head, its Vivaldi coordinate and the size of its cluster. The
//! pairs behind a Vivaldi error figure are [`PairRow`]s. Only the rows live here (serde data,
//! no I/O); both binaries write them as gzipped CSV with the `peerage-records` crate.

use serde::{Deserialize, Serialize};

/// Euclidean components of a coordinate in a [`NodeRow`] (Peerage's Vivaldi space).
pub const COORD_DIMS: usize = 8;

/// A node's role in a placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A cluster head (super peer): its own head, with `cluster_size` members.
    Head,
    /// A normal node attached to a head.
    Member,
    /// A normal node attached to no live head.
    Unattached,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Head => "head",
            Role::Member => "member",
            Role::Unattached => "unattached",
        }
    }
}

/// One node of a placement. Times in milliseconds; empty cells where a value does not apply
/// (a head has no RTT to a head, an unattached node no cluster).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeRow {
    /// The node: its index in the lab's simulated world, or in the swarm (and its latency model).
    pub id: String,
    pub role: Role,
    /// Its head: itself for a head, empty when unattached.
    pub head: Option<String>,
    /// TRUE RTT to the head (the latency model's, or a measured one), members only.
    pub rtt_true_ms: Option<f64>,
    /// RTT to the head predicted by the two Vivaldi coordinates, members only.
    pub rtt_pred_ms: Option<f64>,
    /// RTT the node itself last measured to its head (ping), members only; empty where
    /// nothing was measured (the lab's placements).
    pub rtt_measured_ms: Option<f64>,
    /// Members of the node's cluster (a head's own count), empty when unattached.
    pub cluster_size: Option<u64>,
    /// TRUE RTT from a head to the nearest other head; only for the heads the summary
    /// sampled for its "nearest super peer" figure, empty elsewhere.
    pub nearest_head_ms: Option<f64>,
    /// The Vivaldi coordinate: Euclidean components and height, ms.
    pub x0: f64,
    pub x1: f64,
    pub x2: f64,
    pub x3: f64,
    pub x4: f64,
    pub x5: f64,
    pub x6: f64,
    pub x7: f64,
    pub height_ms: f64,
}

impl NodeRow {
    /// A row of `role` naming `head`: no RTTs, no cluster, the coordinate at the origin.
    pub fn new(id: String, role: Role, head: Option<String>) -> NodeRow {
        NodeRow {
            id,
            role,
            head,
            rtt_true_ms: None,
            rtt_pred_ms: None,
            rtt_measured_ms: None,
            cluster_size: None,
            nearest_head_ms: None,
            x0: 0.0,
            x1: 0.0,
            x2: 0.0,
            x3: 0.0,
            x4: 0.0,
            x5: 0.0,
            x6: 0.0,
            x7: 0.0,
            height_ms: 0.0,
        }
    }

    /// Sets the coordinate from its components (ms; missing ones are 0, extra ones ignored)
    /// and height (ms).
    pub fn set_coord(&mut self, x: &[f64], height_ms: f64) {
        let c = |i: usize| x.get(i).copied().unwrap_or(0.0);
        (self.x0, self.x1, self.x2, self.x3) = (c(0), c(1), c(2), c(3));
        (self.x4, self.x5, self.x6, self.x7) = (c(4), c(5), c(6), c(7));
        self.height_ms = height_ms;
    }

    /// The coordinate's Euclidean components, ms.
    pub fn coord(&self) -> [f64; COORD_DIMS] {
        [self.x0, self.x1, self.x2, self.x3, self.x4, self.x5, self.x6, self.x7]
    }
}

/// One sampled pair behind a Vivaldi error figure: the TRUE RTT and the RTT the two
/// coordinates predict, ms. The relative error is `|pred - true| / max(true, 0.001)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairRow {
    pub a: String,
    pub b: String,
    pub rtt_true_ms: f64,
    pub rtt_pred_ms: f64,
}

impl PairRow {
    pub fn relative_error(&self) -> f64 {
        (self.rtt_pred_ms - self.rtt_true_ms).abs() / self.rtt_true_ms.max(1e-3)
    }
}

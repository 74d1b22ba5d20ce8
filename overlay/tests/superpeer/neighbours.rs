//! A node keeps the `neighbours` nearest of the peers its driver reports (`overlay::superpeer`
//! module doc, step 3, "Nearest neighbours"): a real node is told of whichever
//! peers it happens to be connected to, and keeping the first ones left its cache gossip
//! with peers anywhere. Deterministic: one node fed by hand.

use overlay::superpeer::{PeerInfo, SpInput, SuperPeerConfig, SuperPeerNode};
use overlay::NodeId;
use std::sync::Arc;

use crate::common;
use crate::common::{at, step};

fn ids(node: &SuperPeerNode) -> Vec<NodeId> {
    node.neighbours().iter().map(|n| n.id).collect()
}

#[test]
fn a_full_neighbour_set_takes_a_nearer_peer_in_place_of_the_farthest() {
    let seed = common::seed(13);
    let (mut rng, id) = common::seeded_ids(seed, 8);
    let cfg = common::with(SuperPeerConfig::default(), |c| {
        c.discovery.neighbours = 3;
    });
    let mut node = SuperPeerNode::new(id[0], at(0.0, 0.0), Arc::new(cfg));
    let mut up = |node: &mut SuperPeerNode, i: usize, x: f64| {
        step(node, &mut rng, 0, SpInput::PeerUp(PeerInfo { id: id[i], point: at(x, 0.0) }));
    };
    // Three far peers fill the set, nearest first.
    up(&mut node, 1, 0.090);
    up(&mut node, 2, 0.050);
    up(&mut node, 3, 0.070);
    assert_eq!(ids(&node), vec![id[2], id[3], id[1]]);
    // A peer farther than all of them is not kept; a nearer one replaces the farthest.
    up(&mut node, 4, 0.120);
    assert_eq!(ids(&node), vec![id[2], id[3], id[1]]);
    up(&mut node, 5, 0.010);
    assert_eq!(ids(&node), vec![id[5], id[2], id[3]]);
    // A kept neighbour that moves is re-ranked (and may then lose its place to a newcomer).
    up(&mut node, 5, 0.100);
    assert_eq!(ids(&node), vec![id[2], id[3], id[5]]);
    up(&mut node, 6, 0.080);
    assert_eq!(ids(&node), vec![id[2], id[3], id[6]]);
    // A report of this node itself or a bad point changes nothing.
    step(&mut node, &mut rng, 0, SpInput::PeerUp(PeerInfo { id: id[0], point: at(0.001, 0.0) }));
    assert_eq!(ids(&node), vec![id[2], id[3], id[6]]);
}

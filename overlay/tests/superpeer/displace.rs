//! Displacement (`overlay::superpeer::displace`): a full head gives the place of its least
//! regretful member to a bidder that saves more than that member loses, and its price, which
//! only rises, ends the displacements. One holder fed by hand; ids seeded (`PEERAGE_SEED`
//! replays).

use crate::common::{self, at, hand_token, seeded_ids, Fed};
use overlay::superpeer::{PeerInfo, SpEffect, SpInput, SpMessage, SuperPeerConfig, SuperPeerNode};
use overlay::NodeId;
use std::sync::Arc;

fn seed() -> u64 {
    common::seed(11)
}

/// A holder at the origin whose cluster (cap 4) is full with four members, and four
/// outsiders.
fn full_holder(seed: u64) -> (Fed, Vec<PeerInfo>, Vec<PeerInfo>) {
    let cfg = common::with(SuperPeerConfig::default(), |c| c.cluster_cap = 4);
    let (rng, ids) = seeded_ids(seed, 9);
    let node = SuperPeerNode::new(ids[0], at(0.0, 0.0), Arc::new(cfg));
    let mut h = Fed { rng, now: 0, node };
    h.feed(SpInput::NearestRtt { rtt: 0.001 });
    h.feed(SpInput::Start);
    let spot = |i: usize| at(0.002 * i as f64, 0.001);
    let members: Vec<PeerInfo> = (1..5).map(|i| PeerInfo { id: ids[i], point: spot(i) }).collect();
    let outsiders: Vec<PeerInfo> = (5..9).map(|i| PeerInfo { id: ids[i], point: spot(i) }).collect();
    let now = h.now;
    hand_token(&mut h.node, &mut h.rng, now, members[3].id, members.clone(), Vec::new());
    assert_eq!(h.node.members().len(), 4);
    (h, members, outsiders)
}

fn bid(h: &mut Fed, who: PeerInfo, gain: f32) -> Vec<SpEffect> {
    h.feed(SpInput::Message { from: who.id, msg: SpMessage::Bid { point: who.point, gain } })
}

fn regret(h: &mut Fed, who: NodeId, loss: Option<f32>) -> Vec<SpEffect> {
    h.feed(SpInput::Message { from: who, msg: SpMessage::Regret { loss } })
}

fn sent(fx: &[SpEffect], to: NodeId, kind: &str) -> bool {
    fx.iter().any(|e| matches!(e, SpEffect::Send { to: t, msg } if *t == to && msg.kind() == kind))
}

fn has(h: &Fed, id: NodeId) -> bool {
    h.node.members().iter().any(|m| m.id == id)
}

#[test]
fn a_full_head_gives_the_least_regretful_place_to_a_bid_that_saves_more() {
    let (mut h, m, out) = full_holder(seed());
    regret(&mut h, m[0].id, Some(0.0005));
    regret(&mut h, m[1].id, Some(0.0002));
    regret(&mut h, m[2].id, Some(0.0300));
    // m[3] reported nothing: it is never displaced.
    let fx = bid(&mut h, out[0], 0.004);
    assert!(sent(&fx, m[1].id, "displaced") && sent(&fx, out[0].id, "accept"), "{fx:?}");
    assert!(has(&h, out[0].id) && !has(&h, m[1].id));
    assert_eq!(h.node.members().len(), 4, "over the cap");
    // The price is now 4 ms: m[0]'s regret (0.5 ms) would allow 4.5 ms, the price does not.
    let fx = bid(&mut h, out[1], 0.0045);
    assert!(
        sent(&fx, out[1].id, "refuse-full")
            && !fx.iter().any(|e| matches!(e, SpEffect::Send { msg: SpMessage::Displaced, .. })),
        "{fx:?}"
    );
    // A bid above price and margin displaces the next least regretful member.
    let fx = bid(&mut h, out[2], 0.0052);
    assert!(sent(&fx, m[0].id, "displaced") && sent(&fx, out[2].id, "accept"), "{fx:?}");
    // Left: m[2] (30 ms of regret) and m[3] (none reported), and the two bidders (none
    // reported): a bid of 20 ms displaces nobody.
    let fx = bid(&mut h, out[3], 0.020);
    assert!(sent(&fx, out[3].id, "refuse-full"), "{fx:?}");
    assert_eq!(h.node.members().len(), 4);
}

#[test]
fn a_plain_attach_and_a_small_gain_are_refused_as_before() {
    let (mut h, m, out) = full_holder(seed());
    regret(&mut h, m[0].id, Some(0.002));
    let fx = h.feed(SpInput::Message { from: out[0].id, msg: SpMessage::Attach { point: out[0].point } });
    assert!(sent(&fx, out[0].id, "refuse-full"), "{fx:?}");
    // 2 ms of regret and 1 ms of margin: a 2.9 ms gain is not enough.
    let fx = bid(&mut h, out[1], 0.0029);
    assert!(sent(&fx, out[1].id, "refuse-full"), "{fx:?}");
    assert!(has(&h, m[0].id));
}

#[test]
fn withdrawn_stray_and_bad_claims_are_survived() {
    let (mut h, m, out) = full_holder(seed());
    // A withdrawn regret no longer counts.
    regret(&mut h, m[0].id, Some(0.0001));
    regret(&mut h, m[0].id, None);
    assert!(sent(&bid(&mut h, out[0], 0.010), out[0].id, "refuse-full"));
    // A regret from a node that is no member is not kept.
    regret(&mut h, out[1].id, Some(0.0));
    assert!(sent(&bid(&mut h, out[2], 0.010), out[2].id, "refuse-full"));
    // Out-of-range claims are refused with a reason, and change nothing.
    for bad in [f32::NAN, f32::INFINITY, -1.0, 1e9] {
        let fx = regret(&mut h, m[1].id, Some(bad));
        assert!(fx.iter().any(|e| matches!(e, SpEffect::Rejected { .. })), "{bad}: {fx:?}");
        let fx = bid(&mut h, out[3], bad);
        assert!(fx.iter().any(|e| matches!(e, SpEffect::Rejected { .. })), "{bad}: {fx:?}");
        assert!(!fx.iter().any(|e| matches!(e, SpEffect::Send { .. })), "{bad}: {fx:?}");
    }
    assert!(sent(&bid(&mut h, out[3], 0.010), out[3].id, "refuse-full"));
    assert_eq!(h.node.members().len(), 4);
}

#[test]
fn a_head_with_room_takes_a_bid_as_an_attach() {
    let (mut h, m, out) = full_holder(seed());
    h.feed(SpInput::Message { from: m[0].id, msg: SpMessage::Detach });
    let fx = bid(&mut h, out[0], 0.0001);
    assert!(sent(&fx, out[0].id, "accept"), "{fx:?}");
    assert!(!fx.iter().any(|e| matches!(e, SpEffect::Send { msg: SpMessage::Displaced, .. })));
}

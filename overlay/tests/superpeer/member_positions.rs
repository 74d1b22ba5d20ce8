//! A head prices its token's moves with its members' current positions (module
//! doc of `overlay::superpeer::node`, step 4, "Members' positions are kept fresh").
//!
//! A head knew a member's position from its `Attach`, minutes old in a settled cluster, and
//! its own from now; the coordinates of a real swarm keep moving, and in the 200-node tokens
//! swarm two holders priced the same cluster differently, each seeing the other 3-20 %
//! cheaper. The node driver reports every peer's current position as it learns it
//! (`SpInput::PeerUp`); that report now also refreshes the member's entry.
//!
//! Here one node B is fed by hand: it takes a token from A with four members that attached
//! around A. Deterministic; the ids come from a seeded RNG (`PEERAGE_SEED` replays).

use overlay::superpeer::{Method, PeerInfo, Point, SpEffect, SpInput, SpMessage, SuperPeerConfig, SuperPeerNode};
use std::sync::Arc;

use crate::common;

use crate::common::{at, hand_token, handovers, seeded_ids, Fed as Node};

/// B at (5 ms, 0) takes token 7 from A at the origin, with four members 10 ms around the
/// origin. Every node reports the same nearest RTT, so the access term ranks nobody apart:
/// by these positions A is the best head (predicted mean RTT 11.0 ms against B's 11.5 ms).
/// Returns B and the members.
fn setup(seed: u64) -> (Node, Vec<PeerInfo>, SuperPeerConfig) {
    let (rng, ids) = seeded_ids(seed, 6);
    let cfg = SuperPeerConfig { method: Method::RepulsionTokens, ..Default::default() };
    cfg.validate().unwrap();
    let b = SuperPeerNode::new(ids[0], at(0.005, 0.0), Arc::new(cfg.clone()));
    let mut b = Node { rng, now: 0, node: b };
    b.feed(SpInput::NearestRtt { rtt: 0.001 });
    b.feed(SpInput::Start);
    let spots = [(0.010, 0.0), (-0.010, 0.0), (0.0, 0.010), (0.0, -0.010)];
    let members: Vec<PeerInfo> =
        (0..4).map(|i| PeerInfo { id: ids[1 + i], point: at(spots[i].0, spots[i].1) }).collect();
    let a = PeerInfo { id: ids[5], point: at(0.0, 0.0) };
    let mut handed = members.clone();
    handed.push(a);
    let now = b.now;
    hand_token(&mut b.node, &mut b.rng, now, a.id, handed.clone(), Vec::new());
    for m in &handed {
        b.feed(SpInput::Message { from: m.id, msg: SpMessage::Access { nearest_rtt: 0.001 } });
    }
    (b, members, cfg)
}

#[test]
fn a_members_new_position_replaces_the_one_it_attached_with() {
    let seed = common::seed(23);
    let (mut b, members, _) = setup(seed);
    let m = members[2];
    let moved = at(0.0, 0.004);
    b.feed(SpInput::PeerUp(PeerInfo { id: m.id, point: moved }));
    let held = b.node.members().iter().find(|x| x.id == m.id).map(|x| x.point);
    assert_eq!(held, Some(moved), "the head kept the member's old position (seed {seed})");
    // A peer that is not a member does not become one by reporting its position.
    let (_, other) = seeded_ids(seed.wrapping_add(1), 1);
    let before = b.node.members().len();
    b.feed(SpInput::PeerUp(PeerInfo { id: other[0], point: at(0.001, 0.001) }));
    assert_eq!(b.node.members().len(), before, "a neighbour's position made it a member (seed {seed})");
    // A bad position is not taken.
    let bad = Point::new(&[f64::NAN, 0.0], 0.001);
    b.feed(SpInput::PeerUp(PeerInfo { id: m.id, point: bad }));
    let held = b.node.members().iter().find(|x| x.id == m.id).map(|x| x.point);
    assert_eq!(held, Some(moved), "a bad position replaced the member's (seed {seed})");
}

#[test]
fn the_token_goes_where_the_members_are_now() {
    // By the positions the members attached with, the token goes back to A at once.
    let seed = common::seed(23);
    let (mut b, _, _) = setup(seed);
    let moved = handovers(&b.tick());
    assert_eq!(moved.len(), 1, "control: the token did not move by the members' old positions (seed {seed})");
    // The members are now around (5 ms, 0), where B is: B is the best head by their current
    // positions and keeps the token past the hold time.
    let (mut b, members, cfg) = setup(seed);
    for m in &members {
        let p = Point::new(&[m.point.x[0] as f64 + 0.005, m.point.x[1] as f64], 0.001);
        b.feed(SpInput::PeerUp(PeerInfo { id: m.id, point: p }));
    }
    for r in 1..=cfg.tokens.hold_rounds + 3 {
        let moved = handovers(&b.tick());
        assert!(moved.is_empty(), "round {r}: the token moved ({moved:?}) by the members' old positions (seed {seed})");
    }
}

#[test]
fn a_move_records_what_it_was_priced_on() {
    // The control's move to A, with the record the driver logs (`SpEffect::TokenMovePriced`).
    let seed = common::seed(23);
    let (mut b, members, cfg) = setup(seed);
    let fx = b.tick();
    let moved = handovers(&fx);
    assert_eq!(moved.len(), 1, "no move (seed {seed})");
    let priced: Vec<_> = fx
        .iter()
        .filter_map(|e| match e {
            SpEffect::TokenMovePriced(r) => Some((r.to, r.here, r.there, r.radius, r.members, r.reports, r.needed)),
            _ => None,
        })
        .collect();
    let [(to, here, there, radius, n, reports, needed)] = priced[..] else {
        panic!("{} move records for one move (seed {seed}): {fx:?}", priced.len())
    };
    assert_eq!(to, moved[0].0, "the record names another target (seed {seed})");
    assert_eq!(there.point, at(0.0, 0.0), "A's point as priced (seed {seed})");
    assert_eq!(here.point, b.node.point(), "B's own point as priced (seed {seed})");
    // By these positions: 11.0 ms to A (the members at 10 ms, B at 5 ms, heights 2 ms);
    // 11.47 ms to B (5, 15, 11.18 twice and A at 5 ms, heights 2 ms).
    assert!((there.rtt - 0.0110).abs() < 1e-5, "A's predicted mean RTT {} s (seed {seed})", there.rtt);
    assert!((here.rtt - 0.011472).abs() < 1e-5, "B's predicted mean RTT {} s (seed {seed})", here.rtt);
    for p in [here, there] {
        let sum = cfg.tokens.attraction as f32 * (p.rtt + cfg.tokens.access_weight as f32 * p.access) + p.repulsion;
        assert!((p.total - sum).abs() < 1e-6, "the parts do not make the total: {p:?} (seed {seed})");
    }
    assert!(there.total < here.total * (1.0 - needed), "moved on less than it needed (seed {seed})");
    assert_eq!(n as usize, members.len() + 1, "members counted: the four and A (seed {seed})");
    assert_eq!(reports as usize, members.len() + 1, "access reports counted (seed {seed})");
    assert!(radius > 0.0 && needed > 0.0, "{radius} {needed} (seed {seed})");
}

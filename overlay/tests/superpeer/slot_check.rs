//! One head per reserved slot (`overlay::superpeer::node` module doc, step 2, "One head per
//! slot"): two nodes that both claimed a slot (a real DHT lookup can miss
//! the nearest node) find each other through the slot's providers, and the one nearer to the
//! slot's key keeps it; a node that merely holds a stale provider record for the slot never
//! makes the real head step down.
//!
//! The DHT is an oracle over a fixed set of random ids (seeded, `PEERAGE_SEED` replays).

use overlay::superpeer::{
    HeadRole, LookupReport, Method, PeerInfo, Query, SpEffect, SpInput, SpMessage, SuperPeerConfig, SuperPeerNode,
};
use overlay::NodeId;
use rand::Rng;
use std::sync::Arc;

use crate::common;
use crate::common::{at, lookups, seed, xor, DhtWorld as World};

const N: usize = 2_000;

fn cfg() -> Arc<SuperPeerConfig> {
    let mut c = SuperPeerConfig { method: Method::ReservedPrefix, share: 0.5, ..Default::default() };
    c.estimate.samples = 8;
    c.validate().unwrap();
    Arc::new(c)
}

/// Starts `me` after peers shared six size samples with it, answers its estimate lookups
/// from the oracle, and answers its claim as a
/// short DHT answer would that missed every node nearer to the key than `me`: `me` claims
/// the slot. Returns the node and the slot's key.
fn claimed(w: &mut World, me: NodeId) -> (SuperPeerNode, NodeId) {
    let mut node = SuperPeerNode::new(me, at(0.0, 0.0), cfg());
    // The same six shared samples for every node of a test: their estimates, hence their
    // prefix lengths, stay close (two claimants of one slot must agree on it).
    let shared = common::shared_samples(&w.ids, NodeId([0; 32]), 6);
    let from = *w.ids.iter().find(|x| **x != me).expect("another node");
    w.feed(&mut node, SpInput::Message { from, msg: SpMessage::SizeSamples { samples: shared } });
    let fx = w.feed(&mut node, SpInput::Start);
    let (claim, _) = w.decide(&mut node, &fx);
    let (cq, Query::Closest { key }) = *claim.iter().find(|(_, q)| matches!(q, Query::Closest { .. })).unwrap() else {
        unreachable!()
    };
    let pq = claim.iter().find(|(_, q)| matches!(q, Query::Providers { .. })).unwrap().0;
    let mine = xor(&me, &key);
    let farther: Vec<PeerInfo> = w.closest(me, &key).into_iter().filter(|p| xor(&p.id, &key) > mine).collect();
    w.feed(
        &mut node,
        SpInput::LookupResult { query: cq, report: LookupReport::complete(farther.into_iter().take(5).collect()) },
    );
    w.feed(&mut node, SpInput::LookupResult { query: pq, report: LookupReport::complete(Vec::new()) });
    assert!(node.is_super_peer(), "the test's claim did not succeed");
    assert_eq!(node.role(), Some(HeadRole::Slot { key }));
    (node, key)
}

fn sends(fx: &[SpEffect]) -> Vec<(NodeId, SpMessage)> {
    fx.iter()
        .filter_map(|e| match e {
            SpEffect::Send { to, msg } => Some((*to, msg.clone())),
            _ => None,
        })
        .collect()
}

/// Two ids with the same reserved slot (first 4 bits 0: a slot below 128 whatever k is).
fn two_claimants(w: &mut World) -> (NodeId, NodeId) {
    let mut same = w.ids.iter().copied().filter(|id| id.prefix(4) == 0);
    let a = same.next().expect("a reserved id");
    let b = same.find(|id| id.prefix(12) == a.prefix(12)).or_else(|| {
        // Make one: a's first 12 bits, random rest (added to the oracle).
        let mut b = NodeId(w.rng.gen());
        b.0[..2].copy_from_slice(&a.0[..2]);
        w.ids.push(b);
        Some(b)
    });
    (a, b.unwrap())
}

/// The slot check of `node`: ticks until it asks its slot's providers (within
/// `SLOT_CHECK_FIRST` = 3 rounds), answers with `providers`, and returns its sends.
fn check(w: &mut World, node: &mut SuperPeerNode, key: NodeId, providers: Vec<PeerInfo>) -> Vec<(NodeId, SpMessage)> {
    for _ in 0..4 {
        let fx = w.tick(node);
        if let Some((q, _)) = lookups(&fx).into_iter().find(|(_, q)| *q == Query::Providers { key }) {
            return sends(&w.feed(node, SpInput::LookupResult { query: q, report: LookupReport::complete(providers) }));
        }
    }
    panic!("no slot check within 4 rounds of taking the slot");
}

#[test]
fn of_two_heads_of_one_slot_the_nearer_to_its_key_keeps_it() {
    let mut w = World::new(seed(21), N);
    let (a, b) = two_claimants(&mut w);
    let (mut na, key) = claimed(&mut w, a);
    let (mut nb, key_b) = claimed(&mut w, b);
    assert_eq!(key, key_b, "the test's two ids must share a slot");
    let (near, far) = if xor(&a, &key) < xor(&b, &key) { (a, b) } else { (b, a) };
    // `a` checks and finds `b` among the providers (the seed decides which is nearer).
    let out = check(&mut w, &mut na, key, vec![PeerInfo { id: b, point: at(0.0, 0.0) }]);
    let held: Vec<_> = out.iter().filter(|(_, m)| matches!(m, SpMessage::SlotHeld { .. })).collect();
    assert_eq!(held.len(), 1, "one SlotHeld to the other provider: {out:?}");
    assert_eq!(held[0].0, b);
    let fx = w.feed(&mut nb, SpInput::Message { from: a, msg: held[0].1.clone() });
    if far == b {
        assert!(!nb.is_head(), "the farther head kept the slot");
        assert!(fx.iter().any(|e| matches!(e, SpEffect::StopSuperPeer)));
        assert!(fx.iter().any(|e| matches!(e, SpEffect::Unprovide { key: k } if *k == key)));
        assert!(na.is_head(), "the nearer head must keep the slot");
    } else {
        // `b` is the nearer: it keeps the slot and tells `a`, which steps down.
        assert!(nb.is_head());
        let reply: Vec<_> =
            sends(&fx).into_iter().filter(|(to, m)| *to == a && matches!(m, SpMessage::SlotHeld { .. })).collect();
        assert_eq!(reply.len(), 1, "the nearer head answers the farther one");
        let fx = w.feed(&mut na, SpInput::Message { from: b, msg: reply[0].1.clone() });
        assert!(!na.is_head(), "the farther head kept the slot after the answer");
        assert!(fx.iter().any(|e| matches!(e, SpEffect::StopSuperPeer)));
    }
    assert_eq!(nb.is_head(), near == b);
    assert_eq!(na.is_head(), near == a);
}

#[test]
fn a_stale_provider_record_never_unseats_the_head() {
    let mut w = World::new(seed(22), N);
    let (a, b) = two_claimants(&mut w);
    let (mut na, key) = claimed(&mut w, a);
    // `b` shares the slot but never claimed it (a stale record of a node that stepped down):
    // it gets `a`'s SlotHeld and ignores it, whatever its distance to the key.
    let mut nb = SuperPeerNode::new(b, at(0.0, 0.0), cfg());
    w.feed(&mut nb, SpInput::Start);
    let out = check(&mut w, &mut na, key, vec![PeerInfo { id: b, point: at(0.0, 0.0) }]);
    let (to, msg) = out.into_iter().find(|(_, m)| matches!(m, SpMessage::SlotHeld { .. })).expect("a SlotHeld");
    assert_eq!(to, b);
    let fx = w.feed(&mut nb, SpInput::Message { from: a, msg });
    assert!(sends(&fx).is_empty(), "a node that does not serve the slot answered: {fx:?}");
    assert!(na.is_head());
    // A forged SlotHeld (the named head is not the sender) is refused, and does not unseat.
    let forged = SpMessage::SlotHeld { key, head: PeerInfo { id: b, point: at(0.0, 0.0) } };
    let third = w.ids[5];
    let fx = w.feed(&mut na, SpInput::Message { from: third, msg: forged });
    assert!(fx.iter().any(|e| matches!(e, SpEffect::Rejected { .. })));
    assert!(na.is_head(), "a forged slot claim unseated the head");
}

//! A node that reads its own routing table (`overlay::superpeer::vicinity`): its size sample
//! needs no lookup and goes to peers outside its vicinity, whose own samples it counts; a slot
//! claim that the table settles needs no closest-peers lookup, and a node that the table shows
//! is not the nearest of its slot claims nothing.
//!
//! The tables are Kademlia tables over a fixed set of random ids: each bucket keeps the first
//! 20 peers of its range (seeded, `PEERAGE_SEED` replays).

use overlay::superpeer::vicinity::{Vicinity, BUCKET_SIZE};
use overlay::superpeer::{
    slot_key, LookupReport, Method, PeerInfo, Query, SizeSample, SpContext, SpEffect, SpInput, SpMessage,
    SuperPeerConfig, SuperPeerNode, SEED_LOOKUPS,
};
use overlay::{NodeId, Time};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

use crate::common::{self, at, lookups, seeded_ids};

const N: usize = 2_000;

fn cfg(known_size: u64, share: f64) -> Arc<SuperPeerConfig> {
    let mut c = SuperPeerConfig { method: Method::ReservedPrefix, share, ..Default::default() };
    c.estimate.known_size = known_size;
    c.estimate.samples = 8;
    c.validate().unwrap();
    Arc::new(c)
}

/// One input, without the harness's answers to table reads.
fn raw(node: &mut SuperPeerNode, rng: &mut ChaCha8Rng, input: SpInput) -> Vec<SpEffect> {
    let mut fx = Vec::new();
    let mut ctx = SpContext::new(Time(0), rng, &mut fx);
    node.handle(&mut ctx, input);
    fx
}

/// `me`'s Kademlia table over `ids`, as a complete read of it.
fn table(me: &NodeId, ids: &[NodeId]) -> LookupReport {
    let mut counts = [0usize; 257];
    let mut peers = Vec::new();
    for id in ids.iter().filter(|id| *id != me) {
        let c = me.common_prefix_len(id) as usize;
        if counts[c] < BUCKET_SIZE {
            counts[c] += 1;
            peers.push(PeerInfo { id: *id, point: at(0.01, 0.01) });
        }
    }
    let n = peers.len() as u32;
    LookupReport { found: n, known: n, ..LookupReport::complete(peers) }
}

fn table_read(fx: &[SpEffect]) -> Option<u32> {
    lookups(fx).into_iter().find(|(_, q)| *q == Query::Vicinity).map(|(q, _)| q)
}

fn pushes(fx: &[SpEffect]) -> Vec<(NodeId, Vec<SizeSample>)> {
    fx.iter()
        .filter_map(|e| match e {
            SpEffect::Send { to, msg: SpMessage::SizeSamples { samples } } => Some((*to, samples.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_node_estimates_from_its_table_and_pushes_outside_its_vicinity() {
    let (mut rng, ids) = seeded_ids(common::seed(61), N);
    let me = ids[0];
    let mut node = SuperPeerNode::new(me, at(0.0, 0.0), cfg(0, 0.01));
    let fx = raw(&mut node, &mut rng, SpInput::Start);
    assert!(lookups(&fx).iter().all(|(_, q)| *q == Query::Vicinity), "only a table read at start: {fx:?}");
    let q = table_read(&fx).expect("a table read at start");
    let report = table(&me, &ids);
    let v = Vicinity::of(&me, &report.peers.iter().map(|p| p.id).collect::<Vec<_>>(), true);
    let fx = raw(&mut node, &mut rng, SpInput::LookupResult { query: q, report });
    assert!(lookups(&fx).is_empty(), "no lookup: {fx:?}");
    let sent = pushes(&fx);
    assert_eq!(sent.len(), 4, "pushed to four peers");
    for (to, samples) in &sent {
        assert!(v.is_outside(&me, to), "{to} is inside our vicinity");
        assert_eq!(samples[0].tag, me.high_u64(), "our own sample first, tagged with our id");
        let n = f64::from(samples[0].n);
        assert!((N as f64 * 0.5..N as f64 * 1.5).contains(&n), "sample {n} for {N} nodes");
    }
    assert_eq!(node.wanted(), 0, "one sample decides nothing");
    // Seven peers' own vicinity samples, each first in its message: all count.
    for (i, from) in ids[1..8].iter().enumerate() {
        let s = SizeSample { tag: from.high_u64(), n: 1_900.0 + 20.0 * i as f32 };
        let fx = raw(
            &mut node,
            &mut rng,
            SpInput::Message { from: *from, msg: SpMessage::SizeSamples { samples: vec![s] } },
        );
        assert!(lookups(&fx).iter().all(|(_, q)| !matches!(q, Query::Sample { .. })), "no sample lookup");
    }
    assert!(node.wanted() > 0, "decided on eight samples, no lookup");
    let e = node.estimate().unwrap();
    assert!((N as f64 * 0.8..N as f64 * 1.2).contains(&e), "estimate {e}");
}

#[test]
fn a_table_that_settles_nothing_falls_back_to_lookups() {
    let (mut rng, ids) = seeded_ids(common::seed(62), N);
    let me = ids[0];
    let mut node = SuperPeerNode::new(me, at(0.0, 0.0), cfg(0, 0.01));
    let q = table_read(&raw(&mut node, &mut rng, SpInput::Start)).expect("a table read");
    // Twelve peers, no bucket full: a table still filling.
    let mut small = table(&me, &ids[..13]);
    small.known = small.peers.len() as u32;
    let fx = raw(&mut node, &mut rng, SpInput::LookupResult { query: q, report: small });
    let samples = lookups(&fx).into_iter().filter(|(_, q)| matches!(q, Query::Sample { .. })).count();
    assert_eq!(samples, 2, "two sample lookups instead: {fx:?}");
    assert!(pushes(&fx).is_empty());
}

/// The nearest of its slot to the key (`want = true`) or not, among `ids`, with slot < 100.
fn slot_node(ids: &[NodeId], k: u32, want: bool) -> NodeId {
    *ids.iter()
        .find(|me| {
            let slot = me.prefix(k);
            let nearest = ids.iter().all(|o| o == *me || o.prefix(k) != slot || o > *me);
            slot < 100 && nearest == want
        })
        .expect("such a node among the ids")
}

#[test]
fn the_table_settles_a_slot_claim() {
    let (mut rng, ids) = seeded_ids(common::seed(63), N);
    // Told N, share 5 %: 100 wanted, 7 prefix bits, slots of about 16 ids, which lie in a
    // node's complete region (with share 1 % a slot's 60 ids fill a bucket: the DHT is asked).
    let k = 7;
    for nearest in [true, false] {
        let me = slot_node(&ids, k, nearest);
        let mut node = SuperPeerNode::new(me, at(0.0, 0.0), cfg(N as u64, 0.05));
        let start = raw(&mut node, &mut rng, SpInput::Start);
        assert_eq!(node.wanted(), 100);
        let q = table_read(&start).expect("a table read for the claim");
        let answer = raw(&mut node, &mut rng, SpInput::LookupResult { query: q, report: table(&me, &ids) });
        let all: Vec<(u32, Query)> = lookups(&start).into_iter().chain(lookups(&answer)).collect();
        assert!(all.iter().all(|(_, q)| !matches!(q, Query::Closest { .. })), "no closest-peers lookup: {all:?}");
        let providers = all.iter().filter(|(_, q)| matches!(q, Query::Providers { .. })).count() as u32;
        let mine = Query::Providers { key: slot_key(k, me.prefix(k)) };
        if nearest {
            assert!(lookups(&answer).iter().any(|(_, q)| *q == mine), "its claim's provider lookup: {all:?}");
            assert_eq!(providers, SEED_LOOKUPS + 1, "its claim's provider lookup and the seeds: {all:?}");
        } else {
            assert!(lookups(&answer).is_empty(), "no claim: {all:?}");
            assert_eq!(providers, SEED_LOOKUPS, "the seeds only: {all:?}");
        }
        let seeds = lookups(&raw(&mut node, &mut rng, SpInput::Tick)).len();
        assert_eq!(seeds, 0, "nothing more at the next round");
    }
}

//! The measured medoid step (`overlay::superpeer::medoid`): a settled
//! token holder asks some members to ping a sample of its cluster, pings it itself, and
//! hands its token (with the members) to a candidate only on a measured gain; a member
//! answers only its own head's probe. Deterministic: one node fed by hand (seeded ids,
//! `PEERAGE_SEED` replays).

use crate::common::measures;
use overlay::superpeer::{HeadRole, PeerInfo, SpEffect, SpInput, SpMessage, SuperPeerConfig, SuperPeerNode, TokenId};
use overlay::NodeId;
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

use crate::common;
use crate::common::{at, hand_token, handovers, holders_at, ring, seeded_ids, start_claiming_nothing, Oracle};

fn seed() -> u64 {
    common::seed(13)
}

struct Harness {
    rng: ChaCha8Rng,
    now: u64,
    node: SuperPeerNode,
    ids: Vec<NodeId>,
}

impl Harness {
    fn feed(&mut self, input: SpInput) -> Vec<SpEffect> {
        common::step(&mut self.node, &mut self.rng, self.now, input)
    }

    fn tick(&mut self) -> Vec<SpEffect> {
        self.now += 1_000_000;
        self.feed(SpInput::Tick)
    }

    /// A node at the origin that claims nothing, then takes token 7 by handover from
    /// `ids[40]` with `members` (and one far holder in its view).
    fn holder(cfg: SuperPeerConfig, members: impl Fn(&[NodeId]) -> Vec<PeerInfo>, seed: u64) -> Harness {
        let (mut rng, ids) = seeded_ids(seed, 500);
        let cfg = common::with(SuperPeerConfig { share: 0.01, ..cfg }, |c| {
            c.split.ratio = 0.0;
        });
        cfg.validate().unwrap();
        let mut node = SuperPeerNode::new(ids[0], at(0.0, 0.0), Arc::new(cfg));
        start_claiming_nothing(&mut node, &mut rng, 0, &ids, &Oracle::default());
        let view = holders_at(&ids, &[at(0.5, 0.5)]);
        hand_token(&mut node, &mut rng, 0, ids[40], members(&ids), view);
        Harness { rng, now: 0, node, ids }
    }
}

fn probes(fx: &[SpEffect]) -> Vec<(NodeId, Vec<NodeId>)> {
    fx.iter()
        .filter_map(|e| match e {
            SpEffect::Send { to, msg: SpMessage::MedoidProbe { sample } } => Some((*to, sample.clone())),
            _ => None,
        })
        .collect()
}

/// Ticks the holder until it starts its medoid step; returns the probes (candidate, sample)
/// and the holder's own pings.
fn until_probed(h: &mut Harness, rounds: u32) -> (Vec<(NodeId, Vec<NodeId>)>, Vec<NodeId>) {
    for _ in 0..rounds {
        let fx = h.tick();
        assert!(handovers(&fx).is_empty(), "the predicted law moved the token: {fx:?}");
        let p = probes(&fx);
        if !p.is_empty() {
            return (p, measures(&fx));
        }
    }
    panic!("no medoid step within {rounds} rounds");
}

/// A settled holder probes `medoid_candidates` members with one sample of at most
/// `medoid_sample` members, pings that sample itself, and moves its token with every member
/// to the candidate whose measured RTTs are lowest, only on a gain above the threshold.
#[test]
fn a_settled_holder_moves_its_token_to_a_measurably_better_member() {
    let s = seed();
    let cfg = common::with(SuperPeerConfig::default(), |c| {
        c.medoid.candidates = 3;
        c.medoid.sample = 8;
    });
    let hold = cfg.tokens.hold_rounds;
    let mut h = Harness::holder(cfg, ring, s);
    let members = ring(&h.ids);
    // Not before the hold time.
    for _ in 0..hold - 1 {
        let fx = h.tick();
        assert!(probes(&fx).is_empty(), "probed before the hold time: {fx:?}");
    }
    let (probed, own) = until_probed(&mut h, 3);
    assert_eq!(probed.len(), 3, "{probed:?}");
    let sample = probed[0].1.clone();
    assert_eq!(sample.len(), 8);
    assert!(probed.iter().all(|p| p.1 == sample), "one sample for every candidate");
    assert!(sample.iter().all(|id| members.iter().any(|m| m.id == *id)), "members only");
    let mut own_sorted = own.clone();
    own_sorted.sort();
    let mut sample_sorted = sample.clone();
    sample_sorted.sort();
    assert_eq!(own_sorted, sample_sorted, "the holder pings the same sample");
    // Our RTTs: 10 ms each. Candidate 0: 9.9 ms (1 %, below the threshold), candidate 1:
    // 6 ms, candidate 2: 7 ms.
    for id in &sample {
        h.feed(SpInput::Rtt { peer: *id, rtt: Some(0.010) });
    }
    let answer = |ms: f32| SpMessage::MedoidCost { rtts: vec![ms / 1000.0; sample.len()] };
    h.feed(SpInput::Message { from: probed[0].0, msg: answer(9.9) });
    h.feed(SpInput::Message { from: probed[1].0, msg: answer(6.0) });
    let fx = h.feed(SpInput::Message { from: probed[2].0, msg: answer(7.0) });
    assert!(handovers(&fx).is_empty(), "decides at its round, not on a message");
    let fx = h.tick();
    assert_eq!(handovers(&fx), vec![(probed[1].0, members.len() + 1)], "{fx:?}");
}

/// No move when no candidate is measurably better; a step that moved nothing is retried
/// `medoid.retries` times, `RETRY_ROUNDS` apart, each keeping the best half of the
/// candidates and drawing the rest, and then no more at the same epoch with the same
/// members; bad answers are rejected.
#[test]
fn no_move_without_a_measured_gain_and_a_bounded_series_per_epoch() {
    let s = seed();
    let cfg = common::with(SuperPeerConfig::default(), |c| {
        c.medoid.candidates = 2;
        c.medoid.sample = 6;
        c.medoid.retries = 3;
    });
    let hold = cfg.tokens.hold_rounds;
    let retries = cfg.medoid.retries;
    let mut h = Harness::holder(cfg, ring, s);
    let (probed, own) = until_probed(&mut h, hold + 2);
    for id in &own {
        h.feed(SpInput::Rtt { peer: *id, rtt: Some(0.010) });
    }
    let fx = h.feed(SpInput::Message { from: probed[0].0, msg: SpMessage::MedoidCost { rtts: vec![0.001; 2] } });
    assert!(fx.iter().any(|e| matches!(e, SpEffect::Rejected { .. })), "wrong length: {fx:?}");
    let bad = SpMessage::MedoidCost { rtts: vec![f32::NAN; probed[0].1.len()] };
    let fx = h.feed(SpInput::Message { from: probed[0].0, msg: bad });
    assert!(fx.iter().any(|e| matches!(e, SpEffect::Rejected { .. })), "NaN: {fx:?}");
    let same = SpMessage::MedoidCost { rtts: vec![0.0099; probed[0].1.len()] };
    h.feed(SpInput::Message { from: probed[0].0, msg: same.clone() });
    h.feed(SpInput::Message { from: probed[1].0, msg: same });
    // A stranger's answer is ignored.
    let fx = h.feed(SpInput::Message { from: h.ids[300], msg: SpMessage::MedoidCost { rtts: vec![0.001; 6] } });
    assert!(fx.is_empty(), "{fx:?}");
    // The retries: each `RETRY_ROUNDS` after the previous step started, answered with no gain.
    let mut drawn = Vec::new();
    let mut since = 0u32;
    let mut steps = 0u32;
    for _ in 0..(retries + 2) * overlay::superpeer::medoid::RETRY_ROUNDS + 20 {
        let fx = h.tick();
        since += 1;
        assert!(handovers(&fx).is_empty(), "moved without a gain: {fx:?}");
        let p = probes(&fx);
        if p.is_empty() {
            continue;
        }
        steps += 1;
        assert!(steps <= retries, "a step beyond the {retries} retries: {fx:?}");
        assert_eq!(since, overlay::superpeer::medoid::RETRY_ROUNDS, "retry {steps} after {since} rounds");
        since = 0;
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!(p[0].0, probed[0].0, "the coarse best is measured again");
        assert_ne!(p[0].1, probed[0].1, "on a fresh sample");
        drawn.push(p[1].0);
        for id in measures(&fx) {
            h.feed(SpInput::Rtt { peer: id, rtt: Some(0.010) });
        }
        for (c, sample) in &p {
            h.feed(SpInput::Message { from: *c, msg: SpMessage::MedoidCost { rtts: vec![0.0101; sample.len()] } });
        }
    }
    assert_eq!(steps, retries, "every retry was taken");
    assert!(drawn.iter().all(|d| *d != probed[0].0), "the drawn candidate is another member: {drawn:?}");
    assert!(h.node.is_head());
}

/// Candidates that never answer: the holder decides after a few rounds with what it has and
/// stays.
#[test]
fn silent_candidates_leave_the_token_where_it_is() {
    let s = seed();
    let cfg = common::with(SuperPeerConfig::default(), |c| {
        c.medoid.candidates = 2;
        c.medoid.sample = 6;
    });
    let hold = cfg.tokens.hold_rounds;
    let mut h = Harness::holder(cfg, ring, s);
    let (_, own) = until_probed(&mut h, hold + 2);
    for id in &own {
        h.feed(SpInput::Rtt { peer: *id, rtt: None });
    }
    for _ in 0..10 {
        let fx = h.tick();
        assert!(handovers(&fx).is_empty(), "{fx:?}");
    }
    assert!(h.node.is_head());
}

/// A member pings the sample only for its own head, answers once every ping came back (in
/// the sample's order, 0 for a failed one), and rejects oversized samples.
#[test]
fn a_member_measures_for_its_own_head_only() {
    let s = seed();
    let (rng, ids) = seeded_ids(s, 12);
    let cfg = common::with(SuperPeerConfig::default(), |c| {
        c.medoid.sample = 4;
    });
    let node = SuperPeerNode::new(ids[1], at(0.0, 0.0), Arc::new(cfg));
    let mut m = Harness { rng, now: 0, node, ids: ids.clone() };
    let head = PeerInfo { id: ids[2], point: at(0.001, 0.0) };
    m.feed(SpInput::Message { from: head.id, msg: SpMessage::Announce { head, room: true } });
    m.feed(SpInput::Message { from: ids[6], msg: SpMessage::Refuse { full: true } });
    let role = HeadRole::Token { token: TokenId(9), epoch: 0 };
    m.feed(SpInput::Message { from: head.id, msg: SpMessage::Accept { role, head } });
    assert_eq!(m.node.attached_to(), Some(head.id));
    let sample = vec![ids[7], ids[8], ids[9]];
    // Not our head: nothing measured.
    let fx = m.feed(SpInput::Message { from: ids[3], msg: SpMessage::MedoidProbe { sample: sample.clone() } });
    assert!(measures(&fx).is_empty(), "{fx:?}");
    // Too many peers: rejected.
    let fx = m.feed(SpInput::Message { from: head.id, msg: SpMessage::MedoidProbe { sample: ids[3..9].to_vec() } });
    assert!(fx.iter().any(|e| matches!(e, SpEffect::Rejected { .. })) && measures(&fx).is_empty(), "{fx:?}");
    // Our head: every sampled peer pinged; the answer goes when the last ping is back.
    let fx = m.feed(SpInput::Message { from: head.id, msg: SpMessage::MedoidProbe { sample: sample.clone() } });
    assert_eq!(measures(&fx), sample);
    let fx = m.feed(SpInput::Rtt { peer: ids[9], rtt: Some(0.003) });
    assert!(fx.iter().all(|e| !matches!(e, SpEffect::Send { msg: SpMessage::MedoidCost { .. }, .. })));
    m.feed(SpInput::Rtt { peer: ids[7], rtt: Some(0.005) });
    let fx = m.feed(SpInput::Rtt { peer: ids[8], rtt: None });
    let answers: Vec<(NodeId, Vec<f32>)> = fx
        .iter()
        .filter_map(|e| match e {
            SpEffect::Send { to, msg: SpMessage::MedoidCost { rtts } } => Some((*to, rtts.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(answers, vec![(head.id, vec![0.005, 0.0, 0.003])], "{fx:?}");
}

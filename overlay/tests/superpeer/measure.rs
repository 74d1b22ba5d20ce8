//! Members attach by MEASURED round-trip time (`overlay::superpeer`): a
//! normal node asks its driver to measure the heads it considers (`SpEffect::MeasureRtt`,
//! answered with `SpInput::Rtt`), and when a measurement contradicts the coordinates'
//! prediction it goes by the measurement. Deterministic: one node fed by hand, the DHT an
//! oracle over a fixed set of random ids (seeded, `PEERAGE_SEED` replays).

use crate::common::{attaches, measures};
use overlay::superpeer::{probe_limit, CACHE_TTL, PROBE_MARGIN};
use overlay::superpeer::{
    HeadEntry, HeadRole, LookupReport, Method, PeerInfo, Point, SpEffect, SpInput, SpMessage, SuperPeerConfig,
    SuperPeerNode, TokenId,
};
use overlay::NodeId;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

use crate::common;

fn seed() -> u64 {
    common::seed(5)
}

struct Harness {
    rng: ChaCha8Rng,
    now: u64,
    node: SuperPeerNode,
    ids: Vec<NodeId>,
    /// Head A: predicted 10 ms away. Head B: predicted 20 ms away.
    a: PeerInfo,
    b: PeerInfo,
}

impl Harness {
    fn feed(&mut self, input: SpInput) -> Vec<SpEffect> {
        common::step(&mut self.node, &mut self.rng, self.now, input)
    }

    fn tick(&mut self) -> Vec<SpEffect> {
        self.now += 1_000_000;
        self.feed(SpInput::Tick)
    }

    /// Starts the node, answers its lookups (it claims nothing: every key has a provider)
    /// and offers the two heads through the token directory; returns all effects of the
    /// answers.
    fn start(seed: u64) -> (Harness, Vec<SpEffect>) {
        Harness::start_with(SuperPeerConfig::default(), seed)
    }

    /// As [`Harness::start`], with the token method and 1 % share set in `cfg`.
    fn start_with(cfg: SuperPeerConfig, seed: u64) -> (Harness, Vec<SpEffect>) {
        Harness::start_at(cfg, seed, 0.018)
    }

    /// As [`Harness::start_with`], with head B at distance `b` (seconds; 0.018 there).
    fn start_at(cfg: SuperPeerConfig, seed: u64, b: f64) -> (Harness, Vec<SpEffect>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let ids: Vec<NodeId> = (0..500).map(|_| NodeId(rng.gen())).collect();
        let cfg = SuperPeerConfig { method: Method::RepulsionTokens, share: 0.01, ..cfg };
        cfg.validate().unwrap();
        let me = ids[0];
        // Predicted RTT = distance + both heights (1 ms each here).
        let a = PeerInfo { id: ids[1], point: Point::new(&[0.008, 0.0], 0.001) };
        let b = PeerInfo { id: ids[2], point: Point::new(&[0.0, b], 0.001) };
        let mut node = SuperPeerNode::new(me, Point::new(&[0.0, 0.0], 0.001), Arc::new(cfg));
        let oracle = common::Oracle {
            found_at: Point::new(&[0.05, 0.05], 0.001),
            directory: vec![a, b],
            provider_at: Point::new(&[0.1, 0.1], 0.001),
        };
        let all = common::start_claiming_nothing(&mut node, &mut rng, 0, &ids, &oracle);
        let h = Harness { rng, now: 0, node, ids, a, b };
        (h, all)
    }

    fn accept(&mut self, head: PeerInfo) -> Vec<SpEffect> {
        let role = HeadRole::Token { token: TokenId(head.id.high_u64()), epoch: 0 };
        self.feed(SpInput::Message { from: head.id, msg: SpMessage::Accept { role, head } })
    }
}

/// The started node attaches to A (the nearer by prediction), measures it at 40 ms, and is
/// asking to measure B next. Returns (A, B).
fn attached_to_a_measured(h: &mut Harness, start: &[SpEffect]) -> (NodeId, NodeId) {
    assert_eq!(attaches(start), vec![h.a.id], "{start:?}");
    h.accept(h.a);
    let (a, b) = (h.a.id, h.b.id);
    assert!(until_measured(h, a, 2), "the current head was not measured");
    h.feed(SpInput::Rtt { peer: a, rtt: Some(0.040) });
    assert!(until_measured(h, b, 2), "the nearer-looking head was not measured");
    (a, b)
}

/// Runs rounds until the node asks to measure `who`, at most `rounds`.
fn until_measured(h: &mut Harness, who: NodeId, rounds: u32) -> bool {
    (0..rounds).any(|_| measures(&h.tick()).contains(&who))
}

#[test]
fn a_member_switches_to_the_head_with_the_lower_measured_rtt() {
    let (mut h, fx) = Harness::start(seed());
    // Before any measurement it goes by the prediction: A (10 ms) rather than B (20 ms).
    assert_eq!(attaches(&fx), vec![h.a.id], "{fx:?}");
    h.accept(h.a);
    assert_eq!(h.node.attached_to(), Some(h.a.id));
    // It measures its head first: A is really 40 ms away.
    let (a, b) = (h.a.id, h.b.id);
    assert!(until_measured(&mut h, a, 2), "the current head was not measured");
    let fx = h.feed(SpInput::Rtt { peer: a, rtt: Some(0.040) });
    assert!(attaches(&fx).is_empty(), "switched to an unmeasured head: {fx:?}");
    // B is predicted within the margin (20 < 1.5 x 40 ms): measured next, really 15 ms.
    assert!(until_measured(&mut h, b, 2), "the nearer-looking head was not measured");
    let fx = h.feed(SpInput::Rtt { peer: b, rtt: Some(0.015) });
    assert_eq!(attaches(&fx), vec![b], "{fx:?}");
    h.accept(h.b);
    assert_eq!(h.node.attached_to(), Some(b));
    // And it stays: A measured 40 ms is not nearer than B measured 15 ms, whatever the
    // coordinates say.
    for _ in 0..5 {
        assert!(attaches(&h.tick()).is_empty());
    }
}

/// Within a region the coordinates predict about twice the true RTT (the heights): a head
/// whose prediction is within the margin of the current head's *prediction* is measured,
/// even though it is beyond the margin of the current head's measurement.
#[test]
fn a_head_predicted_near_the_current_heads_prediction_is_measured() {
    // A predicted 10 ms, B 13 ms; A measured 5 ms. 13 > 1.5 x 5 but < 1.5 x 10.
    let (mut h, fx) = Harness::start_at(SuperPeerConfig::default(), seed(), 0.011);
    assert_eq!(attaches(&fx), vec![h.a.id], "{fx:?}");
    h.accept(h.a);
    let (a, b) = (h.a.id, h.b.id);
    assert!(until_measured(&mut h, a, 2), "the current head was not measured");
    h.feed(SpInput::Rtt { peer: a, rtt: Some(0.005) });
    assert!(until_measured(&mut h, b, 3), "B, predicted within 1.5 x A's prediction, was not measured");
    let fx = h.feed(SpInput::Rtt { peer: b, rtt: Some(0.003) });
    assert_eq!(attaches(&fx), vec![b], "{fx:?}");
}

/// The limit itself: the margin times the larger of the measured and the predicted RTT.
#[test]
fn the_probe_limit_takes_the_larger_of_measurement_and_prediction() {
    let close = |x: f64, y: f64| (x - y).abs() < 1e-12;
    assert!(close(probe_limit(Some(0.005), 0.010), PROBE_MARGIN * 0.010));
    assert!(close(probe_limit(Some(0.020), 0.010), PROBE_MARGIN * 0.020));
    assert!(close(probe_limit(None, 0.010), PROBE_MARGIN * 0.010));
    assert!(close(probe_limit(Some(0.0), 0.010), PROBE_MARGIN * 0.010), "no measurement yet");
}

#[test]
fn measurements_taken_while_unfit_are_taken_again_once_fit() {
    // A coordinate that becomes fit forgets the RTTs measured before (the load
    // that kept it unfit inflated them).
    let (mut h, fx) = Harness::start(seed());
    h.feed(SpInput::CoordinateFit { fit: false });
    let (a, b) = attached_to_a_measured(&mut h, &fx);
    // B measured under load: 300 ms, far worse than A. The node stays and does not ask again.
    assert!(attaches(&h.feed(SpInput::Rtt { peer: b, rtt: Some(0.300) })).is_empty());
    assert!(!until_measured(&mut h, b, 3), "a measured head was measured again while unfit");
    // Fit: both are measured again, and B's true 15 ms makes the node switch.
    h.feed(SpInput::CoordinateFit { fit: true });
    assert!(until_measured(&mut h, a, 2), "the head was not measured again once fit");
    h.feed(SpInput::Rtt { peer: a, rtt: Some(0.040) });
    assert!(until_measured(&mut h, b, 2), "the other head was not measured again once fit");
    assert_eq!(attaches(&h.feed(SpInput::Rtt { peer: b, rtt: Some(0.015) })), vec![b]);
    // Attached to B with B's measurement; a fit report while fit forgets nothing (else the
    // head would be measured again).
    h.accept(h.b);
    assert_eq!(h.node.attached_to(), Some(b));
    h.feed(SpInput::CoordinateFit { fit: true });
    assert!(!until_measured(&mut h, b, 5), "re-measured after a repeated fit report");
}

#[test]
fn a_head_whose_measurement_failed_does_not_keep_the_node_from_a_measured_nearer_one() {
    // C looks nearest of all (5 ms) but its measurement fails; B, measured at
    // 15 ms, well below A's 40, is taken all the same (the node does not wait for C).
    let (mut h, fx) = Harness::start(seed());
    assert_eq!(attaches(&fx), vec![h.a.id], "{fx:?}");
    h.accept(h.a);
    let (a, b) = (h.a.id, h.b.id);
    assert!(until_measured(&mut h, a, 2), "the current head was not measured");
    h.feed(SpInput::Rtt { peer: a, rtt: Some(0.040) });
    let c = PeerInfo { id: h.ids[3], point: Point::new(&[0.003, 0.0], 0.001) };
    h.feed(SpInput::Message { from: h.ids[4], msg: gossip(c) });
    assert!(until_measured(&mut h, c.id, 2), "the nearest-looking head was not measured");
    assert!(attaches(&h.feed(SpInput::Rtt { peer: c.id, rtt: None })).is_empty(), "switched to an unmeasured head");
    assert!(until_measured(&mut h, b, 2), "the next head was not measured");
    assert_eq!(attaches(&h.feed(SpInput::Rtt { peer: b, rtt: Some(0.015) })), vec![b]);
}

#[test]
fn a_head_measured_far_does_not_win_its_cache_place_back_by_its_prediction() {
    // B, measured at 300 ms though predicted at 20, is evicted for a nearer
    // newcomer; gossip brings B again. It competes with its remembered 300 ms (not its 20 ms
    // prediction), so it stays out and is not measured again.
    let cfg = common::with(SuperPeerConfig::default(), |c| c.discovery.cache_size = 2);
    let (mut h, fx) = Harness::start_with(cfg, seed());
    let (a, b) = attached_to_a_measured(&mut h, &fx);
    assert!(attaches(&h.feed(SpInput::Rtt { peer: b, rtt: Some(0.300) })).is_empty());
    let c = PeerInfo { id: h.ids[3], point: Point::new(&[0.003, 0.0], 0.001) };
    h.feed(SpInput::Message { from: h.ids[4], msg: gossip(c) });
    let cached = |h: &Harness| h.node.cached_heads().iter().map(|e| e.id).collect::<Vec<_>>();
    assert!(!cached(&h).contains(&b) && cached(&h).contains(&c.id), "B was not evicted for C: {:?}", cached(&h));
    h.feed(SpInput::Message { from: h.ids[4], msg: gossip(h.b) });
    assert!(!cached(&h).contains(&b), "B, measured far, took a place back by its prediction");
    assert!(cached(&h).contains(&a));
    assert!(!until_measured(&mut h, b, 3), "B was measured again");
}

fn gossip(head: PeerInfo) -> SpMessage {
    SpMessage::CacheExchange { entries: vec![HeadEntry { head, age: 0 }], reply: false }
}

/// Runs `rounds` rounds with head B gossiped to the node before each (so it stays cached)
/// and every measurement of B answered `rtt`; returns the rounds (1-based) in which
/// the node asked to measure it.
fn measured_rounds(h: &mut Harness, rtt: f64, rounds: u32) -> Vec<u32> {
    let head = h.b;
    let mut at = Vec::new();
    for r in 1..=rounds {
        let from = h.ids[4];
        h.feed(SpInput::Message { from, msg: gossip(head) });
        if measures(&h.tick()).contains(&head.id) {
            at.push(r);
            h.feed(SpInput::Rtt { peer: head.id, rtt: Some(rtt) });
        }
    }
    at
}

#[test]
fn a_head_measured_under_load_is_measured_again_and_taken() {
    // B, predicted at 20 ms, was measured at 300 ms while the machine was
    // loaded; A, the head, at 40. The minimum alone would keep B out for good: it is
    // measured again after PROBE_RETRY rounds, and its quiet 15 ms makes the node switch.
    let (mut h, fx) = Harness::start(seed());
    let (_, b) = attached_to_a_measured(&mut h, &fx);
    assert!(attaches(&h.feed(SpInput::Rtt { peer: b, rtt: Some(0.300) })).is_empty());
    for r in 1..=10 {
        // Gossip keeps B in the cache (entries age out after `cache_ttl` rounds).
        let from = h.ids[4];
        h.feed(SpInput::Message { from, msg: gossip(h.b) });
        let asked = measures(&h.tick()).contains(&b);
        assert_eq!(asked, r == 10, "round {r}: B measured again {asked}, expected only at round 10");
    }
    assert_eq!(attaches(&h.feed(SpInput::Rtt { peer: b, rtt: Some(0.015) })), vec![b]);
}

#[test]
fn a_head_the_coordinates_misjudge_is_measured_again_ever_more_rarely() {
    // B really is 300 ms away though predicted at 20. The repeats wait 10, 20,
    // then 40 rounds: 5 repeats in 160 rounds, not 16; the back-off survives B leaving the
    // cache and coming back; nothing while unfit.
    let (mut h, fx) = Harness::start(seed());
    let (a, b) = attached_to_a_measured(&mut h, &fx);
    h.feed(SpInput::Rtt { peer: b, rtt: Some(0.300) });
    let at = measured_rounds(&mut h, 0.300, 160);
    assert_eq!(at, vec![10, 30, 70, 110, 150], "repeats of B");
    assert_eq!(h.node.attached_to(), Some(a));
    // B ages out of the cache (no gossip for 12 rounds) and comes back with its
    // measurement and its back-off: the next repeat is 40 rounds away, not 10.
    for _ in 0..12 {
        h.tick();
    }
    assert!(!h.node.cached_heads().iter().any(|e| e.id == b), "B did not age out");
    let at = measured_rounds(&mut h, 0.300, 45);
    assert_eq!(at, vec![40], "B came back: its repeats");
    assert!(h.node.cached_heads().iter().any(|e| e.id == b && e.rtt.is_some()), "B's measurement was lost");
    // While the coordinate is unfit nothing is measured again (its predictions mean
    // nothing; a fit report then forgets every measurement, see the test above).
    let (mut h, fx) = Harness::start(seed());
    h.feed(SpInput::CoordinateFit { fit: false });
    let (_, b) = attached_to_a_measured(&mut h, &fx);
    h.feed(SpInput::Rtt { peer: b, rtt: Some(0.300) });
    let at = measured_rounds(&mut h, 0.300, 40);
    assert!(at.is_empty(), "measured again while unfit: {at:?}");
}

#[test]
fn a_measurement_that_agrees_with_the_head_keeps_it() {
    let (mut h, fx) = Harness::start(seed());
    let (a, b) = attached_to_a_measured(&mut h, &fx);
    // B measured 37 ms: nearer, but not by the switch factor (0.9 x 40 = 36 ms).
    let fx = h.feed(SpInput::Rtt { peer: b, rtt: Some(0.037) });
    assert!(attaches(&fx).is_empty(), "{fx:?}");
    for _ in 0..5 {
        assert!(attaches(&h.tick()).is_empty());
    }
    assert_eq!(h.node.attached_to(), Some(a));
}

#[test]
fn failed_and_bad_measurements_change_nothing_and_are_asked_again_later() {
    let (mut h, _) = Harness::start(seed());
    h.accept(h.a);
    let a = h.a.id;
    assert!(until_measured(&mut h, a, 2));
    let fx = h.feed(SpInput::Rtt { peer: a, rtt: None });
    assert!(attaches(&fx).is_empty());
    for bad in [f64::NAN, -0.01, 0.0, f64::INFINITY] {
        let fx = h.feed(SpInput::Rtt { peer: a, rtt: Some(bad) });
        assert!(fx.iter().any(|e| matches!(e, SpEffect::Rejected { .. })), "{bad}: {fx:?}");
    }
    assert_eq!(h.node.attached_to(), Some(a));
    // A measurement that got no answer is asked for again after a while.
    assert!(until_measured(&mut h, a, 12), "never re-measured after a failure");
}

/// Measurements are a trickle: with four heads worth measuring, a node starts one a round,
/// and still measures them all within a few rounds.
#[test]
fn a_node_starts_one_measurement_a_round() {
    let (mut h, fx) = Harness::start(seed());
    assert_eq!(attaches(&fx), vec![h.a.id]);
    h.accept(h.a);
    for (k, x) in [0.002, 0.003, 0.004].into_iter().enumerate() {
        let c = PeerInfo { id: h.ids[3 + k], point: Point::new(&[x, 0.0], 0.001) };
        h.feed(SpInput::Message { from: h.ids[10], msg: gossip(c) });
    }
    let mut measured = std::collections::HashSet::new();
    for _ in 0..8 {
        let fx = h.tick();
        let m = measures(&fx);
        assert!(m.len() <= 1, "more than one measurement in a round: {m:?}");
        measured.extend(m);
    }
    assert!(measured.len() >= 3, "the heads were not all measured: {measured:?}");
}

fn access_reports(fx: &[SpEffect]) -> Vec<(NodeId, f32)> {
    fx.iter()
        .filter_map(|e| match e {
            SpEffect::Send { to, msg: SpMessage::Access { nearest_rtt } } => Some((*to, *nearest_rtt)),
            _ => None,
        })
        .collect()
}

fn handovers(fx: &[SpEffect]) -> Vec<NodeId> {
    fx.iter()
        .filter_map(|e| match e {
            SpEffect::Send { to, msg: SpMessage::Handover { .. } } => Some(*to),
            _ => None,
        })
        .collect()
}

#[test]
fn a_member_reports_its_nearest_rtt_to_its_token_holder() {
    let (mut h, fx) = Harness::start(seed());
    assert_eq!(attaches(&fx), vec![h.a.id]);
    // Not attached yet: nothing to report to.
    assert!(access_reports(&h.feed(SpInput::NearestRtt { rtt: 0.004 })).is_empty());
    let a = h.a.id;
    assert_eq!(access_reports(&h.accept(h.a)), vec![(a, 0.004)]);
    // A new value while attached goes to the head at once.
    assert_eq!(access_reports(&h.feed(SpInput::NearestRtt { rtt: 0.003 })), vec![(a, 0.003)]);
    for bad in [f64::NAN, -0.01, 0.0, f64::INFINITY, 1e9] {
        let fx = h.feed(SpInput::NearestRtt { rtt: bad });
        assert!(fx.iter().any(|e| matches!(e, SpEffect::Rejected { .. })), "{bad}: {fx:?}");
        assert!(access_reports(&fx).is_empty());
    }
    // With the access term off members report nothing.
    let (mut h, _) = Harness::start_with(
        common::with(SuperPeerConfig::default(), |c| {
            c.tokens.access_weight = 0.0;
        }),
        seed(),
    );
    h.feed(SpInput::NearestRtt { rtt: 0.004 });
    assert!(access_reports(&h.accept(h.a)).is_empty());
}

/// The test node takes a token by handover, with members on a ring around (0.02, 0) that
/// pull it there and two candidates near the ring's centre: `b` slightly nearer to it by the
/// coordinates, `a` on a fast access link (nearest RTT 1 ms, everyone else 5 ms, reported
/// with `Access` by the first `reports` of them). Returns (a, b, the next rounds' effects).
fn holder_with_reports(cfg: SuperPeerConfig, reports: usize, seed: u64) -> (NodeId, NodeId, Vec<SpEffect>) {
    let (mut h, _) = Harness::start_with(cfg, seed);
    h.feed(SpInput::NearestRtt { rtt: 0.005 });
    let at = |x: f64, y: f64| Point::new(&[x, y], 0.001);
    let mut members: Vec<PeerInfo> = (0..8)
        .map(|i| {
            let t = i as f64 * std::f64::consts::TAU / 8.0;
            PeerInfo { id: h.ids[10 + i], point: at(0.02 + 0.004 * t.cos(), 0.004 * t.sin()) }
        })
        .collect();
    let a = PeerInfo { id: h.ids[30], point: at(0.0204, 0.0006) };
    let b = PeerInfo { id: h.ids[31], point: at(0.0199, 0.0001) };
    members.push(a);
    members.push(b);
    let from = h.ids[40];
    let fx = h.feed(SpInput::Message {
        from,
        msg: SpMessage::Handover {
            token: TokenId(7),
            epoch: 1,
            promoted: false,
            members: members.clone(),
            view: Vec::new(),
        },
    });
    assert!(h.node.is_head(), "the handover was not taken: {fx:?}");
    let mut out = Vec::new();
    for m in members.iter().rev().take(reports) {
        let nearest_rtt = if m.id == a.id { 0.001 } else { 0.005 };
        out.extend(h.feed(SpInput::Message { from: m.id, msg: SpMessage::Access { nearest_rtt } }));
    }
    for _ in 0..2 {
        out.extend(h.tick());
    }
    (a.id, b.id, out)
}

#[test]
fn a_token_moves_to_the_candidate_on_the_fastest_access_link() {
    let s = seed();
    let (a, _, fx) = holder_with_reports(SuperPeerConfig::default(), 10, s);
    assert_eq!(handovers(&fx), vec![a], "{fx:?}");
    // Without the access term the coordinates alone pick `b`.
    let (_, b, fx) = holder_with_reports(
        common::with(SuperPeerConfig::default(), |c| {
            c.tokens.access_weight = 0.0;
        }),
        10,
        s,
    );
    assert_eq!(handovers(&fx), vec![b], "{fx:?}");
    // Too few reports to compare with (a's among them): `b` too.
    let (_, b, fx) = holder_with_reports(SuperPeerConfig::default(), 2, s);
    assert_eq!(handovers(&fx), vec![b], "{fx:?}");
}

#[test]
fn bad_and_stray_access_reports_are_survived() {
    let (mut h, _) = Harness::start(seed());
    let a = h.a.id;
    // Not a head: a report is ignored.
    let fx = h.feed(SpInput::Message { from: a, msg: SpMessage::Access { nearest_rtt: 0.01 } });
    assert!(handovers(&fx).is_empty() && access_reports(&fx).is_empty());
    for bad in [f32::NAN, -1.0, 0.0, f32::INFINITY, 1e9] {
        let fx = h.feed(SpInput::Message { from: a, msg: SpMessage::Access { nearest_rtt: bad } });
        assert!(fx.iter().any(|e| matches!(e, SpEffect::Rejected { .. })), "{bad}: {fx:?}");
    }
}

/// A head reported down stays out of the cache (in a 200-node tokens swarm a member tried to attach to a killed head
/// once a round for 10 s, because every cache exchange brought the dead head back): a head
/// reported down is not taken from gossip again for `cache_ttl` rounds; a head that
/// announces itself (`Announce`) still is.
#[test]
fn a_head_reported_down_is_not_learned_again_from_gossip() {
    let cfg = SuperPeerConfig::default();
    let (mut h, _) = Harness::start_with(cfg.clone(), seed());
    let c = PeerInfo { id: h.ids[3], point: Point::new(&[0.003, 0.0], 0.001) };
    let relayed = |head: PeerInfo| SpMessage::CacheExchange { entries: vec![HeadEntry { head, age: 2 }], reply: false };
    let cached = |h: &Harness| h.node.cached_heads().iter().map(|e| e.id).collect::<Vec<_>>();
    h.feed(SpInput::Message { from: h.ids[4], msg: relayed(c) });
    assert!(cached(&h).contains(&c.id), "control: the gossiped head was not cached");
    h.feed(SpInput::PeerDown(c.id));
    assert!(!cached(&h).contains(&c.id), "a head reported down stayed cached");
    for r in 0..CACHE_TTL - 1 {
        h.feed(SpInput::Message { from: h.ids[4], msg: relayed(c) });
        assert!(!cached(&h).contains(&c.id), "round {r}: gossip brought the dead head back");
        h.tick();
    }
    // Its own announcement is believed at once: it is alive after all.
    h.feed(SpInput::Message { from: c.id, msg: SpMessage::Announce { head: c, room: true } });
    assert!(cached(&h).contains(&c.id), "the head's own announcement was ignored");
}

/// A head that refused every connection and sent nothing
/// for the detector's whole silence (`SpInput::HeadNotServing`) is left as if it had answered
/// `Refuse`: the member detaches and attaches elsewhere, with no re-election; a report about
/// another node changes nothing.
#[test]
fn a_head_that_only_refuses_is_left_without_an_election() {
    let (mut h, fx) = Harness::start(seed());
    assert_eq!(attaches(&fx), vec![h.a.id], "{fx:?}");
    h.accept(h.a);
    let (a, b) = (h.a.id, h.b.id);
    let fx = h.feed(SpInput::HeadNotServing(b));
    assert_eq!(h.node.attached_to(), Some(a), "left its head over a report about another node: {fx:?}");
    assert!(!fx.contains(&SpEffect::Detached), "{fx:?}");
    let mut fx = h.feed(SpInput::HeadNotServing(a));
    assert!(fx.contains(&SpEffect::Detached), "stayed with a head that does not serve it: {fx:?}");
    assert_eq!(h.node.attached_to(), None);
    // It looks again (the token directory: A and B) and asks B.
    let directory = vec![h.a, h.b];
    for _ in 0..20 {
        if attaches(&fx).contains(&b) {
            break;
        }
        let asked = common::lookups(&fx);
        fx.clear();
        for (query, what) in asked {
            assert!(matches!(what, overlay::superpeer::Query::Providers { .. }), "{what:?}");
            fx.extend(h.feed(SpInput::LookupResult { query, report: LookupReport::complete(directory.clone()) }));
        }
        if attaches(&fx).is_empty() {
            fx.extend(h.tick());
        }
    }
    assert!(attaches(&fx).contains(&b), "did not look for another head: {fx:?}");
    assert!(!attaches(&fx).contains(&a), "asked the head that does not serve it again: {fx:?}");
    assert!(
        !fx.iter().any(|e| matches!(e, SpEffect::Send { msg: SpMessage::Election { .. }, .. })),
        "a live head was re-elected: {fx:?}"
    );
    h.accept(h.b);
    assert_eq!(h.node.attached_to(), Some(b));
}

/// A node whose own loop runs later than a measurement tolerates (`overlay::detect::stall`,
/// 10 ms for these RTTs) asks for no measurement: the sample would be reported failed, and the
/// connection it opens is what a loaded swarm is short of. Once the loop is on time again, the
/// measurements it held back are asked for.
#[test]
fn a_late_loop_asks_for_no_measurement_until_it_is_on_time_again() {
    let (mut h, fx) = Harness::start(seed());
    assert_eq!(attaches(&fx), vec![h.a.id], "{fx:?}");
    h.feed(SpInput::Lateness { secs: 0.050 });
    h.accept(h.a);
    // Fewer rounds than a cached head lives without gossip (`CACHE_TTL`).
    for r in 0..5 {
        let fx = h.tick();
        assert!(measures(&fx).is_empty(), "round {r}: measured with a loop 50 ms late: {fx:?}");
    }
    // Just within the tolerance: measured again, the current head first.
    h.feed(SpInput::Lateness { secs: 0.009 });
    let (a, b) = (h.a.id, h.b.id);
    assert!(until_measured(&mut h, a, 2), "the current head was not measured once on time");
    h.feed(SpInput::Rtt { peer: a, rtt: Some(0.040) });
    assert!(until_measured(&mut h, b, 2), "the nearer-looking head was not measured once on time");
}

/// A head gossiped at the far edge of the coordinate space (any finite point is valid) has a
/// predicted RTT no `Duration` holds: a late node judges it without panicking.
#[test]
fn a_late_node_survives_a_head_at_the_edge_of_the_space() {
    let (mut h, _) = Harness::start(seed());
    h.feed(SpInput::Lateness { secs: 0.050 });
    let far = PeerInfo { id: h.ids[3], point: Point::new(&[3.0e38, -3.0e38], 3.0e38) };
    let entries = vec![HeadEntry { head: far, age: 0 }];
    h.feed(SpInput::Message { from: h.ids[4], msg: SpMessage::CacheExchange { entries, reply: false } });
    for _ in 0..3 {
        let fx = h.tick();
        assert!(!measures(&fx).contains(&far.id), "a late node measured: {fx:?}");
    }
}

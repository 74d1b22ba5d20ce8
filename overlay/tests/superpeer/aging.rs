//! Settled super peers (`overlay::superpeer::promotion`): a super peer's
//! token moves age with its time as super peer. One holder fed by hand: it takes a token
//! with members placed around it, sits still for the hold time and promotes itself; some
//! rounds later its members' points shift so that a move gains a few percent (predicted).
//! A young super peer moves, an old one stays; with aging off the old one
//! moves too. Deterministic; the ids come from a seeded RNG (`PEERAGE_SEED` replays).

use overlay::superpeer::token::PROMOTED_FACTOR;
use overlay::superpeer::token::{cooling, cost_parts, net_force};
use overlay::superpeer::{Method, PeerInfo, Point, SpEffect, SpInput, SpMessage, SuperPeerConfig, SuperPeerNode};
use overlay::NodeId;
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

use crate::common;
use crate::common::{hand_token, seeded_ids};

fn seed() -> u64 {
    common::seed(11)
}

struct Holder {
    rng: ChaCha8Rng,
    now: u64,
    node: SuperPeerNode,
    members: Vec<PeerInfo>,
}

impl Holder {
    /// `ids[100]` at the origin (its start's lookups go unanswered), then token 7 at epoch 1
    /// handed to it by `ids[150]` with the line as members.
    fn new(cfg: SuperPeerConfig, mut rng: ChaCha8Rng, ids: &[NodeId]) -> Holder {
        let mut node = SuperPeerNode::new(ids[100], Point::new(&[0.0, 0.0], 0.001), Arc::new(cfg));
        common::step(&mut node, &mut rng, 0, SpInput::Start);
        let members = line(ids);
        hand_token(&mut node, &mut rng, 0, ids[150], members.clone(), Vec::new());
        Holder { rng, now: 0, node, members }
    }

    fn feed(&mut self, input: SpInput) -> Vec<SpEffect> {
        common::step(&mut self.node, &mut self.rng, self.now, input)
    }

    fn tick(&mut self) -> Vec<SpEffect> {
        self.now += 1_000_000;
        self.feed(SpInput::Tick)
    }

    /// Every member reports its point moved by `dx` (an `Attach` from a member updates it).
    fn shift(&mut self, dx: f64) {
        for i in 0..self.members.len() {
            let m = &mut self.members[i];
            m.point.x[0] += dx as f32;
            let (from, point) = (m.id, m.point);
            self.feed(SpInput::Message { from, msg: SpMessage::Attach { point } });
        }
    }
}

fn handovers(fx: &[SpEffect]) -> usize {
    fx.iter().filter(|e| matches!(e, SpEffect::Send { msg: SpMessage::Handover { .. }, .. })).count()
}

/// 21 members evenly on a line 20 ms long, centred on the holder at the origin; heights 1 ms.
fn line(ids: &[NodeId]) -> Vec<PeerInfo> {
    (0..21).map(|i| PeerInfo { id: ids[i], point: Point::new(&[0.001 * (i as f64 - 10.0), 0.0], 0.001) }).collect()
}

/// A shift of the members that makes a move gain 4-8 % (predicted, the force law's cost)
/// with a net force above a super peer's threshold.
fn moderate_shift(cfg: &SuperPeerConfig, ids: &[NodeId]) -> f64 {
    let me = PeerInfo { id: ids[100], point: Point::new(&[0.0, 0.0], 0.001) };
    (1..60)
        .map(|k| 0.0001 * k as f64)
        .find(|dx| {
            let shifted: Vec<PeerInfo> = line(ids)
                .into_iter()
                .map(|mut m| {
                    m.point.x[0] += *dx as f32;
                    m
                })
                .collect();
            let Some(f) = net_force(&me.point, &[], &shifted, &cfg.tokens) else { return false };
            let here = cost_parts(&me, &me, &shifted, &[], f.radius, 0.0, &cfg.tokens).total(&cfg.tokens);
            let best = shifted
                .iter()
                .map(|c| cost_parts(c, &me, &shifted, &[], f.radius, 0.0, &cfg.tokens).total(&cfg.tokens))
                .fold(f64::INFINITY, f64::min);
            let gain = 1.0 - best / here;
            f.magnitude() > 1.1 * cfg.tokens.force_threshold * PROMOTED_FACTOR && gain > 0.04 && gain < 0.08
        })
        .expect("a shift with a 4-8 % gain")
}

/// The holder takes token 7 at epoch 1 with the line as members, promotes itself after the
/// hold time, serves `age` more rounds, then its members shift by `dx`: the handovers it
/// sends in the next two rounds.
fn moves_after(cfg: SuperPeerConfig, age: u32, dx: f64, seed: u64) -> usize {
    let (rng, ids) = seeded_ids(seed, 200);
    let cfg = SuperPeerConfig { method: Method::RepulsionTokens, ..cfg };
    cfg.validate().unwrap();
    let hold = cfg.tokens.hold_rounds;
    let mut h = Holder::new(cfg, rng, &ids);
    let mut promoted_at = None;
    for r in 1..=hold + 1 {
        let fx = h.tick();
        assert_eq!(handovers(&fx), 0, "a token centred on its members moved: {fx:?}");
        if fx.iter().any(|e| matches!(e, SpEffect::BecomeSuperPeer)) {
            promoted_at = Some(r);
        }
    }
    assert!(promoted_at.is_some() && h.node.is_super_peer(), "not promoted after the hold time");
    for _ in 0..age {
        assert_eq!(handovers(&h.tick()), 0);
    }
    h.shift(dx);
    (0..2).map(|_| handovers(&h.tick())).sum()
}

#[test]
fn an_old_super_peer_stays_for_a_gain_a_young_one_moves_for() {
    let s = seed();
    let cfg = SuperPeerConfig::default();
    assert!(cfg.tokens.aging > 0.0, "aging is on by default");
    let (_, ids) = seeded_ids(s, 200);
    let dx = moderate_shift(&cfg, &ids);
    // The gain asked of a super peer at epoch 1 before aging: about 2 %.
    assert!(cooling(1, true, &cfg.tokens) * cfg.tokens.min_gain < 0.03);
    assert_eq!(moves_after(cfg.clone(), 0, dx, s), 1, "a young super peer follows its members (shift {dx})");
    assert_eq!(moves_after(cfg.clone(), 40, dx, s), 0, "an old super peer moved on a few percent (shift {dx})");
    // No aging: the old one moves as well.
    let off = common::with(cfg.clone(), |c| {
        c.tokens.aging = 0.0;
    });
    assert_eq!(moves_after(off, 40, dx, s), 1, "without aging (shift {dx})");
    // A large shift still moves an old super peer.
    assert_eq!(moves_after(cfg, 40, 0.012, s), 1, "an old super peer ignored a large gain");
}

#[test]
fn bad_aging_settings_are_refused() {
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        let cfg = common::with(SuperPeerConfig::default(), |c| {
            c.tokens.aging = bad;
        });
        assert!(cfg.validate().is_err(), "{bad}");
    }
}

/// A refused move still promotes (at N = 10^5 a holder stayed unpromoted for 62 rounds
/// without moving otherwise): a holder whose move is refused (`HandoverRefuse`: the target
/// holds a token, or is in an election) does not ask that target again for a while, and a refused move does not
/// keep it from its promotion: the token stayed, so it becomes super peer after the hold time.
/// Here every move it tries is refused: choosing the same target every round would never
/// reach the round's promotion check.
#[test]
fn a_refused_move_is_not_asked_again_and_the_holder_promotes() {
    let s = seed();
    let (rng, ids) = seeded_ids(s, 200);
    let cfg = SuperPeerConfig { method: Method::RepulsionTokens, ..Default::default() };
    let hold = cfg.tokens.hold_rounds;
    let mut h = Holder::new(cfg, rng, &ids);
    // The members pull the token 12 ms away: it wants to move.
    h.shift(0.012);
    let mut asked: Vec<(NodeId, u32)> = Vec::new();
    let mut promoted_at = None;
    for r in 1..=hold + 2 {
        let mut fx = h.tick();
        let mut i = 0;
        while i < fx.len() {
            if let SpEffect::Send { to, msg: SpMessage::Handover { token, epoch, .. } } = &fx[i] {
                let (to, token, epoch) = (*to, *token, *epoch);
                // A holder remembers its last 8 refusals (for the hold time).
                assert!(
                    !asked.iter().any(|(a, at)| *a == to && r - at < 8),
                    "round {r}: {to:?} asked again after refusing: {asked:?}"
                );
                asked.push((to, r));
                let more = h.feed(SpInput::Message { from: to, msg: SpMessage::HandoverRefuse { token, epoch } });
                fx.extend(more);
            }
            if matches!(fx[i], SpEffect::BecomeSuperPeer) && promoted_at.is_none() {
                promoted_at = Some(r);
            }
            i += 1;
        }
    }
    assert!(!asked.is_empty(), "the shifted members made no move");
    assert!(h.node.is_super_peer() && h.node.is_head(), "never promoted; moves asked: {asked:?}");
    assert!(promoted_at.is_some_and(|r| r <= hold + 1), "promoted at {promoted_at:?}, hold {hold}");
}

/// A kill nearby holds a super peer's token still (in a 200-node tokens swarm settled super
/// peers moved right after a kill nearby, each move costing the promotion, and the swarm had fewer super peers for
/// 20-35 s): a super peer that saw a member reported down does not move its token by the
/// force law for the hold time, even for a large gain; after it, it does.
#[test]
fn a_super_peer_waits_out_a_crash_nearby_before_it_moves() {
    let s = seed();
    let (rng, ids) = seeded_ids(s, 200);
    let cfg = SuperPeerConfig { method: Method::RepulsionTokens, ..SuperPeerConfig::default() };
    cfg.validate().unwrap();
    let hold = cfg.tokens.hold_rounds;
    let mut h = Holder::new(cfg, rng, &ids);
    for _ in 1..=hold + 1 {
        assert_eq!(handovers(&h.tick()), 0, "a token centred on its members moved");
    }
    assert!(h.node.is_super_peer(), "not promoted after the hold time (seed {s})");
    // A member crashes; the others then shift far enough that an old super peer moves at once
    // (`an_old_super_peer_stays_for_a_gain_a_young_one_moves_for`).
    let dead = h.members.remove(0);
    h.feed(SpInput::PeerDown(dead.id));
    h.shift(0.012);
    for r in 1..hold {
        assert_eq!(handovers(&h.tick()), 0, "round {r} after a crash nearby: the super peer moved (seed {s})");
    }
    let moved: usize = (0..3).map(|_| handovers(&h.tick())).sum();
    assert_eq!(moved, 1, "the super peer did not move once the hold time after the crash was over (seed {s})");
}

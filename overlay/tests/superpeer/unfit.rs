//! An unfit coordinate pins the token (`overlay::superpeer::node` module doc, step 4):
//! a holder told `SpInput::CoordinateFit { fit: false }` neither moves its token nor
//! promotes itself; once fit, its hold time starts and it moves or promotes as before. One
//! holder fed by hand; the ids come from a seeded RNG (`PEERAGE_SEED` replays).

use overlay::superpeer::{Method, PeerInfo, Point, SpEffect, SpInput, SuperPeerConfig, SuperPeerNode};
use std::sync::Arc;

use crate::common;
use crate::common::{at, hand_token, handovers, ring, seeded_ids};

/// A holder at `point` handed token 7 with `members`, told unfit before the handover. Returns
/// the node and a tick function's state.
fn holder(seed: u64, point: Point, members: impl Fn(&[overlay::NodeId]) -> Vec<PeerInfo>) -> (SuperPeerNode, Tick) {
    let (mut rng, ids) = seeded_ids(seed, 100);
    let cfg = SuperPeerConfig { method: Method::RepulsionTokens, ..SuperPeerConfig::default() };
    cfg.validate().unwrap();
    let mut node = SuperPeerNode::new(ids[0], point, Arc::new(cfg));
    common::step(&mut node, &mut rng, 0, SpInput::Start);
    common::step(&mut node, &mut rng, 0, SpInput::CoordinateFit { fit: false });
    hand_token(&mut node, &mut rng, 0, ids[99], members(&ids), Vec::new());
    (node, Tick { rng, now: 0 })
}

struct Tick {
    rng: rand_chacha::ChaCha8Rng,
    now: u64,
}

impl Tick {
    fn feed(&mut self, node: &mut SuperPeerNode, input: SpInput) -> Vec<SpEffect> {
        common::step(node, &mut self.rng, self.now, input)
    }

    fn round(&mut self, node: &mut SuperPeerNode) -> Vec<SpEffect> {
        self.now += 1_000_000;
        self.feed(node, SpInput::Tick)
    }
}

fn promoted(fx: &[SpEffect]) -> bool {
    fx.iter().any(|e| matches!(e, SpEffect::BecomeSuperPeer))
}

#[test]
fn an_unfit_holder_neither_promotes_nor_counts_its_hold() {
    let seed = common::seed(41);
    // Members on a ring around the holder: no pull, so a fit holder promotes after the hold.
    let (mut node, mut t) = holder(seed, at(0.0, 0.0), ring);
    let hold = SuperPeerConfig::default().tokens.hold_rounds;
    for r in 0..3 * hold {
        let fx = t.round(&mut node);
        assert!(!promoted(&fx) && !node.is_super_peer(), "seed {seed}: promoted while unfit, round {r}");
        assert!(handovers(&fx).is_empty(), "seed {seed}: moved while unfit, round {r}: {fx:?}");
    }
    assert!(node.is_head(), "seed {seed}: the pinned holder still holds its token");
    t.feed(&mut node, SpInput::CoordinateFit { fit: true });
    let mut at_round = None;
    for r in 1..=hold + 2 {
        if promoted(&t.round(&mut node)) {
            at_round = Some(r);
            break;
        }
    }
    // The hold counts from the fit report: promoted after `hold` rounds, not at once.
    let r = at_round.unwrap_or_else(|| panic!("seed {seed}: not promoted within hold + 2 rounds of becoming fit"));
    assert!(r >= hold, "seed {seed}: promoted {r} rounds after becoming fit, hold is {hold}");
}

#[test]
fn an_unfit_holder_does_not_follow_its_members_until_fit() {
    let seed = common::seed(42);
    // The holder sits 30 ms away from a ring of members: a fit holder moves toward them.
    let (mut node, mut t) = holder(seed, at(0.030, 0.0), ring);
    for r in 0..20 {
        let fx = t.round(&mut node);
        assert!(handovers(&fx).is_empty(), "seed {seed}: moved while unfit, round {r}: {fx:?}");
    }
    t.feed(&mut node, SpInput::CoordinateFit { fit: true });
    let moved = (0..5).any(|_| !handovers(&t.round(&mut node)).is_empty());
    assert!(moved, "seed {seed}: a fit holder 30 ms from all its members did not move");
}

//! Split offers (`overlay::superpeer::token`, "Split offers"): a holder
//! whose cluster has a remote group offers a second head's spot to the holders it knows, and
//! a settled holder whose token is cheap to remove drains its members to heads with room and
//! jumps there with its token, handing only itself along as the new holder's member. Deterministic: one
//! node fed by hand (seeded ids, `PEERAGE_SEED` replays).

use overlay::superpeer::{
    HeadRole, PeerInfo, Point, SpEffect, SpInput, SpMessage, SuperPeerConfig, SuperPeerNode, TokenEntry, TokenId,
};
use overlay::NodeId;
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

use crate::common;
use crate::common::{at, hand_token, handovers, holders_at, ring, seeded_ids, start_claiming_nothing, Oracle};

fn seed() -> u64 {
    common::seed(11)
}

struct Harness {
    rng: ChaCha8Rng,
    now: u64,
    node: SuperPeerNode,
    ids: Vec<NodeId>,
    /// Other token holders the node knows (refreshed by gossip every round).
    others: Vec<TokenEntry>,
}

impl Harness {
    fn feed(&mut self, input: SpInput) -> Vec<SpEffect> {
        common::step(&mut self.node, &mut self.rng, self.now, input)
    }

    /// One round, with the other holders' gossip arriving first (so the view stays fresh).
    fn tick(&mut self) -> Vec<SpEffect> {
        self.now += 1_000_000;
        let mut fx = Vec::new();
        for e in self.others.clone() {
            fx.extend(self.feed(SpInput::Message {
                from: e.holder.id,
                msg: SpMessage::TokenGossip { entries: vec![e], reply: false },
            }));
        }
        fx.extend(self.feed(SpInput::Tick));
        fx
    }

    /// A node at the origin that claims nothing, then takes token 7 by handover with
    /// `members` and knows the holders at `others`.
    fn holder(cfg: SuperPeerConfig, members: Vec<PeerInfo>, others: &[Point], seed: u64) -> Harness {
        let (mut rng, ids) = seeded_ids(seed, 500);
        let cfg = SuperPeerConfig { share: 0.01, ..cfg };
        cfg.validate().unwrap();
        let mut node = SuperPeerNode::new(ids[0], at(0.0, 0.0), Arc::new(cfg));
        let others = holders_at(&ids, others);
        start_claiming_nothing(&mut node, &mut rng, 0, &ids, &Oracle::default());
        hand_token(&mut node, &mut rng, 0, ids[40], members, others.clone());
        Harness { rng, now: 0, node, ids, others }
    }
}

/// Whether the node began a split jump: its members told where to go (`StepDownTo`), or a
/// handover that hands only the holder itself.
fn jumps(fx: &[SpEffect]) -> bool {
    fx.iter().any(|e| matches!(e, SpEffect::Send { msg: SpMessage::StepDownTo { .. }, .. }))
        || handovers(fx).iter().any(|h| h.1 == 1)
}

fn splits(fx: &[SpEffect]) -> Vec<(NodeId, NodeId, f32)> {
    fx.iter()
        .filter_map(|e| match e {
            SpEffect::Send { to, msg: SpMessage::Split { at, gain } } => Some((*to, at.id, *gain)),
            _ => None,
        })
        .collect()
}

/// The test node holds a token on its ring of members with another holder 1 ms away (its
/// removal is cheap); after `rounds` rounds it gets a split offer of `gain` seconds for a
/// far node. Returns the harness, the far node and the offer's effects.
fn offered(cfg: SuperPeerConfig, rounds: u32, gain: f32, seed: u64) -> (Harness, PeerInfo, Vec<SpEffect>) {
    offered_next_to(cfg, rounds, gain, seed, 0)
}

/// As [`offered`], the other holder gossiping `members` members (its room is the cap less
/// those and the reserve).
fn offered_next_to(
    cfg: SuperPeerConfig,
    rounds: u32,
    gain: f32,
    seed: u64,
    members: u32,
) -> (Harness, PeerInfo, Vec<SpEffect>) {
    let (_, ids) = seeded_ids(seed, 500);
    let mut h = Harness::holder(cfg, ring(&ids), &[at(0.001, 0.0)], seed);
    h.others[0].members = members;
    for _ in 0..rounds {
        let fx = h.tick();
        assert!(handovers(&fx).is_empty(), "the token moved by itself: {fx:?}");
    }
    let far = PeerInfo { id: h.ids[300], point: at(0.2, 0.0) };
    let offerer = h.others[0].holder.id;
    let fx = h.feed(SpInput::Message { from: offerer, msg: SpMessage::Split { at: far, gain } });
    (h, far, fx)
}

/// A holder jumps for an offer of `at` and its new holder acknowledges (the steps checked on
/// the way): the harness then, the new holder, the head the removal placed the old holder at,
/// and the acknowledgement's effects.
fn jumped(s: u64) -> (Harness, PeerInfo, PeerInfo, Vec<SpEffect>) {
    let cfg = common::with(SuperPeerConfig::default(), |c| {
        c.split.ratio = 0.5;
    });
    let (mut h, far, fx) = offered(cfg.clone(), cfg.tokens.hold_rounds + 1, 1.0, s);
    // Members first: each is told to switch to the head with room the removal
    // placed it at (the other holder); the token waits while they are members.
    let other = h.others[0].holder;
    let to_other: Vec<NodeId> = fx
        .iter()
        .filter_map(|e| match e {
            SpEffect::Send { to, msg: SpMessage::StepDownTo { head } } if *head == other => Some(*to),
            _ => None,
        })
        .collect();
    assert_eq!(to_other.len(), 12, "{fx:?}");
    assert!(handovers(&fx).is_empty(), "the token went before the members: {fx:?}");
    // New members are refused while it drains (members left behind:
    // `a_drain_sends_members_past_a_head_that_kept_none_of_them`).
    let fx = h.feed(SpInput::Message { from: h.ids[299], msg: SpMessage::Attach { point: at(0.0, 0.0) } });
    assert!(fx.iter().any(|e| matches!(e, SpEffect::Send { msg: SpMessage::Refuse { full: true }, .. })), "{fx:?}");
    for m in &to_other {
        h.feed(SpInput::Message { from: *m, msg: SpMessage::Detach });
    }
    // The last one left: the token goes, with the old holder as the only member.
    let fx = h.tick();
    let jump: Vec<Vec<NodeId>> = fx
        .iter()
        .filter_map(|e| match e {
            SpEffect::Send { to, msg: SpMessage::Handover { members, .. } } if *to == far.id => {
                Some(members.iter().map(|m| m.id).collect())
            }
            _ => None,
        })
        .collect();
    assert_eq!(jump, vec![vec![h.node.id()]], "a jump hands the token and its holder only: {fx:?}");
    // The receiver acknowledges: nobody is told anything (`StepDown`, `Moved`); the old holder
    // serves no cluster any more, is the new holder's member at once, and asks for the place
    // the removal gave it.
    let fx = h.feed(SpInput::Message {
        from: far.id,
        msg: SpMessage::HandoverAck { token: TokenId(7), epoch: 2, holder: far },
    });
    let step_downs = fx.iter().filter(|e| matches!(e, SpEffect::Send { msg: SpMessage::StepDown, .. })).count();
    let moved = fx.iter().filter(|e| matches!(e, SpEffect::Send { msg: SpMessage::Moved { .. }, .. })).count();
    assert_eq!((step_downs, moved), (0, 0), "{fx:?}");
    assert!(!h.node.is_head());
    assert_eq!(h.node.attached_to(), Some(far.id), "{fx:?}");
    assert!(fx.iter().any(|e| matches!(e, SpEffect::AttachedTo(x) if *x == far.id)), "{fx:?}");
    assert!(fx.iter().any(|e| matches!(e, SpEffect::Send { to, msg: SpMessage::Attach { .. } } if *to == other.id)));
    (h, far, other, fx)
}

#[test]
fn a_settled_holder_whose_token_is_cheap_to_remove_jumps_to_an_offered_split() {
    let s = seed();
    // The place the removal gave the old holder takes it: it leaves the new holder.
    let (mut h, far, other, _) = jumped(s);
    let role = HeadRole::Token { token: TokenId(9), epoch: 1 };
    let fx = h.feed(SpInput::Message { from: other.id, msg: SpMessage::Accept { role, head: other } });
    assert_eq!(h.node.attached_to(), Some(other.id), "{fx:?}");
    assert!(fx.iter().any(|e| matches!(e, SpEffect::Send { to, msg: SpMessage::Detach } if *to == far.id)), "{fx:?}");
    // That place is full after all: the old holder stays the new holder's member.
    let (mut h, far, other, _) = jumped(s);
    let fx = h.feed(SpInput::Message { from: other.id, msg: SpMessage::Refuse { full: true } });
    assert_eq!(h.node.attached_to(), Some(far.id), "a refused place left the old holder without a head: {fx:?}");
    assert!(!fx.iter().any(|e| matches!(e, SpEffect::Detached)), "{fx:?}");
    // While the new holder is its head it asks a head it learns of nearby as an unattached node
    // does, on the prediction alone (an attached node waits for a measurement).
    let near = PeerInfo { id: h.ids[301], point: at(0.0005, 0.0) };
    let entries = vec![overlay::superpeer::HeadEntry { head: near, age: 0 }];
    h.feed(SpInput::Message { from: h.ids[302], msg: SpMessage::CacheExchange { entries, reply: false } });
    let fx = h.tick();
    assert!(
        fx.iter().any(|e| matches!(e, SpEffect::Send { to, msg: SpMessage::Attach { .. } } if *to == near.id)),
        "{fx:?}"
    );
    assert_eq!(h.node.attached_to(), Some(far.id));
}

/// Members that find no room elsewhere keep the token where it is.
#[test]
fn a_drain_that_does_not_empty_the_cluster_gives_the_jump_up() {
    let s = seed();
    let cfg = common::with(SuperPeerConfig::default(), |c| {
        c.split.ratio = 0.5;
    });
    let (mut h, _, fx) = offered(cfg.clone(), cfg.tokens.hold_rounds + 1, 1.0, s);
    assert!(jumps(&fx), "{fx:?}");
    for _ in 0..6 {
        let fx = h.tick();
        assert!(handovers(&fx).is_empty(), "the token left members behind: {fx:?}");
    }
    assert!(h.node.is_head());
    assert_eq!(h.node.members().len(), 12);
    // It takes members again.
    let fx = h.feed(SpInput::Message { from: h.ids[299], msg: SpMessage::Attach { point: at(0.0, 0.0) } });
    assert!(fx.iter().any(|e| matches!(e, SpEffect::Send { msg: SpMessage::Accept { .. }, .. })), "{fx:?}");
}

/// The heads a node's `StepDownTo`s name.
fn stepped_to(fx: &[SpEffect]) -> Vec<NodeId> {
    fx.iter()
        .filter_map(|e| match e {
            SpEffect::Send { msg: SpMessage::StepDownTo { head }, .. } => Some(head.id),
            _ => None,
        })
        .collect()
}

/// A head that has not taken a member a drain sent to it a round earlier is full, whatever
/// room its holder gossiped (other drains and newcomers take that room too): the next round
/// sends the members left to the next head with room, and once no known head has room the
/// jump is given up at once.
#[test]
fn a_drain_sends_members_past_a_head_that_kept_none_of_them() {
    let s = seed();
    let cfg = common::with(SuperPeerConfig::default(), |c| {
        c.split.ratio = 0.5;
    });
    let (_, ids) = seeded_ids(s, 500);
    // Two other holders, both gossiping room for every member: one 1 ms away, one 20 ms.
    let mut h = Harness::holder(cfg.clone(), ring(&ids), &[at(0.001, 0.0), at(0.0, 0.02)], s);
    for _ in 0..cfg.tokens.hold_rounds + 1 {
        h.tick();
    }
    let (near, next) = (h.others[0].holder.id, h.others[1].holder.id);
    let far = PeerInfo { id: h.ids[300], point: at(0.2, 0.0) };
    let fx = h.feed(SpInput::Message { from: near, msg: SpMessage::Split { at: far, gain: 1.0 } });
    assert_eq!(stepped_to(&fx), vec![near; 12], "{fx:?}");
    // A round later every member is still here: the near head refused them all.
    let fx = h.tick();
    assert_eq!(stepped_to(&fx), vec![next; 12], "the drain named a full head again: {fx:?}");
    // Refused there too: no known head has room, the jump is given up now.
    let fx = h.tick();
    assert!(stepped_to(&fx).is_empty() && handovers(&fx).is_empty(), "{fx:?}");
    assert!(h.node.is_head());
    assert_eq!(h.node.members().len(), 12);
    let fx = h.feed(SpInput::Message { from: h.ids[299], msg: SpMessage::Attach { point: at(0.0, 0.0) } });
    assert!(fx.iter().any(|e| matches!(e, SpEffect::Send { msg: SpMessage::Accept { .. }, .. })), "{fx:?}");
}

#[test]
fn no_jump_when_off_unsettled_or_not_worth_it() {
    let s = seed();
    let d = common::with(SuperPeerConfig::default(), |c| {
        c.split.ratio = 0.5;
    });
    // Off: no split offers.
    let (_, _, fx) = offered(
        common::with(d.clone(), |c| {
            c.split.ratio = 0.0;
        }),
        d.tokens.hold_rounds + 1,
        1.0,
        s,
    );
    assert!(!jumps(&fx), "{fx:?}");
    // Not settled yet (still less than the hold time).
    let (_, _, fx) = offered(d.clone(), d.tokens.hold_rounds / 2, 1.0, s);
    assert!(!jumps(&fx), "{fx:?}");
    // The offered gain does not pay for the removal (each of the 13 nodes pays about 1 ms
    // more without this token).
    let (_, _, fx) = offered(d.clone(), d.tokens.hold_rounds + 1, 0.001, s);
    assert!(!jumps(&fx), "{fx:?}");
    // Bad offers are rejected and change nothing.
    for bad in [f32::NAN, -1.0, 0.0, f32::INFINITY] {
        let (_, _, fx) = offered(d.clone(), d.tokens.hold_rounds + 1, bad, s);
        assert!(!jumps(&fx), "{bad}: {fx:?}");
        assert!(fx.iter().any(|e| matches!(e, SpEffect::Rejected { .. })), "{bad}: {fx:?}");
    }
}

/// A jump needs room (a 10^4 crash sweep with splits on left 75-166 nodes unattached without):
/// a jump needs
/// room for every member at the other tokens (less the reserve), and waits the hold time
/// after a crash nearby.
#[test]
fn no_jump_without_room_for_the_members_or_right_after_a_crash_nearby() {
    let s = seed();
    let d = common::with(SuperPeerConfig::default(), |c| {
        c.split.ratio = 0.5;
    });
    let cap = d.cluster_cap;
    // 12 members and the holder need 13 places: the other holder has 13 beyond the reserve.
    let room = 13 + cap / 10;
    let (_, _, fx) = offered_next_to(d.clone(), d.tokens.hold_rounds + 1, 1.0, s, cap - room);
    assert!(jumps(&fx), "room for all: {fx:?}");
    let (_, _, fx) = offered_next_to(d.clone(), d.tokens.hold_rounds + 1, 1.0, s, cap - room + 1);
    assert!(!jumps(&fx), "room for 12 of 13: {fx:?}");
    // A holder we know (a second one, far away) crashed: no jump (and no offer) for the hold
    // time, then it jumps again.
    let (_, ids) = seeded_ids(s, 500);
    let mut h2 = Harness::holder(d.clone(), ring(&ids), &[at(0.001, 0.0), at(0.0, 0.05)], s);
    for _ in 0..d.tokens.hold_rounds + 1 {
        h2.tick();
    }
    let dead = h2.others.remove(1).holder.id;
    h2.feed(SpInput::PeerDown(dead));
    let far = PeerInfo { id: h2.ids[300], point: at(0.2, 0.0) };
    let offerer = h2.others[0].holder.id;
    let offer = SpMessage::Split { at: far, gain: 1.0 };
    let fx = h2.feed(SpInput::Message { from: offerer, msg: offer.clone() });
    assert!(!jumps(&fx), "jumped right after a crash: {fx:?}");
    for _ in 0..d.tokens.hold_rounds - 1 {
        let fx = h2.tick();
        assert!(splits(&fx).is_empty() && handovers(&fx).is_empty(), "offered or moved after a crash: {fx:?}");
    }
    let fx = h2.feed(SpInput::Message { from: offerer, msg: offer.clone() });
    assert!(!jumps(&fx), "jumped within the hold time after a crash: {fx:?}");
    h2.tick();
    let fx = h2.feed(SpInput::Message { from: offerer, msg: offer });
    assert!(jumps(&fx), "no jump after the hold time: {fx:?}");
}

/// A member told `StepDownTo` asks that head first, even when it knows a nearer one, and
/// stays with its head until that one accepts it.
#[test]
fn a_member_stepped_down_to_a_head_attaches_there_first() {
    let s = seed();
    let (rng, ids) = seeded_ids(s, 8);
    let cfg = common::with(SuperPeerConfig::default(), |c| {
        c.split.ratio = 0.5;
    });
    let node = SuperPeerNode::new(ids[1], at(0.0, 0.0), Arc::new(cfg));
    let mut m = Harness { rng, now: 0, node, ids: ids.clone(), others: Vec::new() };
    let head = PeerInfo { id: ids[2], point: at(0.001, 0.0) };
    let near = PeerInfo { id: ids[3], point: at(0.0005, 0.0) };
    let named = PeerInfo { id: ids[4], point: at(0.03, 0.0) };
    // Attached to `head` (the only head it knows; a refusal from anyone makes it look).
    m.feed(SpInput::Message { from: head.id, msg: SpMessage::Announce { head, room: true } });
    m.feed(SpInput::Message { from: ids[6], msg: SpMessage::Refuse { full: true } });
    let role = HeadRole::Token { token: TokenId(9), epoch: 0 };
    let fx = m.feed(SpInput::Message { from: head.id, msg: SpMessage::Accept { role, head } });
    assert_eq!(m.node.attached_to(), Some(head.id), "{fx:?}");
    // It learns of a nearer head, then its head's token jumps and names a farther one.
    m.feed(SpInput::Message { from: near.id, msg: SpMessage::Announce { head: near, room: true } });
    assert_eq!(m.node.attached_to(), Some(head.id));
    let fx = m.feed(SpInput::Message { from: head.id, msg: SpMessage::StepDownTo { head: named } });
    let attaches: Vec<NodeId> = fx
        .iter()
        .filter_map(|e| match e {
            SpEffect::Send { to, msg: SpMessage::Attach { .. } } => Some(*to),
            _ => None,
        })
        .collect();
    assert_eq!(attaches, vec![named.id], "{fx:?}");
    assert_eq!(m.node.attached_to(), Some(head.id));
    // Refused as full there: it stays where it is.
    m.feed(SpInput::Message { from: named.id, msg: SpMessage::Refuse { full: true } });
    assert_eq!(m.node.attached_to(), Some(head.id));
    // Told again (a later head), accepted: it leaves its old head.
    let later = PeerInfo { id: ids[7], point: at(0.02, 0.0) };
    m.feed(SpInput::Message { from: head.id, msg: SpMessage::StepDownTo { head: later } });
    let fx = m.feed(SpInput::Message { from: later.id, msg: SpMessage::Accept { role, head: later } });
    assert_eq!(m.node.attached_to(), Some(later.id), "{fx:?}");
    assert!(fx.iter().any(|e| matches!(e, SpEffect::Send { to, msg: SpMessage::Detach } if *to == head.id)), "{fx:?}");
    // From a head we are not attached to it changes nothing.
    let fx = m.feed(SpInput::Message { from: head.id, msg: SpMessage::StepDownTo { head: named } });
    assert!(!fx.iter().any(|e| matches!(e, SpEffect::Send { msg: SpMessage::Attach { .. }, .. })), "{fx:?}");
    // A bad head is rejected and changes nothing.
    let bad = PeerInfo { id: ids[5], point: Point::new(&[f64::NAN, 0.0], 0.0) };
    let fx = m.feed(SpInput::Message { from: near.id, msg: SpMessage::StepDownTo { head: bad } });
    assert!(fx.iter().any(|e| matches!(e, SpEffect::Rejected { .. })), "{fx:?}");
}

#[test]
fn a_holder_with_a_remote_group_offers_the_split_to_the_holders_it_knows() {
    let s = seed();
    let run = |cfg: SuperPeerConfig| {
        let (_, ids) = seeded_ids(s, 500);
        // The ring around the holder, and a remote group of 8 members 50 ms away: the ring
        // keeps the token (its median), the remote group would be far better off with a head
        // of its own.
        let mut members = ring(&ids);
        let remote: Vec<PeerInfo> =
            (0..8).map(|i| PeerInfo { id: ids[100 + i], point: at(0.05, 0.0005 * i as f64) }).collect();
        members.extend(remote.iter().copied());
        let others = [at(-0.01, 0.0), at(0.0, 0.01)];
        let mut h = Harness::holder(cfg, members, &others, s);
        let mut out = Vec::new();
        for _ in 0..30 {
            out.extend(h.tick());
        }
        (h, remote, out)
    };
    // The remote group pulls the token (|F| = 0.4): a force threshold of 1 keeps it in place
    // (a move would wait for an acknowledgement this test does not send).
    let still = common::with(SuperPeerConfig::default(), |c| {
        c.tokens.force_threshold = 1.0;
        c.split.ratio = 0.5;
    });
    let (h, remote, fx) = run(still.clone());
    let sent = splits(&fx);
    assert!(!sent.is_empty(), "no split offered");
    let holders: Vec<NodeId> = h.others.iter().map(|e| e.holder.id).collect();
    for (to, at, gain) in &sent {
        assert!(holders.contains(to), "offered to a non-holder: {sent:?}");
        assert!(remote.iter().any(|r| r.id == *at), "the split point is not in the remote group: {sent:?}");
        // 8 members save ~50 ms each (less the spread): about 0.4 s.
        assert!(*gain > 0.3 && *gain < 0.5, "{sent:?}");
    }
    let (_, _, fx) = run(common::with(still, |c| {
        c.split.ratio = 0.0;
    }));
    assert!(splits(&fx).is_empty(), "offered while off");
}

/// A jump is priced by the token's cooling alone (`overlay::superpeer::token`, "Split
/// offers"): a super peer that has served 60 rounds jumps for the same offer as a young one
/// (its moves age, its jumps do not), and a token whose cooling is steeper (the same epoch
/// over a smaller `cooling`) needs a larger offer.
#[test]
fn a_jump_is_priced_by_the_tokens_cooling_not_by_the_super_peers_age() {
    let s = seed();
    let d = SuperPeerConfig::default();
    assert!(d.tokens.aging > 0.0, "aging is on by default");
    let young = d.tokens.hold_rounds + 1;
    let old = young + 60;
    // The smallest offer (on a x1.25 grid) a super peer jumps for.
    let least = |cfg: &SuperPeerConfig, rounds: u32| {
        (0..80).map(|k| 0.001 * 1.25f32.powi(k)).find(|g| jumps(&offered(cfg.clone(), rounds, *g, s).2))
    };
    let young_least = least(&d, young).expect("a young super peer jumps for some offer");
    assert_eq!(least(&d, old), Some(young_least), "an old super peer's jump is priced by its age");
    let steep = common::with(d.clone(), |c| {
        c.tokens.cooling = 0.1;
    });
    let steep_least = least(&steep, young).expect("a steeply cooled token jumps for some offer");
    assert!(steep_least > 2.0 * young_least, "cooling did not raise the price: {steep_least} vs {young_least}");
}

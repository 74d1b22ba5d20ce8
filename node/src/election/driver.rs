//! Runs one `overlay` election state machine inside the node: clock, RNG, timers, and the
//! routing of its `Send` effects.
//!
//! The state machine is sans-IO ([`overlay::Election`]); this driver gives it the node's clock,
//! a seeded RNG, and its timers in one `overlay::core::TimerTable` (the contract of
//! `overlay::core`).
//!
//! Routing (our choice; the papers assume a complete network): an election must reach every
//! member although a node keeps only ~10 connections. The effects of one input are grouped
//! by message; a group whose recipients are mostly not connected and that has at least
//! `broadcast_min` recipients (a bully `Coordinator` to all lower processes, `Alive`
//! heartbeats, `Election` to all higher processes, `IamUp`) is published *once* on the
//! gossipsub election topic with a compact recipient set ([`Recipients`]: all, all ranked
//! above/below a rank, or a list), signed by its author (`overlay::directory::broadcast`), and
//! every receiver checks the signature and whether it is addressed. Other
//! sends go point to point over `/peerage/election/2.0.0`, dialling on demand (the gate lets
//! the dial through, the peer manager closes the connection when it has been unused for a
//! while). Failed point-to-point sends come back as `Input::SendFailed`; broadcasts have no
//! per-recipient failure report, so the algorithms' own timeouts (T2, T3) cover lost ones.
//!
//! Coordinator silence is detected with the bully family's staggered T1
//! (`overlay::detect::stagger`): the driver runs the algorithm inside that wrapper, so a
//! follower that is not the highest below a silent coordinator waits T2 + T3 longer, and one
//! that does not hear the coordinator's every beat holds a failure report of it back while the
//! coordinator's successors notice and announce.

use crate::runtime::clock::Clock;
use libp2p::PeerId;
use overlay::core::TimerTable;
use overlay::detect::stagger::{hold_for, Staggered};
use overlay::{
    AnyElection, Context, Effect, Election, ElectionConfig, Input, Membership, Message, NodeId, Rank, Timer,
};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

/// Version of the broadcast frame (inside the signed envelope of `overlay::directory::broadcast`).
pub const BROADCAST_VERSION: u16 = 1;

/// Who a broadcast election message is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Recipients {
    /// Every member except the sender.
    All,
    /// Every member ranked above this rank.
    Above(Rank),
    /// Every member ranked below this rank.
    Below(Rank),
    /// These members.
    List(Vec<NodeId>),
}

impl Recipients {
    /// The most compact description of `to`, given the sender's view of the group.
    pub fn describe(group: &Membership, me: Rank, to: &[NodeId]) -> Recipients {
        let mut sorted: Vec<NodeId> = to.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let ids = |ranks: &[Rank]| {
            let mut v: Vec<NodeId> = ranks.iter().map(|r| r.id).collect();
            v.sort_unstable();
            v
        };
        let above = ids(group.higher(&me));
        if !above.is_empty() && above == sorted {
            return Recipients::Above(me);
        }
        let below = ids(group.lower(&me));
        if !below.is_empty() && below == sorted {
            return Recipients::Below(me);
        }
        if sorted.len() + 1 == group.len() && sorted.iter().all(|id| group.contains(id)) && !sorted.contains(&me.id) {
            return Recipients::All;
        }
        Recipients::List(sorted)
    }

    /// Is a node of rank `me` addressed?
    pub fn includes(&self, me: &Rank, sender: &NodeId) -> bool {
        match self {
            Recipients::All => me.id != *sender,
            Recipients::Above(r) => me > r,
            Recipients::Below(r) => me < r,
            Recipients::List(v) => v.contains(&me.id),
        }
    }
}

/// The payload of a signed broadcast on the gossipsub election topic: recipients plus one
/// `overlay::wire` frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BroadcastFrame {
    pub version: u16,
    pub to: Recipients,
    pub frame: Vec<u8>,
}

/// Sends grouped by message: `(message, recipients)` in first-seen order.
pub fn group_sends(effects: &[Effect]) -> Vec<(Message, Vec<NodeId>)> {
    let mut groups: Vec<(Message, Vec<NodeId>)> = Vec::new();
    for e in effects {
        if let Effect::Send { to, msg } = e {
            match groups.iter_mut().find(|(m, _)| m == msg) {
                Some((_, v)) => v.push(*to),
                None => groups.push((msg.clone(), vec![*to])),
            }
        }
    }
    groups
}

/// The state machine with its clock, RNG and timers.
pub struct ElectionDriver {
    election: Staggered<AnyElection>,
    clock: Clock,
    rng: StdRng,
    timers: TimerTable<Timer>,
    pub started: u64,
    pub won: u64,
}

impl ElectionDriver {
    pub fn new(me: Rank, cfg: &ElectionConfig, seed: u64, clock: Clock) -> Self {
        let group = Arc::new(Membership::new([me]));
        let election = Staggered::new(AnyElection::new(me, group.clone(), cfg), me, group, hold_for(cfg));
        ElectionDriver {
            election,
            clock,
            rng: StdRng::seed_from_u64(seed),
            timers: TimerTable::new(),
            started: 0,
            won: 0,
        }
    }

    pub fn group(&self) -> &Arc<Membership> {
        self.election.group()
    }
    pub fn leader(&self) -> Option<NodeId> {
        self.election.leader()
    }
    pub fn state(&self) -> &'static str {
        self.election.state()
    }
    pub fn in_election(&self) -> bool {
        self.election.in_election()
    }
    /// T1 expiries held back (`overlay::detect::stagger`).
    pub fn t1_held_back(&self) -> u64 {
        self.election.held_back
    }

    /// Feed one input; timer effects are applied here, all effects are returned.
    pub fn feed(&mut self, input: Input) -> Vec<Effect> {
        let now = self.clock.now();
        let mut effects = Vec::new();
        {
            let mut ctx = Context::new(now, &mut self.rng, &mut effects);
            self.election.handle(&mut ctx, input);
        }
        self.timers.apply_all(now, &effects);
        let me = self.election.id();
        for e in &effects {
            match e {
                Effect::ElectionStarted => self.started += 1,
                Effect::Leader(l) if *l == me => self.won += 1,
                _ => {}
            }
        }
        effects
    }

    /// The earliest armed timer.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.timers.next_deadline().map(|t| self.clock.instant(t))
    }

    /// Disarm and return the timers due at `now`, earliest first.
    pub fn take_due(&mut self, now: Instant) -> Vec<Timer> {
        self.timers.take_due(self.clock.at(now))
    }
}

/// A `NodeId` for a libp2p peer.
pub fn node_id(peer: &PeerId) -> NodeId {
    crate::directory::members::node_id_of(peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipients_are_compact_and_exact() {
        let r = |i| Rank::new(0, NodeId::from_u64(i));
        let g = Membership::new((1..=5).map(r));
        let me = r(3);
        assert_eq!(Recipients::describe(&g, me, &[r(4).id, r(5).id]), Recipients::Above(me));
        assert_eq!(Recipients::describe(&g, me, &[r(2).id, r(1).id]), Recipients::Below(me));
        assert_eq!(Recipients::describe(&g, me, &[r(1).id, r(2).id, r(4).id, r(5).id]), Recipients::All);
        assert_eq!(Recipients::describe(&g, me, &[r(5).id]), Recipients::List(vec![r(5).id]));
        assert!(Recipients::Above(me).includes(&r(4), &me.id));
        assert!(!Recipients::Above(me).includes(&r(2), &me.id));
        assert!(!Recipients::All.includes(&me, &me.id));
    }

    #[test]
    fn sends_group_by_message() {
        let a = NodeId::from_u64(1);
        let b = NodeId::from_u64(2);
        let effects = vec![
            Effect::Send { to: a, msg: Message::Election },
            Effect::Send { to: b, msg: Message::Election },
            Effect::Send { to: a, msg: Message::Answer },
            Effect::ElectionStarted,
        ];
        let g = group_sends(&effects);
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].1, vec![a, b]);
    }
}

//! Runs one `overlay` election state machine inside the node: clock, RNG, timers, and the
//! routing of its `Send` effects.
//!
//! The state machine is sans-IO ([`overlay::Election`]); this driver gives it a clock
//! (microseconds since the driver was created), a seeded RNG, and tokio-style timers with
//! the semantics of `overlay::driver` (re-arming replaces, cancelling an unarmed timer is a
//! no-op, a timer fires at most once per arming, dropping the driver drops its timers).
//!
//! Routing (choice recorded here; issue 3 leaves it open): an election must reach every
//! member although a node keeps only ~10 connections. The effects of one input are grouped
//! by message; a group whose recipients are mostly not connected and that has at least
//! `broadcast_min` recipients (a bully `Coordinator` to all lower processes, `Alive`
//! heartbeats, `Election` to all higher processes, `IamUp`) is published *once* on the
//! gossipsub election topic with a compact recipient set ([`Recipients`]: all, all ranked
//! above/below a rank, or a list), and every receiver checks whether it is addressed. Other
//! sends go point to point over `/peerage/election/2.0.0`, dialling on demand (the gate lets
//! the dial through, the peer manager closes the connection when it has been unused for a
//! while). Failed point-to-point sends come back as `Input::SendFailed`; broadcasts have no
//! per-recipient failure report, so the algorithms' own timeouts (T2, T3) cover lost ones.
//!
//! # Staggered coordinator-silence detection (bully and fast bully; session 3)
//! With heartbeats every follower arms T1 on the same `Alive`, so after a *silent* crash of
//! the coordinator (its sockets stay open, only silence tells) every survivor's T1 expires
//! within a few milliseconds and all of them hold an election at once: N(N-1)/2 `Election`s
//! and as many `Answer`s, most of them point to point over connections dialled on demand.
//! Measured on the shared 2-core machine at load ~21 (`scripts/failover.py`, fast bully,
//! SIGSTOP, 20 processes): 17 of 19 survivors started within 11 ms of each other; the
//! `Answer`s then arrived later than T2, so five processes announced themselves, and their
//! `Coordinator`s made higher processes hold elections again (40-62 `election_started`
//! lines per kill instead of 17, the last survivor 450 ms to 4 s late, over the
//! T1 + T2 + 2 RTT bound). The driver therefore staggers the detection: when T1 expires at
//! a follower that is *not* the highest member below the coordinator it names, the driver
//! holds the expiry back once, for T2 + T3, before it hands `Timer::T1` to the state
//! machine. The highest member below the coordinator (the one the election would choose)
//! detects at T1 as before, holds its election (one `Election`, to the silent coordinator),
//! and announces itself after T2; its `Coordinator` reaches the others within the T3 that
//! the algorithms already allow for a `Coordinator` to arrive, so they admit it (which
//! re-arms T1 and drops the held-back expiry) and never hold an election. If that member is
//! dead too, the others detect T2 + T3 later and elect as before. Any message that re-arms
//! or cancels T1 meanwhile cancels the hold.
//!
//! One more step is needed, because a follower whose expiry is held back still names the
//! silent coordinator, and the bully family treats a `Coordinator` from a process ranked
//! between itself and the coordinator it names as stale (it holds an election instead; a
//! guard against crossed announcements, `bully.rs`). Measured with the hold alone: 9 of the
//! 18 survivors held such elections on the successor's announcement and named it one T2
//! later, over the bound. So when that announcement arrives while the expiry is held back,
//! the driver first hands the held `Timer::T1` to the state machine and then the
//! `Coordinator`, in one step: the machine enters its election and admits the announcement
//! at once. The `Election`s (and the `election_started` report) of that zero-length
//! election are not sent: the announcement ended it before any answer could matter, and
//! sent they would only make the higher processes wait T4 for a `Nomination` that never
//! comes. To the state machine this is the loss of those messages, which every algorithm
//! already survives. The state machines are unchanged (the
//! simulator, which turns heartbeats off, is unaffected); only when the driver reports
//! coordinator silence differs, which is the failure detector's business. Failure reports
//! (`PeerDown`, after a closed connection and a failed redial) are not held back.

use libp2p::PeerId;
use overlay::{
    Algorithm, AnyElection, Context, Effect, Election, ElectionConfig, Input, Membership, Message, NodeId, Rank, Time,
    Timer,
};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Version of the broadcast envelope.
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

/// What travels on the gossipsub election topic: recipients plus one `overlay::wire` frame.
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
    election: AnyElection,
    me: Rank,
    epoch: Instant,
    rng: StdRng,
    timers: HashMap<Timer, Instant>,
    group: Arc<Membership>,
    /// Bully family with heartbeats: how long a T1 expiry is held back at a follower that is
    /// not the highest member below its coordinator (T2 + T3; see the module doc).
    t1_stagger: Option<std::time::Duration>,
    /// The armed T1 has been held back once already.
    t1_held: bool,
    pub started: u64,
    pub won: u64,
    /// T1 expiries held back (see the module doc).
    pub t1_held_back: u64,
    /// Held-back expiries delivered early because a successor's `Coordinator` arrived.
    pub t1_released_by_announcement: u64,
}

impl ElectionDriver {
    pub fn new(me: Rank, cfg: &ElectionConfig, seed: u64) -> Self {
        let group = Arc::new(Membership::new([me]));
        let bully_family = matches!(cfg.algorithm, Algorithm::Bully | Algorithm::FastBully);
        ElectionDriver {
            election: AnyElection::new(me, group.clone(), cfg),
            me,
            epoch: Instant::now(),
            rng: StdRng::seed_from_u64(seed),
            timers: HashMap::new(),
            group,
            t1_stagger: (bully_family && cfg.t1().is_some()).then(|| cfg.t2() + cfg.t3()),
            t1_held: false,
            started: 0,
            won: 0,
            t1_held_back: 0,
            t1_released_by_announcement: 0,
        }
    }

    pub fn me(&self) -> Rank {
        self.me
    }
    pub fn group(&self) -> &Arc<Membership> {
        &self.group
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

    /// Feed one input; timer effects are applied here, all effects are returned.
    pub fn feed(&mut self, input: Input) -> Vec<Effect> {
        if let Input::Membership(g) = &input {
            self.group = g.clone();
        }
        let now = Instant::now();
        let mut effects = Vec::new();
        if self.t1_held && self.announcement_over_suspect(&input) {
            // The held-back T1 expiry goes first, in the same step (see the module doc).
            self.timers.remove(&Timer::T1);
            self.t1_held = false;
            self.t1_released_by_announcement += 1;
            effects = self.run(now, Input::Timer(Timer::T1));
            effects.retain(|e| !matches!(e, Effect::Send { .. } | Effect::ElectionStarted));
            self.apply_timers(now, &effects);
        }
        let more = self.run(now, input);
        self.apply_timers(now, &more);
        effects.extend(more);
        effects
    }

    /// Run the state machine on one input.
    fn run(&mut self, now: Instant, input: Input) -> Vec<Effect> {
        let mut effects = Vec::new();
        let t = Time::from_micros(now.duration_since(self.epoch).as_micros().min(u64::MAX as u128) as u64);
        let mut ctx = Context::new(t, &mut self.rng, &mut effects);
        self.election.handle(&mut ctx, input);
        effects
    }

    /// Is `input` a `Coordinator` from a process ranked between this one and the coordinator
    /// it names (a successor's announcement, which a `Passive` process would treat as stale)?
    fn announcement_over_suspect(&self, input: &Input) -> bool {
        let Input::Message { from, msg: Message::Coordinator } = input else { return false };
        let (Some(s), Some(leader)) =
            (self.group.rank_of(from), self.election.leader().and_then(|l| self.group.rank_of(&l)))
        else {
            return false;
        };
        self.me < s && s < leader
    }

    /// Apply timer effects and count elections.
    fn apply_timers(&mut self, now: Instant, effects: &[Effect]) {
        for e in effects {
            match e {
                Effect::SetTimer { timer, after } => {
                    self.timers.insert(*timer, now + *after);
                    if *timer == Timer::T1 {
                        self.t1_held = false;
                    }
                }
                Effect::CancelTimer { timer } => {
                    self.timers.remove(timer);
                    if *timer == Timer::T1 {
                        self.t1_held = false;
                    }
                }
                Effect::ElectionStarted => self.started += 1,
                Effect::Leader(l) if *l == self.me.id => self.won += 1,
                _ => {}
            }
        }
    }

    /// The earliest armed timer.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.timers.values().min().copied()
    }

    /// Disarm and return the timers due at `now`, earliest first. A T1 expiry may be held
    /// back once instead (see the module doc).
    pub fn take_due(&mut self, now: Instant) -> Vec<Timer> {
        let mut due: Vec<(Instant, Timer)> =
            self.timers.iter().filter(|(_, d)| **d <= now).map(|(t, d)| (*d, *t)).collect();
        due.sort();
        for (_, t) in &due {
            self.timers.remove(t);
        }
        if let Some(hold) = self.t1_stagger {
            if due.iter().any(|(_, t)| *t == Timer::T1) && !self.t1_held && !self.first_to_detect() {
                due.retain(|(_, t)| *t != Timer::T1);
                self.timers.insert(Timer::T1, now + hold);
                self.t1_held = true;
                self.t1_held_back += 1;
            }
        }
        due.into_iter().map(|(_, t)| t).collect()
    }

    /// Is this process the highest member below the coordinator it names (or names none,
    /// or its coordinator is not in the group)? It then detects coordinator silence first.
    fn first_to_detect(&self) -> bool {
        let Some(leader) = self.election.leader().and_then(|l| self.group.rank_of(&l)) else {
            return true;
        };
        self.group.lower(&leader).last().is_none_or(|r| *r == self.me)
    }
}

/// A `NodeId` for a libp2p peer.
pub fn node_id(peer: &PeerId) -> NodeId {
    crate::directory::members::node_id_of(peer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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

    /// After a silent coordinator, only the highest member below it gets T1 at once; a lower
    /// follower's T1 is held back once for T2 + T3, and a re-arm (a `Coordinator` admitted)
    /// cancels the hold.
    #[test]
    fn t1_is_staggered_below_the_highest_follower() {
        let r = |i| Rank::new(i, NodeId::from_u64(i));
        let group = Arc::new(Membership::new((1..=3).map(r)));
        let cfg = ElectionConfig::for_algorithm(Algorithm::FastBully);
        let t1 = cfg.t1().expect("heartbeats on by default");
        let hold = cfg.t2() + cfg.t3();
        for (me, held) in [(1, true), (2, false)] {
            let mut d = ElectionDriver::new(r(me), &cfg, 7);
            d.feed(Input::Membership(group.clone()));
            d.feed(Input::Message { from: r(3).id, msg: Message::Coordinator });
            assert_eq!(d.leader(), Some(r(3).id));
            let t0 = Instant::now();
            let due = d.take_due(t0 + t1 + Duration::from_millis(50));
            if held {
                assert!(due.is_empty(), "process {me}: T1 must be held back, got {due:?}");
                assert_eq!(d.t1_held_back, 1);
                assert!(d.take_due(t0 + t1 + hold - Duration::from_millis(100)).is_empty());
                assert_eq!(d.take_due(t0 + t1 + hold + Duration::from_millis(100)), vec![Timer::T1]);
            } else {
                assert_eq!(due, vec![Timer::T1], "process {me} is the highest below the coordinator");
                assert_eq!(d.t1_held_back, 0);
            }
        }
        // The successor's `Coordinator` while the expiry is held: admitted at once (not taken
        // for a stale announcement), with no `Election` sent, and the hold is over.
        for algorithm in [Algorithm::Bully, Algorithm::FastBully] {
            let cfg = ElectionConfig::for_algorithm(algorithm);
            let mut d = ElectionDriver::new(r(1), &cfg, 7);
            d.feed(Input::Membership(group.clone()));
            d.feed(Input::Message { from: r(3).id, msg: Message::Coordinator });
            let t0 = Instant::now();
            assert!(d.take_due(t0 + t1 + Duration::from_millis(50)).is_empty());
            let out = d.feed(Input::Message { from: r(2).id, msg: Message::Coordinator });
            assert_eq!(d.leader(), Some(r(2).id), "{algorithm}: {out:?}");
            assert!(
                !out.iter().any(|e| matches!(e, Effect::Send { .. } | Effect::ElectionStarted)),
                "{algorithm}: {out:?}"
            );
            assert!(!d.t1_held);
            assert_eq!(d.t1_released_by_announcement, 1);
            assert_eq!(d.started, 0);
            // Without a hold the same announcement is treated as stale: an election.
            let mut d = ElectionDriver::new(r(1), &cfg, 7);
            d.feed(Input::Membership(group.clone()));
            d.feed(Input::Message { from: r(3).id, msg: Message::Coordinator });
            d.feed(Input::Message { from: r(2).id, msg: Message::Coordinator });
            assert_eq!(d.started, 1, "{algorithm}");
        }
        // Ring algorithms have no T1: nothing is ever held.
        let ring = ElectionDriver::new(r(1), &ElectionConfig::for_algorithm(Algorithm::Ring), 7);
        assert!(ring.t1_stagger.is_none());
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

//! Staggered coordinator-silence detection for the bully family: an [`Election`] wrapper that
//! holds a follower's T1 expiry back once, so that after a silent coordinator crash one
//! election runs instead of one per survivor.
//!
//! With heartbeats every follower arms T1 on the same `Alive`, so after a *silent* crash of the
//! coordinator (its sockets stay open, only silence tells) every survivor's T1 expires within
//! milliseconds and all of them hold an election at once: N(N-1)/2 `Election`s and as many
//! `Answer`s. On a loaded machine the `Answer`s then arrive after T2, several processes announce
//! themselves, and their `Coordinator`s make higher processes hold elections again.
//!
//! The rule (ours; Garcia-Molina's paper assumes a detector that reports the crash once): when
//! T1 expires at a follower that is *not* the highest member below the coordinator it names,
//! the expiry is held back once, for T2 + T3. The highest member below the coordinator (the one
//! the election would choose) detects at T1, holds its election and announces itself after T2;
//! its `Coordinator` reaches the others within the T3 the algorithms already allow for one, so
//! they admit it and never hold an election. If that member is dead too, the others detect
//! T2 + T3 later and elect as before. Any re-arm or cancel of T1 ends the hold.
//!
//! One more step: a follower whose expiry is held back still names the silent coordinator, and
//! the bully family takes a `Coordinator` from a process ranked between itself and the
//! coordinator it names for a stale announcement (it holds an election instead). So when such
//! an announcement arrives during the hold, the held T1 expiry is handed to the algorithm first
//! and then the `Coordinator`, in one step: the algorithm enters its election and admits the
//! announcement at once. The `Election`s (and the `ElectionStarted` report) of that zero-length
//! election are dropped; to the algorithm that is a loss of messages, which it survives.
//!
//! With the beat plan of `election::beats` only the coordinator's successors (two by default)
//! wait plain T1 and the others five times longer, so the hold matters for the second
//! successor and for seed 002's plan (`alive_all_every = 1`).
//!
//! **A failure report is held back too.** A killed coordinator's connections close, and the
//! few followers connected to it get `PeerDown` at once. Ranked anywhere, each of them would
//! hold an election that every process above it joins: at 1,000 nodes an election storm
//! (about 200,000 elections started, no coordinator after minutes). So a follower that does
//! not hear every beat of the coordinator (`election::beats`) holds `PeerDown(coordinator)`
//! back for T1 + T2 + T3: by then the successors noticed the silence (T1), the highest of them
//! announced (T2), and its `Coordinator`, which such a follower admits
//! (`election::bully::judge_claim`, `watched`), arrives. The held report is handed to the
//! algorithm when the hold ends, or at once when the algorithm re-arms or cancels T1 (it
//! admitted a coordinator, or heard from one); a `PeerUp` of the same process drops it. When
//! the successors are gone too, the report starts an election T1 + T2 + T3 late.
//!
//! The algorithms are unchanged; only when coordinator silence is reported differs.

use crate::driver::{Context, Effect, Election, Input, Timer};
use crate::election::beats::BeatPlan;
use crate::election::{Algorithm, ElectionConfig, Message};
use crate::id::{NodeId, Rank};
use crate::membership::Membership;
use std::sync::Arc;
use std::time::Duration;

/// An election whose T1 expiries are staggered (module doc).
#[derive(Debug, Clone)]
pub struct Staggered<E> {
    inner: E,
    me: Rank,
    group: Arc<Membership>,
    /// The holds; `None` when the rule does not apply.
    hold: Option<Hold>,
    /// The armed T1 has been held back once already.
    held: bool,
    /// A `PeerDown` of the coordinator, held back (module doc); T1 measures the hold.
    down_held: Option<NodeId>,
    /// T1 expiries held back.
    pub held_back: u64,
    /// Held-back expiries delivered early because a successor's `Coordinator` arrived.
    pub released_by_announcement: u64,
    /// Failure reports of the coordinator held back.
    pub downs_held: u64,
}

/// The holds of one configuration (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    /// A T1 expiry below the highest follower: T2 + T3.
    expiry: Duration,
    /// A failure report of the coordinator at a follower that does not hear its every beat:
    /// T1 + T2 + T3.
    report: Duration,
    /// The longest wait for a beat, re-armed when a held report is dropped.
    longest: Duration,
    plan: BeatPlan,
}

/// The holds of `cfg`'s algorithm: for the bully family with heartbeats, else none.
pub fn hold_for(cfg: &ElectionConfig) -> Option<Hold> {
    let bully_family = matches!(cfg.algorithm, Algorithm::Bully | Algorithm::FastBully);
    let (t1, longest) = cfg.t1().zip(cfg.t1_longest())?;
    bully_family.then(|| Hold {
        expiry: cfg.t2() + cfg.t3(),
        report: t1 + cfg.t2() + cfg.t3(),
        longest,
        plan: BeatPlan::new(cfg),
    })
}

impl<E: Election> Staggered<E> {
    pub fn new(inner: E, me: Rank, group: Arc<Membership>, hold: Option<Hold>) -> Self {
        Staggered {
            inner,
            me,
            group,
            hold,
            held: false,
            down_held: None,
            held_back: 0,
            released_by_announcement: 0,
            downs_held: 0,
        }
    }

    pub fn inner(&self) -> &E {
        &self.inner
    }

    pub fn group(&self) -> &Arc<Membership> {
        &self.group
    }

    /// Whether a T1 expiry is being held back now.
    pub fn holding(&self) -> bool {
        self.held
    }

    /// Whether the rule applies at all.
    pub fn staggers(&self) -> bool {
        self.hold.is_some()
    }

    /// Is this process the highest member below the coordinator it names (or names none, or
    /// its coordinator is not in the group)? It then detects coordinator silence first.
    fn first_to_detect(&self) -> bool {
        let Some(leader) = self.inner.leader().and_then(|l| self.group.rank_of(&l)) else {
            return true;
        };
        self.group.lower(&leader).last().is_none_or(|r| *r == self.me)
    }

    /// Is `input` a `Coordinator` from a process ranked between this one and the coordinator
    /// it names (a successor's announcement, which a `Passive` process would take for stale)?
    fn announcement_over_suspect(&self, input: &Input) -> bool {
        let Input::Message { from, msg: Message::Coordinator } = input else { return false };
        let (Some(s), Some(leader)) =
            (self.group.rank_of(from), self.inner.leader().and_then(|l| self.group.rank_of(&l)))
        else {
            return false;
        };
        self.me < s && s < leader
    }

    /// Should a `PeerDown` of `down` be held back? When it names the coordinator this process
    /// follows and this process does not hear the coordinator's every beat.
    fn holds_report(&self, down: &NodeId) -> Option<Duration> {
        let hold = self.hold?;
        if self.held || self.down_held.is_some() || self.inner.in_election() || self.inner.leader() != Some(*down) {
            return None;
        }
        let leader = self.group.rank_of(down)?;
        (*down != self.me.id && !hold.plan.hears_every_beat(&self.group, &self.me, &leader)).then_some(hold.report)
    }

    /// A re-arm or cancel of T1 by the algorithm ends the hold.
    fn observe(&mut self, effects: &[Effect]) -> bool {
        let t1 = effects
            .iter()
            .any(|e| matches!(e, Effect::SetTimer { timer: Timer::T1, .. } | Effect::CancelTimer { timer: Timer::T1 }));
        if t1 {
            self.held = false;
        }
        t1
    }

    /// Hand the algorithm `input`, and then a held report if its T1 moved meanwhile.
    fn pass(&mut self, ctx: &mut Context<'_>, input: Input) {
        let start = ctx.effects().len();
        self.inner.handle(ctx, input);
        if self.observe(&ctx.effects()[start..]) {
            if let Some(down) = self.down_held.take() {
                self.inner.handle(ctx, Input::PeerDown(down));
            }
        }
    }
}

/// Appends `e` to `ctx` through the context's own calls.
fn forward(ctx: &mut Context<'_>, e: Effect) {
    match e {
        Effect::Send { to, msg } => ctx.send(to, msg),
        Effect::SetTimer { timer, after } => ctx.set_timer(timer, after),
        Effect::CancelTimer { timer } => ctx.cancel_timer(timer),
        Effect::Leader(l) => ctx.decide(l),
        Effect::ElectionStarted => ctx.started(),
        Effect::Rejected { from, reason, offence } => ctx.push_rejected(from, reason, offence),
    }
}

impl<E: Election> Election for Staggered<E> {
    fn id(&self) -> NodeId {
        self.inner.id()
    }

    fn handle(&mut self, ctx: &mut Context<'_>, input: Input) {
        if let Input::Membership(g) = &input {
            self.group = g.clone();
        }
        match &input {
            Input::PeerDown(down) => {
                if let Some(wait) = self.holds_report(down) {
                    self.down_held = Some(*down);
                    self.downs_held += 1;
                    ctx.set_timer(Timer::T1, wait);
                    return;
                }
            }
            Input::PeerUp(up) if self.down_held == Some(*up) => {
                // The report was wrong: drop it, and wait for a beat as long as any follower.
                self.down_held = None;
                if let Some(hold) = self.hold {
                    ctx.set_timer(Timer::T1, hold.longest);
                }
            }
            Input::Timer(Timer::T1) => {
                if let Some(down) = self.down_held.take() {
                    self.pass(ctx, Input::PeerDown(down));
                    return;
                }
            }
            _ => {}
        }
        if let (Input::Timer(Timer::T1), Some(hold)) = (&input, self.hold) {
            if !self.held && !self.first_to_detect() {
                self.held = true;
                self.held_back += 1;
                ctx.set_timer(Timer::T1, hold.expiry);
                return;
            }
        }
        if self.held && self.announcement_over_suspect(&input) {
            // The held-back expiry goes first, in the same step, without its sends.
            ctx.cancel_timer(Timer::T1);
            self.held = false;
            self.released_by_announcement += 1;
            let mut first = Vec::new();
            {
                let mut inner = Context::new(ctx.now, &mut *ctx.rng, &mut first);
                self.inner.handle(&mut inner, Input::Timer(Timer::T1));
            }
            first.retain(|e| !matches!(e, Effect::Send { .. } | Effect::ElectionStarted));
            self.observe(&first);
            for e in first {
                forward(ctx, e);
            }
        }
        self.pass(ctx, input);
    }

    fn leader(&self) -> Option<NodeId> {
        self.inner.leader()
    }

    fn state(&self) -> &'static str {
        self.inner.state()
    }

    fn in_election(&self) -> bool {
        self.inner.in_election()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::TimerTable;
    use crate::election::AnyElection;
    use crate::time::Time;
    use rand::SeedableRng;

    /// A node's election with its timers, as the node's driver runs it.
    struct Pump {
        e: Staggered<AnyElection>,
        timers: TimerTable<Timer>,
        rng: rand_chacha::ChaCha8Rng,
        started: u64,
    }

    impl Pump {
        fn new(me: Rank, cfg: &ElectionConfig) -> Pump {
            let group = Arc::new(Membership::new([me]));
            let e = Staggered::new(AnyElection::new(me, group.clone(), cfg), me, group, hold_for(cfg));
            Pump { e, timers: TimerTable::new(), rng: rand_chacha::ChaCha8Rng::seed_from_u64(7), started: 0 }
        }
        fn feed(&mut self, now: Time, input: Input) -> Vec<Effect> {
            let mut fx = Vec::new();
            let mut ctx = Context::new(now, &mut self.rng, &mut fx);
            self.e.handle(&mut ctx, input);
            self.timers.apply_all(now, &fx);
            self.started += fx.iter().filter(|e| matches!(e, Effect::ElectionStarted)).count() as u64;
            fx
        }
        fn fire(&mut self, now: Time) -> Vec<Timer> {
            let due = self.timers.take_due(now);
            for t in &due {
                self.feed(now, Input::Timer(*t));
            }
            due
        }
    }

    /// After a silent coordinator, only the highest member below it gets T1 at once; a lower
    /// follower's T1 is held back once for T2 + T3; a successor's `Coordinator` during the hold
    /// is admitted at once with no `Election` sent.
    #[test]
    fn t1_is_staggered_below_the_highest_follower() {
        let r = |i| Rank::new(i, NodeId::from_u64(i));
        let group = Arc::new(Membership::new((1..=3).map(r)));
        let cfg = ElectionConfig::for_algorithm(Algorithm::FastBully);
        let t1 = cfg.t1().expect("heartbeats on by default");
        let hold = cfg.t2() + cfg.t3();
        let t0 = Time::from_millis(1_000);
        let ms = Duration::from_millis;
        for (me, held) in [(1, true), (2, false)] {
            let mut p = Pump::new(r(me), &cfg);
            p.feed(t0, Input::Membership(group.clone()));
            p.feed(t0, Input::Message { from: r(3).id, msg: Message::Coordinator });
            assert_eq!(p.e.leader(), Some(r(3).id));
            let fired = p.fire(t0 + t1 + ms(50));
            assert_eq!(fired, vec![Timer::T1]);
            if held {
                assert_eq!(p.e.held_back, 1, "process {me}: T1 must be held back");
                assert_eq!(p.started, 0);
                assert!(p.fire(t0 + (t1 + hold - ms(100))).is_empty());
                assert_eq!(p.fire(t0 + (t1 + hold + ms(100))), vec![Timer::T1]);
                assert_eq!(p.started, 1, "detected T2 + T3 later");
            } else {
                assert_eq!(p.e.held_back, 0, "process {me} is the highest below the coordinator");
                assert_eq!(p.started, 1);
            }
        }
        for algorithm in [Algorithm::Bully, Algorithm::FastBully] {
            let cfg = ElectionConfig::for_algorithm(algorithm);
            let mut p = Pump::new(r(1), &cfg);
            p.feed(t0, Input::Membership(group.clone()));
            p.feed(t0, Input::Message { from: r(3).id, msg: Message::Coordinator });
            p.fire(t0 + t1 + ms(50));
            assert!(p.e.holding());
            let out = p.feed(t0 + t1 + ms(60), Input::Message { from: r(2).id, msg: Message::Coordinator });
            assert_eq!(p.e.leader(), Some(r(2).id), "{algorithm}: {out:?}");
            assert!(!out.iter().any(|e| matches!(e, Effect::Send { .. } | Effect::ElectionStarted)), "{out:?}");
            assert!(!p.e.holding());
            assert_eq!(p.e.released_by_announcement, 1);
            assert_eq!(p.started, 0);
            // Without the rule the same announcement is taken for stale: an election.
            let mut q = Pump::new(r(1), &cfg);
            q.e.hold = None;
            q.feed(t0, Input::Membership(group.clone()));
            q.feed(t0, Input::Message { from: r(3).id, msg: Message::Coordinator });
            q.feed(t0, Input::Message { from: r(2).id, msg: Message::Coordinator });
            assert_eq!(q.started, 1, "{algorithm}");
        }
        assert!(hold_for(&ElectionConfig::for_algorithm(Algorithm::Ring)).is_none(), "rings have no T1");
    }

    /// A `PeerDown` of the coordinator at a follower that does not hear its every beat is held
    /// back T1 + T2 + T3: a successor's `Coordinator` meanwhile is admitted with no election;
    /// without one the report starts an election when the hold ends; a `PeerUp` drops it. A
    /// successor's report starts its election at once.
    #[test]
    fn a_report_of_the_coordinator_waits_for_its_successors() {
        let r = |i| Rank::new(i, NodeId::from_u64(i));
        let group = Arc::new(Membership::new((1..=6).map(r)));
        let t0 = Time::from_millis(1_000);
        let ms = Duration::from_millis;
        for algorithm in [Algorithm::Bully, Algorithm::FastBully] {
            let cfg = ElectionConfig::for_algorithm(algorithm);
            let wait = cfg.t1().expect("heartbeats on by default") + cfg.t2() + cfg.t3();
            let follower = |me| {
                let mut p = Pump::new(r(me), &cfg);
                p.feed(t0, Input::Membership(group.clone()));
                p.feed(t0, Input::Message { from: r(6).id, msg: Message::Coordinator });
                assert_eq!(p.e.leader(), Some(r(6).id));
                p
            };
            // The successor's announcement arrives during the hold.
            let mut p = follower(1);
            let out = p.feed(t0 + ms(10), Input::PeerDown(r(6).id));
            assert_eq!(out, vec![Effect::SetTimer { timer: Timer::T1, after: wait }], "{algorithm}");
            assert_eq!((p.started, p.e.downs_held), (0, 1), "{algorithm}");
            let out = p.feed(t0 + ms(3_500), Input::Message { from: r(5).id, msg: Message::Coordinator });
            assert_eq!(p.e.leader(), Some(r(5).id), "{algorithm}: {out:?}");
            assert!(!out.iter().any(|e| matches!(e, Effect::Send { .. })), "{algorithm}: {out:?}");
            assert!(p.fire(t0 + wait + ms(20)).is_empty(), "{algorithm}: T1 re-armed for the new coordinator");
            assert_eq!(p.started, 0, "{algorithm}: no election");
            // Nobody announces: the report starts an election when the hold ends.
            let mut p = follower(1);
            p.feed(t0 + ms(10), Input::PeerDown(r(6).id));
            assert!(p.fire(t0 + wait).is_empty(), "{algorithm}");
            assert_eq!(p.fire(t0 + wait + ms(20)), vec![Timer::T1], "{algorithm}");
            assert_eq!(p.started, 1, "{algorithm}: the held report, handed on");
            // The report is taken back.
            let mut p = follower(1);
            p.feed(t0 + ms(10), Input::PeerDown(r(6).id));
            let out = p.feed(t0 + ms(20), Input::PeerUp(r(6).id));
            let longest = cfg.t1_longest().expect("heartbeats on");
            assert!(out.contains(&Effect::SetTimer { timer: Timer::T1, after: longest }), "{algorithm}: {out:?}");
            p.fire(t0 + wait + ms(20));
            assert_eq!((p.started, p.e.leader()), (0, Some(r(6).id)), "{algorithm}");
            // A successor of the coordinator is not held.
            let mut p = follower(5);
            p.feed(t0 + ms(10), Input::PeerDown(r(6).id));
            assert_eq!((p.started, p.e.downs_held), (1, 0), "{algorithm}");
        }
    }
}

//! Leader liveness for the algorithms that have none of their own (the list ring,
//! Chang-Roberts, Villadangos): seed 002's heartbeat, wrapped around the algorithm.
//!
//! With heartbeats on (`cfg.alive_interval()`), a process that names itself leader sends
//! `Alive` each alive interval (also while its own announcement lap is still out). A process
//! that names another leader and is not in an election arms T1 (alive interval x error
//! factor, seed 002) and re-arms it on every message from that leader. When T1 expires the
//! leader is silent (crashed unreported, frozen, or cut off): the algorithm holds a new
//! election that skips it ([`LeaderSilence`]). Silence is not a failure report: the skip
//! lasts that one election, so a leader that was only frozen takes part in the next one.
//!
//! **Who hears each beat** ([`super::beats`], shared with the bully family): every member
//! on one beat in `alive_all_every`, the leader's `alive_successors` just below it on every
//! beat; a member that does not hear every beat waits T1 x `alive_all_every`.
//!
//! **The orphan rule** (`ElectionConfig::orphans`): a process that names no leader outside
//! an election (it was never reached by one, or a partition cut it off before the result
//! came) holds an election after T1 too. In a node the rule applies only once the process has
//! named a leader or taken part in an election ([`Orphans::AfterFirstElection`]): its start
//! policy (`detect::start`) starts the first election once the member directory settled,
//! where T1 from the group's first arrival would start elections over the partial groups of
//! a swarm still forming ([`ElectionConfig::with_start_policy`]).
//!
//! `Alive` from a process this one does not follow, ranked above the leader it names (or
//! when it names none), means two leaders can see each other: after a heal, a thaw, or an
//! announcement that was lost. The sender lives: the algorithm stops suspecting it
//! ([`LeaderSilence::alive`]; a failure report still stands until `PeerUp`), so the election
//! that follows does not skip it again. Outside an election the process then holds one (`Start`),
//! which the ring algorithms run over everyone reachable, so the components merge under the
//! best leader. `Alive` from a lower process is left alone: that process hears the higher
//! leader's `Alive` itself. Convergence after a heal therefore takes one alive interval, the
//! detector's delay, and one election.
//!
//! A partitioned minority elects its own leader (each side's T1 expires, or its
//! `PeerDown` reports arrive): the algorithms here favour availability, like Vasudevan et
//! al.'s echo election, and the heal merges the sides as above.
//!
//! The wrapped algorithm never sees `Alive`, T1 or `Heartbeat`; everything else passes
//! through unchanged. With heartbeats off the wrapper only forwards.

use crate::driver::{Context, Election, Input, Timer};
use crate::election::beats::BeatPlan;
use crate::election::down::Down;
use crate::election::{ElectionConfig, Message, Orphans};
use crate::id::NodeId;
use crate::membership::Membership;
use std::sync::Arc;
use std::time::Duration;

/// How an algorithm reacts to its leader's silence.
pub trait LeaderSilence: Election {
    /// The leader this process names (`leader`) was silent for T1: hold a new election that
    /// skips it, for that election only.
    fn leader_silent(&mut self, ctx: &mut Context<'_>, leader: NodeId);

    /// `from` sent an `Alive`: it lives, whatever this process suspected from its silence or
    /// from failed sends (a failure report stands until `PeerUp`).
    fn alive(&mut self, _from: NodeId) {}
}

/// What T1 is measuring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watch {
    /// Nothing (this process leads, is in an election, or heartbeats are off).
    Nothing,
    /// The silence of the leader this process follows.
    Leader(NodeId),
    /// How long this process has named no leader, outside any election.
    Orphan,
}

/// An election wrapped with the leader-liveness rule.
#[derive(Debug, Clone)]
pub struct Watched<E> {
    inner: E,
    me: NodeId,
    group: Arc<Membership>,
    /// The `Alive` period and T1; `None` when heartbeats are off.
    timing: Option<(Duration, Duration)>,
    /// When the orphan rule applies (module doc).
    orphans: Orphans,
    /// This process has named a leader or taken part in an election.
    reached: bool,
    /// What T1 is measuring.
    watch: Watch,
    /// This process sends `Alive` (it leads, and no election runs).
    beating: bool,
    /// Members the driver reported down (they get no `Alive`).
    down: Down,
    /// Who hears each beat (module doc).
    plan: BeatPlan,
    /// Beats sent since this process became leader.
    beats: u64,
}

impl<E: LeaderSilence> Watched<E> {
    pub fn new(inner: E, group: Arc<Membership>, cfg: &ElectionConfig) -> Self {
        let timing = cfg.alive_interval().zip(cfg.t1());
        Watched {
            me: inner.id(),
            inner,
            group,
            timing,
            orphans: cfg.orphans,
            reached: false,
            watch: Watch::Nothing,
            beating: false,
            down: Down::default(),
            plan: BeatPlan::new(cfg),
            beats: 0,
        }
    }

    /// T1 for a follower of `leader` ([`BeatPlan::t1`]).
    fn t1_for(&self, leader: &NodeId) -> Option<Duration> {
        let (_, t1) = self.timing?;
        let (Some(l), Some(me)) = (self.rank_of(leader), self.rank_of(&self.me)) else { return Some(t1) };
        Some(self.plan.t1(&self.group, &me, &l, t1))
    }

    /// Arm T1 for what is watched now.
    fn arm_t1(&self, ctx: &mut Context<'_>) {
        let t1 = match self.watch {
            Watch::Nothing => None,
            Watch::Leader(l) => self.t1_for(&l),
            Watch::Orphan => self.timing.map(|(_, t1)| t1),
        };
        if let Some(t1) = t1 {
            ctx.set_timer(Timer::T1, t1);
        }
    }

    /// The wrapped algorithm.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    fn rank_of(&self, id: &NodeId) -> Option<crate::id::Rank> {
        self.group.rank_of(id)
    }

    fn on_alive(&mut self, ctx: &mut Context<'_>, from: NodeId) {
        if from == self.me {
            ctx.reject(from, "Alive claims to come from this process");
            return;
        }
        let Some(sender) = self.rank_of(&from) else {
            ctx.reject(from, "Alive from a process outside the group");
            return;
        };
        if self.watch == Watch::Leader(from) {
            self.arm_t1(ctx);
            return;
        }
        self.inner.alive(from);
        if self.inner.in_election() || self.inner.leader() == Some(from) {
            return;
        }
        let above = match self.inner.leader() {
            None => true,
            Some(l) => self.rank_of(&l).is_none_or(|l| sender > l),
        };
        if above {
            self.inner.handle(ctx, Input::Start);
        }
    }

    /// Arm or disarm the heartbeat and T1 after the algorithm handled an input.
    fn sync(&mut self, ctx: &mut Context<'_>) {
        let Some((alive, _)) = self.timing else { return };
        let busy = self.inner.in_election();
        let leader = self.inner.leader();
        self.reached |= busy || leader.is_some();
        let orphan_rule = self.orphans.apply(self.reached);
        let leads = leader == Some(self.me);
        if leads != self.beating {
            self.beating = leads;
            if leads {
                self.beats = 0;
                ctx.set_timer(Timer::Heartbeat, alive);
            } else {
                ctx.cancel_timer(Timer::Heartbeat);
            }
        }
        let watch = match leader {
            _ if busy => Watch::Nothing,
            Some(l) if l == self.me => Watch::Nothing,
            Some(l) => Watch::Leader(l),
            None if orphan_rule => Watch::Orphan,
            None => Watch::Nothing,
        };
        if watch != self.watch {
            self.watch = watch;
            if watch == Watch::Nothing {
                ctx.cancel_timer(Timer::T1);
            } else {
                self.arm_t1(ctx);
            }
        }
    }

    fn beat(&mut self, ctx: &mut Context<'_>) {
        let Some((alive, _)) = self.timing else { return };
        if !self.beating {
            return;
        }
        let me = self.rank_of(&self.me);
        let everyone = self.group.ranks().iter().filter(|r| r.id != self.me && !self.down.contains(&r.id));
        self.plan.send_beat(ctx, self.beats, &self.group, me.as_ref(), &self.down, everyone);
        self.beats += 1;
        ctx.set_timer(Timer::Heartbeat, alive);
    }
}

impl<E> std::ops::Deref for Watched<E> {
    type Target = E;
    fn deref(&self) -> &E {
        &self.inner
    }
}

impl<E: LeaderSilence> Election for Watched<E> {
    fn id(&self) -> NodeId {
        self.me
    }

    fn handle(&mut self, ctx: &mut Context<'_>, input: Input) {
        match input {
            Input::Message { from, msg: Message::Alive } => self.on_alive(ctx, from),
            Input::Timer(Timer::T1) => match std::mem::replace(&mut self.watch, Watch::Nothing) {
                Watch::Leader(l) => self.inner.leader_silent(ctx, l),
                // No leader for T1 and no election: hold one.
                Watch::Orphan => self.inner.handle(ctx, Input::Start),
                Watch::Nothing => {}
            },
            Input::Timer(Timer::Heartbeat) => self.beat(ctx),
            Input::Message { from, msg } => {
                if self.watch == Watch::Leader(from) {
                    self.arm_t1(ctx);
                }
                self.inner.handle(ctx, Input::Message { from, msg });
            }
            Input::PeerDown(p) => {
                if p != self.me {
                    self.down.insert(&self.group, p);
                }
                self.inner.handle(ctx, Input::PeerDown(p));
            }
            Input::PeerUp(p) => {
                self.down.remove(&p);
                self.inner.handle(ctx, Input::PeerUp(p));
            }
            Input::Membership(g) => {
                self.group = g.clone();
                self.down.retain_members(&self.group);
                self.inner.handle(ctx, Input::Membership(g));
            }
            Input::Recover => {
                self.down.clear();
                self.inner.handle(ctx, Input::Recover);
            }
            other => self.inner.handle(ctx, other),
        }
        self.sync(ctx);
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
    use crate::driver::Effect;
    use crate::election::{Algorithm, AnyElection};
    use crate::id::Rank;
    use crate::testkit::{feed, Net};
    use crate::time::Time;

    const RINGS: [Algorithm; 3] = [Algorithm::Ring, Algorithm::ChangRoberts, Algorithm::Villadangos];

    /// The algorithms whose leader beats by `election::beats`: the ring family (this wrapper)
    /// and the bully family (its own heartbeat).
    fn beating() -> impl Iterator<Item = Algorithm> {
        Algorithm::ALL.into_iter().filter(|a| a.beats_to_successors())
    }

    /// An upper bound on one election over `n` processes whose higher ones are all silent:
    /// a few laps of 1 ms hops for the ring family, T2 (no answer) for the bully family.
    fn one_election(a: Algorithm, n: usize) -> Duration {
        let wait = if a.is_quadratic() { cfg(a).t2() } else { Duration::from_millis(100) };
        wait + Duration::from_millis(10 * n as u64)
    }

    fn cfg(a: Algorithm) -> ElectionConfig {
        ElectionConfig { alive_interval_ms: 100, alive_error_factor: 3, ..ElectionConfig::for_algorithm(a) }
    }

    /// Run `net` for `ms` more virtual milliseconds (heartbeats never let it go quiet).
    fn run_for(net: &mut Net, ms: u64) {
        let until = net.now + Duration::from_millis(ms);
        net.run_until_quiet(until);
    }

    /// A leader that stops without any report (a frozen or silently dead process) is noticed
    /// by T1 and replaced, for every algorithm that beats; without heartbeats the followers
    /// would name it for good.
    #[test]
    fn silent_leader_is_replaced_within_t1_and_one_election() {
        for a in beating() {
            for n in [2usize, 3, 5, 9] {
                let mut net = Net::new(n, cfg(a));
                net.start_all();
                run_for(&mut net, 2_000);
                assert!(net.all_agree_on(net.id(n - 1)), "{a} n={n}: first election {:?}", net.leaders());
                let beats = net.sent_of("Alive");
                assert!(beats > 0, "{a} n={n}: the leader beats");
                // Silent crash: nothing reports it.
                net.crash(n - 1);
                let crashed_at = net.now;
                run_for(&mut net, 2_000);
                assert!(net.all_agree_on(net.id(n - 2)), "{a} n={n}: after the silent crash {:?}", net.leaders());
                let took = net.last_decision.since(crashed_at);
                // T1 = 300 ms, plus one election.
                assert!(took <= Duration::from_millis(300) + one_election(a, n), "{a} n={n}: took {took:?}");
            }
        }
    }

    /// The leader's beats: every beat to the two members just below it, one in five to
    /// everyone; with `alive_all_every = 1` every beat to everyone.
    #[test]
    fn each_beat_reaches_the_successors_and_one_in_five_everyone() {
        for a in beating() {
            let n = 6;
            for all_every in [5u64, 1] {
                let mut net = Net::new(n, ElectionConfig { alive_all_every: all_every, ..cfg(a) });
                net.start_all();
                run_for(&mut net, 2_000);
                assert!(net.all_agree_on(net.id(n - 1)), "{a}: {:?}", net.leaders());
                let mut leader = net.process(n - 1).clone();
                let mut seen = Vec::new();
                for beat in 0..10 {
                    let to: Vec<NodeId> = feed(&mut leader, Input::Timer(Timer::Heartbeat))
                        .into_iter()
                        .filter_map(|e| match e {
                            Effect::Send { to, msg: Message::Alive } => Some(to),
                            _ => None,
                        })
                        .collect();
                    if to.len() < n - 1 {
                        assert_eq!(to, vec![net.id(n - 2), net.id(n - 3)], "{a} beat {beat}: the successors");
                    }
                    seen.push(to.len());
                }
                let everyone: Vec<usize> = (0..10).filter(|&i| seen[i] == n - 1).collect();
                if all_every == 1 {
                    assert_eq!(everyone.len(), 10, "{a}: {seen:?}");
                } else {
                    assert_eq!(everyone.len(), 2, "{a}: {seen:?}");
                    assert_eq!(everyone[1] - everyone[0], 5, "{a}: {seen:?}");
                }
            }
        }
    }

    /// When the leader and both its successors stop at once (a partition that leaves the
    /// others alone), the others notice by themselves after T1 x 5 and elect among themselves;
    /// a leader alone stopping is noticed by its successors after T1 (the test above).
    #[test]
    fn the_others_notice_after_the_longer_wait_when_the_successors_are_gone_too() {
        for a in beating() {
            let n = 6;
            let mut net = Net::new(n, cfg(a));
            net.start_all();
            run_for(&mut net, 2_000);
            assert!(net.all_agree_on(net.id(n - 1)), "{a}: first election {:?}", net.leaders());
            for i in [n - 1, n - 2, n - 3] {
                net.crash(i);
            }
            let crashed_at = net.now;
            run_for(&mut net, 4_000);
            assert!(net.all_agree_on(net.id(n - 4)), "{a}: {:?}", net.leaders());
            let took = net.last_decision.since(crashed_at);
            // T1 x 5 = 1.5 s after the last beat to everyone, which came at most 400 ms before
            // the crash (one in five beats of 100 ms), plus one election.
            assert!(took >= Duration::from_millis(1_000), "{a}: took {took:?}: the others waited T1 only");
            assert!(took <= Duration::from_millis(1_500) + one_election(a, n), "{a}: took {took:?}");
        }
    }

    /// Two leaders that can hear each other (a heal) merge: the lower one's side holds an
    /// election on the higher one's `Alive`, and everyone ends with the highest.
    #[test]
    fn alive_from_a_higher_process_merges_two_leaders() {
        for a in RINGS {
            let n = 4;
            let ranks: Vec<Rank> = (0..n).map(|i| Rank::new(0, NodeId::from_u64(i as u64 + 1))).collect();
            let group = Arc::new(Membership::new(ranks.clone()));
            // Process 1 leads a side of its own (it never heard of 3).
            let mut p = AnyElection::new(ranks[1], group.clone(), &cfg(a));
            feed(&mut p, Input::PeerDown(ranks[2].id));
            feed(&mut p, Input::PeerDown(ranks[3].id));
            feed(&mut p, Input::PeerDown(ranks[0].id));
            feed(&mut p, Input::Start);
            // Alone (everyone else reported down), it names itself.
            assert_eq!(p.leader(), Some(ranks[1].id), "{a}");
            // The heal: the others come back, and the highest's heartbeat arrives.
            for r in [0usize, 2, 3] {
                feed(&mut p, Input::PeerUp(ranks[r].id));
            }
            let out = feed(&mut p, Input::Message { from: ranks[3].id, msg: Message::Alive });
            let started = out.contains(&Effect::ElectionStarted) || p.in_election();
            assert!(started, "{a}: a higher leader's Alive starts an election: {out:?}");
            // A lower process's Alive changes nothing.
            let mut q = AnyElection::new(ranks[3], group.clone(), &cfg(a));
            feed(&mut q, Input::Start);
            let mut net = Net::with_ranks(ranks.clone(), cfg(a));
            net.start_all();
            run_for(&mut net, 2_000);
            assert!(net.all_agree_on(ranks[3].id), "{a}");
            let before = (net.process(3).leader(), net.process(3).in_election());
            net.input(3, Input::Message { from: ranks[1].id, msg: Message::Alive });
            assert_eq!(before, (net.process(3).leader(), net.process(3).in_election()), "{a}");
        }
    }

    /// A leader that fell silent (frozen, cut off) and speaks again is no longer skipped: the
    /// election its `Alive` starts includes it (Villadangos kept it as the suspect of every
    /// later epoch, so a thawed leader was left out for good).
    #[test]
    fn a_silent_leader_that_speaks_again_is_not_skipped() {
        let a = Algorithm::Villadangos;
        let ranks: Vec<Rank> = (0..4).map(|i| Rank::new(0, NodeId::from_u64(i + 1))).collect();
        let group = Arc::new(Membership::new(ranks.clone()));
        let mut p = AnyElection::new(ranks[0], group, &cfg(a));
        let announce = |epoch, l: usize| Input::Message {
            from: ranks[l].id,
            msg: Message::VillLeader { epoch, leader: ranks[l] },
        };
        feed(&mut p, announce(1, 3));
        assert_eq!(p.leader(), Some(ranks[3].id));
        // Silence: the next epoch skips 3 (its `Message1` goes to 2, the next below on the
        // ring after the wrap).
        let out = feed(&mut p, Input::Timer(Timer::T1));
        let first_to = |out: &[Effect]| {
            out.iter().find_map(|e| match e {
                Effect::Send { to, msg: Message::Message1 { .. } } => Some(*to),
                _ => None,
            })
        };
        assert_eq!(first_to(&out), Some(ranks[2].id), "{out:?}");
        feed(&mut p, announce(2, 2));
        assert_eq!(p.leader(), Some(ranks[2].id));
        // 3 speaks again: the election its Alive starts goes to it.
        let out = feed(&mut p, Input::Message { from: ranks[3].id, msg: Message::Alive });
        assert_eq!(first_to(&out), Some(ranks[3].id), "{out:?}");
    }

    /// A process that names no leader and is in no election holds one after T1 (a partition
    /// cut it off before any election reached it).
    #[test]
    fn no_leader_for_t1_starts_an_election() {
        for a in RINGS {
            let ranks: Vec<Rank> = (0..3).map(|i| Rank::new(0, NodeId::from_u64(i + 1))).collect();
            let group = Arc::new(Membership::new(ranks.clone()));
            let mut p = AnyElection::new(ranks[0], group, &cfg(a));
            let out = feed(&mut p, Input::PeerDown(ranks[2].id));
            assert!(
                out.contains(&Effect::SetTimer { timer: Timer::T1, after: Duration::from_millis(300) }),
                "{a}: {out:?}"
            );
            let out = feed(&mut p, Input::Timer(Timer::T1));
            assert!(out.contains(&Effect::ElectionStarted), "{a}: {out:?}");
        }
    }

    /// Heartbeats off: the wrapper only forwards (no `Alive`, no T1).
    #[test]
    fn heartbeats_off_adds_nothing() {
        for a in RINGS {
            let mut net = Net::new(5, ElectionConfig { alive_interval_ms: 0, ..ElectionConfig::for_algorithm(a) });
            net.start_at(Time::ZERO, 0);
            net.run();
            assert!(net.all_agree_on(net.id(4)), "{a}");
            assert_eq!(net.sent_of("Alive"), 0, "{a}");
        }
    }
}

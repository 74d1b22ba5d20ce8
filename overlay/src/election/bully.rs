//! Garcia-Molina's bully algorithm, as a sans-IO state machine (seed 002's "Bully Algorithm",
//! steps 1-10, with seeds 000/001's rules that a receiver of `Election` holds an election
//! unless it already holds one, and that a recovered process holds one).
//!
//! # The protocol
//! - *Holding an election*: `Election` to every higher process, arm T2. No `Answer` within
//!   T2: announce `Coordinator` to every lower process. An `Answer`: arm T3 and wait for a
//!   `Coordinator`; T3 expires: hold the election again.
//! - An election is held on `Start`, `Recover`, coordinator silence for T1 (heartbeats on),
//!   `PeerDown(coordinator)`, `Election` from a lower process (after answering it), and a
//!   claim (`Coordinator`, `Alive`) from a lower process, which the receiver bullies.
//! - `Coordinator` from a higher process is admitted and ends any election (seed 002 step 9).
//! - Heartbeats (`cfg.alive_interval()`): the coordinator sends `Alive` each interval; a
//!   follower re-arms T1 (= interval x error factor) on every message from its coordinator.
//!   A process that names no coordinator holds an election after T1 (the orphan rule; when it
//!   applies: `ElectionConfig::orphans`, [`super::watch`]).
//! - **Who hears each beat** (departure from seed 002, where every beat goes to every lower
//!   process; [`super::beats`]): every lower process on one beat in `alive_all_every`, the
//!   `alive_successors` just below the coordinator on every beat. Those wait T1, the others
//!   T1 x `alive_all_every`; the highest below the coordinator, which an election after its
//!   silence chooses, notices first.
//!
//! States: `Passive`, `Candidate` (waiting T2), `Waiting` (waiting T3), `Leader`.
//!
//! # Choices where the seeds are vague
//! - Entering an election forgets the coordinator (seed 002: elected = ⊥), also for a
//!   coordinator that answers a lower process's `Election` and re-announces after T2.
//! - The highest process still waits T2 before announcing, so concurrent initiators cost one
//!   `Coordinator` round.
//! - **A failure report outlives the messages in flight** ([`Down`]). A process reported down
//!   stays down for the receiver until `PeerUp`; its `Coordinator` or `Alive` is not admitted
//!   meanwhile: a `Passive` receiver holds an election instead, one in an election lets the
//!   election decide. Otherwise a coordinator that crashed just after announcing, whose
//!   announcement lands after the crash report, would be named by everyone for good. A live
//!   process wrongly reported down (its `PeerUp` is still on the way) costs re-elections
//!   until the report is taken back.
//! - A `Passive` process naming a coordinator higher than a claimant holds an election instead
//!   of admitting the lower claim: announcements from different senders are not FIFO, and the
//!   higher coordinator never receives the lower claim (announcements go down only), so
//!   admitting the one that lands last can leave two coordinators.
//! - `Alive` from a higher process other than the coordinator is taken as its announcement
//!   when `Passive` and naming none or a lower one (after a heal, or a lost `Coordinator`).
//! - `Membership` replaces the group; if the coordinator left it, an election is held.
//! - Messages from non-members or from itself, `Election` from a higher process, `Answer` from
//!   a lower one, and messages of other algorithms are rejected (`Effect::Rejected`).
//!
//! # Cost
//! State: the shared group, a rank, a phase and the (usually empty) [`Down`] set. With the
//! lowest process initiating and the highest crashed: N² - N - 1 messages
//! (`exact_count_lowest_initiates`).

use crate::driver::{Context, Election, Input, Timer};
use crate::election::beats::BeatPlan;
pub(crate) use crate::election::contradicted::Contradicted;
use crate::election::contradicted::CONTRADICTED;
use crate::election::down::Down;
use crate::election::{ElectionConfig, Message};
use crate::id::{NodeId, Rank};
use crate::membership::Membership;
use std::sync::Arc;
use std::time::Duration;

/// The timeouts of the bully family, copied out of [`ElectionConfig`] once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timing {
    /// The coordinator's `Alive` period (`None`: heartbeats off).
    pub alive: Option<Duration>,
    /// T1: coordinator silence (`None`: heartbeats off), for a follower that hears every beat
    /// and for a process that names no coordinator.
    pub t1: Option<Duration>,
    /// Who hears each beat, and how long the others wait ([`super::beats`]).
    pub beats: BeatPlan,
    /// When the orphan rule applies.
    pub orphans: crate::election::Orphans,
    pub t2: Duration,
    pub t3: Duration,
    pub t4: Duration,
}

impl Timing {
    pub(crate) fn new(cfg: &ElectionConfig) -> Timing {
        Timing {
            alive: cfg.alive_interval(),
            t1: cfg.t1(),
            beats: BeatPlan::new(cfg),
            orphans: cfg.orphans,
            t2: cfg.t2(),
            t3: cfg.t3(),
            t4: cfg.t4(),
        }
    }

    /// T1 for follower `me` of coordinator `leader` ([`BeatPlan::t1`]).
    pub(crate) fn t1_following(&self, group: &Membership, me: &Rank, leader: &Rank) -> Option<Duration> {
        self.t1.map(|t1| self.beats.t1(group, me, leader, t1))
    }
}

/// The orphan rule of the bully family (when it applies: [`crate::election::Orphans`]): a
/// process that names no coordinator and holds no election waits T1 for one, then holds an
/// election (its `Timer::T1` handler asks [`OrphanWatch::armed`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct OrphanWatch {
    /// T1 is armed for a process that names no coordinator (heartbeats on).
    armed: bool,
    /// This process has named a coordinator or taken part in an election.
    reached: bool,
}

impl OrphanWatch {
    /// After each input: `idle` (no election phase) and `named` (a coordinator is named).
    pub(crate) fn after_input(&mut self, ctx: &mut Context<'_>, timing: &Timing, idle: bool, named: bool) {
        self.reached |= named || !idle;
        let orphan = timing.orphans.apply(self.reached) && timing.t1.is_some() && idle && !named;
        if let Some(t1) = timing.t1.filter(|_| orphan && !self.armed) {
            ctx.set_timer(Timer::T1, t1);
        }
        self.armed = orphan;
    }

    /// T1 is measuring how long this process has named no coordinator.
    pub(crate) fn armed(&self) -> bool {
        self.armed
    }
}

/// What a bully-family process does with a claim of leadership from `s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// Hold an election: the claim is from below, or stale.
    Ask,
    /// Remember the claim as refused (its sender is reported down), and hold an election.
    RefuseAndAsk,
    /// Remember the claim as refused, nothing more.
    Refuse,
    /// Admit `s` as coordinator.
    Accept,
    /// It is the coordinator's heartbeat: re-arm T1.
    Heartbeat,
    Ignore,
}

/// The bully family's rule for a `Coordinator` (`coordinator`) or an `Alive` from `s`, as a
/// process ranked `me` that is `idle` (in no election), names `leader`, and holds `s`
/// reported down (`down`): a claim from below is answered with an election; a claim of a
/// process reported down (sent before its crash) is refused, and a `Coordinator` of one is
/// questioned; a lower claim over a higher coordinator already admitted is stale (messages from
/// different senders are not FIFO) or the higher one died, so a `Coordinator` is questioned and
/// an `Alive` ignored; an `Alive` of the coordinator re-arms T1.
///
/// One exception (`watched`, heartbeats on): a `Coordinator` over the named coordinator from one of its
/// successors, which hears its every beat, when this process does not ([`super::beats`]). The
/// successor is the one that notices the coordinator's silence; this process, waiting five
/// times longer, could not tell, and questioning it would make every such follower hold an
/// election at once (N² messages). It is admitted. A stale one is corrected by the higher
/// coordinator's next beat to everyone, which this process takes for its announcement; its
/// sender is then questioned for a while ([`Contradicted`]: a successor that lies).
pub(crate) fn judge_claim(
    coordinator: bool,
    me: Rank,
    s: Rank,
    down: bool,
    idle: bool,
    leader: Option<Rank>,
    watched: bool,
) -> Claim {
    let higher = s > me;
    if !higher {
        return Claim::Ask;
    }
    if down {
        return if coordinator { Claim::RefuseAndAsk } else { Claim::Refuse };
    }
    match (coordinator, idle, leader) {
        (true, true, Some(l)) if l > s && !watched => Claim::Ask,
        (true, _, _) => Claim::Accept,
        (false, false, _) => Claim::Ignore,
        (false, true, Some(l)) if l == s => Claim::Heartbeat,
        (false, true, Some(l)) if l > s => Claim::Ignore,
        (false, true, _) => Claim::Accept,
    }
}

/// What [`ClaimSteps`]' shared steps read of a process: whether it is idle (in no
/// election), the coordinator it names, its own rank and T1.
pub(crate) struct ClaimView {
    pub idle: bool,
    pub leader: Option<Rank>,
    pub me: Rank,
    /// T1 for this process as a follower of `leader`.
    pub t1: Option<Duration>,
}

/// The steps a judged claim calls for, as each bully-family process takes them.
pub(crate) trait ClaimSteps {
    /// Seed 002's `StartElection`, unless this process already holds an election.
    fn hold_election(&mut self, ctx: &mut Context<'_>);
    /// Admit `s` (a higher process) as the coordinator and stop any election.
    fn accept(&mut self, ctx: &mut Context<'_>, s: Rank);
    fn claim_view(&self) -> ClaimView;
    /// The claims refused so far, and the group they are kept for.
    fn refused(&mut self) -> (&mut Down, &Membership);
    /// The beat plan and the group it is read against.
    fn beat_plan(&self) -> (&BeatPlan, &Membership);
    /// The coordinator admitted through the `watched` exception, and the claimants that its
    /// beat contradicted.
    fn contradicted(&mut self) -> &mut Contradicted;

    /// Re-arm T1 if `s` is the coordinator this idle process names.
    fn rearm_t1_if_from_leader(&self, ctx: &mut Context<'_>, s: Rank) {
        let v = self.claim_view();
        if v.idle && v.leader == Some(s) && s != v.me {
            if let Some(t1) = v.t1 {
                ctx.set_timer(Timer::T1, t1);
            }
        }
    }

    /// Remember `from`'s claim as refused (it is reported down).
    fn refuse(&mut self, from: NodeId) {
        let (refused, group) = self.refused();
        refused.insert(group, from);
    }
}

/// Judges `from`'s (ranked `s`, reported down if `down`) `Coordinator` (`coordinator`) or
/// `Alive` with [`judge_claim`] and carries out the verdict.
pub(crate) fn take_claim<P: ClaimSteps>(
    p: &mut P,
    ctx: &mut Context<'_>,
    from: NodeId,
    s: Rank,
    coordinator: bool,
    down: bool,
) {
    let v = p.claim_view();
    let now = ctx.now;
    let watched = v.t1.is_some()
        && !p.contradicted().contains(&from, now)
        && v.leader.is_some_and(|l| {
            let (plan, group) = p.beat_plan();
            l > s && plan.hears_every_beat(group, &s, &l) && !plan.hears_every_beat(group, &v.me, &l)
        });
    match judge_claim(coordinator, v.me, s, down, v.idle, v.leader, watched) {
        Claim::Ask => p.hold_election(ctx),
        Claim::RefuseAndAsk => {
            p.refuse(from);
            p.hold_election(ctx);
        }
        Claim::Refuse => p.refuse(from),
        Claim::Accept => {
            // A beat from above the named coordinator, taken for an announcement: the named
            // one's claim, if the exception admitted it, was contradicted.
            if let Some(l) = v.leader.filter(|l| !coordinator && s > *l) {
                if let Some(claimant) = p.contradicted().beat_over(l.id, now) {
                    ctx.reject_lie(claimant, CONTRADICTED);
                }
            }
            let via_exception = coordinator && watched && v.idle && v.leader.is_some_and(|l| l > s);
            p.accept(ctx, s);
            p.contradicted().named(s.id, via_exception);
        }
        Claim::Heartbeat => p.rearm_t1_if_from_leader(ctx, s),
        Claim::Ignore => {}
    }
}

/// The reason given when a message of another algorithm reaches a bully-family process.
pub(crate) const FOREIGN: &str = "message of another election algorithm";
pub(crate) const NOT_MEMBER: &str = "sender is not a member of the group";
pub(crate) const FROM_SELF: &str = "message claims to come from this process";

/// The sender's rank, or a rejection if the sender is not a member (or is this process).
pub(crate) fn sender_rank(ctx: &mut Context<'_>, group: &Membership, me: Rank, from: NodeId) -> Option<Rank> {
    if from == me.id {
        ctx.reject(from, FROM_SELF);
        return None;
    }
    match group.rank_of(&from) {
        Some(r) => Some(r),
        None => {
            ctx.reject(from, NOT_MEMBER);
            None
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Not in an election (`Passive`, or `Leader` when `leader == me`).
    Idle,
    /// Sent `Election`, waiting T2 for an `Answer`.
    Candidate,
    /// Got an `Answer`, waiting T3 for a `Coordinator`.
    Waiting,
}

/// One process of the bully algorithm.
#[derive(Debug, Clone)]
pub struct Bully {
    me: Rank,
    group: Arc<Membership>,
    timing: Timing,
    phase: Phase,
    /// The coordinator this process names (seed 002's `elected_i`; `None` = ⊥).
    leader: Option<Rank>,
    /// Members reported down and not since up.
    down: Down,
    /// Members reported down whose claim of leadership this process refused: when one is
    /// reported up again, the question is asked again.
    refused: Down,
    /// The highest process above this one reported up while this process was in an
    /// election: its claims may have been refused while it was reported down, so the
    /// election's outcome is checked against it.
    up_above: Option<Rank>,
    /// The orphan rule.
    orphans: OrphanWatch,
    /// Beats sent since this process became coordinator.
    beats: u64,
    /// Claims admitted through the `watched` exception and contradicted ([`Contradicted`]).
    contradicted: Contradicted,
}

impl Bully {
    pub fn new(me: Rank, group: Arc<Membership>, cfg: &ElectionConfig) -> Self {
        Bully {
            me,
            group,
            timing: Timing::new(cfg),
            phase: Phase::Idle,
            leader: None,
            down: Down::default(),
            refused: Down::default(),
            up_above: None,
            orphans: OrphanWatch::default(),
            beats: 0,
            contradicted: Contradicted::default(),
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> Rank {
        self.me
    }

    fn is_leader(&self) -> bool {
        self.phase == Phase::Idle && self.leader == Some(self.me)
    }

    /// Disarm the timer that belongs to the current phase and role.
    fn disarm(&self, ctx: &mut Context<'_>) {
        match self.phase {
            Phase::Candidate => ctx.cancel_timer(Timer::T2),
            Phase::Waiting => ctx.cancel_timer(Timer::T3),
            Phase::Idle => match self.leader {
                Some(l) if l == self.me && self.timing.alive.is_some() => ctx.cancel_timer(Timer::Heartbeat),
                Some(l) if l != self.me && self.timing.t1.is_some() => ctx.cancel_timer(Timer::T1),
                _ => {}
            },
        }
    }

    /// The election ended with coordinator `c`: if a higher process came up meanwhile (see
    /// `up_above`), ask again.
    fn recheck(&mut self, ctx: &mut Context<'_>, c: Rank) {
        if self.up_above.take().is_some_and(|u| u > c && !self.down.contains(&u.id)) {
            self.hold_election(ctx);
        }
    }

    fn send_elections(&mut self, ctx: &mut Context<'_>) {
        for r in self.group.higher(&self.me) {
            ctx.send(r.id, Message::Election);
        }
        self.phase = Phase::Candidate;
        ctx.set_timer(Timer::T2, self.timing.t2);
    }

    /// No answer within T2: announce to every lower process.
    fn become_leader(&mut self, ctx: &mut Context<'_>) {
        self.phase = Phase::Idle;
        for r in self.group.lower(&self.me) {
            ctx.send(r.id, Message::Coordinator);
        }
        self.leader = Some(self.me);
        ctx.decide(self.me.id);
        if let Some(a) = self.timing.alive {
            self.beats = 0;
            ctx.set_timer(Timer::Heartbeat, a);
        }
        self.recheck(ctx, self.me);
    }

    fn on_message(&mut self, ctx: &mut Context<'_>, from: NodeId, msg: Message) {
        let Some(s) = sender_rank(ctx, &self.group, self.me, from) else { return };
        let higher = s > self.me;
        match msg {
            Message::Election => {
                if higher {
                    ctx.reject(from, "Election from a higher process");
                    return;
                }
                ctx.send(from, Message::Answer);
                self.hold_election(ctx);
            }
            Message::Answer => {
                if !higher {
                    ctx.reject(from, "Answer from a lower process");
                    return;
                }
                if self.phase == Phase::Candidate {
                    ctx.cancel_timer(Timer::T2);
                    self.phase = Phase::Waiting;
                    ctx.set_timer(Timer::T3, self.timing.t3);
                } else {
                    self.rearm_t1_if_from_leader(ctx, s);
                }
            }
            Message::Coordinator | Message::Alive => {
                let down = self.down.contains(&from);
                take_claim(self, ctx, from, s, msg == Message::Coordinator, down);
            }
            _ => ctx.reject(from, FOREIGN),
        }
    }

    fn on_timer(&mut self, ctx: &mut Context<'_>, timer: Timer) {
        match (timer, self.phase) {
            (Timer::T1, Phase::Idle) => {
                // Coordinator silence, or no coordinator at all for T1 (`orphan`).
                let silent = matches!(self.leader, Some(l) if l != self.me);
                if silent || (self.leader.is_none() && self.orphans.armed()) {
                    self.hold_election(ctx);
                }
            }
            (Timer::T2, Phase::Candidate) => self.become_leader(ctx),
            (Timer::T3, Phase::Waiting) => {
                // Seed 002 step 7: a higher process answered but failed; restart.
                ctx.started();
                self.send_elections(ctx);
            }
            (Timer::Heartbeat, Phase::Idle) if self.is_leader() => {
                let everyone = self.group.lower(&self.me).iter();
                self.timing.beats.send_beat(ctx, self.beats, &self.group, Some(&self.me), &self.down, everyone);
                self.beats += 1;
                if let Some(a) = self.timing.alive {
                    ctx.set_timer(Timer::Heartbeat, a);
                }
            }
            // A timer of another phase (the driver may deliver one already in flight).
            _ => {}
        }
    }

    fn on_membership(&mut self, ctx: &mut Context<'_>, group: Arc<Membership>) {
        self.group = group;
        self.down.retain_members(&self.group);
        self.refused.retain_members(&self.group);
        if let Some(l) = self.leader {
            if l != self.me {
                match self.group.rank_of(&l.id) {
                    Some(r) => self.leader = Some(r),
                    None => self.hold_election(ctx),
                }
            }
        }
    }

    fn handle_input(&mut self, ctx: &mut Context<'_>, input: Input) {
        match input {
            Input::Start => self.hold_election(ctx),
            Input::Recover => {
                // Fresh state (the driver may reuse this value): forget everything, then hold
                // an election (seeds 000/001).
                self.disarm(ctx);
                self.phase = Phase::Idle;
                self.leader = None;
                self.down.clear();
                self.refused.clear();
                self.up_above = None;
                self.hold_election(ctx);
            }
            Input::Message { from, msg } => self.on_message(ctx, from, msg),
            Input::Timer(t) => self.on_timer(ctx, t),
            Input::PeerDown(p) => {
                if p != self.me.id {
                    self.down.insert(&self.group, p);
                }
                if self.phase == Phase::Idle && matches!(self.leader, Some(l) if l.id == p && l != self.me) {
                    self.hold_election(ctx);
                }
            }
            Input::PeerUp(p) => {
                self.down.remove(&p);
                // A higher process is up again (a recovery or a heal), above the coordinator
                // this process names, and its claim was refused while it was reported down:
                // ask again.
                let up = self.refused.refused_and_above(&self.group, self.me, self.leader, &p);
                if let Some(r) = up {
                    if self.phase == Phase::Idle {
                        self.hold_election(ctx);
                    } else if self.up_above.is_none_or(|u| r > u) {
                        self.up_above = Some(r);
                    }
                }
            }
            Input::SendFailed { .. } => {}
            Input::Membership(g) => self.on_membership(ctx, g),
        }
    }
}

impl ClaimSteps for Bully {
    /// Seed 002's `StartElection`, unless this process already holds an election.
    fn hold_election(&mut self, ctx: &mut Context<'_>) {
        if self.phase != Phase::Idle {
            return;
        }
        self.disarm(ctx);
        self.leader = None;
        self.up_above = None;
        ctx.started();
        self.send_elections(ctx);
    }

    /// Admit `s` (a higher process) as the coordinator and stop any election.
    fn accept(&mut self, ctx: &mut Context<'_>, s: Rank) {
        let unchanged = self.phase == Phase::Idle && self.leader == Some(s);
        if !unchanged {
            self.disarm(ctx);
            self.phase = Phase::Idle;
            self.leader = Some(s);
            ctx.decide(s.id);
        }
        if let Some(t1) = self.timing.t1_following(&self.group, &self.me, &s) {
            ctx.set_timer(Timer::T1, t1);
        }
        self.recheck(ctx, s);
    }

    fn claim_view(&self) -> ClaimView {
        let t1 = self.leader.and_then(|l| self.timing.t1_following(&self.group, &self.me, &l));
        ClaimView { idle: self.phase == Phase::Idle, leader: self.leader, me: self.me, t1 }
    }

    fn refused(&mut self) -> (&mut Down, &Membership) {
        (&mut self.refused, &self.group)
    }

    fn beat_plan(&self) -> (&BeatPlan, &Membership) {
        (&self.timing.beats, &self.group)
    }

    fn contradicted(&mut self) -> &mut Contradicted {
        &mut self.contradicted
    }
}

impl Election for Bully {
    fn id(&self) -> NodeId {
        self.me.id
    }

    fn handle(&mut self, ctx: &mut Context<'_>, input: Input) {
        self.handle_input(ctx, input);
        self.orphans.after_input(ctx, &self.timing, self.phase == Phase::Idle, self.leader.is_some());
    }

    fn leader(&self) -> Option<NodeId> {
        self.leader.map(|r| r.id)
    }

    fn state(&self) -> &'static str {
        match self.phase {
            Phase::Candidate => "Candidate",
            Phase::Waiting => "Waiting",
            Phase::Idle if self.leader == Some(self.me) => "Leader",
            Phase::Idle => "Passive",
        }
    }

    fn in_election(&self) -> bool {
        self.phase != Phase::Idle
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::driver::Effect;
    use crate::election::Algorithm;
    use crate::testkit::feed;
    use crate::testkit::scenarios as sc;
    use crate::testkit::Net;
    use crate::time::Time;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn cfg() -> ElectionConfig {
        sc::quiet_cfg(Algorithm::Bully)
    }

    fn assert_settled(net: &Net, expected: usize, what: &str) {
        sc::assert_leader_settled(net, expected, what);
    }

    /// Every non-empty set of starters, started together, in ascending and in descending
    /// order 7 ms apart, for N = 1..=12: all agree on the highest process. Exact counts too:
    /// with m the lowest starter, exactly the processes m..N-1 hold one election each
    /// (processes below m never hear an `Election`), every `Election` is answered, and the
    /// highest announces once, so Election = Answer = sum_{i>=m} (N-1-i) and
    /// Coordinator = N-1.
    #[test]
    fn agreement_every_start_pattern() {
        for n in 1..=12usize {
            for mask in 1u32..(1 << n) {
                for pattern in 0..3 {
                    let mut net = Net::new(n, cfg());
                    sc::start_pattern(&mut net, mask, pattern);
                    net.run();
                    let what = format!("n={n} starters={mask:b} pattern={pattern}");
                    assert_settled(&net, n - 1, &what);
                    let m = mask.trailing_zeros() as usize;
                    let elections: u64 = (m..n).map(|i| (n - 1 - i) as u64).sum();
                    assert_eq!(net.sent_of("Election"), elections, "{what}");
                    assert_eq!(net.sent_of("Answer"), elections, "{what}");
                    assert_eq!(net.sent_of("Coordinator"), n as u64 - 1, "{what}");
                    for i in 0..n {
                        assert_eq!(net.started[i], u64::from(i >= m), "{what}: elections held by {i}");
                    }
                    assert_eq!(net.rejected, 0, "{what}");
                }
            }
        }
    }

    #[test]
    fn highest_crashed_before_election() {
        sc::highest_crashed_before_election(&cfg());
    }

    /// The theory check. P_0 .. P_{N-1}, P_{N-1} (the coordinator) has crashed, only P_0
    /// notices and holds an election.
    ///
    /// - P_0 sends `Election` to P_1 .. P_{N-1}: N-1 messages (the one to the dead P_{N-1}
    ///   is sent too, and fails).
    /// - Each live P_k, 1 <= k <= N-2, answers P_0 (N-2 `Answer`s) and holds its own
    ///   election, sending N-1-k `Election`s: sum_{k=1}^{N-2} (N-1-k) = (N-1)(N-2)/2.
    /// - Those reaching a live process are answered: P_k's go to N-2-k live processes,
    ///   sum_{k=1}^{N-2} (N-2-k) = (N-2)(N-3)/2 `Answer`s.
    /// - Only P_{N-2} hears no answer; after T2 it sends `Coordinator` to its N-2 lower
    ///   processes, which reaches every waiting process before its T3 expires.
    ///
    /// Election = N(N-1)/2, Answer = (N-1)(N-2)/2, Coordinator = N-2, total
    /// (N-1)² + N-2 = **N² - N - 1**.
    #[test]
    fn exact_count_lowest_initiates() {
        for n in (2..=12u64).chain([16, 32, 64]) {
            let mut net = Net::new(n as usize, cfg());
            net.start_all();
            net.run();
            assert_settled(&net, n as usize - 1, "first election");
            net.sent.clear();
            net.crash(n as usize - 1);
            let now = net.now;
            net.start_at(now, 0);
            net.run();
            assert_settled(&net, n as usize - 2, &format!("n={n}"));
            assert_eq!(net.sent_of("Election"), n * (n - 1) / 2, "n={n}");
            assert_eq!(net.sent_of("Answer"), (n - 1) * (n - 2) / 2, "n={n}");
            assert_eq!(net.sent_of("Coordinator"), n - 2, "n={n}");
            assert_eq!(net.total_sent(), lowest_initiates_formula(n), "n={n}");
        }
    }

    /// N² - N - 1 (see `exact_count_lowest_initiates`).
    pub(crate) fn lowest_initiates_formula(n: u64) -> u64 {
        n * n - n - 1
    }

    /// Recovery of the lowest process P_0 while the highest P_{N-1} is coordinator: P_0 holds
    /// an election; every P_k (k >= 1) answers every `Election` from below and holds its own
    /// election (the coordinator included), and P_{N-1} re-announces. Election = Answer =
    /// (N-1) + sum_{k=1}^{N-1} (N-1-k) = N(N-1)/2, Coordinator = N-1: total **N² - 1**.
    #[test]
    fn exact_count_lowest_recovers() {
        for n in (2..=12u64).chain([16, 64]) {
            let mut net = Net::new(n as usize, cfg());
            net.start_all();
            net.run();
            net.crash(0);
            net.sent.clear();
            let at = net.now + std::time::Duration::from_millis(10);
            net.recover_at(at, 0);
            net.run();
            assert_settled(&net, n as usize - 1, &format!("n={n}"));
            assert_eq!(net.total_sent(), lowest_recovers_formula(n), "n={n}");
        }
    }

    /// N² - 1 (see `exact_count_lowest_recovers`).
    pub(crate) fn lowest_recovers_formula(n: u64) -> u64 {
        n * n - 1
    }

    /// The highest process dies after answering but before announcing itself: the waiting
    /// processes' T3 expires and they restart; P_{N-2} wins.
    #[test]
    fn new_coordinator_crashes_during_election() {
        for n in 3..=8 {
            let mut net = Net::new(n, cfg());
            net.detector = true;
            net.start_at(Time::ZERO, 0);
            net.crash_at(Time::from_millis(100), n - 1);
            net.run();
            assert_settled(&net, n - 2, &format!("n={n}"));
            assert!(net.started[n - 2] >= 2, "n={n}: P_(N-2) must have restarted after T3");
        }
    }

    /// The coordinator dies just after its announcement; the failure detector's `PeerDown`
    /// starts a new election; then the next coordinator dies during that election too.
    #[test]
    fn coordinator_crash_reported_then_reelection() {
        for n in 3..=10 {
            let mut net = Net::new(n, cfg());
            net.detector = true;
            net.start_all();
            net.crash_at(Time::from_millis(600), n - 1);
            net.run();
            assert_settled(&net, n - 2, &format!("n={n}, one crash"));
        }
        sc::two_coordinator_crashes(&cfg());
    }

    /// A process whose only input is its group holds an election after T1 (the simulator's
    /// boot relies on it, as a node does).
    #[test]
    fn group_alone_then_the_orphan_elects_itself() {
        sc::group_alone_then_the_orphan_elects_itself(Algorithm::Bully);
    }

    /// With heartbeats on and no failure detector, the coordinator's `Alive` keeps followers
    /// quiet (T1 re-armed), and its silence after a crash starts a new election.
    #[test]
    fn heartbeats_keep_followers_and_detect_a_crash() {
        sc::heartbeats_keep_followers_and_detect_a_crash(Algorithm::Bully);
    }

    /// A silent crash costs the successors' election only (`election::beats`).
    #[test]
    fn silent_crash_costs_the_successors_election_only() {
        sc::silent_crash_costs_the_successors_election_only(Algorithm::Bully);
    }

    #[test]
    fn recovered_highest_bullies_its_way_back() {
        for n in 2..=10 {
            let mut net = Net::new(n, cfg());
            net.detector = true;
            net.start_all();
            net.crash_at(Time::from_millis(1_000), n - 1);
            net.run();
            assert_settled(&net, n - 2, "after the crash");
            net.sent.clear();
            let at = net.now + std::time::Duration::from_millis(100);
            net.recover_at(at, n - 1);
            net.run();
            assert_settled(&net, n - 1, &format!("n={n} after recovery"));
            // The highest process has nobody to ask: after T2 it only announces.
            assert_eq!(net.total_sent(), n as u64 - 1, "n={n}");
        }
    }

    /// The claim rule, case by case, for `Coordinator` and `Alive`.
    #[test]
    fn claims_are_judged_by_rank_report_phase_and_named_coordinator() {
        let r = |i: u64| Rank::new(i, NodeId::from_u64(i));
        let (me, s, top) = (r(2), r(3), r(4));
        for coordinator in [true, false] {
            assert_eq!(judge_claim(coordinator, me, r(1), false, true, None, false), Claim::Ask, "from below");
            assert_eq!(judge_claim(coordinator, me, s, false, true, None, false), Claim::Accept, "none named");
        }
        assert_eq!(judge_claim(true, me, s, true, true, None, false), Claim::RefuseAndAsk);
        assert_eq!(judge_claim(false, me, s, true, true, None, false), Claim::Refuse);
        assert_eq!(
            judge_claim(true, me, s, false, true, Some(top), false),
            Claim::Ask,
            "a lower claim over a higher one"
        );
        assert_eq!(
            judge_claim(true, me, s, false, true, Some(top), true),
            Claim::Accept,
            "a lower claim over a higher one from its watching successor"
        );
        assert_eq!(judge_claim(false, me, s, false, true, Some(top), true), Claim::Ignore, "its Alive");
        assert_eq!(judge_claim(false, me, s, false, true, Some(top), false), Claim::Ignore);
        assert_eq!(judge_claim(true, me, s, false, false, Some(top), false), Claim::Accept, "in an election");
        assert_eq!(judge_claim(false, me, s, false, false, None, false), Claim::Ignore, "Alive in an election");
        assert_eq!(judge_claim(false, me, s, false, true, Some(s), false), Claim::Heartbeat);
        assert_eq!(judge_claim(false, me, top, false, true, Some(s), false), Claim::Accept, "a higher one's Alive");
    }

    /// A `Coordinator` from a lower process makes the higher receiver hold an election.
    #[test]
    fn coordinator_from_lower_is_bullied() {
        let net = sc::coordinator_from_lower_is_bullied(&cfg());
        assert_eq!(net.started[3], 2);
    }

    /// A stale lower `Coordinator` (delivered after the higher coordinator's) does not
    /// override it: the receiver holds an election, and the highest announces again.
    #[test]
    fn lower_claim_over_a_higher_coordinator_holds_an_election() {
        let n = 5;
        let mut net = Net::new(n, cfg());
        net.start_all();
        net.run();
        let from = net.id(3);
        net.input(1, Input::Message { from, msg: Message::Coordinator });
        assert_eq!(net.process(1).state(), "Candidate");
        net.run();
        assert_settled(&net, n - 1, "after the stale claim");
    }

    /// The coordinator leaves the group (`Input::Membership`): the others elect a new one.
    #[test]
    fn membership_without_the_coordinator_starts_an_election() {
        sc::membership_without_the_coordinator_starts_an_election(&cfg());
    }

    #[test]
    fn bad_input_is_rejected_and_changes_nothing() {
        let ranks: Vec<Rank> = (1..=4).map(|i| Rank::new(0, NodeId::from_u64(i))).collect();
        let group = Arc::new(Membership::new(ranks.clone()));
        let mut p = Bully::new(ranks[1], group, &cfg());
        // Make it a follower of process 4.
        feed(&mut p, Input::Message { from: ranks[3].id, msg: Message::Coordinator });
        assert_eq!(p.leader(), Some(ranks[3].id));
        let stranger = NodeId::from_u64(99);
        let cases = [
            (stranger, Message::Election),
            (stranger, Message::Coordinator),
            (ranks[1].id, Message::Coordinator),
            (ranks[3].id, Message::Election),
            (ranks[0].id, Message::Answer),
            (ranks[0].id, Message::IamUp),
            (ranks[3].id, Message::Nomination),
            (ranks[3].id, Message::View { up: vec![], coordinator: None }),
            (ranks[0].id, Message::EchoProbe),
        ];
        for (from, msg) in cases {
            let before = (p.leader(), p.state(), p.in_election());
            let effects = feed(&mut p, Input::Message { from, msg: msg.clone() });
            assert!(
                matches!(effects.as_slice(), [Effect::Rejected { from: f, .. }] if *f == from),
                "{msg:?} from {from:?}: {effects:?}"
            );
            assert_eq!(before, (p.leader(), p.state(), p.in_election()), "{msg:?}");
        }
        // Through the pump too: the stranger's message is counted as rejected.
        let mut net = Net::new(3, cfg());
        net.start_all();
        net.run();
        net.input(0, Input::Message { from: stranger, msg: Message::Election });
        net.run();
        assert_eq!(net.rejected, 1);
        // Election 3, Answer 3, Coordinator 2: nothing was sent to the stranger.
        assert_eq!(net.total_sent(), 8, "no reply to a stranger");
        assert_settled(&net, 2, "after bad input");
    }

    /// `Input::Membership` replaces the group: a newcomer's messages are refused before and
    /// taken after; ranks of the old group stay valid.
    #[test]
    fn membership_update_admits_a_newcomer() {
        sc::membership_update_admits_a_newcomer(|me, group| Bully::new(me, group, &cfg()));
    }

    /// Timers of a phase already left do nothing.
    #[test]
    fn stale_timers_are_ignored() {
        sc::stale_timers_are_ignored(|me, group| Bully::new(me, group, &cfg()));
    }

    /// The seeds a randomised test runs: `PEERAGE_SEED` alone if set, else `0..count`.
    pub(crate) fn seeds(count: u64) -> Vec<u64> {
        match std::env::var("PEERAGE_SEED") {
            Ok(v) => vec![v.trim().parse().expect("PEERAGE_SEED must be an unsigned integer")],
            Err(_) => (0..count).collect(),
        }
    }

    /// One random schedule: N in 2..=10 processes start together; up to 8 crashes and
    /// recoveries at random times in the first 3 s or the first 20 s; either heartbeats on (alive 200 ms,
    /// T1 = 600 ms) with crash reports on or off, or heartbeats off with crash reports on. By 60 s every live process must name the highest
    /// live process and none may be in an election. Panics with the seed on failure.
    pub(crate) fn random_schedule(algorithm: Algorithm, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let n = rng.gen_range(2..=10usize);
        let heartbeats = rng.gen_bool(0.5);
        let cfg = ElectionConfig {
            alive_interval_ms: if heartbeats { 200 } else { 0 },
            alive_error_factor: 3,
            ..ElectionConfig::for_algorithm(algorithm)
        };
        let mut net = Net::new(n, cfg);
        // Without heartbeats only the failure detector's reports reveal a crash.
        net.detector = !heartbeats || rng.gen_bool(0.5);
        net.start_all();
        let mut schedule = Vec::new();
        // Crashes packed into the first elections, or spread out.
        let window = if rng.gen_bool(0.5) { 3_000 } else { 20_000 };
        for _ in 0..rng.gen_range(1..=8) {
            let at = Time::from_millis(rng.gen_range(0..window));
            let who = rng.gen_range(0..n);
            let crash = rng.gen_bool(0.6);
            schedule.push((at, who, crash));
            if crash {
                net.crash_at(at, who);
            } else {
                net.recover_at(at, who);
            }
        }
        // Keep somebody alive at the end.
        net.recover_at(Time::from_millis(21_000), 0);
        net.run_until_quiet(Time::from_millis(60_000));
        let what = format!(
            "{algorithm}: replay with PEERAGE_SEED={seed} (n={n}, heartbeats={heartbeats}, reports={}, schedule={schedule:?})",
            net.detector
        );
        let Some(h) = net.highest_alive() else { panic!("{what}: nobody alive") };
        assert!(net.all_agree_on(net.id(h)), "{what}: leaders {:?}, highest alive {h}", net.leaders());
        for i in (0..n).filter(|&i| net.is_alive(i)) {
            assert!(!net.process(i).in_election(), "{what}: {i} in {}", net.process(i).state());
        }
        assert_eq!(net.rejected, 0, "{what}");
    }

    #[test]
    fn random_crash_recover_schedules() {
        let seeds = seeds(300);
        println!(
            "bully random schedules: seeds {}..={} (replay one with PEERAGE_SEED)",
            seeds[0],
            seeds[seeds.len() - 1]
        );
        for seed in seeds {
            random_schedule(Algorithm::Bully, seed);
        }
    }
}

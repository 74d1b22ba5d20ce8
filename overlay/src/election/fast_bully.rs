//! The fast bully algorithm, as a sans-IO state machine (seed 002's three listings: failure
//! recovery, start election, and the handlers), with timeouts T1 (coordinator silence), T2
//! (waiting for `Answer`s, or `View`s when recovering), T3 (waiting for the nominee's
//! `Coordinator`) and T4 (an answering process waiting for `Nomination` or `Coordinator`).
//!
//! # The protocol
//! - *Recovery* (`Recover`): `IamUp` to every process, T2 for `View`s, then: no `View`, it
//!   is the coordinator (nobody else is up); it outranks every sender, `Coordinator` to every
//!   lower process; the highest sender H names itself coordinator in its view, admit H;
//!   otherwise (H names someone who sent no `View`, so is dead) hold an election.
//! - *Election* (`Start`, T1 silence, `PeerDown(coordinator)`, T4 expiry, a lower claim):
//!   `Election` to every higher process, T2 collecting `Answer`s. None: `Coordinator` to every
//!   lower process. Else `Nomination` to the highest answerer, T3; on expiry (or its
//!   `PeerDown`, or a failed send) the next answerer; none left: elect again.
//! - `Election` from a lower process: `Answer`, then T4 for `Nomination`/`Coordinator` (the
//!   saving over the bully: no election of its own). `Nomination`: become coordinator.
//!   `IamUp`: answer with `View`. Heartbeats as in [`super::bully`].
//!
//! States: `Passive`, `Recovering`, `Candidate`, `Waiting` (nominating, or answered), `Leader`.
//!
//! # Choices where seed 002 is vague
//! - `Start` holds an election; only `Recover` runs the recovery procedure.
//! - A view is what a process knows is up without a per-peer table: itself and its
//!   coordinator. `View`s after T2 are ignored.
//! - The answered list keeps the [`ANSWERED_CAP`] highest answerers, so state is O(1); when
//!   all of them fail the election restarts, as when the seed's full list empties.
//! - A process holding its own election answers lower `Election`s without arming T4; one
//!   waiting T4 re-arms it for each further `Election`. The coordinator answers and stays
//!   coordinator; nominated after answering, it announces again to every lower process, and
//!   so it does when no `Nomination` follows within T4 (the nominator admitted a `Coordinator`
//!   and dropped its election, and an answerer may meanwhile have admitted a stale lower
//!   claim: this announcement is the last it hears); a nomination it did not answer an
//!   `Election` for is answered with `Coordinator` to the nominator alone.
//! - A process that names a higher coordinator (not reported down) when it answers waits
//!   T4 + T2: that coordinator answered the same `Election` and announces within T4 of it, so
//!   the wait ends after the announcement while two one-way delays stay below T2. With equal
//!   waits the two cross, and each crossing starts another election that the coordinator
//!   answers again, a round per T4 (settle tails of 10-30 s in the sweep).
//! - A nominee that knows of a live higher process the nominator did not hear from does not
//!   take over: it holds an election (or lets its own reach the nominator). It knows of one
//!   when its own election heard an `Answer`, when it names a higher coordinator, or when a
//!   higher process sent it `IamUp` since it last changed phase. Taking over would send a
//!   `Coordinator` the higher process never sees, leaving two coordinators.
//! - A `Passive` process naming a coordinator higher than a claimant holds an election
//!   instead of admitting the lower claim (announcements of different senders are not FIFO).
//! - **A failure report outlives the messages in flight**, as in [`super::bully`]: a process
//!   reported down is not admitted as coordinator (`Coordinator`, `Alive`, or its `View`)
//!   until `PeerUp`; if its claim was refused, its `PeerUp` makes this process ask again (at
//!   once when idle, when its election ends otherwise). A nominee reported down is skipped.
//! - With heartbeats, a process that names no coordinator for T1 holds an election (the
//!   orphan rule; when it applies: `ElectionConfig::orphans`, [`super::watch`]).
//! - The highest process still waits T2 before announcing; entering an election forgets the
//!   coordinator; bad input is rejected as in [`super::bully`].
//!
//! # Cost
//! The shared group, a few ranks, at most [`ANSWERED_CAP`] answerers during an election and
//! the (usually empty) reported-down sets. With the lowest process initiating and the highest
//! crashed: 3N - 4 messages against the bully's N² - N - 1 (`exact_count_lowest_initiates`).

use super::bully::{sender_rank, take_claim, ClaimSteps, ClaimView, OrphanWatch, Timing, FOREIGN};
use crate::driver::{Context, Election, Input, Timer};
use crate::election::down::Down;
use crate::election::{ElectionConfig, Message};
use crate::id::{NodeId, Rank};
use crate::membership::Membership;
use std::sync::Arc;

/// How many of the highest answerers an election manager remembers.
pub const ANSWERED_CAP: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Not in an election (`Passive`, or `Leader` when `leader == me`).
    Idle,
    /// Sent `IamUp`, waiting T2 for `View`s. `best` is the highest sender so far and
    /// `best_is_coordinator` whether its view names itself coordinator.
    Recovering { best: Option<Rank>, best_is_coordinator: bool },
    /// Sent `Election`, waiting T2 for `Answer`s.
    Candidate,
    /// Sent `Nomination` to `nominee`, waiting T3 for a `Coordinator`.
    Nominating { nominee: Rank },
    /// Answered a lower process's `Election`, waiting T4 for `Nomination` or `Coordinator`.
    Answered,
}

/// One process of the fast bully algorithm.
#[derive(Debug, Clone)]
pub struct FastBully {
    me: Rank,
    group: Arc<Membership>,
    timing: Timing,
    phase: Phase,
    /// The coordinator this process names (`None` = ⊥).
    leader: Option<Rank>,
    /// The highest answerers of this process's election, descending, at most `ANSWERED_CAP`.
    answered: Vec<Rank>,
    /// As coordinator: answered an `Election` since the last `Coordinator` round.
    answered_since_announce: bool,
    /// A higher process sent `IamUp` (it is up) since this process last left a phase or
    /// admitted a coordinator: evidence that a nomination may be stale.
    higher_up: bool,
    /// Members reported down and not since up.
    down: Down,
    /// Members reported down whose claim of leadership this process refused: when one is
    /// reported up again, the question is asked again.
    refused: Down,
    /// The highest process above this one reported up while this process was in an
    /// election (see `Bully`'s field of the same name).
    up_above: Option<Rank>,
    /// The orphan rule.
    orphans: OrphanWatch,
    /// Beats sent since this process became coordinator.
    beats: u64,
    /// Claims admitted through the `watched` exception and contradicted
    /// (`crate::election::contradicted`).
    contradicted: crate::election::contradicted::Contradicted,
}

impl FastBully {
    pub fn new(me: Rank, group: Arc<Membership>, cfg: &ElectionConfig) -> Self {
        FastBully {
            me,
            group,
            timing: Timing::new(cfg),
            phase: Phase::Idle,
            leader: None,
            answered: Vec::new(),
            answered_since_announce: false,
            higher_up: false,
            down: Down::default(),
            refused: Down::default(),
            up_above: None,
            orphans: OrphanWatch::default(),
            beats: 0,
            contradicted: Default::default(),
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> Rank {
        self.me
    }

    fn is_leader(&self) -> bool {
        self.phase == Phase::Idle && self.leader == Some(self.me)
    }

    /// True while this process runs its own election (it starts no other).
    fn holding(&self) -> bool {
        matches!(self.phase, Phase::Recovering { .. } | Phase::Candidate | Phase::Nominating { .. })
    }

    /// Disarm the timer that belongs to the current phase and role.
    fn disarm(&self, ctx: &mut Context<'_>) {
        match self.phase {
            Phase::Recovering { .. } | Phase::Candidate => ctx.cancel_timer(Timer::T2),
            Phase::Nominating { .. } => ctx.cancel_timer(Timer::T3),
            Phase::Answered => ctx.cancel_timer(Timer::T4),
            Phase::Idle => match self.leader {
                Some(l) if l == self.me => {
                    if self.timing.alive.is_some() {
                        ctx.cancel_timer(Timer::Heartbeat);
                    }
                    if self.answered_since_announce {
                        ctx.cancel_timer(Timer::T4);
                    }
                }
                Some(l) if l != self.me && self.timing.t1.is_some() => ctx.cancel_timer(Timer::T1),
                _ => {}
            },
        }
    }

    /// Leave the current phase for `Idle`, dropping the answered list.
    fn stop(&mut self, ctx: &mut Context<'_>) {
        self.disarm(ctx);
        self.phase = Phase::Idle;
        self.answered = Vec::new();
        self.higher_up = false;
    }

    /// An election or recovery ended naming coordinator `c`: if a higher process came up
    /// meanwhile (see `up_above`), ask again.
    fn recheck(&mut self, ctx: &mut Context<'_>, c: Rank) {
        if self.up_above.take().is_some_and(|u| u > c && !self.down.contains(&u.id)) {
            self.hold_election(ctx);
        }
    }

    fn send_elections(&mut self, ctx: &mut Context<'_>) {
        self.answered.clear();
        for r in self.group.higher(&self.me) {
            ctx.send(r.id, Message::Election);
        }
        self.phase = Phase::Candidate;
        ctx.set_timer(Timer::T2, self.timing.t2);
    }

    /// Announce to every lower process and become the coordinator.
    fn become_leader(&mut self, ctx: &mut Context<'_>) {
        self.stop(ctx);
        for r in self.group.lower(&self.me) {
            ctx.send(r.id, Message::Coordinator);
        }
        self.answered_since_announce = false;
        self.claim_leadership(ctx);
    }

    /// Name this process coordinator (without announcing) and start heartbeats.
    fn claim_leadership(&mut self, ctx: &mut Context<'_>) {
        self.phase = Phase::Idle;
        self.leader = Some(self.me);
        ctx.decide(self.me.id);
        if let Some(a) = self.timing.alive {
            self.beats = 0;
            ctx.set_timer(Timer::Heartbeat, a);
        }
        self.recheck(ctx, self.me);
    }

    fn nominate(&mut self, ctx: &mut Context<'_>, nominee: Rank) {
        ctx.send(nominee.id, Message::Nomination);
        self.phase = Phase::Nominating { nominee };
        ctx.set_timer(Timer::T3, self.timing.t3);
    }

    /// The nominee failed (T3 expired, reported down, or unreachable): nominate the next
    /// answerer, or restart the election when none is left.
    fn nominee_failed(&mut self, ctx: &mut Context<'_>, nominee: Rank) {
        self.answered.retain(|r| *r != nominee);
        match self.answered.first().copied() {
            Some(next) => self.nominate(ctx, next),
            None => {
                ctx.started();
                self.send_elections(ctx);
            }
        }
    }

    /// Insert an answerer, keeping the `ANSWERED_CAP` highest, descending.
    fn remember_answer(&mut self, s: Rank) {
        if self.answered.contains(&s) {
            return;
        }
        let pos = self.answered.partition_point(|r| *r > s);
        if pos < ANSWERED_CAP {
            self.answered.insert(pos, s);
            self.answered.truncate(ANSWERED_CAP);
        }
    }

    /// Failure recovery (seed 002's StartFailureRecovery).
    fn recover(&mut self, ctx: &mut Context<'_>) {
        self.stop(ctx);
        self.leader = None;
        self.down.clear();
        self.refused.clear();
        self.up_above = None;
        if self.group.ranks().iter().all(|r| *r == self.me) {
            // Nobody else could answer: the pseudo-code's "no view within T2" at once.
            ctx.started();
            self.claim_leadership(ctx);
            return;
        }
        ctx.started();
        for r in self.group.ranks() {
            if *r != self.me {
                ctx.send(r.id, Message::IamUp);
            }
        }
        self.phase = Phase::Recovering { best: None, best_is_coordinator: false };
        ctx.set_timer(Timer::T2, self.timing.t2);
    }

    /// T2 expired while recovering: decide from the merged view.
    fn finish_recovery(&mut self, ctx: &mut Context<'_>, best: Option<Rank>, best_is_coordinator: bool) {
        self.phase = Phase::Idle;
        match best {
            None => self.claim_leadership(ctx),
            Some(h) if h < self.me => self.become_leader(ctx),
            Some(h) if best_is_coordinator => {
                self.leader = Some(h);
                ctx.decide(h.id);
                if let Some(t1) = self.timing.t1_following(&self.group, &self.me, &h) {
                    ctx.set_timer(Timer::T1, t1);
                }
                self.recheck(ctx, h);
            }
            Some(_) => {
                ctx.started();
                self.send_elections(ctx);
            }
        }
    }

    /// This process's view: itself and the coordinator it names.
    fn view(&self) -> Message {
        let mut up = vec![self.me];
        if let Some(l) = self.leader {
            if l != self.me {
                up.push(l);
            }
        }
        Message::View { up, coordinator: self.leader }
    }

    fn valid_rank(&self, r: &Rank) -> bool {
        self.group.rank_of(&r.id) == Some(*r)
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
                match self.phase {
                    Phase::Idle if self.leader == Some(self.me) => {
                        // The nominator's `Nomination` makes it announce again. If none comes
                        // within T4 (the nominator admitted a `Coordinator` meanwhile and
                        // dropped its election), it announces anyway: a lower process waiting
                        // T4 after answering may have admitted a stale lower `Coordinator`,
                        // and this announcement, sent after every claim that crossed its own,
                        // is the last one it hears.
                        if !self.answered_since_announce {
                            ctx.set_timer(Timer::T4, self.timing.t4);
                        }
                        self.answered_since_announce = true;
                    }
                    Phase::Idle | Phase::Answered => {
                        if self.phase == Phase::Idle {
                            self.disarm(ctx);
                        }
                        // (Re-)arming T4 replaces an armed T4. A process that names a higher
                        // coordinator waits T2 longer: that coordinator answered the same
                        // `Election` and announces within T4 of it, so its announcement comes
                        // before this wait ends.
                        self.phase = Phase::Answered;
                        let follows = self.leader.is_some_and(|l| l > self.me && !self.down.contains(&l.id));
                        let wait = if follows { self.timing.t4 + self.timing.t2 } else { self.timing.t4 };
                        ctx.set_timer(Timer::T4, wait);
                    }
                    Phase::Recovering { .. } | Phase::Candidate | Phase::Nominating { .. } => {}
                }
            }
            Message::Answer => {
                if !higher {
                    ctx.reject(from, "Answer from a lower process");
                    return;
                }
                match self.phase {
                    Phase::Candidate | Phase::Nominating { .. } => self.remember_answer(s),
                    _ => self.rearm_t1_if_from_leader(ctx, s),
                }
            }
            Message::Nomination => {
                if higher {
                    ctx.reject(from, "Nomination from a higher process");
                    return;
                }
                if self.is_leader() {
                    if self.answered_since_announce {
                        self.become_leader(ctx);
                    } else {
                        ctx.send(from, Message::Coordinator);
                    }
                } else if matches!(self.phase, Phase::Candidate | Phase::Nominating { .. }) && !self.answered.is_empty()
                {
                    // A higher process is alive; our own election's outcome reaches the
                    // nominator.
                } else if self.higher_up || (self.phase == Phase::Idle && self.leader.is_some_and(|l| l > self.me)) {
                    // It knows of a live higher process the nominator did not hear from: a
                    // coordinator admitted after answering the nominator's `Election`
                    // (answering made it wait T4), or a recovering process's `IamUp`. Ask the
                    // higher processes instead of taking over (a no-op while holding its own
                    // election); the outcome reaches the nominator.
                    self.hold_election(ctx);
                } else {
                    self.become_leader(ctx);
                }
            }
            Message::Coordinator | Message::Alive => {
                let down = self.down.contains(&from);
                take_claim(self, ctx, from, s, msg == Message::Coordinator, down);
            }
            Message::IamUp => {
                let view = self.view();
                ctx.send(from, view);
                if higher {
                    self.higher_up = true;
                }
            }
            Message::View { up, coordinator } => {
                if !up.iter().chain(coordinator.iter()).all(|r| self.valid_rank(r)) {
                    ctx.reject(from, "View names a process outside the group or a wrong rank");
                    return;
                }
                if let Phase::Recovering { best, .. } = self.phase {
                    if self.down.contains(&from) {
                        self.refused.insert(&self.group, from);
                    } else if best.is_none_or(|b| s > b) {
                        self.phase = Phase::Recovering { best: Some(s), best_is_coordinator: coordinator == Some(s) };
                    }
                }
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
            (Timer::T2, Phase::Recovering { best, best_is_coordinator }) => {
                self.finish_recovery(ctx, best, best_is_coordinator)
            }
            (Timer::T2, Phase::Candidate) => match self.answered.first().copied() {
                None => self.become_leader(ctx),
                Some(top) => self.nominate(ctx, top),
            },
            (Timer::T3, Phase::Nominating { nominee }) => self.nominee_failed(ctx, nominee),
            (Timer::T4, Phase::Answered) => {
                self.phase = Phase::Idle;
                // Not holding one: T4 had been the only armed timer.
                self.leader = None;
                ctx.started();
                self.send_elections(ctx);
            }
            (Timer::T4, Phase::Idle) if self.is_leader() && self.answered_since_announce => self.become_leader(ctx),
            (Timer::Heartbeat, Phase::Idle) if self.is_leader() => {
                let everyone = self.group.lower(&self.me).iter();
                self.timing.beats.send_beat(ctx, self.beats, &self.group, Some(&self.me), &self.down, everyone);
                self.beats += 1;
                if let Some(a) = self.timing.alive {
                    ctx.set_timer(Timer::Heartbeat, a);
                }
            }
            _ => {}
        }
    }

    fn on_membership(&mut self, ctx: &mut Context<'_>, group: Arc<Membership>) {
        self.group = group;
        self.down.retain_members(&self.group);
        self.refused.retain_members(&self.group);
        self.answered.retain(|r| self.group.rank_of(&r.id) == Some(*r));
        if let Some(l) = self.leader {
            if l != self.me {
                match self.group.rank_of(&l.id) {
                    Some(r) => self.leader = Some(r),
                    None => self.hold_election(ctx),
                }
            }
        }
    }

    fn on_peer_down(&mut self, ctx: &mut Context<'_>, p: NodeId) {
        if !matches!(self.phase, Phase::Nominating { nominee } if nominee.id == p) {
            self.answered.retain(|r| r.id != p);
        }
        match self.phase {
            Phase::Recovering { best: Some(b), .. } if b.id == p => {
                // Never admit a process reported down: hold an election after T2.
                self.phase = Phase::Recovering { best: Some(b), best_is_coordinator: false };
            }
            Phase::Nominating { nominee } if nominee.id == p => {
                ctx.cancel_timer(Timer::T3);
                self.nominee_failed(ctx, nominee);
            }
            Phase::Idle if matches!(self.leader, Some(l) if l.id == p && l != self.me) => self.hold_election(ctx),
            _ => {}
        }
    }

    fn handle_input(&mut self, ctx: &mut Context<'_>, input: Input) {
        match input {
            Input::Start => self.hold_election(ctx),
            Input::Recover => self.recover(ctx),
            Input::Message { from, msg } => self.on_message(ctx, from, msg),
            Input::Timer(t) => self.on_timer(ctx, t),
            Input::PeerDown(p) => {
                if p != self.me.id {
                    self.down.insert(&self.group, p);
                }
                self.on_peer_down(ctx, p);
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
            Input::SendFailed { to, msg: Message::Nomination } => {
                if let Phase::Nominating { nominee } = self.phase {
                    if nominee.id == to {
                        ctx.cancel_timer(Timer::T3);
                        self.nominee_failed(ctx, nominee);
                    }
                }
            }
            Input::SendFailed { .. } => {}
            Input::Membership(g) => self.on_membership(ctx, g),
        }
    }
}

impl ClaimSteps for FastBully {
    /// Seed 002's `StartElection`, unless this process already holds an election.
    fn hold_election(&mut self, ctx: &mut Context<'_>) {
        if self.holding() {
            return;
        }
        self.stop(ctx);
        self.leader = None;
        self.up_above = None;
        ctx.started();
        self.send_elections(ctx);
    }

    /// Admit `s` as the coordinator and stop any election or wait.
    fn accept(&mut self, ctx: &mut Context<'_>, s: Rank) {
        let unchanged = self.phase == Phase::Idle && self.leader == Some(s);
        if !unchanged {
            self.stop(ctx);
            self.leader = Some(s);
            ctx.decide(s.id);
        }
        self.higher_up = false;
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

    fn beat_plan(&self) -> (&crate::election::beats::BeatPlan, &Membership) {
        (&self.timing.beats, &self.group)
    }

    fn contradicted(&mut self) -> &mut crate::election::contradicted::Contradicted {
        &mut self.contradicted
    }
}

impl Election for FastBully {
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
            Phase::Recovering { .. } => "Recovering",
            Phase::Candidate => "Candidate",
            Phase::Nominating { .. } | Phase::Answered => "Waiting",
            Phase::Idle if self.leader == Some(self.me) => "Leader",
            Phase::Idle => "Passive",
        }
    }

    fn in_election(&self) -> bool {
        self.phase != Phase::Idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::Effect;
    use crate::election::Algorithm;
    use crate::testkit::feed;
    use crate::testkit::scenarios as sc;
    use crate::testkit::Net;
    use crate::time::Time;
    use std::time::Duration;

    use sc::quiet_cfg as quiet;

    fn cfg() -> ElectionConfig {
        quiet(Algorithm::FastBully)
    }

    fn assert_settled(net: &Net, expected: usize, what: &str) {
        sc::assert_leader_settled(net, expected, what);
    }

    /// Every non-empty set of starters, started together, in ascending and in descending
    /// order 7 ms apart, N = 1..=12: all agree on the highest process.
    ///
    /// Exact counts when the starters S start together: each starter sends `Election` to its
    /// higher processes and every one is answered (no receiver holds its own election); at T2
    /// every starter but P_{N-1} nominates P_{N-1}. P_{N-1} announces once to its N-1 lower
    /// processes, and answers each further `Nomination` with one `Coordinator` to the
    /// nominator: Nomination = |S \ {P_{N-1}}|, Coordinator = N-1 + |S \ {P_{N-1}}| - 1 if
    /// P_{N-1} did not start (its first nomination made it announce), N-1 + |S \ {P_{N-1}}| if
    /// it did (it announced at its own T2, just before the nominations arrived).
    #[test]
    fn agreement_every_start_pattern() {
        for n in 1..=12usize {
            for mask in 1u32..(1 << n) {
                for pattern in 0..3 {
                    let mut net = Net::new(n, cfg());
                    let starters: Vec<usize> = (0..n).filter(|i| mask & (1 << i) != 0).collect();
                    sc::start_pattern(&mut net, mask, pattern);
                    net.run();
                    let what = format!("n={n} starters={mask:b} pattern={pattern}");
                    assert_settled(&net, n - 1, &what);
                    assert_eq!(net.rejected, 0, "{what}");
                    let elections: u64 = starters.iter().map(|&i| (n - 1 - i) as u64).sum();
                    assert_eq!(net.sent_of("Election"), elections, "{what}");
                    assert_eq!(net.sent_of("Answer"), elections, "{what}");
                    for i in 0..n {
                        assert_eq!(net.started[i], u64::from(starters.contains(&i)), "{what}: {i}");
                    }
                    if pattern == 0 {
                        let top_started = starters.contains(&(n - 1));
                        let nominators = starters.len() as u64 - u64::from(top_started);
                        assert_eq!(net.sent_of("Nomination"), nominators, "{what}");
                        let coord = if top_started { n as u64 - 1 + nominators } else { n as u64 - 2 + nominators };
                        assert_eq!(net.sent_of("Coordinator"), coord, "{what}");
                    }
                }
            }
        }
    }

    #[test]
    fn highest_crashed_before_election() {
        sc::highest_crashed_before_election(&cfg());
    }

    /// Run the theory schedule with `algorithm`: all N processes elect P_{N-1}, P_{N-1}
    /// crashes unnoticed, P_0 alone holds an election. Returns the messages of that election.
    fn lowest_initiates(algorithm: Algorithm, n: usize) -> Net {
        let mut net = Net::new(n, quiet(algorithm));
        net.start_all();
        net.run();
        net.sent.clear();
        net.crash(n - 1);
        let now = net.now;
        net.start_at(now, 0);
        net.run();
        assert_settled(&net, n - 2, &format!("{algorithm} n={n}"));
        net
    }

    /// The theory check, same schedule as the bully's `exact_count_lowest_initiates`:
    /// P_{N-1} has crashed, P_0 alone holds an election (N >= 3).
    ///
    /// - P_0 sends `Election` to P_1 .. P_{N-1}: N-1 (the one to P_{N-1} fails).
    /// - P_1 .. P_{N-2} answer and wait T4, holding no election of their own: N-2 `Answer`s.
    /// - At T2, P_0 nominates the highest answerer P_{N-2}: 1 `Nomination`.
    /// - P_{N-2} sends `Coordinator` to its N-2 lower processes.
    ///
    /// Total (N-1) + (N-2) + 1 + (N-2) = **3N - 4**, against the bully's N² - N - 1: a saving
    /// of (N-1)(N-3), so the fast bully sends fewer for every N >= 4 (equal at N = 3).
    #[test]
    fn exact_count_lowest_initiates() {
        for n in (3..=12u64).chain([16, 32, 64]) {
            let fast = lowest_initiates(Algorithm::FastBully, n as usize);
            assert_eq!(fast.sent_of("Election"), n - 1, "n={n}");
            assert_eq!(fast.sent_of("Answer"), n - 2, "n={n}");
            assert_eq!(fast.sent_of("Nomination"), 1, "n={n}");
            assert_eq!(fast.sent_of("Coordinator"), n - 2, "n={n}");
            assert_eq!(fast.total_sent(), fast_lowest_initiates(n), "n={n}");
            let bully = lowest_initiates(Algorithm::Bully, n as usize);
            assert_eq!(bully.total_sent(), bully_lowest_initiates(n), "n={n}");
            assert_eq!(bully.total_sent() - fast.total_sent(), (n - 1) * (n - 3), "n={n}");
            if n >= 4 {
                assert!(fast.total_sent() < bully.total_sent(), "n={n}");
            }
        }
        // N = 2: P_0 sends one `Election` to the dead P_1 and wins alone, in both.
        assert_eq!(lowest_initiates(Algorithm::FastBully, 2).total_sent(), 1);
        assert_eq!(lowest_initiates(Algorithm::Bully, 2).total_sent(), 1);
    }

    fn fast_lowest_initiates(n: u64) -> u64 {
        3 * n - 4
    }
    fn bully_lowest_initiates(n: u64) -> u64 {
        n * n - n - 1
    }

    /// Run a recovery schedule: all N elect P_{N-1}; process `who` crashes and recovers 10 ms
    /// later. Returns the messages sent from the crash on.
    fn recovery(algorithm: Algorithm, n: usize, who: usize) -> Net {
        let mut net = Net::new(n, quiet(algorithm));
        net.start_all();
        net.run();
        net.sent.clear();
        net.crash(who);
        let at = net.now + Duration::from_millis(10);
        net.recover_at(at, who);
        net.run();
        assert_settled(&net, n - 1, &format!("{algorithm} n={n} recovery of {who}"));
        net
    }

    /// Recovery of the lowest process while P_{N-1} is coordinator: `IamUp` to N-1 processes,
    /// N-1 `View`s, the highest sender names itself coordinator and is admitted: **2(N-1)**,
    /// against the bully's N² - 1 (every higher process answers and holds an election).
    /// Recovery of the highest: `IamUp` N-1, `View` N-1, `Coordinator` N-1: **3(N-1)**, where
    /// the bully sends only its N-1 `Coordinator`s (it has nobody higher to ask): the fast
    /// bully's recovery costs more for the highest process.
    #[test]
    fn exact_count_recovery() {
        for n in (2..=12u64).chain([16, 64]) {
            let low = recovery(Algorithm::FastBully, n as usize, 0);
            assert_eq!(low.sent_of("IamUp"), n - 1);
            assert_eq!(low.sent_of("View"), n - 1);
            assert_eq!(low.total_sent(), 2 * (n - 1), "n={n}");
            assert_eq!(recovery(Algorithm::Bully, n as usize, 0).total_sent(), n * n - 1, "n={n}");
            let high = recovery(Algorithm::FastBully, n as usize, n as usize - 1);
            assert_eq!(high.total_sent(), 3 * (n - 1), "n={n}");
            assert_eq!(recovery(Algorithm::Bully, n as usize, n as usize - 1).total_sent(), n - 1);
        }
    }

    /// The table of `docs/RESULTS.md`: `cargo test -p overlay bully_exact_counts_table --
    /// --nocapture`. Every number printed is measured by the pump and checked against its
    /// formula.
    #[test]
    fn bully_exact_counts_table() {
        println!("| N | bully, lowest initiates, highest crashed (N²-N-1) | fast bully, same (3N-4) | saving ((N-1)(N-3)) | bully, lowest recovers (N²-1) | fast bully, lowest recovers (2(N-1)) | bully, highest recovers (N-1) | fast bully, highest recovers (3(N-1)) |");
        println!("|---|---|---|---|---|---|---|---|");
        for n in [4u64, 8, 16, 64] {
            let b = lowest_initiates(Algorithm::Bully, n as usize).total_sent();
            let f = lowest_initiates(Algorithm::FastBully, n as usize).total_sent();
            let bl = recovery(Algorithm::Bully, n as usize, 0).total_sent();
            let fl = recovery(Algorithm::FastBully, n as usize, 0).total_sent();
            let bh = recovery(Algorithm::Bully, n as usize, n as usize - 1).total_sent();
            let fh = recovery(Algorithm::FastBully, n as usize, n as usize - 1).total_sent();
            assert_eq!(
                (b, f, bl, fl, bh, fh),
                (n * n - n - 1, 3 * n - 4, n * n - 1, 2 * (n - 1), n - 1, 3 * (n - 1)),
                "n={n}"
            );
            println!("| {n} | {b} | {f} | {} | {bl} | {fl} | {bh} | {fh} |", b - f);
        }
    }

    /// The nominee dies after answering: P_0's T3 expires, it nominates the next answerer.
    #[test]
    fn nominee_crash_nominates_the_next() {
        for n in 4..=10 {
            let mut net = Net::new(n, cfg());
            net.crash(n - 1);
            net.start_at(Time::ZERO, 0);
            // P_{N-2} answers at 1 ms and would be nominated at 500 ms.
            net.crash_at(Time::from_millis(100), n - 2);
            net.run();
            assert_settled(&net, n - 3, &format!("n={n}"));
            assert_eq!(net.sent_of("Nomination"), 2, "n={n}: one to the dead nominee, one to the next");
            assert_eq!(net.started[0], 1, "n={n}: no restart needed");
        }
        // The same, reported by the failure detector: the next nominee is chosen at once.
        let n = 6;
        let mut net = Net::new(n, cfg());
        net.detector = true;
        net.crash(n - 1);
        net.start_at(Time::ZERO, 0);
        net.crash_at(Time::from_millis(500) + Duration::from_micros(500), n - 2);
        net.run();
        assert_settled(&net, n - 3, "reported");
        assert!(net.last_decision < Time::from_millis(1_000), "no T3 wait: decided at {:?}", net.last_decision);
    }

    /// Every answerer dies: the list empties and the election restarts (seed 002).
    #[test]
    fn all_answerers_crash_restarts() {
        let n = 5;
        let mut net = Net::new(n, cfg());
        net.start_at(Time::ZERO, 0);
        for i in 1..n {
            net.crash_at(Time::from_millis(100), i);
        }
        net.run();
        assert_settled(&net, 0, "alone");
        assert_eq!(net.started[0], 2);
    }

    /// More answerers than `ANSWERED_CAP`, and the highest ANSWERED_CAP of them die after
    /// answering: the list empties, the election restarts, and the next one wins.
    #[test]
    fn bounded_answered_list() {
        let n = ANSWERED_CAP + 4;
        let mut net = Net::new(n, cfg());
        net.start_at(Time::ZERO, 0);
        for i in n - ANSWERED_CAP..n {
            net.crash_at(Time::from_millis(100), i);
        }
        net.run();
        assert_settled(&net, n - ANSWERED_CAP - 1, "cap");
        assert_eq!(net.started[0], 2, "restarted once the remembered answerers were exhausted");
    }

    /// An answering process whose initiator dies before nominating holds its own election
    /// after T4.
    #[test]
    fn t4_expiry_holds_an_election() {
        let n = 5;
        let mut net = Net::new(n, cfg());
        net.start_at(Time::ZERO, 0);
        net.crash_at(Time::from_millis(100), 0);
        net.run();
        assert_settled(&net, n - 1, "after T4");
        for i in 1..n {
            assert_eq!(net.started[i], 1, "process {i} held one election after T4");
        }
    }

    /// The coordinator dies just after its announcement; `PeerDown` starts a new election;
    /// then the next coordinator dies too.
    #[test]
    fn coordinator_crash_reported_then_reelection() {
        sc::two_coordinator_crashes(&cfg());
    }

    /// A process whose only input is its group holds an election after T1 (the simulator's
    /// boot relies on it, as a node does).
    #[test]
    fn group_alone_then_the_orphan_elects_itself() {
        sc::group_alone_then_the_orphan_elects_itself(Algorithm::FastBully);
    }

    #[test]
    fn heartbeats_keep_followers_and_detect_a_crash() {
        sc::heartbeats_keep_followers_and_detect_a_crash(Algorithm::FastBully);
    }

    /// A silent crash costs the successors' election only (`election::beats`).
    #[test]
    fn silent_crash_costs_the_successors_election_only() {
        sc::silent_crash_costs_the_successors_election_only(Algorithm::FastBully);
    }

    /// The old highest recovers and takes over through `IamUp`/`View`/`Coordinator`.
    #[test]
    fn recovered_highest_bullies_its_way_back() {
        for n in 2..=10 {
            let mut net = Net::new(n, cfg());
            net.detector = true;
            net.start_all();
            net.crash_at(Time::from_millis(1_000), n - 1);
            net.run();
            assert_settled(&net, n - 2, "after the crash");
            let at = net.now + Duration::from_millis(100);
            net.recover_at(at, n - 1);
            net.run();
            assert_settled(&net, n - 1, &format!("n={n} after recovery"));
        }
    }

    /// Recovering when the group's coordinator is dead but nobody noticed: the highest `View`
    /// sender names a dead coordinator, so the recovering process holds an election.
    #[test]
    fn recovery_with_dead_coordinator_in_view_holds_an_election() {
        let n = 6;
        let mut net = Net::new(n, cfg());
        net.start_all();
        net.run();
        net.sent.clear();
        net.crash(n - 1); // unnoticed: no reports, no heartbeats
        net.crash(1);
        let at = net.now + Duration::from_millis(10);
        net.recover_at(at, 1);
        net.run();
        // P_1 elected P_{N-2}, which announced to every lower process.
        assert_settled(&net, n - 2, "dead coordinator in the view");
        // IamUp 5, View 4, Election 4 (to P_2 .. P_5), Answer 3, Nomination 1 (to P_4),
        // Coordinator 4 (P_4 to P_0 .. P_3). P_0 took no part and still names the dead P_5:
        // P_4's claim is lower than that, so P_0 asks (Election 5, Answer 4 from P_1 .. P_4),
        // nominates P_4 (1), which announces again (Coordinator 4).
        let expect = [("Answer", 7), ("Coordinator", 8), ("Election", 9), ("IamUp", 5), ("Nomination", 2), ("View", 4)];
        assert_eq!(net.sent, expect.into_iter().collect());
    }

    /// The highest `View` sender is reported down before T2 expires: it is not admitted (the
    /// case of `PEERAGE_SEED=3381`, shrunk).
    #[test]
    fn recovery_does_not_admit_a_process_reported_down() {
        let mut net = Net::new(2, cfg());
        net.detector = true;
        net.start_all();
        net.run();
        net.crash(0);
        let at = net.now + Duration::from_millis(10);
        net.recover_at(at, 0);
        net.crash_at(at + Duration::from_millis(100), 1);
        net.run();
        assert_settled(&net, 0, "highest sender died during recovery");
    }

    /// The sweep's safety violation (`peerage-lab`, fast bully seeds 135 and 742), shrunk: a
    /// stale `Nomination` reaches a process that has meanwhile accepted a live higher
    /// coordinator. P_4 (the coordinator) is down when P_0's `Election` reaches it, recovers
    /// 2 ms after P_0 started and announces itself after its T2 (`IamUp`/`View`). P_0's first
    /// nominee P_3 has crashed; the failed `Nomination` comes back at the very instant P_4
    /// announces, so P_0 nominates P_2 just after P_4's `Coordinator` left: P_2 accepts P_4
    /// first and receives the `Nomination` second. Taking over there would make P_2's
    /// `Coordinator` override P_4's at P_0 and P_1 (two coordinators, the lower one last).
    /// P_2 holds an election instead, P_4 answers, is nominated and announces again.
    #[test]
    fn stale_nomination_after_a_higher_coordinator_holds_an_election() {
        let n = 5;
        let mut net = Net::new(n, cfg());
        net.start_all();
        net.run();
        assert_settled(&net, n - 1, "first election");
        net.sent.clear();
        let held = net.started[2];
        net.crash(4); // unnoticed: no reports, no heartbeats
        let t0 = net.now + Duration::from_millis(10);
        net.start_at(t0, 0);
        // P_0's `Election` reaches the dead P_4 at t0 + 1 ms; P_4 is back at t0 + 2 ms.
        net.recover_at(t0 + Duration::from_millis(2), 4);
        // The first nominee dies after answering (before P_0's T2).
        net.crash_at(t0 + Duration::from_millis(100), 3);
        net.run_until_quiet(t0 + Duration::from_millis(503));
        // The interleaving: P_2 has admitted P_4, then P_0's `Nomination` reached it.
        assert_eq!(net.sent_of("Nomination"), 2, "to the dead P_3, then to P_2");
        net.run();
        assert_settled(&net, n - 1, "stale nomination");
        assert_eq!(net.started[2], held + 1, "P_2 held an election instead of taking over");
    }

    /// Nobody answers `IamUp`: the recovering process is coordinator without announcing.
    #[test]
    fn recovery_alone() {
        let n = 4;
        let mut net = Net::new(n, cfg());
        for i in 0..n - 1 {
            net.crash(i);
        }
        net.crash(n - 1);
        net.recover_at(Time::ZERO, 1);
        net.run();
        assert_eq!(net.process(1).leader(), Some(net.id(1)));
        assert_eq!(net.process(1).state(), "Leader");
        assert_eq!(net.total_sent(), 3, "only the IamUps");
        let mut single = Net::new(1, cfg());
        single.crash(0);
        single.recover_at(Time::ZERO, 0);
        single.run();
        assert_settled(&single, 0, "single");
        assert_eq!(single.total_sent(), 0);
    }

    #[test]
    fn coordinator_from_lower_is_bullied() {
        sc::coordinator_from_lower_is_bullied(&cfg());
    }

    #[test]
    fn membership_without_the_coordinator_starts_an_election() {
        sc::membership_without_the_coordinator_starts_an_election(&cfg());
    }

    #[test]
    fn bad_input_is_rejected_and_changes_nothing() {
        let ranks: Vec<Rank> = (1..=4).map(|i| Rank::new(0, NodeId::from_u64(i))).collect();
        let group = Arc::new(Membership::new(ranks.clone()));
        let mut p = FastBully::new(ranks[1], group, &cfg());
        feed(&mut p, Input::Recover);
        assert_eq!(p.state(), "Recovering");
        let stranger = NodeId::from_u64(99);
        let outsider = Rank::new(0, stranger);
        let cases = [
            (stranger, Message::IamUp),
            (stranger, Message::Nomination),
            (ranks[1].id, Message::Answer),
            (ranks[3].id, Message::Election),
            (ranks[3].id, Message::Nomination),
            (ranks[0].id, Message::Answer),
            (ranks[3].id, Message::View { up: vec![outsider], coordinator: None }),
            (ranks[3].id, Message::View { up: vec![], coordinator: Some(outsider) }),
            (ranks[3].id, Message::View { up: vec![Rank::new(7, ranks[2].id)], coordinator: None }),
            (ranks[0].id, Message::EchoProbe),
        ];
        for (from, msg) in cases {
            let before = (p.leader(), p.state(), p.in_election(), p.phase);
            let effects = feed(&mut p, Input::Message { from, msg: msg.clone() });
            assert!(
                matches!(effects.as_slice(), [Effect::Rejected { from: f, .. }] if *f == from),
                "{msg:?} from {from:?}: {effects:?}"
            );
            assert_eq!(before, (p.leader(), p.state(), p.in_election(), p.phase), "{msg:?}");
        }
        // A valid view is taken.
        let v = Message::View { up: vec![ranks[3]], coordinator: Some(ranks[3]) };
        assert!(feed(&mut p, Input::Message { from: ranks[3].id, msg: v }).is_empty());
        let effects = feed(&mut p, Input::Timer(Timer::T2));
        // Heartbeats are off, so admitting P_3 arms no T1.
        assert_eq!(effects, vec![Effect::Leader(ranks[3].id)]);
        assert_eq!(p.leader(), Some(ranks[3].id));
    }

    /// Seed 407's interleaving (simulator, random latencies), at one process: P_2 answers
    /// P_0's `Election` (which reached the dead P_3), then the recovering P_3's `IamUp`
    /// arrives, then P_0's `Nomination`. P_3 may announce itself at any moment, and a
    /// `Coordinator` from P_2 delivered after P_3's would leave two coordinators: P_2 asks
    /// the higher processes instead of taking over.
    #[test]
    fn nominee_that_heard_iamup_from_a_higher_process_holds_an_election() {
        let ranks: Vec<Rank> = (1..=4).map(|i| Rank::new(0, NodeId::from_u64(i))).collect();
        let mut p = FastBully::new(ranks[2], Arc::new(Membership::new(ranks.clone())), &cfg());
        let from = |i: usize, msg: Message| Input::Message { from: ranks[i].id, msg };
        feed(&mut p, from(0, Message::Election));
        assert_eq!(p.state(), "Waiting");
        let effects = feed(&mut p, from(3, Message::IamUp));
        assert!(matches!(effects.as_slice(), [Effect::Send { msg: Message::View { .. }, .. }]), "{effects:?}");
        let effects = feed(&mut p, from(0, Message::Nomination));
        assert!(effects.contains(&Effect::Send { to: ranks[3].id, msg: Message::Election }), "{effects:?}");
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::Send { msg: Message::Coordinator, .. })),
            "must not announce: {effects:?}"
        );
        assert_eq!((p.state(), p.leader()), ("Candidate", None));
        // Without the `IamUp` the seed's fast path holds: the nominee takes over at once.
        let mut q = FastBully::new(ranks[2], Arc::new(Membership::new(ranks.clone())), &cfg());
        feed(&mut q, from(0, Message::Election));
        let effects = feed(&mut q, from(0, Message::Nomination));
        assert!(effects.contains(&Effect::Send { to: ranks[0].id, msg: Message::Coordinator }), "{effects:?}");
        assert_eq!((q.state(), q.leader()), ("Leader", Some(ranks[2].id)));
    }

    /// Sweep seeds 2280/2450/4068/4782, at one process: P_1 admitted P_3's `Coordinator`,
    /// then P_2's (sent before P_2 heard of P_3, delivered later) arrives. P_1 must not let
    /// it override P_3: it holds an election.
    #[test]
    fn lower_claim_over_a_higher_coordinator_holds_an_election() {
        let ranks: Vec<Rank> = (1..=4).map(|i| Rank::new(0, NodeId::from_u64(i))).collect();
        let mut p = FastBully::new(ranks[1], Arc::new(Membership::new(ranks.clone())), &cfg());
        let from = |i: usize, msg: Message| Input::Message { from: ranks[i].id, msg };
        assert_eq!(feed(&mut p, from(3, Message::Coordinator)), vec![Effect::Leader(ranks[3].id)]);
        let effects = feed(&mut p, from(2, Message::Coordinator));
        assert!(!effects.contains(&Effect::Leader(ranks[2].id)), "{effects:?}");
        for i in [2, 3] {
            assert!(effects.contains(&Effect::Send { to: ranks[i].id, msg: Message::Election }), "{effects:?}");
        }
        assert_eq!((p.state(), p.leader()), ("Candidate", None));
        // A higher claim than the named coordinator is admitted at once (seed 002).
        let mut q = FastBully::new(ranks[0], Arc::new(Membership::new(ranks.clone())), &cfg());
        feed(&mut q, from(2, Message::Coordinator));
        assert_eq!(feed(&mut q, from(3, Message::Coordinator)), vec![Effect::Leader(ranks[3].id)]);
    }

    /// Sweep seed 455497 (recovery): a leader answers a lower process's `Election` and no
    /// `Nomination` follows (the nominator admitted a `Coordinator` and dropped its election).
    /// After T4 it announces again, so a process that admitted a stale lower claim meanwhile
    /// hears it last; a `Nomination` in time makes that announcement and disarms T4.
    #[test]
    fn a_leader_that_answered_and_got_no_nomination_announces_again() {
        let ranks: Vec<Rank> = (1..=4).map(|i| Rank::new(0, NodeId::from_u64(i))).collect();
        let mut p = FastBully::new(ranks[3], Arc::new(Membership::new(ranks.clone())), &cfg());
        let from = |i: usize, msg: Message| Input::Message { from: ranks[i].id, msg };
        feed(&mut p, Input::Start);
        feed(&mut p, Input::Timer(Timer::T2));
        assert_eq!(p.leader(), Some(ranks[3].id));
        let effects = feed(&mut p, from(0, Message::Election));
        assert!(effects.contains(&Effect::Send { to: ranks[0].id, msg: Message::Answer }), "{effects:?}");
        assert!(effects.iter().any(|e| matches!(e, Effect::SetTimer { timer: Timer::T4, .. })), "{effects:?}");
        let effects = feed(&mut p, Input::Timer(Timer::T4));
        for r in &ranks[..3] {
            assert!(effects.contains(&Effect::Send { to: r.id, msg: Message::Coordinator }), "{effects:?}");
        }
        // Once announced, a late T4 does nothing.
        assert!(feed(&mut p, Input::Timer(Timer::T4)).is_empty());
        // With a Nomination in time, that is the announcement, and T4 is disarmed.
        feed(&mut p, from(1, Message::Election));
        let effects = feed(&mut p, from(1, Message::Nomination));
        assert!(effects.contains(&Effect::CancelTimer { timer: Timer::T4 }), "{effects:?}");
        assert_eq!(effects.iter().filter(|e| matches!(e, Effect::Send { msg: Message::Coordinator, .. })).count(), 3);
    }

    /// An answering process that names a higher coordinator waits T4 + T2, one that names
    /// none (or itself a lower one) T4: the coordinator answers the same `Election` and
    /// announces within T4, so the follower's wait ends after that announcement instead of
    /// racing it into another election.
    #[test]
    fn a_follower_answering_waits_past_its_coordinators_announcement() {
        let c = cfg();
        let ranks: Vec<Rank> = (1..=4).map(|i| Rank::new(0, NodeId::from_u64(i))).collect();
        let group = Arc::new(Membership::new(ranks.clone()));
        let from = |i: usize, msg: Message| Input::Message { from: ranks[i].id, msg };
        let t4 = |effects: &[Effect]| {
            effects.iter().find_map(|e| match e {
                Effect::SetTimer { timer: Timer::T4, after } => Some(*after),
                _ => None,
            })
        };
        let mut follower = FastBully::new(ranks[1], group.clone(), &c);
        feed(&mut follower, from(3, Message::Coordinator));
        assert_eq!(follower.leader(), Some(ranks[3].id));
        let effects = feed(&mut follower, from(0, Message::Election));
        assert_eq!(t4(&effects), Some(c.t4() + c.t2()), "{effects:?}");
        assert_eq!(follower.state(), "Waiting");
        // A further `Election` re-arms the same wait.
        assert_eq!(t4(&feed(&mut follower, from(0, Message::Election))), Some(c.t4() + c.t2()));
        let mut orphan = FastBully::new(ranks[1], group, &c);
        assert_eq!(t4(&feed(&mut orphan, from(0, Message::Election))), Some(c.t4()));
        // A coordinator reported down meanwhile is not waited for.
        feed(&mut follower, Input::PeerDown(ranks[3].id));
        assert_eq!(t4(&feed(&mut follower, from(0, Message::Election))), Some(c.t4()));
    }

    /// `Input::Membership` replaces the group: a newcomer's messages are refused before and
    /// taken after; ranks of the old group stay valid.
    #[test]
    fn membership_update_admits_a_newcomer() {
        sc::membership_update_admits_a_newcomer(|me, group| FastBully::new(me, group, &cfg()));
    }

    /// Timers of a phase already left do nothing.
    #[test]
    fn stale_timers_are_ignored() {
        sc::stale_timers_are_ignored(|me, group| FastBully::new(me, group, &cfg()));
    }

    #[test]
    fn random_crash_recover_schedules() {
        let seeds = crate::election::bully::tests::seeds(300);
        println!(
            "fast bully random schedules: seeds {}..={} (replay one with PEERAGE_SEED)",
            seeds[0],
            seeds[seeds.len() - 1]
        );
        for seed in seeds {
            crate::election::bully::tests::random_schedule(Algorithm::FastBully, seed);
        }
    }
}

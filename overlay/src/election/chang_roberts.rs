//! Chang and Roberts' ring election with a participant flag (seed 003, "Ring-Based
//! Algorithm"), made failure-tolerant as seed 003's "modified version" suggests.
//!
//! The logical ring is the rank order of [`Membership`]: a process's successor is the next
//! higher rank, wrapping from the highest to the lowest.
//!
//! # The algorithm as seed 003 gives it
//! Every process starts non-participant. An initiator marks itself participant and sends
//! `election(own rank)` ([`Message::CrElection`]) to its successor. On `election(c)`: `c > me`
//! forward it and mark participant; `c < me` and not participant: replace `c` by its own rank
//! and forward; `c < me` and participant: discard it; `c = me`: it is the leader and sends
//! `elected(me)` ([`Message::CrElected`]) round, which every process adopts and forwards until
//! it is back at the leader. One initiator at position `i` costs `N - 1 - i` + `N` `election`
//! and `N` `elected` messages: 2N when the highest initiates, 3N - 1 when the lowest does.
//!
//! # Failure handling (seed 003's "modified version", made precise)
//! - **Dead successors** are skipped as in [`super::ring`] (the same suspects list: this
//!   epoch's failed sends and `PeerDown`s, and the detector's reports kept across epochs until
//!   `PeerUp` or a message from the process).
//! - **A dead candidate or leader**: the process whose send to it fails (or that skips it)
//!   discards the message and elects again; receiving `election(c)` or `elected(l)` is taken
//!   as a sign that `c` or `l` lives (a wrong guess costs one failed send).
//! - **Epochs** (not in the seed): every message carries one; a new election increments it, a
//!   higher one is joined (participant flag cleared, leader unset), and a lower one never sets
//!   a leader. A stale `election` or `elected` (a recovered or lagging sender) is answered,
//!   by a non-participant at once and by a participant when its election ends: a new election
//!   if the sender (or the leader it names, whichever is higher) ranks above this process's
//!   leader, else `elected(leader)` straight back (a catch-up). A failed send of an older
//!   epoch's message marks nothing.
//! - **Rank check**: `elected(l)` with `l` below the receiver makes it elect again.
//! - **Two laps in one epoch** (only when processes recovered during the election): within an
//!   epoch a process only moves to a higher leader; a lower lap is answered with the higher
//!   leader instead of being passed on, and a process that named itself and meets a higher
//!   lap of the same epoch, or whose own lap comes back while it names a higher leader, elects
//!   again.
//! - **A lap the ring outgrew** (ours): a process that already names the leader passes a second
//!   `elected` lap of the epoch on only if its next hop is no longer the process it told: its
//!   membership grew since, and the processes now between them may be waiting. Else the copy
//!   is a catch-up echo and stops. Without it a five-process start-up named its leader in 12-13
//!   s instead of 2: the first lap passed processes that did not yet know all members, the two
//!   it skipped started late elections, and the leader's answering lap stopped at the first
//!   process that already named it, so they waited for the 10 s lap timer.
//! - **Lap timer**: a participant, and a leader whose `elected` lap is out, arm `Lap`; it
//!   elects again when it fires, doubling the timeout with each consecutive restart.
//! - **Recoveries**: `PeerUp` of a process above the leader (or, during an election, above
//!   this process) starts a new election. A recovered process elects at epoch 1.
//! - A process alone names itself; `Membership` without this process is ignored.
//! - The leader's liveness (heartbeats, T1) is the wrapper's ([`super::watch`]).
//!
//! # Memory
//! A handful of words per process (the simulator holds 100,000): rank, ring position, epoch,
//! flags, leader, backoff and the (usually empty) suspects list; the group is shared.

use crate::driver::{Context, Election, Input, Timer};
use crate::election::ring::{backoff, is_member, next_live, Next, Suspects, MAX_BACKOFF_SHIFT};
use crate::election::watch::LeaderSilence;
use crate::election::{ElectionConfig, LapRule, Message};
use crate::id::{NodeId, Rank};
use crate::membership::Membership;
use std::sync::Arc;

/// One process of the Chang-Roberts election.
#[derive(Debug, Clone)]
pub struct ChangRoberts {
    me: Rank,
    group: Arc<Membership>,
    /// This process's ring position; `None` if it is not a member of `group`.
    pos: Option<u32>,
    /// The lap timer, scaled with the group's size (`ElectionConfig::hop_delay_ms`).
    lap: LapRule,
    epoch: u64,
    participant: bool,
    leader: Option<Rank>,
    dead: Suspects,
    /// A stale `election` received while participant: (sender, candidate) ring positions,
    /// answered when this process's election ends.
    stale: Option<(u32, u32)>,
    /// Consecutive restarts by the lap timer (the backoff exponent).
    restarts: u8,
    /// This process named itself and its `elected` lap is out: the `Lap` timer guards it
    /// (a forwarder can crash with it).
    announcing: bool,
    /// The first 64 bits of the id of the process this one last sent an `elected` lap on to,
    /// in this epoch (see "A lap the ring outgrew"; the bits keep the state small).
    lap_to: Option<u64>,
}

impl ChangRoberts {
    pub fn new(me: Rank, group: Arc<Membership>, cfg: &ElectionConfig) -> Self {
        let pos = group.position(&me.id).map(|p| p as u32);
        ChangRoberts {
            me,
            group,
            pos,
            lap: LapRule::of(cfg),
            epoch: 0,
            participant: false,
            leader: None,
            dead: Suspects::default(),
            stale: None,
            restarts: 0,
            announcing: false,
            lap_to: None,
        }
    }

    /// The current epoch (for tests and status output).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    fn pos_of(&self, id: &NodeId) -> Option<usize> {
        self.group.position(id)
    }

    fn suspect(&mut self, id: &NodeId) {
        self.dead.suspect(&self.group, &self.me.id, id);
    }

    fn alive(&mut self, id: &NodeId) {
        self.dead.alive(&self.group, id);
    }

    /// True if `to` is the next process on the ring after this one once the processes known
    /// dead (other than `to`) are skipped, i.e. `to` was the target of a lap hop.
    fn is_next_hop(&self, to: &NodeId) -> bool {
        let (Some(me), Some(t)) = (self.pos, self.pos_of(to)) else { return false };
        self.dead.next_after(self.group.len(), me as usize, t)
    }

    /// Where an `elected(leader)` lap ends: at the leader, or nowhere for our own lap.
    fn lap_stop(&self, leader: Rank) -> Option<usize> {
        if leader == self.me {
            None
        } else {
            self.pos_of(&leader.id)
        }
    }

    /// The process an `elected(leader)` lap goes to next from here, if any.
    fn next_lap_hop(&self, leader: Rank) -> Option<NodeId> {
        let pos = self.pos?;
        match next_live(self.group.len(), pos as usize, &self.dead, self.lap_stop(leader)) {
            Next::To(p) => Some(self.group.ranks()[p].id),
            _ => None,
        }
    }

    fn become_participant(&mut self, ctx: &mut Context<'_>) {
        if !self.participant {
            self.participant = true;
            ctx.set_timer(Timer::Lap, backoff(self.lap.for_group(self.group.len()), self.restarts));
        }
    }

    /// Enter a higher epoch seen in a message.
    fn join(&mut self, ctx: &mut Context<'_>, epoch: u64) {
        self.epoch = epoch;
        self.dead.clear();
        self.leader = None;
        if self.participant || self.announcing {
            ctx.cancel_timer(Timer::Lap);
        }
        self.participant = false;
        self.announcing = false;
        self.lap_to = None;
    }

    /// Hold a new election at a new epoch; `dead_now` is a process just found dead, kept
    /// across the epoch change.
    fn restart(&mut self, ctx: &mut Context<'_>, dead_now: Option<NodeId>) {
        if self.pos.is_none() {
            return;
        }
        self.epoch += 1;
        self.dead.clear();
        if let Some(id) = dead_now {
            self.suspect(&id);
        }
        self.leader = None;
        self.participant = false;
        self.announcing = false;
        self.lap_to = None;
        ctx.started();
        self.become_participant(ctx);
        self.send_election(ctx, self.me);
    }

    /// Send `election(candidate)` to the next live process; a dead candidate ends the message
    /// and starts a new election.
    fn send_election(&mut self, ctx: &mut Context<'_>, candidate: Rank) {
        let Some(pos) = self.pos else { return };
        let stop = if candidate == self.me { None } else { self.pos_of(&candidate.id) };
        if stop.is_some_and(|p| self.dead.contains(p)) {
            self.restart(ctx, None);
            return;
        }
        let n = self.group.len();
        match self.dead.walk(n, pos as usize, stop) {
            Next::To(p) => {
                let to = self.group.ranks()[p].id;
                ctx.send(to, Message::CrElection { epoch: self.epoch, candidate });
            }
            Next::PassedStop => self.restart(ctx, None),
            Next::Alone => self.elected(ctx),
        }
    }

    /// This process is the leader of the current epoch: announce it.
    fn elected(&mut self, ctx: &mut Context<'_>) {
        self.set_leader(ctx, self.me);
        self.send_elected(ctx, self.me);
        self.answer_stale(ctx);
    }

    /// The election ended here: answer a stale `election` received meanwhile, as a
    /// non-participant would have (new election if its candidate ranks above the leader,
    /// else a catch-up `elected` to its sender).
    fn answer_stale(&mut self, ctx: &mut Context<'_>) {
        if self.participant {
            return;
        }
        let (Some((from, cand)), Some(leader)) = (self.stale, self.leader) else { return };
        self.stale = None;
        let ranks = self.group.ranks();
        let (Some(from), Some(cand)) = (ranks.get(from as usize), ranks.get(cand as usize)) else {
            return;
        };
        if *cand > leader {
            self.restart(ctx, None);
        } else if from.id != self.me.id {
            ctx.send(from.id, Message::CrElected { epoch: self.epoch, leader });
        }
    }

    fn set_leader(&mut self, ctx: &mut Context<'_>, leader: Rank) {
        if self.participant || self.announcing {
            ctx.cancel_timer(Timer::Lap);
        }
        self.participant = false;
        self.announcing = false;
        self.restarts = 0;
        if self.leader != Some(leader) {
            self.leader = Some(leader);
            ctx.decide(leader.id);
        }
    }

    /// Send `elected(leader)` on; the lap ends at the leader (or, if it is dead, at the
    /// process that skips it, which holds a new election).
    fn send_elected(&mut self, ctx: &mut Context<'_>, leader: Rank) {
        let Some(pos) = self.pos else { return };
        let stop = self.lap_stop(leader);
        let n = self.group.len();
        match self.dead.walk(n, pos as usize, stop) {
            Next::To(p) => {
                let to = self.group.ranks()[p].id;
                ctx.send(to, Message::CrElected { epoch: self.epoch, leader });
                self.lap_to = Some(to.high_u64());
                if leader == self.me && !self.participant {
                    // Our own lap: wait for it to come back (see "Lost `elected` lap").
                    self.announcing = true;
                    ctx.set_timer(Timer::Lap, backoff(self.lap.for_group(self.group.len()), self.restarts));
                }
            }
            Next::PassedStop => self.restart(ctx, None),
            Next::Alone => {}
        }
    }

    fn on_election(&mut self, ctx: &mut Context<'_>, from: NodeId, epoch: u64, candidate: Rank) {
        if epoch < self.epoch {
            self.lagging(ctx, from, candidate);
            return;
        }
        let joined = epoch > self.epoch;
        if joined {
            self.join(ctx, epoch);
        }
        // The candidate was alive when it sent this message: a suspicion of it (perhaps from
        // before it recovered) is dropped and the message goes towards it; only a failed
        // send to it ends the message (otherwise a recovered process could be skipped for
        // ever).
        self.alive(&candidate.id);
        if candidate == self.me {
            // Our own rank came all the way round: no live process ranks higher.
            if self.participant || joined {
                self.elected(ctx);
            }
            return;
        }
        if candidate > self.me {
            // A process that already names `candidate` in this epoch passes its election on
            // (a recovered candidate needs it back) without taking part again: the lap ends
            // at `candidate`, and an `elected` echo of it stops here.
            if joined || self.participant || self.leader != Some(candidate) {
                self.become_participant(ctx);
            }
            self.send_election(ctx, candidate);
        } else if !self.participant {
            self.become_participant(ctx);
            self.send_election(ctx, self.me);
        }
        // else: participant and a smaller candidate: discard.
    }

    /// A message of an older epoch from `from` (a recovered or lagging process), naming
    /// `candidate` (for a stale `elected`, the sender itself). A non-participant answers at
    /// once, a participant when its election ends (it remembers one, the highest): a new
    /// election if `candidate` ranks above the leader, else a catch-up `elected(leader)` to
    /// `from`.
    fn lagging(&mut self, ctx: &mut Context<'_>, from: NodeId, candidate: Rank) {
        if self.participant {
            if let (Some(f), Some(c)) = (self.pos_of(&from), self.pos_of(&candidate.id)) {
                if self.stale.is_none_or(|(_, old)| old as usize <= c) {
                    self.stale = Some((f as u32, c as u32));
                }
            }
            return;
        }
        match self.leader {
            Some(l) if candidate <= l => {
                ctx.send(from, Message::CrElected { epoch: self.epoch, leader: l });
            }
            _ => self.restart(ctx, None),
        }
    }

    fn on_elected(&mut self, ctx: &mut Context<'_>, from: NodeId, epoch: u64, leader: Rank) {
        if epoch < self.epoch {
            // Never set a leader from an older election; tell the lagging sender. The message
            // names two processes that lived: its sender and `leader`; the higher one counts
            // as the candidate, so a leader above ours (perhaps skipped by our election on a
            // suspicion older than its recovery) leads to a new election.
            if let Some(sender) = self.group.rank_of(&from) {
                self.lagging(ctx, from, sender.max(leader));
            }
            return;
        }
        let joined = epoch > self.epoch;
        if joined {
            self.join(ctx, epoch);
        }
        let settled = if joined { None } else { self.leader };
        if leader == self.me {
            // The lap is back at the leader (unless a higher leader of this epoch is known).
            if settled.is_none_or(|cur| cur <= self.me) {
                self.set_leader(ctx, leader);
                self.answer_stale(ctx);
            } else {
                // Our lap went round while we name a higher leader of this epoch: processes
                // it passed may name us, and the higher lap may have skipped them (an old
                // suspicion). Hold a new election, in which the suspicions are dropped.
                self.restart(ctx, None);
            }
            return;
        }
        if let Some(cur) = settled {
            // Two laps of one epoch (possible only when processes recovered while it ran):
            // a process only ever moves to a higher leader within an epoch.
            if cur == leader {
                // Already announced here: a catch-up echo, or a second lap of the leader
                // (it answered a late initiator's election). That lap goes on only if this
                // process's next hop is no longer the one it told: the ring grew since, and
                // the processes it now passes may wait for the leader ("A lap the ring
                // outgrew").
                if self.next_lap_hop(leader).is_some_and(|to| Some(to.high_u64()) != self.lap_to) {
                    self.send_elected(ctx, leader);
                }
                return;
            }
            if leader < cur {
                // Tell the lower leader about the higher one instead of passing its lap on.
                ctx.send(leader.id, Message::CrElected { epoch: self.epoch, leader: cur });
                return;
            }
            if cur == self.me {
                // This process named itself in this epoch and sent its own lap round; a
                // higher lap of the same epoch may have skipped the processes that lap passed
                // (on a failure report older than a recovery). Mirror of the rule above for a
                // lap that comes back late: hold a new election.
                self.restart(ctx, None);
                return;
            }
        }
        if leader < self.me {
            // The election missed this live, higher process.
            self.restart(ctx, None);
            return;
        }
        // A leader the failure detector reported down sent this lap before its crash: do not
        // adopt it, elect again without it.
        if self.pos_of(&leader.id).is_some_and(|p| self.dead.is_reported(p)) {
            self.restart(ctx, None);
            return;
        }
        // The leader sent this lap, so it lived after any older suspicion of this epoch: adopt
        // it and send the lap on towards it; if it is dead after all, the process whose send
        // to it fails holds a new election, which supersedes this one.
        self.alive(&leader.id);
        self.set_leader(ctx, leader);
        self.send_elected(ctx, leader);
        self.answer_stale(ctx);
    }

    fn on_send_failed(&mut self, ctx: &mut Context<'_>, to: NodeId, msg: Message) {
        // A failed send of an older epoch's message says nothing about `to` now: that
        // epoch's marks were dropped with it.
        let current = match &msg {
            Message::CrElection { epoch, .. } | Message::CrElected { epoch, .. } => *epoch >= self.epoch,
            _ => false,
        };
        if !current {
            return;
        }
        self.suspect(&to);
        match msg {
            Message::CrElection { epoch, candidate } if epoch == self.epoch && self.participant => {
                self.send_election(ctx, candidate);
            }
            // Resend only a lap hop (not a catch-up sent back to a predecessor).
            Message::CrElected { epoch, leader }
                if epoch == self.epoch && self.leader == Some(leader) && self.is_next_hop(&to) =>
            {
                self.send_elected(ctx, leader);
            }
            _ => {}
        }
    }

    fn on_message(&mut self, ctx: &mut Context<'_>, from: NodeId, msg: Message) {
        if self.pos.is_none() {
            ctx.reject(from, "this process is not a member of its group");
            return;
        }
        if !self.group.contains(&from) {
            ctx.reject(from, "sender is not a member of the group");
            return;
        }
        match msg {
            Message::CrElection { epoch, candidate } => {
                if !is_member(&self.group, &candidate) {
                    ctx.reject(from, "Chang-Roberts election for a non-member");
                    return;
                }
                self.alive(&from);
                self.on_election(ctx, from, epoch, candidate);
            }
            Message::CrElected { epoch, leader } => {
                if !is_member(&self.group, &leader) {
                    ctx.reject(from, "Chang-Roberts elected names a non-member");
                    return;
                }
                self.alive(&from);
                self.on_elected(ctx, from, epoch, leader);
            }
            _ => ctx.reject(from, "not a Chang-Roberts message"),
        }
    }

    fn on_membership(&mut self, ctx: &mut Context<'_>, group: Arc<Membership>) {
        let Some(pos) = group.position(&self.me.id) else { return };
        self.me = group.ranks()[pos];
        self.pos = Some(pos as u32);
        self.dead.regroup(&self.group, &group);
        self.group = group;
        if self.leader.is_some_and(|l| !is_member(&self.group, &l)) {
            self.leader = None;
            if !self.participant {
                self.restart(ctx, None);
            }
        }
    }
}

impl LeaderSilence for ChangRoberts {
    fn leader_silent(&mut self, ctx: &mut Context<'_>, leader: NodeId) {
        if self.leader.is_some_and(|l| l.id == leader) && !self.participant {
            self.restart(ctx, Some(leader));
        }
    }
}

impl Election for ChangRoberts {
    fn id(&self) -> NodeId {
        self.me.id
    }

    fn handle(&mut self, ctx: &mut Context<'_>, input: Input) {
        match input {
            Input::Start => {
                if !self.participant {
                    self.restart(ctx, None);
                }
            }
            Input::Recover => self.restart(ctx, None),
            Input::Message { from, msg } => self.on_message(ctx, from, msg),
            Input::Timer(Timer::Lap) => {
                if self.participant || self.announcing {
                    self.restarts = self.restarts.saturating_add(1).min(MAX_BACKOFF_SHIFT);
                    self.restart(ctx, None);
                }
            }
            Input::Timer(_) => {}
            Input::PeerUp(id) => {
                if let Some(p) = self.pos_of(&id) {
                    self.dead.unreport(p);
                }
                // A process ranked above our leader came up (recovered): hold a new election,
                // as for the ring. While in an election, one ranked above this process is
                // enough. A lower one learns the leader from the catch-up its own recovery
                // election gets.
                let up = self.group.rank_of(&id);
                let above_leader = up.is_some_and(|r| self.leader.is_none_or(|l| r > l));
                let named = self.leader.is_some();
                if above_leader
                    && ((!self.participant && named) || (self.participant && up.is_some_and(|r| r > self.me)))
                {
                    self.restart(ctx, None);
                }
            }
            Input::PeerDown(id) => {
                if id != self.me.id {
                    if let Some(p) = self.pos_of(&id) {
                        self.dead.report(p);
                    }
                }
                if self.leader.is_some_and(|l| l.id == id) && !self.participant {
                    self.restart(ctx, Some(id));
                } else {
                    self.suspect(&id);
                }
            }
            Input::SendFailed { to, msg } => self.on_send_failed(ctx, to, msg),
            Input::Membership(group) => self.on_membership(ctx, group),
        }
    }

    fn leader(&self) -> Option<NodeId> {
        self.leader.map(|r| r.id)
    }

    fn state(&self) -> &'static str {
        if self.participant {
            "Candidate"
        } else if self.leader == Some(self.me) {
            "Leader"
        } else {
            "Passive"
        }
    }

    fn in_election(&self) -> bool {
        self.participant
    }
}

#[cfg(test)]
mod tests {
    //! Exact, deterministic tests on the lock-step [`Net`]: every message takes 1 ms, a failed
    //! send comes back to its sender 1 ms later, process `i` has rank `i` (so `n - 1` is the
    //! highest) and its successor is `i + 1` (wrapping).
    use super::*;
    use crate::election::{Algorithm, AnyElection};
    use crate::testkit::feed;
    use crate::testkit::scenarios::{
        assert_settled, crash_during, crashes_before, lap_timer_recovers_lost_election, leader_crash_reelection,
        random_faults, random_schedule, recovered_highest_wins,
    };
    use crate::testkit::Net;
    use crate::time::Time;

    /// Heartbeats off: these tests count the algorithm's own messages and run to
    /// quiescence (the leader-liveness rule around it is tested in `watch.rs`).
    fn cfg() -> ElectionConfig {
        crate::testkit::scenarios::quiet_cfg(Algorithm::ChangRoberts)
    }

    fn net(n: usize) -> Net {
        Net::new(n, cfg())
    }

    fn epoch_of(net: &Net, i: usize) -> u64 {
        match net.process(i) {
            AnyElection::ChangRoberts(c) => c.epoch(),
            _ => unreachable!(),
        }
    }

    /// One initiator at ring position i (rank order), no faults. Its `election(i)` is replaced
    /// by each higher process in turn until it reaches the highest, n - 1: n - 1 - i messages
    /// (the highest's own message starts at its first hop, so count hops): i -> i+1 -> ... ->
    /// n-1 is n - 1 - i hops; then `election(n-1)` goes once round, n hops; then `elected`
    /// goes once round, n hops. Total 3n - 1 - i: the best case 2n when the highest initiates
    /// (i = n - 1), the worst case 3n - 1 when the lowest, the highest's successor in our
    /// ring direction, initiates (i = 0).
    #[test]
    fn cr_one_initiator_counts_best_and_worst() {
        for n in 2..=12usize {
            for i in 0..n {
                let mut net = net(n);
                net.start_at(Time::ZERO, i);
                net.run();
                let what = format!("n={n} initiator={i}");
                assert_settled(&net, &what);
                let (n64, i64) = (n as u64, i as u64);
                assert_eq!(net.sent_of("CrElection"), 2 * n64 - 1 - i64, "{what}");
                assert_eq!(net.sent_of("CrElected"), n64, "{what}");
                assert_eq!(net.total_sent(), 3 * n64 - 1 - i64, "{what}");
                assert_eq!(net.rejected, 0);
                assert_eq!(net.process(n - 1).state(), "Leader");
                assert_eq!(net.process(0).state(), "Passive");
            }
            // The extremes, as seed 003 states them.
            let count = |i: usize| {
                let mut net = net(n);
                net.start_at(Time::ZERO, i);
                net.run();
                net.total_sent()
            };
            assert_eq!(count(n - 1), 2 * n as u64, "best case n={n}");
            assert_eq!(count(0), 3 * n as u64 - 1, "worst case n={n}");
        }
    }

    /// A group of one names itself without a message.
    #[test]
    fn cr_group_of_one() {
        let mut net = net(1);
        net.start_at(Time::ZERO, 0);
        net.run();
        assert_settled(&net, "n=1");
        assert_eq!(net.total_sent(), 0);
    }

    /// Every process initiates at once: process i + 1 (participant) discards `election(i)`,
    /// except process 0, which forwards `election(n-1)`: n + (n - 1) `election`, n `elected`:
    /// 3n - 1.
    #[test]
    fn cr_all_initiate() {
        for n in 2..=12usize {
            let mut net = net(n);
            net.start_all();
            net.run();
            assert_settled(&net, &format!("n={n}"));
            assert_eq!(net.sent_of("CrElection"), 2 * n as u64 - 1, "n={n}");
            assert_eq!(net.sent_of("CrElected"), n as u64, "n={n}");
        }
    }

    /// Two initiators, the second starting up to n - 1 ms later (before the first election
    /// can have ended at it).
    #[test]
    fn cr_several_initiators() {
        for n in 2..=12usize {
            for (a, b) in [(0, n / 2), (n / 2, 0), (1 % n, n - 1), (n - 1, 0)] {
                for dt in 0..n as u64 {
                    let mut net = net(n);
                    net.start_at(Time::ZERO, a);
                    net.start_at(Time::from_millis(dt), b);
                    net.run();
                    let what = format!("n={n} a={a} b={b} dt={dt}");
                    assert_settled(&net, &what);
                    // Both joined one epoch: only the highest's election comes back, so
                    // exactly one `elected` lap of n messages.
                    assert_eq!(net.sent_of("CrElected"), n as u64, "{what}");
                }
            }
        }
    }

    /// Crashes before the election (not reported), always including the highest: dead
    /// successors are skipped and the highest live process wins, for several dead sets and
    /// every live initiator.
    #[test]
    fn cr_crashes_before() {
        crashes_before(&cfg());
    }

    /// The highest process dead before the election (not reported), the lowest initiating
    /// (worst case): the message is replaced up to n - 2, whose send to n - 1 fails once and
    /// is resent to 0; then `election(n-2)` and `elected` go round the N' = n - 1 live
    /// processes, the predecessor skipping the dead one: (n - 2) + 1 failed + N' + N' =
    /// 3N' - 1 + 1, the worst case over the live ring plus the one failed send.
    #[test]
    fn cr_dead_top_counts() {
        for n in 3..=12usize {
            let mut net = net(n);
            net.crash(n - 1);
            net.start_at(Time::ZERO, 0);
            net.run();
            assert_settled(&net, &format!("n={n}"));
            let m = n as u64 - 1;
            assert_eq!(net.total_sent(), 3 * m - 1 + 1, "n={n}");
        }
    }

    /// A process crashes at every instant of the election, with and without reports,
    /// including the highest (possibly while its own `election` or `elected` circulates) and
    /// the initiator.
    #[test]
    fn cr_crash_during() {
        crash_during(&cfg(), 3, true);
    }

    /// The highest process crashes while its own `election` circulates (everyone else
    /// forwards it). The process whose send to it fails discards the message and holds a new
    /// election at epoch 2, which the others join although they are all participants of
    /// epoch 1.
    #[test]
    fn cr_dead_candidate_restarts_at_new_epoch() {
        let n = 6;
        let mut net = net(n);
        net.start_at(Time::ZERO, n - 1);
        // election(5) reaches 0 at 1 ms, ..., 4 at 5 ms, back to 5 at 6 ms: crash at 3.5 ms.
        net.crash_at(Time::from_micros(3_500), n - 1);
        net.run();
        assert_settled(&net, "dead candidate");
        assert_eq!(net.started[n - 2], 1, "process 4 restarted");
        assert!((0..n - 1).all(|i| epoch_of(&net, i) == 2));
    }

    /// The leader crashes after the election and every process is told: 3N' - 1 messages
    /// for the N' = n - 1 survivors (as `cr_all_initiate`).
    #[test]
    fn cr_leader_crash_reelection() {
        leader_crash_reelection(&cfg());
    }

    #[test]
    fn cr_lap_timer_recovers_lost_election() {
        lap_timer_recovers_lost_election(&cfg());
    }

    /// A recovered low process (fresh state, epoch 0) is behind the group (epoch 2). Its
    /// stale `election` makes its successor send `elected(leader)` straight back (a
    /// catch-up); the recovered process adopts it and forwards it once, and its successor,
    /// which already names that leader, stops it: 3 messages, no new election.
    #[test]
    fn cr_recovered_low_process_catches_up() {
        for n in 3..=12usize {
            let mut net = net(n);
            net.detector = true;
            net.start_at(Time::ZERO, 0);
            net.run();
            net.start_at(net.now, 0); // a second election: epoch 2
            net.run();
            net.crash(1);
            net.run();
            let before = net.total_sent();
            let t = net.now + std::time::Duration::from_millis(1);
            net.recover_at(t, 1);
            net.run();
            assert_settled(&net, &format!("n={n}"));
            assert_eq!(net.total_sent() - before, 3, "n={n}");
            assert_eq!(epoch_of(&net, 1), 2);
        }
    }

    /// The old leader recovers and wins again: its stale candidate ranks above the group's
    /// leader, so its successor holds a new election.
    /// Feeds one input to a lone process at time zero and returns its effects
    /// (Chang-Roberts draws no randomness, so a fresh RNG per call changes nothing).
    #[test]
    fn cr_recovered_highest_wins() {
        recovered_highest_wins(&cfg());
    }

    /// Stale messages of an older epoch never set a leader, and a dead leader's `elected`
    /// lap ends at the process that cannot deliver to it, which holds a new election.
    #[test]
    fn cr_stale_messages_cannot_name_a_dead_leader() {
        let ranks: Vec<Rank> = (0..5).map(|i| Rank::new(0, NodeId::from_u64(i + 1))).collect();
        let group = Arc::new(Membership::new(ranks.iter().copied()));
        // Process 3, the predecessor of process 4.
        let mut p = ChangRoberts::new(ranks[3], group, &cfg());
        let from = ranks[2].id;
        use crate::driver::Effect;
        // Epoch 3 names process 3 itself (its lap comes back).
        feed(&mut p, Input::Message { from, msg: Message::CrElection { epoch: 3, candidate: ranks[3] } });
        assert_eq!(p.leader(), Some(ranks[3].id));
        // A stale elected(3) of epoch 2 arrives: its sender (process 2) lags behind and both
        // it and the stale leader rank no higher than the leader, so it gets a catch-up
        // elected(3) of epoch 3. (A stale elected naming a leader above 3 starts a new
        // election instead: `cr_stale_elected_of_a_higher_leader_starts_an_election`.)
        let fx2 = feed(&mut p, Input::Message { from, msg: Message::CrElected { epoch: 2, leader: ranks[3] } });
        let catch_up = Message::CrElected { epoch: 3, leader: ranks[3] };
        assert_eq!(fx2, vec![Effect::Send { to: from, msg: catch_up }]);
        assert_eq!(p.leader(), Some(ranks[3].id));
        // A stale election(2): not participant, and 2 <= its leader 3, so it answers with a
        // catch-up elected(3) of epoch 3 to the sender.
        let fx = feed(&mut p, Input::Message { from, msg: Message::CrElection { epoch: 1, candidate: ranks[2] } });
        let catch_up = Message::CrElected { epoch: 3, leader: ranks[3] };
        assert_eq!(fx, vec![Effect::Send { to: from, msg: catch_up }]);
        // Epoch 4: election(4) passes, process 4 is reported dead, then its elected(4) arrives
        // (sent before the crash): it is not adopted, and epoch 5 begins at once, its own
        // election skipping the reported 4 and going to process 0.
        feed(&mut p, Input::Message { from, msg: Message::CrElection { epoch: 4, candidate: ranks[4] } });
        assert_eq!(p.leader(), None);
        feed(&mut p, Input::PeerDown(ranks[4].id));
        let lap = Message::CrElected { epoch: 4, leader: ranks[4] };
        let fx4 = feed(&mut p, Input::Message { from, msg: lap.clone() });
        assert_ne!(p.leader(), Some(ranks[4].id));
        assert_eq!(p.epoch(), 5);
        assert!(fx4.contains(&Effect::ElectionStarted));
        let own = Message::CrElection { epoch: 5, candidate: ranks[3] };
        assert!(fx4.contains(&Effect::Send { to: ranks[0].id, msg: own.clone() }), "{fx4:?}");
        assert!(!fx4.iter().any(|e| matches!(e, Effect::Send { to, .. } if *to == ranks[4].id)), "{fx4:?}");
        // A late report about the epoch-4 lap says nothing about epoch 5: no effect.
        let fx6 =
            feed(&mut p, Input::SendFailed { to: ranks[0].id, msg: Message::CrElected { epoch: 4, leader: ranks[4] } });
        assert!(fx6.is_empty(), "{fx6:?}");
        assert!(p.in_election());
        assert_eq!(p.state(), "Candidate");
    }

    /// A second `elected` lap of the same epoch goes on from a process whose ring grew since
    /// the first passed (a real five-process start-up: the first lap reached the lowest
    /// process while it knew three members, skipped the two it did not know yet, and they,
    /// starting late, waited for the 10 s lap timer because the leader's second lap stopped at
    /// the lowest process). Process 0 first knows {0, 3, 4}; the leader 4's lap passes it to
    /// 3. Once it knows all five, the leader's second lap passes it to 1; a third copy (a
    /// catch-up echo) goes nowhere.
    #[test]
    fn cr_a_second_lap_goes_on_where_the_ring_grew() {
        use crate::driver::Effect;
        let ranks: Vec<Rank> = (0..5).map(|i| Rank::new(0, NodeId::from_u64(i + 1))).collect();
        let few = Arc::new(Membership::new([ranks[0], ranks[3], ranks[4]]));
        let all = Arc::new(Membership::new(ranks.iter().copied()));
        let mut p = ChangRoberts::new(ranks[0], few, &cfg());
        let (leader, from) = (ranks[4], ranks[4].id);
        feed(&mut p, Input::Message { from, msg: Message::CrElection { epoch: 1, candidate: leader } });
        let lap = Message::CrElected { epoch: 1, leader };
        let sends =
            |fx: Vec<Effect>| -> Vec<Effect> { fx.into_iter().filter(|e| matches!(e, Effect::Send { .. })).collect() };
        let fx = sends(feed(&mut p, Input::Message { from, msg: lap.clone() }));
        assert_eq!(fx, vec![Effect::Send { to: ranks[3].id, msg: lap.clone() }]);
        // Nothing new while the ring is the same.
        assert!(sends(feed(&mut p, Input::Message { from, msg: lap.clone() })).is_empty());
        feed(&mut p, Input::Membership(all));
        let fx = sends(feed(&mut p, Input::Message { from, msg: lap.clone() }));
        assert_eq!(fx, vec![Effect::Send { to: ranks[1].id, msg: lap.clone() }]);
        assert!(sends(feed(&mut p, Input::Message { from, msg: lap })).is_empty(), "a catch-up echo went on");
        assert_eq!(p.leader(), Some(leader.id));
    }

    /// Within an epoch a process only moves to a higher leader, also after a second
    /// `election` of that epoch passed it (sweep seed 56168: a recovered
    /// leader's fresh election at the group's epoch made a process that named it take part
    /// again, and it then adopted a lower leader whose lap had skipped the recovered one on an
    /// old suspicion). After an election of 4 processes (all name 3 at epoch 1), process 0
    /// receives `election(3)` again, then a lower lap `elected(2)` of the same epoch: it
    /// passes the election on without taking part, keeps 3 and tells 2.
    #[test]
    fn cr_second_election_of_the_leader_does_not_let_a_lower_lap_in() {
        let mut net = net(4);
        net.start_at(Time::ZERO, 0);
        net.run();
        assert_settled(&net, "first election");
        let (r2, r3) = (net.rank(2), net.rank(3));
        net.input(0, Input::Message { from: r3.id, msg: Message::CrElection { epoch: 1, candidate: r3 } });
        assert!(!net.process(0).in_election(), "a process naming 3 does not take part again for 3");
        net.input(0, Input::Message { from: r3.id, msg: Message::CrElected { epoch: 1, leader: r2 } });
        assert_eq!(net.process(0).leader(), Some(r3.id));
        net.run();
        assert_settled(&net, "after the lower lap");
        // A process taking part in a higher candidate's election of the same epoch (here 3,
        // while it names 2) does not move down either.
        let mut p = ChangRoberts::new(net.rank(0), net.group.clone(), &cfg());
        let r1 = net.rank(1);
        feed(&mut p, Input::Start);
        feed(&mut p, Input::Message { from: r3.id, msg: Message::CrElected { epoch: 1, leader: r2 } });
        assert_eq!(p.leader(), Some(r2.id));
        feed(&mut p, Input::Message { from: r3.id, msg: Message::CrElection { epoch: 1, candidate: r3 } });
        assert!(p.in_election());
        let out = feed(&mut p, Input::Message { from: r3.id, msg: Message::CrElected { epoch: 1, leader: r1 } });
        assert_eq!(p.leader(), Some(r2.id), "moved down to 1 while taking part in 3's election");
        let tell = Message::CrElected { epoch: 1, leader: r2 };
        assert_eq!(out, vec![crate::driver::Effect::Send { to: r1.id, msg: tell }]);
    }

    /// A lower leader whose own lap comes back while it names a higher leader of the same
    /// epoch holds a new election (sweep seed 92791, N = 3: the highest's lap skipped the
    /// recovered lowest on a failed-send report older than its recovery; the middle one's lap
    /// reached the lowest and came back to the middle one, which already named the highest
    /// and told no one, so the lowest kept naming the middle one). After an election of 3
    /// processes (all name 2 at epoch 1), process 1 receives its own lap `elected(1)`: it
    /// starts epoch 2, and everyone ends naming 2 at epoch 2.
    #[test]
    fn cr_lower_leader_lap_back_while_naming_a_higher_one_reelects() {
        let mut net = net(3);
        net.start_at(Time::ZERO, 0);
        net.run();
        assert_settled(&net, "first election");
        let r1 = net.rank(1);
        net.input(1, Input::Message { from: net.id(0), msg: Message::CrElected { epoch: 1, leader: r1 } });
        assert_eq!(epoch_of(&net, 1), 2, "a new election");
        net.run();
        assert_settled(&net, "after the lower lap");
        assert!((0..3).all(|i| epoch_of(&net, i) == 2));
    }

    /// A stale `elected(l)` whose leader ranks above the current leader starts a new election
    /// when the current one ends (sweep seed 6965). Process 1 of 3 recovers; its send to 2
    /// fails (2 crashed and recovers meanwhile), so it suspects 2 and goes on; 2's fresh
    /// election passes it; then the failure of its forward to the *old* 2 comes back, and it
    /// holds epoch 2 without 2. 2's epoch-1 lap `elected(2)` reaches it through 0: before,
    /// it sent 0 a catch-up and 2 was left naming itself at epoch 1 while 0 and 1 named 1.
    #[test]
    fn cr_stale_elected_of_a_higher_leader_starts_an_election() {
        use crate::driver::Effect;
        let ranks: Vec<Rank> = (0..3).map(|i| Rank::new(0, NodeId::from_u64(i + 1))).collect();
        let group = Arc::new(Membership::new(ranks.iter().copied()));
        let mut p = ChangRoberts::new(ranks[1], group, &cfg());
        let (r0, r1, r2) = (ranks[0], ranks[1], ranks[2]);
        feed(&mut p, Input::Recover);
        feed(&mut p, Input::SendFailed { to: r2.id, msg: Message::CrElection { epoch: 1, candidate: r1 } });
        feed(&mut p, Input::Message { from: r0.id, msg: Message::CrElection { epoch: 1, candidate: r2 } });
        feed(&mut p, Input::SendFailed { to: r2.id, msg: Message::CrElection { epoch: 1, candidate: r2 } });
        assert_eq!(p.epoch(), 2);
        feed(&mut p, Input::Message { from: r0.id, msg: Message::CrElected { epoch: 1, leader: r2 } });
        let out = feed(&mut p, Input::Message { from: r0.id, msg: Message::CrElection { epoch: 2, candidate: r1 } });
        // Its election of epoch 2 ended; 2 outranks it, so epoch 3 begins and tries 2 again.
        assert_eq!(p.epoch(), 3, "{out:?}");
        assert_ne!(p.leader(), Some(r2.id));
        let own = Message::CrElection { epoch: 3, candidate: r1 };
        assert!(out.contains(&Effect::Send { to: r2.id, msg: own }), "{out:?}");
        // A non-participant does the same at once.
        let out = feed(&mut p, Input::Message { from: r0.id, msg: Message::CrElection { epoch: 3, candidate: r1 } });
        assert_eq!(p.leader(), Some(r1.id), "{out:?}");
        let out = feed(&mut p, Input::Message { from: r0.id, msg: Message::CrElected { epoch: 2, leader: r2 } });
        assert_eq!(p.epoch(), 4, "{out:?}");
    }

    /// Messages of other algorithms, from non-members, or with forged ranks are refused and
    /// change nothing.
    #[test]
    fn cr_rejects_bad_input() {
        let mut net = net(4);
        net.start_at(Time::ZERO, 0);
        net.run();
        let before = net.total_sent();
        let forged = Rank::new(7, net.id(1));
        let r3 = net.rank(3);
        let inputs = vec![
            Input::Message { from: net.id(1), msg: Message::Election },
            Input::Message {
                from: net.id(1),
                msg: Message::RingElection { epoch: 9, initiator: r3, candidates: vec![r3] },
            },
            Input::Message { from: NodeId::from_u64(99), msg: Message::CrElection { epoch: 9, candidate: r3 } },
            Input::Message { from: net.id(1), msg: Message::CrElection { epoch: 9, candidate: forged } },
            Input::Message { from: net.id(1), msg: Message::CrElected { epoch: 9, leader: forged } },
        ];
        let k = inputs.len() as u64;
        for input in inputs {
            net.input(2, input);
        }
        net.run();
        assert_eq!(net.rejected, k);
        assert_eq!(net.total_sent(), before);
        assert_settled(&net, "after bad input");
    }

    /// Random crash and recovery schedules; at quiescence every live process names the
    /// highest live one. Replay one with `PEERAGE_SEED`.
    #[test]
    fn cr_random_faults_agree() {
        random_faults(&cfg(), "chang-roberts");
    }

    /// Random schedules that once failed, one per distinct cause: 542217 (a recovery reported to a
    /// participant whose election then skipped the recovered process on an older failure
    /// report), 930650 and 949565 (a process that named itself in an epoch adopted a higher
    /// lap of that epoch, which had skipped the processes its own lap passed), 250171 (the
    /// leader's `elected` lap lost with a crashed forwarder, no failure detector).
    #[test]
    fn cr_random_schedule_regressions() {
        for seed in [542217, 930650, 949565, 250171] {
            if let Err(e) = random_schedule(&cfg(), "chang-roberts", seed) {
                panic!("{e}");
            }
        }
    }

    /// 100,000 processes, every one initiating (the simulator's worst load), on the test
    /// pump: still exactly 3N - 1 messages and agreement. Ignored by default (about 2 s and
    /// 300 MB): `cargo test -p overlay cr_100k -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn cr_100k_all_initiate() {
        let n = 100_000usize;
        let mut cfg = cfg();
        cfg.lap_timeout_ms = 3_600_000; // longer than one election (3N one-way delays)
        let mut net = Net::new(n, cfg);
        net.start_all();
        net.run();
        println!("N = {n}: {} messages (3N - 1 = {})", net.total_sent(), 3 * n as u64 - 1);
        assert_eq!(net.total_sent(), 3 * n as u64 - 1);
        assert!(net.all_agree_on(net.id(n - 1)));
    }

    /// The counts table for docs/results/elections.md:
    /// `cargo test -p overlay count_table -- --nocapture`.
    #[test]
    fn cr_count_table() {
        println!("| N | Chang-Roberts scenario | formula | measured |");
        println!("|---|---|---|---|");
        for n in [4usize, 16, 64, 256] {
            let nn = n as u64;
            let run = |setup: &dyn Fn(&mut Net)| {
                let mut net = net(n);
                setup(&mut net);
                net.run();
                assert_settled(&net, "table");
                net.total_sent()
            };
            let best = run(&|net| net.start_at(Time::ZERO, n - 1));
            let worst = run(&|net| net.start_at(Time::ZERO, 0));
            let all = run(&|net| net.start_all());
            for (what, formula, measured) in [
                ("one initiator, the highest (best case)", 2 * nn, best),
                ("one initiator, the lowest = the highest's successor (worst case)", 3 * nn - 1, worst),
                ("every process initiates", 3 * nn - 1, all),
            ] {
                println!("| {n} | {what} | {formula} | {measured} |");
                assert_eq!(formula, measured, "n={n} {what}");
            }
        }
    }
}

#[cfg(test)]
mod size {
    /// The simulator holds 100,000 of these at once: keep the state a handful of words (no
    /// per-process copy of the group; the suspects list is empty unless failures were seen).
    #[test]
    fn cr_and_ring_state_is_small() {
        let cr = std::mem::size_of::<super::ChangRoberts>();
        let ring = std::mem::size_of::<crate::election::ring::Ring>();
        println!("ChangRoberts: {cr} bytes, Ring: {ring} bytes");
        assert!(cr <= 192, "ChangRoberts grew to {cr} bytes");
        assert!(ring <= 256, "Ring grew to {ring} bytes");
    }
}

//! The list-based ring election, skipping dead successors (seed 000 "A ring algorithm",
//! seed 001 "The Ring Algorithm", seed 003's failure-tolerant "modified version").
//!
//! The logical ring is the rank order of [`Membership`]: a process's successor is the next
//! higher rank, wrapping from the highest to the lowest.
//!
//! # The algorithm as the seeds give it
//! An initiator sends `Election` ([`Message::RingElection`]) with the candidate list
//! `[itself]` to its successor; each process appends its rank and forwards it, skipping a dead
//! successor ("or the one after that, until a running process is located"). Back at its
//! initiator it becomes `Coordinator` ([`Message::RingCoordinator`]) naming the highest
//! candidate, with the list as the new ring's members, and goes round once; each process
//! names that leader. Seed 003: when the `Coordinator` lap is back, the election succeeded if
//! the leader is still in the list, otherwise a new one is held.
//!
//! # Choices where the seeds are vague
//! - **Skipping the dead** ([`Suspects`]): a failed send (`SendFailed`) or a `PeerDown` marks
//!   a process dead for the current epoch; a `PeerDown` also marks it *reported*, which lasts
//!   across epochs until `PeerUp` or a message from it (the expiry rule: members known dead
//!   cost later elections nothing, not even a connect timeout). A message from a process
//!   clears both marks: it may be stale, which costs one failed send. If the marks leave a
//!   process alone, it drops this epoch's marks once and tries again.
//! - **Epochs** (not in the seeds): every message carries one. A new election (`Start`,
//!   `Recover`, `PeerDown` of the leader, the leader's silence, a lap timeout, a missing
//!   leader) increments it; a higher epoch is joined, dropping the old one's state; a lower
//!   epoch never sets a leader. A recovered process elects at its fresh epoch 0, so a process
//!   that names a leader treats that election as stale and starts a new epoch, which begins
//!   after the recovery; a process in an election remembers the stale initiator and, if the
//!   lap it adopts skipped that initiator, elects again. A failed send of an older epoch's
//!   message marks nothing.
//! - **Coordinator lap over live members only**: forwarders drop the processes they know dead
//!   from `members`; a process names the leader only if it is a member and not known dead;
//!   a leader ranked below the receiver, or below the leader it already named in the same
//!   epoch, makes the receiver elect again instead (the lap missed a live, higher process).
//! - **Several initiators**: in one epoch a process forwards no `Election` of an initiator
//!   below the highest one it forwarded, so one lap survives: everyone initiating costs
//!   2N - 1 `Election` + N `Coordinator` messages instead of 2N².
//! - **Initiator crash**: the process whose send to the initiator fails (or that skips it)
//!   completes the lap on its behalf, for `Election` and `Coordinator` laps alike.
//! - **Lap timer**: every process in an election arms `Lap`; it elects again when it fires,
//!   and the timeout doubles with each consecutive restart (up to 2^10).
//! - **Recoveries**: `PeerUp` of a process above the leader (or, during an election, above
//!   this process) starts a new election, which it joins.
//! - **Membership views differ**: a list naming a member this process does not know yet is
//!   kept without it; a forged rank or an unknown initiator or leader is rejected.
//! - The leader's liveness (heartbeats, T1) is the wrapper's ([`super::watch`]); a silent
//!   leader is skipped by the one election that follows ([`LeaderSilence`]).
//!
//! # Assumptions
//! Crash-recovery processes with fresh state, a known membership, reliable channels, a
//! transport that reports failed sends, and a failure detector (see
//! [`super::assumptions`]). State: a few words plus the (usually empty) suspects and stale
//! lists; the group is shared.

use crate::driver::{Context, Election, Input, Timer};
use crate::election::watch::LeaderSilence;
use crate::election::{ElectionConfig, LapRule, Message};
use crate::id::{NodeId, Rank};
use crate::membership::Membership;
use std::sync::Arc;
use std::time::Duration;

/// The largest doubling of the lap timeout after consecutive restarts.
pub(crate) const MAX_BACKOFF_SHIFT: u8 = 10;

/// Ring positions (indices in [`Membership::ranks`]) this process skips, one sorted list of
/// two kinds: found dead by a failed send or a `PeerDown` during the current epoch (forgotten
/// at every new epoch, or when a message shows the process alive), and reported down by the
/// failure detector (flagged [`REPORTED`], kept across epochs until `PeerUp`, so that members
/// known dead cost later elections nothing, and a message sent before a reported crash
/// cannot bring the process back). Usually empty.
#[derive(Debug, Clone, Default)]
pub(crate) struct Suspects {
    list: Vec<u32>,
    /// This epoch's suspicions were all dropped once because they left this process alone.
    rechecked: bool,
}

/// The flag of a position the failure detector reported down.
const REPORTED: u32 = 1 << 31;

impl Suspects {
    fn has(&self, x: u32) -> bool {
        self.list.binary_search(&x).is_ok()
    }
    fn add(&mut self, x: u32) {
        if let Err(i) = self.list.binary_search(&x) {
            self.list.insert(i, x);
        }
    }
    fn drop_entry(&mut self, x: u32) {
        if let Ok(i) = self.list.binary_search(&x) {
            self.list.remove(i);
        }
    }
    /// Reported down by the failure detector (and not taken back).
    pub(crate) fn is_reported(&self, pos: usize) -> bool {
        !self.list.is_empty() && self.has(pos as u32 | REPORTED)
    }
    pub(crate) fn contains(&self, pos: usize) -> bool {
        !self.list.is_empty() && (self.has(pos as u32) || self.has(pos as u32 | REPORTED))
    }
    /// Found dead in this epoch.
    pub(crate) fn insert(&mut self, pos: usize) {
        self.add(pos as u32);
    }
    /// Reported down by the failure detector: skipped until taken back.
    pub(crate) fn report(&mut self, pos: usize) {
        self.add(pos as u32 | REPORTED);
    }
    /// A sign of life (a message from or naming the process): drop this epoch's suspicion.
    pub(crate) fn remove(&mut self, pos: usize) {
        self.drop_entry(pos as u32);
    }
    /// `PeerUp`: the detector takes its report back. Returns whether there was one.
    pub(crate) fn unreport(&mut self, pos: usize) -> bool {
        self.drop_entry(pos as u32);
        let had = self.has(pos as u32 | REPORTED);
        self.drop_entry(pos as u32 | REPORTED);
        had
    }
    /// Suspect `id` for this epoch (never `me`, nor a process outside `group`).
    pub(crate) fn suspect(&mut self, group: &Membership, me: &NodeId, id: &NodeId) {
        if id != me {
            if let Some(p) = group.position(id) {
                self.insert(p);
            }
        }
    }
    /// A sign of life of `id`: drop this epoch's suspicion of it.
    pub(crate) fn alive(&mut self, group: &Membership, id: &NodeId) {
        if let Some(p) = group.position(id) {
            self.remove(p);
        }
    }
    /// Whether `to` is the next process after position `me` on the ring of `n` once the
    /// suspected are skipped (every position strictly between them is suspected).
    pub(crate) fn next_after(&self, n: usize, me: usize, to: usize) -> bool {
        (1..n).map(|k| (me + k) % n).take_while(|&p| p != to).all(|p| self.contains(p))
    }
    /// Forget this epoch's suspicions (a new epoch); the detector's reports stay.
    pub(crate) fn clear(&mut self) {
        self.list.retain(|&x| x & REPORTED != 0);
        self.rechecked = false;
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
    /// The group changed: positions move. Keep the reports of members still in it.
    pub(crate) fn regroup(&mut self, old: &Membership, new: &Membership) {
        let moved: Vec<u32> = self
            .list
            .iter()
            .filter(|&&x| x & REPORTED != 0)
            .filter_map(|&x| old.ranks().get((x & !REPORTED) as usize))
            .filter_map(|r| new.position(&r.id))
            .map(|p| p as u32 | REPORTED)
            .collect();
        self.list = moved;
        self.list.sort_unstable();
        self.rechecked = false;
    }

    /// [`next_live`] from `from`; but the first time in an epoch that the suspicions leave
    /// this process alone, this epoch's are dropped and the walk is retried: a suspicion can
    /// be older than a recovery (a failed send reported just after the process came back),
    /// and being alone is a strong conclusion. If everyone else really is dead this costs one
    /// failed send per process, once per epoch. The detector's reports are trusted.
    pub(crate) fn walk(&mut self, n: usize, from: usize, stop: Option<usize>) -> Next {
        let next = next_live(n, from, self, stop);
        if next == Next::Alone && self.list.iter().any(|&x| x & REPORTED == 0) && !self.rechecked {
            self.clear();
            self.rechecked = true;
            return next_live(n, from, self, stop);
        }
        next
    }
}

/// Where a message goes next on the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// The first process after `from` not known dead (a ring position).
    To(usize),
    /// The walk passed `stop`, which is known dead: the message has completed its lap.
    PassedStop,
    /// Every other process is known dead.
    Alone,
}

/// Walk the ring of `n` processes from position `from` (exclusive) to the first position not
/// in `dead`. If the walk has to skip over `stop` (it is dead), report [`Next::PassedStop`].
pub(crate) fn next_live(n: usize, from: usize, dead: &Suspects, stop: Option<usize>) -> Next {
    for k in 1..n {
        let p = (from + k) % n;
        if !dead.contains(p) {
            return Next::To(p);
        }
        if stop == Some(p) {
            return Next::PassedStop;
        }
    }
    Next::Alone
}

/// True if `r` is exactly the rank `group` knows for `r.id` (a message cannot invent a rank).
pub(crate) fn is_member(group: &Membership, r: &Rank) -> bool {
    group.rank_of(&r.id) == Some(*r)
}

/// `list` without the processes this group does not know yet, or `None` if a process it
/// knows carries another rank than the group's (a message cannot invent a rank). A sender
/// whose group is newer (a node joined and the news has not reached this process) names
/// members this process has not heard of: they are left out of the lap instead of the whole
/// message being refused, which would end the lap here and leave every process after this
/// one without a leader until its lap timer fires (see "Membership views differ" above).
fn known_ranks(group: &Membership, mut list: Vec<Rank>) -> Option<Vec<Rank>> {
    if list.iter().any(|r| group.rank_of(&r.id).is_some_and(|known| known != *r)) {
        return None;
    }
    list.retain(|r| group.rank_of(&r.id).is_some());
    Some(list)
}

/// The lap timeout after `restarts` consecutive restarts.
pub(crate) fn backoff(base: Duration, restarts: u8) -> Duration {
    base.saturating_mul(1u32 << restarts.min(MAX_BACKOFF_SHIFT))
}

/// An initiator whose `Election` this process dropped (stale, or suppressed by a higher
/// initiator) while it was in an election of `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stale {
    /// Ring position of the initiator.
    pos: u32,
    epoch: u64,
}

/// Where this process stands in the current epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Not in an election.
    Passive,
    /// Forwarded an `Election` of this epoch; waiting for `Coordinator`.
    Candidate,
    /// Initiator: its `Election` is out and it is the highest initiator seen so far.
    Waiting,
    /// Initiator (or taker-over): its `Coordinator` lap is out.
    Announcing,
}

/// One process of the list-based ring election.
#[derive(Debug, Clone)]
pub struct Ring {
    me: Rank,
    group: Arc<Membership>,
    /// This process's ring position; `None` if it is not a member of `group`.
    pos: Option<u32>,
    /// The lap timer, scaled with the group's size (`ElectionConfig::hop_delay_ms`).
    lap: LapRule,
    epoch: u64,
    phase: Phase,
    /// The highest initiator whose `Election` of this epoch this process forwarded or sent.
    best_initiator: Option<Rank>,
    leader: Option<Rank>,
    dead: Suspects,
    /// Initiators of stale or suppressed `Election`s received during an election, each with
    /// the epoch this process was in when it arrived: checked against every `Coordinator`
    /// lap this process adopts in that epoch (and the first one of a later epoch).
    stale: Vec<Stale>,
    /// Consecutive restarts by the lap timer (the backoff exponent).
    restarts: u8,
}

impl Ring {
    pub fn new(me: Rank, group: Arc<Membership>, cfg: &ElectionConfig) -> Self {
        let pos = group.position(&me.id).map(|p| p as u32);
        Ring {
            me,
            group,
            pos,
            lap: LapRule::of(cfg),
            epoch: 0,
            phase: Phase::Passive,
            best_initiator: None,
            leader: None,
            dead: Suspects::default(),
            stale: Vec::new(),
            restarts: 0,
        }
    }

    /// The current epoch (for tests and status output).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    fn pos_of(&self, id: &NodeId) -> Option<usize> {
        self.group.position(id)
    }

    fn id_at(&self, p: usize) -> NodeId {
        self.group.ranks()[p].id
    }

    fn arm_lap(&self, ctx: &mut Context<'_>) {
        ctx.set_timer(Timer::Lap, backoff(self.lap.for_group(self.group.len()), self.restarts));
    }

    /// Mark a process dead (never this process itself).
    fn suspect(&mut self, id: &NodeId) {
        self.dead.suspect(&self.group, &self.me.id, id);
    }

    fn alive(&mut self, id: &NodeId) {
        self.dead.alive(&self.group, id);
    }

    /// True if `id` is the next process on the ring after this one once the processes known
    /// dead are skipped: the one this process's laps go to, or skipped.
    fn is_live_predecessor_of(&self, id: &NodeId) -> bool {
        let (Some(me), Some(t)) = (self.pos, self.pos_of(id)) else { return false };
        self.dead.next_after(self.group.len(), me as usize, t)
    }

    fn is_dead(&self, r: &Rank) -> bool {
        self.pos_of(&r.id).is_some_and(|p| self.dead.contains(p))
    }

    /// Enter a higher epoch seen in a message.
    fn join(&mut self, ctx: &mut Context<'_>, epoch: u64) {
        self.epoch = epoch;
        self.dead.clear();
        self.leader = None;
        self.best_initiator = None;
        if self.phase != Phase::Passive {
            ctx.cancel_timer(Timer::Lap);
        }
        self.phase = Phase::Passive;
    }

    /// Hold a new election at a new epoch. `dead_now` is a process just found dead, kept
    /// across the epoch change.
    fn restart(&mut self, ctx: &mut Context<'_>, dead_now: Option<NodeId>) {
        if self.pos.is_none() {
            return;
        }
        self.epoch += 1;
        self.hold_election(ctx, dead_now);
    }

    /// Hold an election in the current epoch (a fresh state's, on `Recover`; else just
    /// incremented by [`Self::restart`]).
    fn hold_election(&mut self, ctx: &mut Context<'_>, dead_now: Option<NodeId>) {
        if self.pos.is_none() {
            return;
        }
        self.dead.clear();
        if let Some(id) = dead_now {
            self.suspect(&id);
        }
        self.leader = None;
        self.best_initiator = Some(self.me);
        self.phase = Phase::Waiting;
        ctx.started();
        self.arm_lap(ctx);
        self.forward_election(ctx, self.me, vec![self.me]);
    }

    /// Send `Election` on (skipping dead successors), or finish the lap if it is complete.
    fn forward_election(&mut self, ctx: &mut Context<'_>, initiator: Rank, mut candidates: Vec<Rank>) {
        let Some(pos) = self.pos else { return };
        let stop = if initiator == self.me { None } else { self.pos_of(&initiator.id) };
        let n = self.group.len();
        match self.dead.walk(n, pos as usize, stop) {
            Next::To(p) => {
                let msg = Message::RingElection { epoch: self.epoch, initiator, candidates };
                ctx.send(self.id_at(p), msg);
            }
            Next::PassedStop | Next::Alone => {
                // The lap is complete: back at our own initiation (everyone else dead), or the
                // initiator is dead and we take over.
                if initiator != self.me {
                    candidates.retain(|r| *r != initiator);
                }
                self.announce(ctx, candidates);
            }
        }
    }

    /// The `Election` lap is complete at this process: name the highest candidate and send
    /// `Coordinator` round once.
    fn announce(&mut self, ctx: &mut Context<'_>, candidates: Vec<Rank>) {
        let leader = candidates.iter().copied().max().unwrap_or(self.me).max(self.me);
        let mut members = candidates;
        if !members.contains(&self.me) {
            members.push(self.me);
        }
        self.set_leader(ctx, leader);
        self.phase = Phase::Announcing;
        self.arm_lap(ctx);
        self.forward_coordinator(ctx, self.me, leader, members);
    }

    fn set_leader(&mut self, ctx: &mut Context<'_>, leader: Rank) {
        if self.leader != Some(leader) {
            self.leader = Some(leader);
            ctx.decide(leader.id);
        }
    }

    /// Send `Coordinator` on to the next live member, or complete the lap.
    fn forward_coordinator(&mut self, ctx: &mut Context<'_>, initiator: Rank, leader: Rank, mut members: Vec<Rank>) {
        let Some(pos) = self.pos else { return };
        if !self.dead.is_empty() {
            let (group, dead) = (&self.group, &self.dead);
            members.retain(|r| !group.position(&r.id).is_some_and(|p| dead.contains(p)));
        }
        let stop = if initiator == self.me { None } else { self.pos_of(&initiator.id) };
        let n = self.group.len();
        match self.dead.walk(n, pos as usize, stop) {
            Next::To(p) => {
                let msg = Message::RingCoordinator { epoch: self.epoch, initiator, leader, members };
                ctx.send(self.id_at(p), msg);
            }
            Next::PassedStop | Next::Alone => self.complete_coordinator(ctx, leader, &members),
        }
    }

    /// The `Coordinator` lap has come round (to its initiator, or to the process that skips
    /// its dead initiator): succeed if the leader is still a live member, else re-elect.
    fn complete_coordinator(&mut self, ctx: &mut Context<'_>, leader: Rank, members: &[Rank]) {
        if members.contains(&leader) && !self.is_dead(&leader) {
            // Only a process that named this leader ends its election here (a process
            // completing the lap on a dead initiator's behalf may be in an election of its
            // own, for example after recovering).
            if self.leader == Some(leader) {
                if self.phase != Phase::Passive {
                    ctx.cancel_timer(Timer::Lap);
                }
                self.phase = Phase::Passive;
                self.restarts = 0;
                if self.stale_missed(members) {
                    self.restart(ctx, None);
                }
            }
        } else {
            // The new epoch starts without suspicions, also of the leader: a failed send can be
            // older than a recovery (see "Failure reports are scoped to their epoch").
            self.restart(ctx, None);
        }
    }

    /// Check the remembered stale and suppressed initiators against the `members` of a
    /// `Coordinator` lap this process adopts. True if one of them is missing: it wants an
    /// election it did not get (its predecessor skipped it on a suspicion), so the caller
    /// holds a new election and the list is emptied. An initiator the lap did include is kept
    /// while the epoch it was remembered in lasts: a later `Coordinator` lap of that epoch (a
    /// higher initiator's, which replaces the leader) may still skip it. It is dropped at the
    /// first check in a later epoch.
    fn stale_missed(&mut self, members: &[Rank]) -> bool {
        if self.stale.is_empty() {
            return false;
        }
        let group = &self.group;
        let included = |p: u32| members.iter().any(|r| group.position(&r.id) == Some(p as usize));
        if self.stale.iter().any(|s| !included(s.pos)) {
            self.stale.clear();
            return true;
        }
        let epoch = self.epoch;
        self.stale.retain(|s| s.epoch >= epoch);
        false
    }

    fn remember_stale(&mut self, initiator: &Rank) {
        let Some(p) = self.pos_of(&initiator.id) else { return };
        let (pos, epoch) = (p as u32, self.epoch);
        match self.stale.iter_mut().find(|s| s.pos == pos) {
            Some(s) => s.epoch = s.epoch.max(epoch),
            None => self.stale.push(Stale { pos, epoch }),
        }
    }

    fn on_election(&mut self, ctx: &mut Context<'_>, epoch: u64, initiator: Rank, mut candidates: Vec<Rank>) {
        if epoch < self.epoch {
            if self.phase == Phase::Passive {
                self.restart(ctx, None);
            } else {
                // Checked when this election ends: the running election may skip the
                // sender (its predecessor can still suspect it).
                self.remember_stale(&initiator);
            }
            return;
        }
        let joined = epoch > self.epoch;
        if joined {
            self.join(ctx, epoch);
        }
        // Every candidate appended itself during this lap: drop suspicions of them (perhaps
        // from before they recovered). A wrong guess costs one failed send.
        if !self.dead.is_empty() {
            for r in &candidates {
                if let Some(p) = self.group.position(&r.id) {
                    self.dead.remove(p);
                }
            }
        }
        if initiator == self.me {
            // Our lap is back; if it is of a newer epoch than ours, it was started by this
            // process before it crashed and recovered: it is still a complete lap.
            if self.phase == Phase::Waiting || joined {
                self.announce(ctx, candidates);
            }
            return;
        }
        // The initiator was alive when it sent this: drop a suspicion of it (perhaps from
        // before it recovered), so that its lap can come back to it; if it is dead after all,
        // the send to it fails and the lap is taken over.
        self.alive(&initiator.id);
        // A passive process that names a leader has finished this epoch's election.
        let taking_part = self.phase != Phase::Passive || self.leader.is_none();
        if taking_part {
            if self.best_initiator.is_some_and(|b| initiator < b) {
                // Suppressed: a higher initiator's election has passed here. Remember the
                // initiator as for a stale election: if the winning lap skips it (its
                // predecessor suspects it), a new election follows.
                self.remember_stale(&initiator);
                return;
            }
            self.best_initiator = Some(initiator);
        }
        if candidates.contains(&self.me) {
            // The message lapped without its initiator: take over.
            candidates.retain(|r| *r != initiator);
            self.announce(ctx, candidates);
            return;
        }
        if taking_part && matches!(self.phase, Phase::Passive | Phase::Waiting) {
            self.phase = Phase::Candidate;
            self.arm_lap(ctx);
        }
        candidates.push(self.me);
        self.forward_election(ctx, initiator, candidates);
    }

    fn on_coordinator(&mut self, ctx: &mut Context<'_>, epoch: u64, initiator: Rank, leader: Rank, members: Vec<Rank>) {
        if epoch < self.epoch {
            return; // stale: never set a leader from an older election
        }
        let joined = epoch > self.epoch;
        if joined {
            self.join(ctx, epoch);
        }
        if initiator == self.me {
            if joined && members.contains(&leader) && leader >= self.me {
                // Our lap from before a crash and recovery: name its leader as the
                // initiator would have.
                self.set_leader(ctx, leader);
                self.phase = Phase::Announcing;
            }
            if self.phase == Phase::Announcing {
                self.complete_coordinator(ctx, leader, &members);
            } else if joined {
                self.restart(ctx, None);
            }
            return;
        }
        let ok = members.contains(&leader) && !self.is_dead(&leader);
        if ok && leader < self.me {
            // The election missed this live, higher process.
            self.restart(ctx, None);
            return;
        }
        if ok && self.leader.is_some_and(|cur| leader < cur) {
            // A second lap of this epoch names a lower leader than the one this process
            // already named in it: that lap skipped a higher process (on a suspicion older
            // than its recovery). Within an epoch a process never moves down; a new
            // election, in which the suspicions are dropped, settles it.
            self.restart(ctx, None);
            return;
        }
        let mut missed = false;
        if ok {
            self.set_leader(ctx, leader);
            // An initiator whose own `Coordinator` lap is out keeps waiting for it, so that
            // its check of the leader still runs.
            if self.phase != Phase::Announcing {
                if self.phase != Phase::Passive {
                    ctx.cancel_timer(Timer::Lap);
                }
                self.phase = Phase::Passive;
                self.restarts = 0;
                missed = self.stale_missed(&members);
            }
        }
        let epoch = self.epoch;
        self.forward_coordinator(ctx, initiator, leader, members);
        if missed && self.epoch == epoch {
            self.restart(ctx, None);
        }
    }

    fn on_send_failed(&mut self, ctx: &mut Context<'_>, to: NodeId, msg: Message) {
        // A failed send of an older epoch's message says nothing about `to` now: that
        // epoch's marks were dropped with it.
        let current = match &msg {
            Message::RingElection { epoch, .. } | Message::RingCoordinator { epoch, .. } => *epoch >= self.epoch,
            _ => false,
        };
        if !current {
            return;
        }
        self.suspect(&to);
        match msg {
            Message::RingElection { epoch, initiator, candidates } if epoch == self.epoch => {
                self.forward_election(ctx, initiator, candidates);
            }
            Message::RingCoordinator { epoch, initiator, leader, mut members } if epoch == self.epoch => {
                members.retain(|r| r.id != to);
                self.forward_coordinator(ctx, initiator, leader, members);
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
        let g = &*self.group;
        match msg {
            Message::RingElection { epoch, initiator, candidates } => {
                let candidates = known_ranks(g, candidates).filter(|c| !c.is_empty() && c.len() <= g.len());
                let Some(candidates) = candidates.filter(|_| is_member(g, &initiator)) else {
                    ctx.reject(from, "ring Election with a forged rank, an unknown initiator or an empty list");
                    return;
                };
                self.alive(&from);
                self.on_election(ctx, epoch, initiator, candidates);
            }
            Message::RingCoordinator { epoch, initiator, leader, members } => {
                let members = known_ranks(g, members).filter(|m| m.len() <= g.len());
                let Some(members) = members.filter(|_| is_member(g, &initiator) && is_member(g, &leader)) else {
                    ctx.reject(from, "ring Coordinator with a forged rank or naming an unknown initiator or leader");
                    return;
                };
                self.alive(&from);
                self.on_coordinator(ctx, epoch, initiator, leader, members);
            }
            _ => ctx.reject(from, "not a ring election message"),
        }
    }

    fn on_membership(&mut self, ctx: &mut Context<'_>, group: Arc<Membership>) {
        let Some(pos) = group.position(&self.me.id) else { return };
        self.me = group.ranks()[pos];
        self.pos = Some(pos as u32);
        self.dead.regroup(&self.group, &group);
        self.group = group;
        let leader_gone = self.leader.is_some_and(|l| !is_member(&self.group, &l));
        if leader_gone {
            self.leader = None;
            if self.phase == Phase::Passive {
                self.restart(ctx, None);
            }
        }
    }
}

impl LeaderSilence for Ring {
    fn leader_silent(&mut self, ctx: &mut Context<'_>, leader: NodeId) {
        if self.leader.is_some_and(|l| l.id == leader) && self.phase == Phase::Passive {
            self.restart(ctx, Some(leader));
        }
    }
}

impl Election for Ring {
    fn id(&self) -> NodeId {
        self.me.id
    }

    fn handle(&mut self, ctx: &mut Context<'_>, input: Input) {
        match input {
            Input::Start => {
                if self.phase == Phase::Passive {
                    self.restart(ctx, None);
                }
            }
            // A recovered process holds its election in the epoch its fresh state is at (0),
            // below any epoch that elected a leader: every process that already names a
            // leader treats it as stale and answers with an election of a new epoch, which
            // begins after this recovery.
            Input::Recover => self.hold_election(ctx, None),
            Input::Message { from, msg } => self.on_message(ctx, from, msg),
            Input::Timer(Timer::Lap) => {
                if self.phase != Phase::Passive {
                    self.restarts = self.restarts.saturating_add(1).min(MAX_BACKOFF_SHIFT);
                    self.restart(ctx, None);
                }
            }
            Input::Timer(_) => {}
            Input::PeerUp(id) => {
                let was_reported = self.pos_of(&id).is_some_and(|p| self.dead.unreport(p));
                // A process ranked above our leader came up (recovered): the election that
                // named the leader did not include it, perhaps on a failure report older than
                // its recovery. Hold a new election (as the bully does), which it joins.
                // While in an election, one ranked above this process is enough: a failure
                // report older than its recovery can still make this election skip it.
                let up = self.group.rank_of(&id);
                let above_leader = up.is_some_and(|r| self.leader.is_none_or(|l| r > l));
                let passive = self.phase == Phase::Passive;
                let named = self.leader.is_some();
                if above_leader && ((passive && named) || (!passive && up.is_some_and(|r| r > self.me))) {
                    self.restart(ctx, None);
                } else if was_reported && self.is_live_predecessor_of(&id) {
                    // Our laps skipped it while it was reported down: when passive, elect
                    // again; in an election, check the lap we adopt for it.
                    match up {
                        Some(_) if passive && named => self.restart(ctx, None),
                        Some(r) if !passive => self.remember_stale(&r),
                        _ => {}
                    }
                }
            }
            Input::PeerDown(id) => {
                if id != self.me.id {
                    if let Some(p) = self.pos_of(&id) {
                        self.dead.report(p);
                    }
                }
                if self.leader.is_some_and(|l| l.id == id) && self.phase == Phase::Passive {
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
        match self.phase {
            Phase::Passive if self.leader == Some(self.me) => "Leader",
            Phase::Passive => "Passive",
            Phase::Candidate => "Candidate",
            Phase::Waiting | Phase::Announcing => "Waiting",
        }
    }

    fn in_election(&self) -> bool {
        self.phase != Phase::Passive
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! Exact, deterministic tests on the lock-step [`Net`]: every message takes 1 ms, a failed
    //! send comes back to its sender 1 ms later, process `i` has rank `i` (so `n - 1` is the
    //! highest) and its successor is `i + 1` (wrapping).
    use super::*;
    use crate::election::Algorithm;
    use crate::testkit::scenarios::{
        assert_settled, crash_during, crashes_before, lap_timer_recovers_lost_election, leader_crash_reelection,
        random_faults, random_schedule, recovered_highest_wins,
    };
    use crate::testkit::Net;
    use crate::time::Time;

    /// Heartbeats off: these tests count the algorithm's own messages and run to
    /// quiescence (the leader-liveness rule around it is tested in `watch.rs`).
    fn cfg() -> ElectionConfig {
        crate::testkit::scenarios::quiet_cfg(Algorithm::Ring)
    }

    fn net(n: usize) -> Net {
        Net::new(n, cfg())
    }

    /// One initiator, no faults: the `Election` lap visits all N processes and comes back
    /// (N messages), then the `Coordinator` lap does the same (N messages): 2N in total,
    /// whichever process initiates. A group of one sends nothing.
    #[test]
    fn ring_one_initiator_two_laps() {
        for n in 1..=12 {
            for i in 0..n {
                let mut net = net(n);
                net.start_at(Time::ZERO, i);
                net.run();
                assert_settled(&net, &format!("n={n} initiator={i}"));
                let lap = if n == 1 { 0 } else { n as u64 };
                assert_eq!(net.sent_of("RingElection"), lap, "n={n} i={i}");
                assert_eq!(net.sent_of("RingCoordinator"), lap, "n={n} i={i}");
                assert_eq!(net.total_sent(), 2 * lap, "n={n} i={i}");
                assert_eq!(net.rejected, 0);
                assert_eq!(net.process(n - 1).state(), "Leader");
            }
        }
    }

    /// One dead successor that crashed before the election (not reported). The `Election`
    /// lap makes N - 1 successful hops round the N - 1 live processes plus one failed send
    /// to the dead one (its predecessor then resends past it): N `Election` messages. The
    /// `Coordinator` lap skips the dead process without trying (its predecessor remembers
    /// it): N - 1 messages. In total 2N - 1, for every initiator and dead process.
    #[test]
    fn ring_one_dead_successor_counts() {
        for n in 3..=12 {
            for dead in 0..n {
                for i in (0..n).filter(|&i| i != dead) {
                    let mut net = net(n);
                    net.crash(dead);
                    net.start_at(Time::ZERO, i);
                    net.run();
                    let what = format!("n={n} dead={dead} initiator={i}");
                    assert_settled(&net, &what);
                    assert_eq!(net.sent_of("RingElection"), n as u64, "{what}");
                    assert_eq!(net.sent_of("RingCoordinator"), n as u64 - 1, "{what}");
                }
            }
        }
    }

    /// Every process initiates at once. Process i + 1 drops the `Election` of initiator i
    /// (it is itself a higher initiator), except process 0, which forwards the highest
    /// initiator's: N initial sends + N - 1 forwards of the highest's message, then one
    /// `Coordinator` lap of N: 3N - 1 in total.
    #[test]
    fn ring_all_initiate() {
        for n in 2..=12 {
            let mut net = net(n);
            net.start_all();
            net.run();
            assert_settled(&net, &format!("n={n}"));
            assert_eq!(net.sent_of("RingElection"), 2 * n as u64 - 1, "n={n}");
            assert_eq!(net.sent_of("RingCoordinator"), n as u64, "n={n}");
        }
    }

    /// The suspect list skips to the next live process, never suspects this process, and
    /// forgets a suspicion on a sign of life.
    #[test]
    fn suspects_skip_to_the_next_live_process() {
        let id = NodeId::from_u64;
        let g = Membership::new((1..=5).map(|i| Rank::new(i, id(i))));
        let p = |i: u64| g.position(&id(i)).expect("a member");
        let mut s = Suspects::default();
        s.suspect(&g, &id(1), &id(1));
        assert!(s.is_empty(), "never this process");
        s.suspect(&g, &id(1), &id(2));
        s.suspect(&g, &id(1), &id(3));
        assert!(s.next_after(5, p(1), p(4)) && !s.next_after(5, p(1), p(5)));
        s.alive(&g, &id(3));
        assert!(s.next_after(5, p(1), p(3)) && !s.next_after(5, p(1), p(4)));
    }

    /// Several processes crashed before the election; various initiators.
    #[test]
    fn ring_crashes_before() {
        crashes_before(&cfg());
    }

    /// A process crashes at every instant of the election (1 ms per hop), including the
    /// highest (which may already be in the candidate list, or already named leader by the
    /// initiator before the `Coordinator` lap reaches it), and the initiator itself.
    #[test]
    fn ring_crash_during() {
        crash_during(&cfg(), 2, false);
    }

    /// The highest process crashes after the `Election` lap passed it but before the
    /// `Coordinator` lap reaches it: the lap cannot deliver to it, it is dropped from
    /// `members`, the processes after it do not adopt it, and the initiator (process 0)
    /// holds a second election when the lap returns without the leader.
    #[test]
    fn ring_leader_missing_from_coordinator_lap_restarts() {
        let n = 6;
        let mut net = net(n);
        net.start_at(Time::ZERO, 0);
        // The Election lap is back at 0 at t = 6 ms; the Coordinator reaches 5 at t = 11 ms.
        net.crash_at(Time::from_micros(8_500), n - 1);
        net.run();
        assert_settled(&net, "leader missing");
        assert_eq!(net.started[0], 2, "the initiator restarted once");
        assert_eq!(net.id(n - 2), net.process(0).leader().unwrap());
        match net.process(0) {
            crate::election::AnyElection::Ring(r) => assert_eq!(r.epoch(), 2),
            _ => unreachable!(),
        }
    }

    /// The initiator crashes while its `Election` circulates. Its predecessor's send to it
    /// fails; that process takes over, drops the initiator from the list and announces. No
    /// lap timer is needed: the decision comes well before `lap_timeout`.
    #[test]
    fn ring_initiator_crash_is_taken_over() {
        for n in 3..=12usize {
            for i in 0..n {
                for t in 1..n as u64 {
                    let mut net = net(n);
                    net.start_at(Time::ZERO, i);
                    net.crash_at(Time::from_micros(t * 1000 + 500), i);
                    net.run();
                    let what = format!("n={n} initiator={i} crash at {t}.5ms");
                    assert_settled(&net, &what);
                    assert!(net.last_decision < Time::from_millis(cfg().lap_timeout_ms), "{what}");
                    // N Election sends (one of them fails) + N - 1 Coordinator hops.
                    assert_eq!(net.total_sent(), 2 * n as u64 - 1, "{what}");
                }
            }
        }
    }

    /// The leader crashes after the election and every process is told: 3N' - 1 messages
    /// for the N' = n - 1 survivors (as `ring_all_initiate`).
    #[test]
    fn ring_leader_crash_reelection() {
        leader_crash_reelection(&cfg());
    }

    /// The initiator, whose lap timer ran out, holds the second election: it initiated twice.
    #[test]
    fn ring_lap_timer_recovers_lost_election() {
        let net = lap_timer_recovers_lost_election(&cfg());
        assert_eq!(net.started[0], 2);
    }

    /// The old leader recovers (fresh state) and holds an election; it wins again, even when
    /// the group's epoch is already higher than its fresh one.
    #[test]
    fn ring_recovered_highest_wins() {
        recovered_highest_wins(&cfg());
    }

    /// A low process recovers: every process keeps or re-learns the same leader.
    #[test]
    fn ring_recovered_low_process_learns_leader() {
        for n in 3..=12usize {
            let mut net = net(n);
            net.start_at(Time::ZERO, 0);
            net.run();
            net.crash(1);
            net.start_at(net.now, 0); // a second election without 1 (epoch 2)
            net.run();
            let t = net.now + std::time::Duration::from_millis(1);
            net.recover_at(t, 1);
            net.run();
            assert_settled(&net, &format!("n={n}"));
        }
    }

    /// Within an epoch a process never moves to a lower leader (sweep seed 85015, N = 3: the
    /// recovered middle process's lap skipped the recovered highest on a failed-send report
    /// older than its recovery, and the lowest, which had named the highest in that epoch,
    /// adopted the middle one). After an election of 4 processes (all name 3 at epoch 1),
    /// process 0 receives a second `Coordinator` of epoch 1 naming 2: it holds a new
    /// election instead of adopting it, and everyone ends naming 3. Before the fix 0 and 1
    /// named 2.
    #[test]
    fn ring_lower_coordinator_lap_of_the_same_epoch_is_not_adopted() {
        let mut net = net(4);
        net.start_at(Time::ZERO, 0);
        net.run();
        assert_settled(&net, "first election");
        let r2 = net.rank(2);
        let lap = Message::RingCoordinator { epoch: 1, initiator: r2, leader: r2, members: vec![r2] };
        net.input(0, Input::Message { from: net.id(3), msg: lap });
        assert_ne!(net.process(0).leader(), Some(r2.id));
        net.run();
        assert_settled(&net, "after the lower lap");
    }

    /// Seed 143718 of the random sweep, reduced. Process 3 (the highest) is down when process
    /// 2 initiates (epoch 1), so 2's `Election` skips it. Process 3 recovers (2.5 ms) and
    /// holds its own election, also at epoch 1 (fresh state); its send to 0 fails because 0
    /// crashed just after forwarding 2's `Election` (3.2 ms), and 0 recovers (4 ms) while
    /// that failure is still being reported back to 3, so 3 goes on suspecting 0 for the
    /// whole epoch. The recovered 0 initiates at epoch 1 too; its successor 1 has forwarded
    /// 2's `Election` and drops 0's (suppressed, 0 < 2) and remembers it. 2's `Coordinator`
    /// lap (leader 2) includes 0 and reaches it; then 3's lap (leader 3) skips 0 and
    /// replaces the leader at 1, 2 and 3. Before the fix, 1 checked the suppressed 0 only
    /// against the first lap it adopted, so 0 kept naming 2 and nothing held another
    /// election. Now 1 checks it again against 3's lap, finds 0 missing and re-elects.
    #[test]
    fn ring_recovery_during_failed_send_report_is_not_left_behind() {
        let mut net = net(4);
        net.crash(3);
        net.start_at(Time::ZERO, 2);
        net.recover_at(Time::from_micros(2_500), 3);
        net.crash_at(Time::from_micros(3_200), 0);
        net.recover_at(Time::from_micros(4_000), 0);
        net.run();
        assert_settled(&net, "recovery during a failed-send report");
        // The repair is a second election (epoch 2), held by the process that suppressed
        // the recovered initiator.
        assert_eq!(net.started[1], 1, "process 1 re-elected");
        match net.process(0) {
            crate::election::AnyElection::Ring(r) => assert_eq!(r.epoch(), 2),
            _ => unreachable!(),
        }
    }

    /// Messages of other algorithms, from non-members, or with forged ranks are refused and
    /// change nothing.
    #[test]
    fn ring_rejects_bad_input() {
        let mut net = net(4);
        net.start_at(Time::ZERO, 0);
        net.run();
        let stranger = NodeId::from_u64(99);
        let forged = Rank::new(7, net.id(1));
        let r3 = net.rank(3);
        let inputs = vec![
            Input::Message { from: net.id(1), msg: Message::Election },
            Input::Message { from: net.id(1), msg: Message::CrElected { epoch: 9, leader: r3 } },
            Input::Message {
                from: stranger,
                msg: Message::RingElection { epoch: 9, initiator: r3, candidates: vec![r3] },
            },
            Input::Message {
                from: net.id(1),
                msg: Message::RingCoordinator { epoch: 9, initiator: r3, leader: forged, members: vec![forged] },
            },
            Input::Message {
                from: net.id(1),
                msg: Message::RingElection { epoch: 9, initiator: r3, candidates: vec![] },
            },
        ];
        let k = inputs.len() as u64;
        for input in inputs {
            net.input(2, input);
        }
        net.run();
        assert_eq!(net.rejected, k);
        assert_settled(&net, "after bad input");
        assert_eq!(net.total_sent(), 8);
    }

    /// A sender with a newer group names a process the receiver has not heard of (a node that
    /// just joined a swarm): the receiver leaves it out and carries the lap on, so the
    /// processes after it are not left leaderless until their lap timers fire.
    #[test]
    fn ring_message_naming_an_unknown_member_is_kept_without_it() {
        let mut net = net(4);
        net.start_at(Time::ZERO, 0);
        net.run();
        let newcomer = Rank::new(1, NodeId::from_u64(99)); // known to nobody in this group
        let (r0, r1, r2, r3) = (net.rank(0), net.rank(1), net.rank(2), net.rank(3));
        // An `Election` of a new epoch, started by 0, reaches 2 with the newcomer on its list:
        // 2 -> 3 -> 0 (Election), then 0 -> 1 -> 2 -> 3 -> 0 (Coordinator).
        let before = net.total_sent();
        let election = Message::RingElection { epoch: 9, initiator: r0, candidates: vec![r0, newcomer, r1] };
        net.input(2, Input::Message { from: net.id(1), msg: election });
        net.run();
        assert_eq!(net.rejected, 0, "the Election lap was refused");
        assert_eq!(net.total_sent() - before, 6, "the laps did not go round");
        assert_settled(&net, "after an Election naming an unknown member");
        // A `Coordinator` of a newer epoch, with the newcomer among its members, reaches 1.
        let before = net.total_sent();
        let coordinator =
            Message::RingCoordinator { epoch: 10, initiator: r0, leader: r3, members: vec![r0, newcomer, r1, r2, r3] };
        net.input(1, Input::Message { from: net.id(0), msg: coordinator });
        net.run();
        assert_eq!(net.rejected, 0, "the Coordinator lap was refused");
        assert_eq!(net.total_sent() - before, 3, "the Coordinator lap did not reach 2, 3 and 0");
        assert_settled(&net, "after a Coordinator naming an unknown member");
    }

    /// Random crash and recovery schedules; at quiescence every live process names the
    /// highest live one. Replay one with `PEERAGE_SEED`.
    #[test]
    fn ring_random_faults_agree() {
        random_faults(&cfg(), "ring");
    }

    /// Random schedules that once failed: 741990 (a recovered process's election in the
    /// group's own epoch, while its predecessor's report about the old incarnation came
    /// later), 876629 and 617059 (a recovery reported while a new epoch was being started on
    /// the crash report).
    #[test]
    fn ring_random_schedule_regressions() {
        for seed in [741990, 876629, 617059] {
            if let Err(e) = random_schedule(&cfg(), "ring", seed) {
                panic!("{e}");
            }
        }
    }

    /// The counts table for docs/results/elections.md:
    /// `cargo test -p overlay count_table -- --nocapture`.
    #[test]
    fn ring_count_table() {
        println!("| N | list-based ring scenario | formula | measured |");
        println!("|---|---|---|---|");
        for n in [4usize, 16, 64, 256] {
            let nn = n as u64;
            let mut one = net(n);
            one.start_at(Time::ZERO, 0);
            one.run();
            assert_settled(&one, "one");
            let mut dead = net(n);
            dead.crash(n / 2);
            dead.start_at(Time::ZERO, 0);
            dead.run();
            assert_settled(&dead, "dead");
            let mut all = net(n);
            all.start_all();
            all.run();
            assert_settled(&all, "all");
            for (what, formula, measured) in [
                ("one initiator, no faults", 2 * nn, one.total_sent()),
                ("one initiator, one dead successor (incl. 1 failed send)", 2 * nn - 1, dead.total_sent()),
                ("every process initiates", 3 * nn - 1, all.total_sent()),
            ] {
                println!("| {n} | {what} | {formula} | {measured} |");
                assert_eq!(formula, measured, "n={n} {what}");
            }
        }
    }
}

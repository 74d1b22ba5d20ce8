//! Villadangos, Córdoba, Fariña and Prieto's O(n) leader election in complete networks
//! ("Efficient Leader Election in Complete Networks", PDP 2005; seed 004), made to survive
//! crashes, with the winner announced to all.
//!
//! # The fault-free algorithm (seed 004)
//! The members form a *virtual ring*: a process's `neighbor` is the next lower rank, the
//! lowest wrapping to the highest. Any number of processes may initiate (become `Candidate`,
//! send `Message1(me)` to the neighbour). Per process: the status (`Passive`, `Candidate`,
//! `Dummy`, `Waiting`, `Leader`), the `candidate_predecessor` and the `candidate_successor`.
//! - `Message1(p)`: `Passive` becomes `Dummy` and forwards it. A `Candidate` records `p`;
//!   `p` itself: `Leader`; with a successor s: `Dummy`, `Message3(p)` to s; `p` lower (the
//!   message crossed the wrap): `Waiting`, `Message2(me)` to p.
//! - `Message2(s)`: a `Candidate` that knows its predecessor p sends `Message3(p)` to s and
//!   becomes `Dummy`, otherwise records s; a `Waiting` process records s.
//! - `Message3(p)`: a `Waiting` process records p; p itself: `Leader`; with a successor s:
//!   `Dummy`, forward to s; else if p is lower, `Message2(me)` to p.
//!
//! The highest candidate receives the lowest candidate's `Message1`, waits, and eats the
//! candidates from the lowest up, one `Message2`/`Message3` each. Messages: n `Message1`,
//! 2(k - 1) for k candidates, n - 1 announcements: at most 4n - 3.
//!
//! # Choices where the seed is vague
//! 1. `neighbor` is the next *lower* rank, as the seed says.
//! 2. The highest *live* process wins: a `Passive` process reached by a lower candidate (only
//!    the first process after the wrap) initiates first, so the highest is always a candidate.
//! 3. A candidate that knows both its predecessor and its successor hands the predecessor on
//!    and becomes `Dummy`, whatever order the messages came in. `Message2` must come from the
//!    successor it names, from above.
//! 4. The winner sends `VillLeader` to every member not reported down; a process decides on
//!    receipt; two leaders in one epoch (only after crashes): everyone keeps the higher.
//! 5. `Start` joins the current election if undecided, starts a new epoch after a decision.
//!
//! # Failure handling (not in the paper, which assumes no failures)
//! - **Epochs**: every message carries one; a higher one is joined, a lower one ignored, and
//!   a decided process answers a stale or late message with `VillLeader`. A new epoch starts
//!   on `Recover`, `PeerDown` of the leader, the leader's silence ([`super::watch`]), `Start`
//!   after a decision, a broken chain (a failed `Message2`/`Message3`, `PeerDown` of the
//!   successor or of the predecessor being eaten), a failed send to the leader, the stall
//!   timer, a `VillLeader` naming a leader below the receiver, or an impossible state.
//! - **The dead are skipped** on the ring: found by a failed send (the 32 most recent, for
//!   the epoch they were found in) or reported by the failure detector (kept across epochs until
//!   `PeerUp` or news of life, so members known dead cost later elections nothing; the leader
//!   tells a member reported up who leads). The process whose failure started an epoch is its
//!   *suspect*: skipped, but accepted as leader if it wins. A process is alive again after
//!   `PeerUp`, or when its `Message1` is the first of an epoch the receiver handles. A leader
//!   known dead when its announcement arrives (it overtook the crash report) starts an epoch.
//! - **A skipped process that takes part** (a message from it in the current epoch, or a
//!   `Message3` handing it on as a candidate) was not dead: a process whose `Message1` skipped
//!   it sends it `Message1` too. After a healed partition the marks are stale, and a skipped
//!   candidate would otherwise wait for its predecessor until the stall timer.
//! - **Stall timer**: a process in an undecided election arms `Lap` for 3 laps (one lap's
//!   worth each of n + 2(n - 1) delays), doubled after each stall in a row. A lap is
//!   `LapRule::for_group(n)`: it grows with the group, since the election takes O(n)
//!   delays in a row (about 2 minutes for 1,000 processes over Internet delays).
//! - A recovered higher process adopts the group's epoch from the first `VillLeader` it gets
//!   and, being higher than the leader, starts the next one, which it wins.
//!
//! # Assumptions
//! A complete network; channels need not be FIFO, and a duplicate meets a process whose status
//! has moved on and is ignored; crash-recovery with fresh state; a failure detector, and
//! heartbeats for a silent leader and for merging after a heal ([`super::assumptions`]). A
//! lost message is made up for only by the stall timer. State: a few words, positions in the
//! shared group, and a short list of the dead. A process whose rank is not in its group takes
//! no part until a [`Input::Membership`] that contains it; a membership change during an
//! election restarts it.

use crate::driver::{Context, Election, Input, Timer};
use crate::election::config::times;
use crate::election::watch::LeaderSilence;
use crate::election::{ElectionConfig, LapRule, Message};
use crate::id::{NodeId, Rank};
use crate::membership::Membership;
use std::sync::Arc;
use std::time::Duration;

/// "No process": the sentinel for the position fields.
const NONE: u32 = u32::MAX;

/// How many processes found dead by a failed send a process remembers (the most recent);
/// forgetting one only costs a failed send.
const MAX_DEAD: usize = 32;

/// The flag, in `dead`, of a position the failure detector reported down.
const REPORTED: u32 = 1 << 31;

/// A process's status, in seed 004's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Passive,
    Candidate,
    Dummy,
    Waiting,
    Leader,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Passive => "Passive",
            Status::Candidate => "Candidate",
            Status::Dummy => "Dummy",
            Status::Waiting => "Waiting",
            Status::Leader => "Leader",
        }
    }
}

/// One process of the Villadangos et al. election.
#[derive(Debug, Clone)]
pub struct Villadangos {
    me: Rank,
    group: Arc<Membership>,
    /// Our position in `group` (rank order), `NONE` if we are not a member.
    pos: u32,
    epoch: u64,
    status: Status,
    /// Whether `leader` is decided for `epoch`.
    decided: bool,
    /// Positions in `group`, `NONE` when unknown.
    candidate_predecessor: u32,
    candidate_successor: u32,
    leader: u32,
    /// Stalls this process detected in a row (backs the stall timer off).
    stalls: u8,
    /// The lap timer, scaled with the group's size (`ElectionConfig::hop_delay_ms`).
    lap: LapRule,
    /// The process whose failure made this process start its latest epoch (`NONE` if none):
    /// skipped on the ring, but accepted as leader if it wins (then it has recovered).
    suspect: u32,
    /// Positions known to be dead: from failed sends (at most `MAX_DEAD`, the most recent,
    /// for the current epoch) and, flagged [`REPORTED`], from the failure detector (kept
    /// across epochs until `PeerUp` or news of life).
    dead: Vec<u32>,
    /// Where this process sent `Message1` in the current epoch, and the candidate it carried
    /// (`NONE`: not sent): a live process found between us and `m1_to` was skipped.
    m1_to: u32,
    m1_for: u32,
}

impl Villadangos {
    pub fn new(me: Rank, group: Arc<Membership>, cfg: &ElectionConfig) -> Self {
        let pos = position_of(&group, &me).unwrap_or(NONE);
        Villadangos {
            me,
            group,
            pos,
            epoch: 0,
            status: Status::Passive,
            decided: false,
            candidate_predecessor: NONE,
            candidate_successor: NONE,
            leader: NONE,
            stalls: 0,
            lap: LapRule::of(cfg),
            suspect: NONE,
            dead: Vec::new(),
            m1_to: NONE,
            m1_for: NONE,
        }
    }

    /// The current status.
    pub fn status(&self) -> Status {
        self.status
    }
    /// The current epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    fn rank_at(&self, p: u32) -> Rank {
        self.group.ranks()[p as usize]
    }
    fn pos_of(&self, r: &Rank) -> Option<u32> {
        position_of(&self.group, r)
    }
    /// Known or suspected dead (skipped on the ring).
    fn is_dead(&self, p: u32) -> bool {
        p == self.suspect || self.dead.contains(&p) || self.is_reported(p)
    }
    fn is_reported(&self, p: u32) -> bool {
        self.dead.contains(&(p | REPORTED))
    }
    fn mark_dead(&mut self, p: u32) {
        if p != self.pos && !self.dead.contains(&p) {
            if self.dead.iter().filter(|&&d| d & REPORTED == 0).count() >= MAX_DEAD {
                if let Some(i) = self.dead.iter().position(|&d| d & REPORTED == 0) {
                    self.dead.remove(i);
                }
            }
            self.dead.push(p);
        }
    }
    fn mark_reported(&mut self, p: u32) {
        if p != self.pos && !self.is_reported(p) {
            self.dead.push(p | REPORTED);
        }
    }
    fn mark_alive(&mut self, p: u32) {
        self.dead.retain(|&d| d & !REPORTED != p);
        if self.suspect == p {
            self.suspect = NONE;
        }
    }

    /// The first process below us on the virtual ring not known to be dead; ourselves if
    /// everybody else is.
    fn next_live_below(&self) -> u32 {
        let n = self.group.len() as u32;
        (1..n).map(|k| (self.pos + n - k) % n).find(|&q| !self.is_dead(q)).unwrap_or(self.pos)
    }

    fn lap_after(&self) -> Duration {
        let factor = 3u64 << self.stalls.min(10);
        times(self.lap.for_group(self.group.len()), factor)
    }
    fn arm_lap(&self, ctx: &mut Context<'_>) {
        ctx.set_timer(Timer::Lap, self.lap_after());
    }

    fn send_to(&self, ctx: &mut Context<'_>, p: u32, msg: Message) {
        ctx.send(self.rank_at(p).id, msg);
    }

    /// Drop the election state and join `epoch`, undecided. Deaths learnt from failed sends
    /// stay with the epoch they were learnt in: a send that failed during a partition says
    /// nothing after the heal, and a process dead for good fails the next epoch's send at once
    /// (the failure detector's reports, which stay, cover it meanwhile).
    fn enter_epoch(&mut self, ctx: &mut Context<'_>, epoch: u64) {
        self.epoch = epoch;
        self.dead.retain(|&d| d & REPORTED != 0);
        self.status = Status::Passive;
        self.decided = false;
        self.candidate_predecessor = NONE;
        self.candidate_successor = NONE;
        self.leader = NONE;
        self.m1_to = NONE;
        self.m1_for = NONE;
        self.arm_lap(ctx);
    }

    /// Start the next epoch and initiate in it. `dead` is the failure that caused it.
    fn start_epoch(&mut self, ctx: &mut Context<'_>, dead: Option<u32>) {
        self.enter_epoch(ctx, self.epoch.saturating_add(1));
        if let Some(d) = dead.filter(|&d| d != self.pos) {
            self.dead.retain(|&x| x != d);
            self.suspect = d;
        }
        self.initiate(ctx);
    }

    /// Seed 004's `initiate`: become a candidate and send `Message1(me)` to the neighbour.
    fn initiate(&mut self, ctx: &mut Context<'_>) {
        self.status = Status::Candidate;
        self.candidate_predecessor = NONE;
        self.candidate_successor = NONE;
        ctx.started();
        self.arm_lap(ctx);
        self.send_message1(ctx, self.pos);
    }

    /// Send `Message1(p)` to the next live process below us.
    fn send_message1(&mut self, ctx: &mut Context<'_>, p: u32) {
        let to = self.next_live_below();
        if to != self.pos {
            self.m1_to = to;
            self.m1_for = p;
            let msg = Message::Message1 { epoch: self.epoch, candidate_predecessor: self.rank_at(p) };
            self.send_to(ctx, to, msg);
        } else if p == self.pos {
            // Everybody else is dead: our message "comes round" at once.
            self.on_message1(ctx, p);
        } else {
            // We are alone and `p`, the candidate we were forwarding for, is dead.
            self.start_epoch(ctx, None);
        }
    }

    /// `x` takes part in the current epoch (it sent us one of its messages, or a `Message3`
    /// hands it on as a candidate). If our `Message1` of this epoch skipped it as dead, it is
    /// our neighbour after all and never got that message: as a candidate it would wait for
    /// its predecessor to the stall timer. It is marked alive and gets `Message1` too (a copy
    /// for any process past it, which has moved on and ignores it).
    fn took_part(&mut self, ctx: &mut Context<'_>, x: u32) {
        if self.decided || self.m1_to == NONE || x == self.pos {
            return;
        }
        let n = self.group.len() as u32;
        let below = |q: u32| (self.pos + n - q) % n;
        if below(x) < below(self.m1_to) {
            self.mark_alive(x);
            self.send_message1(ctx, self.m1_for);
        }
    }

    fn become_leader(&mut self, ctx: &mut Context<'_>) {
        self.status = Status::Leader;
        self.decided = true;
        self.leader = self.pos;
        self.stalls = 0;
        ctx.cancel_timer(Timer::Lap);
        ctx.decide(self.me.id);
        let msg = Message::VillLeader { epoch: self.epoch, leader: self.me };
        for r in self.group.ranks() {
            // Members the detector reported down are left out: one that comes back is
            // reported up and catches up on its own (`reply_current`, `PeerUp`).
            if r.id != self.me.id && !self.group.position(&r.id).is_some_and(|p| self.is_reported(p as u32)) {
                ctx.send(r.id, msg.clone());
            }
        }
    }

    /// Accept `l` as the leader of the current epoch.
    fn decide(&mut self, ctx: &mut Context<'_>, l: u32) {
        if !self.decided {
            self.decided = true;
            self.leader = l;
            self.status = if l == self.pos { Status::Leader } else { Status::Dummy };
            self.stalls = 0;
            ctx.cancel_timer(Timer::Lap);
            ctx.decide(self.rank_at(l).id);
        } else if l > self.leader {
            // Two leaders in one epoch (only after crashes): keep the higher.
            self.leader = l;
            if self.status == Status::Leader {
                self.status = Status::Dummy;
            }
            ctx.decide(self.rank_at(l).id);
        }
        if self.leader == self.suspect {
            // It won an epoch started after its failure: it has recovered.
            self.suspect = NONE;
        }
        if self.dead.contains(&self.leader) || self.is_reported(self.leader) {
            // The announcement overtook the report of the leader's crash.
            self.start_epoch(ctx, Some(self.leader));
        } else if self.leader < self.pos {
            // A live process above the leader: it must win.
            self.start_epoch(ctx, None);
        }
    }

    /// Tell a stale process the current leader (if decided).
    fn reply_current(&self, ctx: &mut Context<'_>, to: NodeId) {
        if self.decided && to != self.me.id {
            let msg = Message::VillLeader { epoch: self.epoch, leader: self.rank_at(self.leader) };
            ctx.send(to, msg);
        }
    }

    /// Epoch filter for `Message1/2/3`: false if the message is to be ignored.
    fn admit(&mut self, ctx: &mut Context<'_>, epoch: u64, from: NodeId) -> bool {
        if epoch < self.epoch || (epoch == self.epoch && self.decided) {
            self.reply_current(ctx, from);
            return false;
        }
        if epoch > self.epoch {
            self.enter_epoch(ctx, epoch);
        }
        true
    }

    fn on_message1(&mut self, ctx: &mut Context<'_>, p: u32) {
        match self.status {
            Status::Passive if p > self.pos => {
                self.status = Status::Dummy;
                self.arm_lap(ctx);
                self.send_message1(ctx, p);
            }
            Status::Passive if p == self.pos => {
                // Our own message, from an incarnation before a crash: start afresh.
                self.start_epoch(ctx, None);
            }
            Status::Passive => {
                // Choice 2: reached by a lower candidate, we initiate, then handle it.
                self.initiate(ctx);
                if self.status == Status::Candidate {
                    self.on_message1(ctx, p);
                }
            }
            Status::Candidate => {
                self.candidate_predecessor = p;
                if p == self.pos {
                    self.become_leader(ctx);
                } else if self.candidate_successor != NONE {
                    self.status = Status::Dummy;
                    let msg = Message::Message3 { epoch: self.epoch, candidate_predecessor: self.rank_at(p) };
                    self.send_to(ctx, self.candidate_successor, msg);
                } else if p < self.pos {
                    self.status = Status::Waiting;
                    let msg = Message::Message2 { epoch: self.epoch, candidate_successor: self.me };
                    self.send_to(ctx, p, msg);
                }
                // p above us and no successor yet: wait for `Message2`.
            }
            Status::Waiting | Status::Dummy | Status::Leader => {}
        }
    }

    fn on_message2(&mut self, ctx: &mut Context<'_>, s: u32) {
        match self.status {
            Status::Candidate => {
                self.candidate_successor = s;
                if self.candidate_predecessor != NONE {
                    self.status = Status::Dummy;
                    let msg = Message::Message3 {
                        epoch: self.epoch,
                        candidate_predecessor: self.rank_at(self.candidate_predecessor),
                    };
                    self.send_to(ctx, s, msg);
                }
            }
            Status::Waiting => self.candidate_successor = s,
            Status::Passive | Status::Dummy | Status::Leader => {}
        }
    }

    fn on_message3(&mut self, ctx: &mut Context<'_>, p: u32) {
        if self.status != Status::Waiting {
            return;
        }
        self.candidate_predecessor = p;
        if p == self.pos {
            self.become_leader(ctx);
        } else if self.candidate_successor != NONE {
            self.status = Status::Dummy;
            let msg = Message::Message3 { epoch: self.epoch, candidate_predecessor: self.rank_at(p) };
            self.send_to(ctx, self.candidate_successor, msg);
        } else if p < self.pos {
            let msg = Message::Message2 { epoch: self.epoch, candidate_successor: self.me };
            self.send_to(ctx, p, msg);
        } else {
            // A higher candidate handed to us with nobody above us: impossible without
            // crashes, so the epoch is broken.
            self.start_epoch(ctx, None);
        }
    }

    fn on_message(&mut self, ctx: &mut Context<'_>, from: NodeId, msg: Message) {
        let Some(f) = self.group.position(&from).map(|p| p as u32) else {
            ctx.reject(from, "sender is not a member of the group");
            return;
        };
        if f == self.pos {
            ctx.reject(from, "message from this process itself");
            return;
        }
        match msg {
            Message::Message1 { epoch, candidate_predecessor } => {
                let Some(p) = self.pos_of(&candidate_predecessor) else {
                    ctx.reject(from, "message1 names a process outside the group");
                    return;
                };
                if self.admit(ctx, epoch, from) {
                    // The first Message1 of an epoch is news of life of its initiator (see the
                    // doc); a later one may be a duplicate sent before a crash.
                    let first = self.status == Status::Passive
                        || (self.status == Status::Candidate && self.candidate_predecessor == NONE);
                    if first {
                        self.mark_alive(p);
                    }
                    self.on_message1(ctx, p);
                    self.took_part(ctx, f);
                }
            }
            Message::Message2 { epoch, candidate_successor } => {
                let Some(s) = self.pos_of(&candidate_successor) else {
                    ctx.reject(from, "message2 names a process outside the group");
                    return;
                };
                if s != f {
                    ctx.reject(from, "message2 not sent by the candidate successor it names");
                    return;
                }
                if s < self.pos {
                    ctx.reject(from, "message2 from a lower process");
                    return;
                }
                if self.admit(ctx, epoch, from) {
                    self.on_message2(ctx, s);
                    self.took_part(ctx, f);
                }
            }
            Message::Message3 { epoch, candidate_predecessor } => {
                let Some(p) = self.pos_of(&candidate_predecessor) else {
                    ctx.reject(from, "message3 names a process outside the group");
                    return;
                };
                if self.admit(ctx, epoch, from) {
                    self.on_message3(ctx, p);
                    self.took_part(ctx, f);
                    self.took_part(ctx, p);
                }
            }
            Message::VillLeader { epoch, leader } => {
                let Some(l) = self.pos_of(&leader) else {
                    ctx.reject(from, "leader announcement names a process outside the group");
                    return;
                };
                if epoch < self.epoch {
                    self.reply_current(ctx, from);
                    return;
                }
                if epoch > self.epoch {
                    self.enter_epoch(ctx, epoch);
                }
                self.decide(ctx, l);
            }
            _ => ctx.reject(from, "not a Villadangos et al. message"),
        }
    }

    fn on_peer_down(&mut self, ctx: &mut Context<'_>, id: NodeId) {
        let Some(x) = self.group.position(&id).map(|p| p as u32) else { return };
        if x == self.pos {
            return;
        }
        self.mark_reported(x);
        self.mark_dead(x);
        if self.decided {
            if x == self.leader {
                self.start_epoch(ctx, Some(x));
            }
        } else if self.status != Status::Passive
            && (x == self.candidate_successor || (self.status == Status::Waiting && x == self.candidate_predecessor))
        {
            self.start_epoch(ctx, Some(x));
        }
    }

    fn on_send_failed(&mut self, ctx: &mut Context<'_>, to: NodeId, msg: Message) {
        let Some(t) = self.group.position(&to).map(|p| p as u32) else { return };
        self.mark_dead(t);
        if self.decided && t == self.leader && t != self.pos {
            // Whatever the message, the leader we name is unreachable.
            self.start_epoch(ctx, Some(t));
            return;
        }
        match msg {
            Message::Message1 { epoch, candidate_predecessor } if epoch == self.epoch && !self.decided => {
                if let Some(p) = self.pos_of(&candidate_predecessor) {
                    self.send_message1(ctx, p);
                }
            }
            Message::Message2 { epoch, .. } | Message::Message3 { epoch, .. }
                if epoch == self.epoch && !self.decided =>
            {
                self.start_epoch(ctx, Some(t));
            }
            _ => {}
        }
    }

    fn on_membership(&mut self, ctx: &mut Context<'_>, group: Arc<Membership>) {
        let old_leader = self.decided.then(|| self.rank_at(self.leader));
        let was_active = self.status != Status::Passive;
        let reported: Vec<NodeId> =
            self.dead.iter().filter(|&&d| d & REPORTED != 0).map(|&d| self.rank_at(d & !REPORTED).id).collect();
        self.group = group;
        self.dead = reported.iter().filter_map(|id| self.group.position(id)).map(|p| p as u32 | REPORTED).collect();
        self.suspect = NONE;
        self.candidate_predecessor = NONE;
        self.candidate_successor = NONE;
        let Some(p) = position_of(&self.group, &self.me) else {
            // Not a member any more: take no part.
            self.pos = NONE;
            self.status = Status::Passive;
            self.decided = false;
            self.leader = NONE;
            ctx.cancel_timer(Timer::Lap);
            return;
        };
        let was_member = self.pos != NONE;
        self.pos = p;
        if !was_member {
            self.status = Status::Passive;
            return;
        }
        match old_leader {
            Some(l) => match self.pos_of(&l) {
                Some(lp) => {
                    self.leader = lp;
                    if lp < self.pos {
                        self.start_epoch(ctx, None);
                    }
                }
                None => self.start_epoch(ctx, None),
            },
            None if was_active => self.start_epoch(ctx, None),
            None => {}
        }
    }
}

fn position_of(group: &Membership, r: &Rank) -> Option<u32> {
    let p = group.position(&r.id)?;
    (group.ranks()[p] == *r).then_some(p as u32)
}

impl LeaderSilence for Villadangos {
    fn leader_silent(&mut self, ctx: &mut Context<'_>, leader: NodeId) {
        if self.pos == NONE || !self.decided {
            return;
        }
        if self.rank_at(self.leader).id == leader && self.leader != self.pos {
            let l = self.leader;
            self.start_epoch(ctx, Some(l));
        }
    }

    /// A silent leader that speaks again (thawed, or healed from a partition) is no longer
    /// the suspect, nor dead from failed sends; its reported failure stands until `PeerUp`.
    fn alive(&mut self, from: NodeId) {
        let Some(p) = self.group.position(&from).map(|p| p as u32) else { return };
        self.dead.retain(|&d| d != p);
        if self.suspect == p {
            self.suspect = NONE;
        }
    }
}

impl Election for Villadangos {
    fn id(&self) -> NodeId {
        self.me.id
    }

    fn handle(&mut self, ctx: &mut Context<'_>, input: Input) {
        if self.pos == NONE {
            match input {
                Input::Message { from, .. } => ctx.reject(from, "this process is not a member of its group"),
                Input::Membership(g) => self.on_membership(ctx, g),
                _ => {}
            }
            return;
        }
        match input {
            Input::Start => {
                if self.decided {
                    self.start_epoch(ctx, None);
                } else if self.status == Status::Passive {
                    self.initiate(ctx);
                }
            }
            Input::Recover => self.start_epoch(ctx, None),
            Input::Message { from, msg } => self.on_message(ctx, from, msg),
            Input::Timer(Timer::Lap) => {
                if !self.decided {
                    // A stall may come from a wrong belief that someone is dead (a process
                    // that recovered unreported, a healed partition): forget them all.
                    self.stalls = self.stalls.saturating_add(1);
                    self.dead.retain(|&d| d & REPORTED != 0);
                    self.suspect = NONE;
                    self.start_epoch(ctx, None);
                }
            }
            Input::Timer(_) => {}
            Input::PeerUp(id) => {
                if let Some(x) = self.group.position(&id).map(|p| p as u32) {
                    self.mark_alive(x);
                    // The leader tells a process that comes back who leads: its announcement
                    // left out members reported down, and a higher one must take over.
                    if self.decided && self.leader == self.pos {
                        let msg = Message::VillLeader { epoch: self.epoch, leader: self.me };
                        ctx.send(id, msg);
                    }
                }
            }
            Input::PeerDown(id) => self.on_peer_down(ctx, id),
            Input::SendFailed { to, msg } => self.on_send_failed(ctx, to, msg),
            Input::Membership(g) => self.on_membership(ctx, g),
        }
    }

    fn leader(&self) -> Option<NodeId> {
        (self.decided && self.pos != NONE).then(|| self.rank_at(self.leader).id)
    }

    fn state(&self) -> &'static str {
        self.status.name()
    }

    fn in_election(&self) -> bool {
        !self.decided && self.status != Status::Passive
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::{Effect, Election};
    use crate::election::{Algorithm, AnyElection};
    use crate::testkit::feed;
    use crate::testkit::Net;
    use crate::time::Time;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// Heartbeats off: these tests count the algorithm's own messages and run to
    /// quiescence (the leader-liveness rule around it is tested in `watch.rs`).
    fn cfg() -> ElectionConfig {
        crate::testkit::scenarios::quiet_cfg(Algorithm::Villadangos)
    }

    /// The base seed of a randomised test: `PEERAGE_SEED` if set (to replay), else fixed.
    fn base_seed(test: &str) -> u64 {
        let s = std::env::var("PEERAGE_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_0004);
        println!("{test}: base seed {s} (replay with PEERAGE_SEED={s})");
        s
    }

    fn state_of(net: &Net, i: usize) -> &'static str {
        net.process(i).state()
    }

    /// Every live process names the highest live one, which alone is in state `Leader`.
    fn check_agreement(net: &Net, what: &str) {
        let h = net.highest_alive().expect("someone alive");
        if std::env::var("PEERAGE_TRACE").is_ok() {
            println!("now {:?} started {:?} sent {:?}", net.now, net.started, net.sent);
            for i in 0..net.len() {
                if let AnyElection::Villadangos(v) = net.process(i) {
                    println!("  {i}: alive {} {:?}", net.is_alive(i), v);
                }
            }
        }
        assert!(
            net.all_agree_on(net.id(h)),
            "{what}: leaders {:?}, expected process {h} ({:?})",
            net.leaders(),
            net.id(h)
        );
        for i in (0..net.len()).filter(|&i| net.is_alive(i)) {
            let want = if i == h { "Leader" } else { "Dummy" };
            assert_eq!(state_of(net, i), want, "{what}: state of process {i}");
            assert!(!net.process(i).in_election(), "{what}: process {i} still in an election");
        }
    }

    /// `net.run()`, printing every process after each event when `PEERAGE_TRACE` is set.
    fn run(net: &mut Net) {
        if std::env::var("PEERAGE_TRACE").is_err() {
            net.run();
            return;
        }
        let limit = Time::from_millis(3_600_000);
        let mut last = String::new();
        while net.now <= limit && net.step() {
            let mut line = format!("{:>9}us sent {:>4}:", net.now.as_micros(), net.total_sent());
            for i in 0..net.len() {
                if let AnyElection::Villadangos(v) = net.process(i) {
                    let l = v.leader().map(|l| l.high_u64() as i64 - 1).unwrap_or(-1);
                    let a = if net.is_alive(i) { ' ' } else { 'X' };
                    line += &format!(" {a}{i}:{}/e{}/l{l}/s{}", &v.state()[..2], v.epoch(), v.suspect as i32);
                }
            }
            if line[16..] != last[16.min(last.len())..] {
                println!("{line}");
            }
            last = line;
        }
    }

    /// If every live process is still untouched (`Passive` in epoch 0: every initiator crashed
    /// before anyone heard of the election), the application starts them, as at start-up.
    fn start_untouched(net: &mut Net) {
        let untouched = (0..net.len()).all(|i| {
            !net.is_alive(i) || matches!(net.process(i), AnyElection::Villadangos(v) if v.epoch() == 0 && v.status() == Status::Passive)
        });
        if untouched {
            let now = net.now;
            let live: Vec<usize> = (0..net.len()).filter(|&i| net.is_alive(i)).collect();
            for i in live {
                net.start_at(now, i);
            }
            run(net);
        }
    }

    /// Fault-free message count from the module doc: n Message1, k - 1 each of Message2 and
    /// Message3 (k candidates, counting the woken highest), n - 1 announcements.
    fn expected_total(n: u64, k: u64) -> u64 {
        if n == 1 {
            return 0; // alone: its Message1 "comes round" without being sent
        }
        2 * n - 1 + 2 * (k - 1)
    }

    fn run_fault_free(n: usize, initiators: &[usize]) -> Net {
        let mut net = Net::new(n, cfg());
        for &i in initiators {
            net.start_at(Time::ZERO, i);
        }
        net.run();
        let what = format!("n={n} initiators={initiators:?}");
        check_agreement(&net, &what);
        let mut cands: Vec<usize> = initiators.to_vec();
        cands.push(n - 1);
        cands.sort_unstable();
        cands.dedup();
        let k = cands.len() as u64;
        let n = n as u64;
        assert_eq!(net.sent_of("Message1"), if n == 1 { 0 } else { n }, "{what}: Message1");
        assert_eq!(net.sent_of("Message2"), k - 1, "{what}: Message2");
        assert_eq!(net.sent_of("Message3"), k - 1, "{what}: Message3");
        assert_eq!(net.sent_of("VillLeader"), n - 1, "{what}: VillLeader");
        assert_eq!(net.total_sent(), expected_total(n, k), "{what}: total");
        assert!(net.total_sent() < 4 * n, "{what}: {} messages, not < 4n", net.total_sent());
        assert_eq!(net.rejected, 0, "{what}: rejected messages");
        net
    }

    #[test]
    fn villadangos_seed_trace_all_initiators() {
        // Five candidates 1 > ... seed 004: the highest receives the lowest's Message1
        // across the wrap, goes Waiting and eats the candidates from the bottom up.
        let net = run_fault_free(5, &[0, 1, 2, 3, 4]);
        assert_eq!(net.sent_of("Message2"), 4);
        assert_eq!(net.sent_of("Message3"), 4);
        assert_eq!(net.started, vec![1; 5]);
    }

    #[test]
    fn villadangos_single_initiator_passive_become_dummy_and_highest_wakes() {
        // Process 2 initiates; its Message1 makes 1 and 0 Dummy, crosses the wrap and wakes
        // the highest (5), whose own Message1 makes 4 and 3 Dummy and reaches 2.
        let net = run_fault_free(6, &[2]);
        assert_eq!(net.started, vec![0, 0, 1, 0, 0, 1]);
        // The highest alone: its message goes round, nobody else is a candidate.
        let net = run_fault_free(6, &[5]);
        assert_eq!(net.started, vec![0, 0, 0, 0, 0, 1]);
        assert_eq!(net.total_sent(), 2 * 6 - 1);
    }

    #[test]
    fn villadangos_agreement_fault_free_n_1_to_12() {
        let mut rng = StdRng::seed_from_u64(base_seed("fault_free"));
        for n in 1..=12usize {
            for i in 0..n {
                run_fault_free(n, &[i]);
            }
            run_fault_free(n, &(0..n).collect::<Vec<_>>());
            for _ in 0..20 {
                let many: Vec<usize> = (0..n).filter(|_| rng.gen_bool(0.5)).collect();
                if !many.is_empty() {
                    run_fault_free(n, &many);
                }
            }
        }
    }

    #[test]
    fn villadangos_messages_grow_linearly() {
        println!("| N | one initiator (lowest) | one initiator (highest) | all initiate | bound 4N |");
        println!("|---|---|---|---|---|");
        for n in [4usize, 16, 64, 256, 1024] {
            let one_low = run_fault_free(n, &[0]).total_sent();
            let one_high = run_fault_free(n, &[n - 1]).total_sent();
            let all = run_fault_free(n, &(0..n).collect::<Vec<_>>()).total_sent();
            let n64 = n as u64;
            assert_eq!(one_low, 2 * n64 + 1);
            assert_eq!(one_high, 2 * n64 - 1);
            assert_eq!(all, 4 * n64 - 3);
            assert!(one_low <= 4 * n64 && one_high <= 4 * n64 && all <= 4 * n64);
            println!("| {n} | {one_low} | {one_high} | {all} | {} |", 4 * n);
        }
    }

    /// The election takes O(n) delays in a row (the highest eats the candidates one after
    /// another): 400 processes that all initiate, over 65 ms links (an Internet median), need
    /// about 52 s. With the lap timer scaled to the group (`hop_delay_ms` at the links'
    /// delay) the election runs once, with its 4n - 3 messages; a fixed 10 s lap timer (3 x
    /// 10 s stall) restarts it before it ends.
    #[test]
    fn villadangos_lap_timer_covers_a_large_groups_slow_lap() {
        let n = 400usize;
        let run = |hop_delay_ms: u64| {
            let mut net = Net::new(n, ElectionConfig { hop_delay_ms, ..cfg() });
            net.latency = Duration::from_millis(65);
            for i in 0..n {
                net.start_at(Time::ZERO, i);
            }
            net.run();
            check_agreement(&net, &format!("hop {hop_delay_ms} ms"));
            net
        };
        let scaled = run(65);
        assert_eq!(scaled.total_sent(), 4 * n as u64 - 3, "one election, no restart");
        assert_eq!(scaled.started, vec![1; n]);
        assert!(scaled.last_decision > Time::from_millis(30_000), "the lap is longer than 3 x 10 s");
        let fixed = run(0);
        assert!(
            fixed.total_sent() > 4 * n as u64,
            "a fixed lap timer restarts the election: {} messages",
            fixed.total_sent()
        );
    }

    /// Random crashes before the election; random initiators among the live.
    #[test]
    fn villadangos_agreement_with_crashes_before() {
        let base = base_seed("crashes_before");
        for s in 0..400u64 {
            let seed = base.wrapping_add(s);
            let mut rng = StdRng::seed_from_u64(seed);
            let n = rng.gen_range(1..=12usize);
            let mut net = Net::new(n, cfg());
            net.detector = rng.gen_bool(0.5);
            let crashed: Vec<usize> = (0..n).filter(|_| rng.gen_bool(0.3)).collect();
            if crashed.len() == n {
                continue;
            }
            for &c in &crashed {
                net.crash(c);
            }
            let live: Vec<usize> = (0..n).filter(|&i| net.is_alive(i)).collect();
            let mut inits: Vec<usize> = live.iter().copied().filter(|_| rng.gen_bool(0.4)).collect();
            if inits.is_empty() {
                inits.push(live[rng.gen_range(0..live.len())]);
            }
            for &i in &inits {
                net.start_at(Time::ZERO, i);
            }
            net.run();
            check_agreement(&net, &format!("seed {seed}: n={n} crashed={crashed:?} inits={inits:?}"));
        }
    }

    /// Random crashes while the election runs (crashes reported as `PeerDown`, or not).
    /// Without reports nothing can tell the live processes that a leader that had already won
    /// crashed afterwards; as an application would on the coordinator's silence, the test then
    /// gives `Start` to the live processes naming a dead leader, once.
    #[test]
    fn villadangos_agreement_with_crashes_during() {
        let base = base_seed("crashes_during");
        for s in 0..600u64 {
            let seed = base.wrapping_add(s);
            let mut rng = StdRng::seed_from_u64(seed);
            let n = rng.gen_range(2..=12usize);
            let mut net = Net::new(n, cfg());
            let reports = rng.gen_bool(0.6);
            net.detector = reports;
            let mut inits: Vec<usize> = (0..n).filter(|_| rng.gen_bool(0.4)).collect();
            if inits.is_empty() {
                inits.push(rng.gen_range(0..n));
            }
            for &i in &inits {
                net.start_at(Time::ZERO, i);
            }
            let k = rng.gen_range(1..n);
            let mut crashes = Vec::new();
            for _ in 0..k {
                let who = rng.gen_range(0..n);
                let at = Time::from_micros(rng.gen_range(1..(4 * n as u64 + 2) * 1000));
                net.crash_at(at, who);
                crashes.push((who, at.as_micros()));
            }
            net.run();
            if net.highest_alive().is_none() {
                continue;
            }
            start_untouched(&mut net);
            if !reports {
                let dead_leader = |net: &Net, i: usize| match net.process(i).leader() {
                    Some(l) => (0..n).any(|j| net.id(j) == l && !net.is_alive(j)),
                    None => true,
                };
                let stale: Vec<usize> = (0..n).filter(|&i| net.is_alive(i) && dead_leader(&net, i)).collect();
                let now = net.now;
                for i in stale {
                    net.start_at(now, i);
                }
                net.run();
            }
            check_agreement(&net, &format!("seed {seed}: n={n} reports={reports} inits={inits:?} crashes={crashes:?}"));
        }
    }

    /// The leader crashes after the election (reported); the next highest takes over, again
    /// and again; then the crashed ones recover (highest first) and win back.
    #[test]
    fn villadangos_leader_crash_afterwards_and_recovery() {
        for n in 1..=12usize {
            let mut net = Net::new(n, cfg());
            net.detector = true;
            net.start_all();
            net.run();
            check_agreement(&net, &format!("n={n} initial"));
            for down in (1..n).rev() {
                let now = net.now;
                net.crash_at(now, down);
                net.run();
                check_agreement(&net, &format!("n={n} after crashing {down}"));
            }
            for up in (1..n).rev() {
                let now = net.now;
                net.recover_at(now, up);
                net.run();
                check_agreement(&net, &format!("n={n} after recovering {up}"));
            }
            // A lower process recovering keeps the leader.
            if n >= 3 {
                let now = net.now;
                net.crash_at(now, 1);
                net.run();
                let now = net.now;
                net.recover_at(now, 1);
                net.run();
                check_agreement(&net, &format!("n={n} after lower crash/recovery"));
            }
        }
    }

    /// Crash and recovery of random processes at random times, reported or not.
    #[test]
    fn villadangos_agreement_with_crash_recovery_churn() {
        let base = base_seed("churn");
        for s in 0..300u64 {
            let seed = base.wrapping_add(s);
            let mut rng = StdRng::seed_from_u64(seed);
            let n = rng.gen_range(2..=12usize);
            let mut net = Net::new(n, cfg());
            net.detector = true;
            let mut events = Vec::new();
            net.start_at(Time::ZERO, rng.gen_range(0..n));
            for _ in 0..rng.gen_range(1..=4) {
                let who = rng.gen_range(0..n);
                let at = rng.gen_range(1..(4 * n as u64 + 2) * 1000);
                net.crash_at(Time::from_micros(at), who);
                let back = at + rng.gen_range(1..(4 * n as u64 + 2) * 1000);
                if rng.gen_bool(0.5) {
                    net.recover_at(Time::from_micros(back), who);
                }
                events.push((who, at, back));
            }
            run(&mut net);
            if net.highest_alive().is_none() {
                continue;
            }
            start_untouched(&mut net);
            check_agreement(&net, &format!("seed {seed}: n={n} crash/recover {events:?}"));
        }
    }

    fn rank(i: u64) -> Rank {
        Rank::new(0, NodeId::from_u64(i))
    }

    fn group(n: u64) -> Arc<Membership> {
        Arc::new(Membership::new((1..=n).map(rank)))
    }

    fn rejected(effects: &[Effect]) -> usize {
        effects.iter().filter(|e| matches!(e, Effect::Rejected { .. })).count()
    }

    #[test]
    fn villadangos_rejects_bad_input_and_keeps_state() {
        let mut p = Villadangos::new(rank(2), group(4), &cfg());
        let outsider = NodeId::from_u64(99);
        let m1 = Message::Message1 { epoch: 0, candidate_predecessor: rank(3) };
        let e = feed(&mut p, Input::Message { from: outsider, msg: m1.clone() });
        assert_eq!(rejected(&e), 1);
        assert_eq!(p.state(), "Passive");
        // Another algorithm's message.
        let e = feed(&mut p, Input::Message { from: NodeId::from_u64(3), msg: Message::Election });
        assert_eq!(rejected(&e), 1);
        // A candidate outside the group, a wrong priority, a Message2 not from its sender,
        // a Message2 from below.
        let bad = [
            Message::Message1 { epoch: 0, candidate_predecessor: rank(77) },
            Message::Message3 { epoch: 0, candidate_predecessor: Rank::new(5, NodeId::from_u64(3)) },
            Message::Message2 { epoch: 0, candidate_successor: rank(4) },
            Message::VillLeader { epoch: 9, leader: rank(50) },
        ];
        for msg in bad {
            let e = feed(&mut p, Input::Message { from: NodeId::from_u64(3), msg });
            assert_eq!(rejected(&e), 1);
        }
        let e = feed(
            &mut p,
            Input::Message {
                from: NodeId::from_u64(1),
                msg: Message::Message2 { epoch: 0, candidate_successor: rank(1) },
            },
        );
        assert_eq!(rejected(&e), 1);
        assert_eq!((p.state(), p.epoch(), p.leader()), ("Passive", 0, None));
        // A process outside its own group takes no part.
        let mut q = Villadangos::new(rank(9), group(4), &cfg());
        assert!(feed(&mut q, Input::Start).is_empty());
        let e = feed(&mut q, Input::Message { from: NodeId::from_u64(1), msg: m1 });
        assert_eq!(rejected(&e), 1);
    }

    #[test]
    fn villadangos_stale_epochs_are_ignored_and_answered() {
        let mut p = Villadangos::new(rank(2), group(4), &cfg());
        let from4 = NodeId::from_u64(4);
        feed(&mut p, Input::Message { from: from4, msg: Message::VillLeader { epoch: 3, leader: rank(4) } });
        assert_eq!((p.state(), p.epoch(), p.leader()), ("Dummy", 3, Some(from4)));
        // A Message1 of epoch 1 from a stale process: ignored, answered with the leader.
        let from3 = NodeId::from_u64(3);
        let e = feed(
            &mut p,
            Input::Message { from: from3, msg: Message::Message1 { epoch: 1, candidate_predecessor: rank(3) } },
        );
        assert_eq!(e, vec![Effect::Send { to: from3, msg: Message::VillLeader { epoch: 3, leader: rank(4) } }]);
        assert_eq!((p.state(), p.epoch(), p.leader()), ("Dummy", 3, Some(from4)));
        // A higher epoch supersedes: the process joins it and forwards the Message1.
        let e = feed(
            &mut p,
            Input::Message { from: from3, msg: Message::Message1 { epoch: 4, candidate_predecessor: rank(3) } },
        );
        assert_eq!((p.state(), p.epoch(), p.leader()), ("Dummy", 4, None));
        assert!(e.contains(&Effect::Send {
            to: NodeId::from_u64(1),
            msg: Message::Message1 { epoch: 4, candidate_predecessor: rank(3) }
        }));
    }

    #[test]
    fn villadangos_higher_process_told_of_lower_leader_restarts() {
        let mut p = Villadangos::new(rank(4), group(4), &cfg());
        let e = feed(
            &mut p,
            Input::Message { from: NodeId::from_u64(3), msg: Message::VillLeader { epoch: 2, leader: rank(3) } },
        );
        assert_eq!((p.state(), p.epoch()), ("Candidate", 3));
        assert!(e.contains(&Effect::ElectionStarted));
        assert!(e.contains(&Effect::Send {
            to: NodeId::from_u64(3),
            msg: Message::Message1 { epoch: 3, candidate_predecessor: rank(4) }
        }));
    }

    /// After a heal: the highest process still marks two live ones dead (its sends to them
    /// failed during the cut), so its `Message1` skips them. When the epoch shows them taking
    /// part (`Message3`s handing them on), it sends them `Message1` as well, and the lower
    /// candidate that waited for its predecessor hands the highest its own message: it leads
    /// without waiting for the stall timer.
    #[test]
    fn villadangos_a_skipped_process_that_takes_part_gets_message1() {
        let mut p = Villadangos::new(rank(5), group(5), &cfg());
        let id = NodeId::from_u64;
        for x in [4, 3] {
            feed(&mut p, Input::SendFailed { to: id(x), msg: Message::Alive });
        }
        let m1 =
            |to: u64| Effect::Send { to: id(to), msg: Message::Message1 { epoch: 0, candidate_predecessor: rank(5) } };
        let m2 =
            |to: u64| Effect::Send { to: id(to), msg: Message::Message2 { epoch: 0, candidate_successor: rank(5) } };
        let e = feed(
            &mut p,
            Input::Message { from: id(1), msg: Message::Message1 { epoch: 0, candidate_predecessor: rank(1) } },
        );
        assert!(e.contains(&m1(2)) && e.contains(&m2(1)), "4 and 3 are skipped as dead: {e:?}");
        assert_eq!(p.state(), "Waiting");
        let e = feed(
            &mut p,
            Input::Message { from: id(1), msg: Message::Message3 { epoch: 0, candidate_predecessor: rank(3) } },
        );
        assert!(e.contains(&m2(3)) && e.contains(&m1(3)), "3 takes part: it gets Message1 too: {e:?}");
        let e = feed(
            &mut p,
            Input::Message { from: id(3), msg: Message::Message3 { epoch: 0, candidate_predecessor: rank(4) } },
        );
        assert!(e.contains(&m2(4)) && e.contains(&m1(4)), "so does 4, the true neighbour: {e:?}");
        // 4, a candidate, now has both its predecessor (5) and its successor (5).
        let mut four = Villadangos::new(rank(4), group(5), &cfg());
        feed(&mut four, Input::Start);
        assert_eq!((four.state(), four.epoch()), ("Candidate", 0));
        feed(
            &mut four,
            Input::Message { from: id(5), msg: Message::Message2 { epoch: 0, candidate_successor: rank(5) } },
        );
        let e = feed(
            &mut four,
            Input::Message { from: id(5), msg: Message::Message1 { epoch: 0, candidate_predecessor: rank(5) } },
        );
        let m3 = Effect::Send { to: id(5), msg: Message::Message3 { epoch: 0, candidate_predecessor: rank(5) } };
        assert!(e.contains(&m3), "4 hands the highest its own message: {e:?}");
        feed(
            &mut p,
            Input::Message { from: id(4), msg: Message::Message3 { epoch: 0, candidate_predecessor: rank(5) } },
        );
        assert_eq!((p.state(), p.leader()), ("Leader", Some(id(5))));
    }

    /// A send that failed in one epoch (during a partition, say) does not make its target
    /// dead in the next: the next epoch's `Message1` goes to it again.
    #[test]
    fn villadangos_a_failed_send_marks_dead_for_its_epoch_only() {
        let id = NodeId::from_u64;
        let mut p = Villadangos::new(rank(3), group(5), &cfg());
        feed(&mut p, Input::Start);
        let e = feed(
            &mut p,
            Input::SendFailed { to: id(2), msg: Message::Message1 { epoch: 0, candidate_predecessor: rank(3) } },
        );
        let m1 = |epoch: u64, to: u64, c: u64| Effect::Send {
            to: id(to),
            msg: Message::Message1 { epoch, candidate_predecessor: rank(c) },
        };
        assert!(e.contains(&m1(0, 1, 3)), "2 is skipped in its epoch: {e:?}");
        let e = feed(
            &mut p,
            Input::Message { from: id(4), msg: Message::Message1 { epoch: 1, candidate_predecessor: rank(4) } },
        );
        assert!(e.contains(&m1(1, 2, 4)), "the next epoch tries 2 again: {e:?}");
        // A failure report stays.
        feed(&mut p, Input::PeerDown(id(2)));
        let e = feed(
            &mut p,
            Input::Message { from: id(4), msg: Message::Message1 { epoch: 2, candidate_predecessor: rank(4) } },
        );
        assert!(e.contains(&m1(2, 1, 4)), "a reported process is skipped across epochs: {e:?}");
    }

    /// An asynchronous pump: any pending message may be delivered next (every interleaving a
    /// simulator's random latencies can produce, and more), processes crash at random steps,
    /// crashes are optionally reported (`PeerDown`), failed sends are reported to live senders,
    /// messages may be duplicated or (a few) lost, and a `Lap` timer fires when nothing else is
    /// pending (time passes) or, rarely, early.
    struct Chaos {
        procs: Vec<Villadangos>,
        ids: Vec<NodeId>,
        alive: Vec<bool>,
        lap: Vec<bool>,
        pending: Vec<Ev>,
        rng: StdRng,
        reports: bool,
        early_timers: f64,
        late_starts: bool,
        /// Duplicate probability; loss probability for the first `losses` losses.
        dup: f64,
        loss: f64,
        losses: usize,
        sent: u64,
        started: u64,
    }

    enum Ev {
        Deliver { from: usize, to: usize, msg: Message },
        Failed { sender: usize, dest: NodeId, msg: Message },
        Start(usize),
    }

    impl Chaos {
        fn new(n: usize, seed: u64) -> Chaos {
            let g = group(n as u64);
            Chaos {
                procs: (1..=n as u64).map(|i| Villadangos::new(rank(i), g.clone(), &cfg())).collect(),
                ids: (1..=n as u64).map(NodeId::from_u64).collect(),
                alive: vec![true; n],
                lap: vec![false; n],
                pending: Vec::new(),
                rng: StdRng::seed_from_u64(seed),
                reports: false,
                early_timers: 0.0,
                late_starts: true,
                dup: 0.0,
                loss: 0.0,
                losses: 0,
                sent: 0,
                started: 0,
            }
        }

        fn feed(&mut self, i: usize, input: Input) {
            if !self.alive[i] {
                return;
            }
            let trace = std::env::var("PEERAGE_TRACE").is_ok();
            if trace {
                println!("{i} <- {input:?}");
            }
            let effects = feed(&mut self.procs[i], input);
            if trace {
                let p = &self.procs[i];
                println!(
                    "   {i} now {} e{} leader {:?}: {effects:?}",
                    p.state(),
                    p.epoch(),
                    p.leader().map(|l| l.high_u64())
                );
            }
            for e in effects {
                match e {
                    Effect::Send { to, msg } => {
                        self.sent += 1;
                        let j = (to.high_u64() - 1) as usize;
                        if self.losses > 0 && self.rng.gen_bool(self.loss) {
                            self.losses -= 1;
                            continue;
                        }
                        if self.rng.gen_bool(self.dup) {
                            self.pending.push(Ev::Deliver { from: i, to: j, msg: msg.clone() });
                        }
                        self.pending.push(Ev::Deliver { from: i, to: j, msg });
                    }
                    Effect::SetTimer { timer: Timer::Lap, .. } => self.lap[i] = true,
                    Effect::CancelTimer { timer: Timer::Lap } => self.lap[i] = false,
                    Effect::ElectionStarted => self.started += 1,
                    Effect::Rejected { reason, .. } => panic!("rejected: {reason}"),
                    _ => {}
                }
            }
        }

        fn crash(&mut self, i: usize) {
            if !self.alive[i] {
                return;
            }
            self.alive[i] = false;
            self.lap[i] = false;
            if self.reports {
                for j in 0..self.procs.len() {
                    self.feed(j, Input::PeerDown(self.ids[i]));
                }
            }
        }

        fn fire_timer(&mut self) -> bool {
            let armed: Vec<usize> = (0..self.procs.len()).filter(|&i| self.alive[i] && self.lap[i]).collect();
            if armed.is_empty() {
                return false;
            }
            let i = armed[self.rng.gen_range(0..armed.len())];
            self.lap[i] = false;
            self.feed(i, Input::Timer(Timer::Lap));
            true
        }

        /// One event; false when quiet.
        fn step(&mut self) -> bool {
            if self.pending.is_empty() || self.rng.gen_bool(self.early_timers) {
                return self.fire_timer() || !self.pending.is_empty();
            }
            let k = self.rng.gen_range(0..self.pending.len());
            match self.pending.swap_remove(k) {
                Ev::Deliver { from, to, msg } => {
                    if self.alive[to] {
                        let from = self.ids[from];
                        self.feed(to, Input::Message { from, msg });
                    } else {
                        self.pending.push(Ev::Failed { sender: from, dest: self.ids[to], msg });
                    }
                }
                Ev::Failed { sender, dest, msg } => self.feed(sender, Input::SendFailed { to: dest, msg }),
                Ev::Start(i) => {
                    if self.late_starts || self.procs[i].leader().is_none() {
                        self.feed(i, Input::Start)
                    }
                }
            }
            true
        }

        fn run(&mut self, crash_budget: &mut usize, p_crash: f64) {
            for _ in 0..1_000_000 {
                if *crash_budget > 0 && self.rng.gen_bool(p_crash) {
                    let i = self.rng.gen_range(0..self.procs.len());
                    if self.alive[i] && self.alive.iter().filter(|&&a| a).count() > 1 {
                        self.crash(i);
                        *crash_budget -= 1;
                    }
                }
                if !self.step() {
                    return;
                }
            }
            panic!("no quiescence after a million events");
        }

        fn check(&self, what: &str) {
            let n = self.procs.len();
            let h = (0..n).filter(|&i| self.alive[i]).max().expect("someone alive");
            for i in (0..n).filter(|&i| self.alive[i]) {
                let p = &self.procs[i];
                assert_eq!(p.leader(), Some(self.ids[h]), "{what}: process {i} names {:?}", p.leader());
                let want = if i == h { "Leader" } else { "Dummy" };
                assert_eq!(p.state(), want, "{what}: state of {i}");
            }
        }
    }

    #[test]
    fn villadangos_any_delivery_order_fault_free() {
        let base = base_seed("any_order");
        for s in 0..2_000u64 {
            let seed = base.wrapping_add(s);
            let mut rng = StdRng::seed_from_u64(seed ^ 0xabcd);
            let n = rng.gen_range(1..=12usize);
            let mut c = Chaos::new(n, seed);
            let mut inits: Vec<usize> = (0..n).filter(|_| rng.gen_bool(0.4)).collect();
            if inits.is_empty() {
                inits.push(rng.gen_range(0..n));
            }
            // Starts are events too, so they interleave with the messages (a start that
            // comes after the decision is dropped: it would ask for a new election).
            c.late_starts = false;
            for &i in &inits {
                c.pending.push(Ev::Start(i));
            }
            c.run(&mut 0, 0.0);
            let what = format!("seed {seed}: n={n} inits={inits:?}");
            c.check(&what);
            let (n, k) = (n as u64, c.started);
            assert!(k >= 1 && k <= n, "{what}: {k} candidates");
            assert_eq!(c.sent, expected_total(n, k), "{what}: messages with {k} candidates");
        }
    }

    #[test]
    fn villadangos_any_delivery_order_with_crashes_and_early_timers() {
        let base = base_seed("any_order_crashes");
        for s in 0..2_000u64 {
            let seed = base.wrapping_add(s);
            let mut rng = StdRng::seed_from_u64(seed ^ 0x1234);
            let n = rng.gen_range(2..=12usize);
            let mut c = Chaos::new(n, seed);
            c.reports = rng.gen_bool(0.5);
            c.early_timers = if rng.gen_bool(0.3) { 0.02 } else { 0.0 };
            c.dup = if rng.gen_bool(0.3) { 0.05 } else { 0.0 };
            if rng.gen_bool(0.2) {
                c.loss = 0.02;
                c.losses = 3;
            }
            let mut inits: Vec<usize> = (0..n).filter(|_| rng.gen_bool(0.4)).collect();
            if inits.is_empty() {
                inits.push(rng.gen_range(0..n));
            }
            for &i in &inits {
                c.pending.push(Ev::Start(i));
            }
            let mut budget = rng.gen_range(1..n);
            let p_crash = rng.gen_range(0.01..0.2);
            c.run(&mut budget, p_crash);
            let untouched = (0..n).all(|i| !c.alive[i] || (c.procs[i].state() == "Passive" && c.procs[i].epoch() == 0));
            if untouched {
                // Every initiator crashed before it started: nobody heard of an election.
                for i in (0..n).filter(|&i| c.alive[i]) {
                    c.pending.push(Ev::Start(i));
                }
                c.run(&mut 0, 0.0);
            } else if !c.reports {
                // Nothing reports a leader that crashed after winning: the application's
                // `Start` (on the coordinator's silence) does.
                for i in 0..n {
                    let dead_leader = match c.procs[i].leader() {
                        Some(l) => !c.alive[(l.high_u64() - 1) as usize],
                        None => true,
                    };
                    if c.alive[i] && dead_leader {
                        c.pending.push(Ev::Start(i));
                    }
                }
                c.run(&mut 0, 0.0);
            }
            c.check(&format!(
                "seed {seed}: n={n} reports={} early={} dup={} loss={} inits={inits:?} alive={:?}",
                c.reports, c.early_timers, c.dup, c.loss, c.alive
            ));
        }
    }

    #[test]
    fn villadangos_membership_change() {
        // Decided on 4 in a group of 4; a group without the leader restarts the election.
        let mut p = Villadangos::new(rank(2), group(4), &cfg());
        let from4 = NodeId::from_u64(4);
        feed(&mut p, Input::Message { from: from4, msg: Message::VillLeader { epoch: 0, leader: rank(4) } });
        assert_eq!(p.leader(), Some(from4));
        // The leader stays a member (another process joins below): the decision is kept.
        let bigger = Arc::new(Membership::new([0, 1, 2, 3, 4].map(rank)));
        let e = feed(&mut p, Input::Membership(bigger));
        assert!(e.is_empty(), "{e:?}");
        assert_eq!((p.state(), p.leader()), ("Dummy", Some(from4)));
        // The leader leaves: new epoch, Message1 to the new neighbour below (rank 1).
        let smaller = Arc::new(Membership::new([1, 2, 3].map(rank)));
        let e = feed(&mut p, Input::Membership(smaller));
        assert_eq!((p.state(), p.epoch(), p.leader()), ("Candidate", 1, None));
        assert!(e.contains(&Effect::Send {
            to: NodeId::from_u64(1),
            msg: Message::Message1 { epoch: 1, candidate_predecessor: rank(2) }
        }));
        // Removed from the group: takes no part, rejects messages.
        let without = Arc::new(Membership::new([1, 3].map(rank)));
        feed(&mut p, Input::Membership(without));
        assert_eq!((p.state(), p.leader(), p.in_election()), ("Passive", None, false));
        let e = feed(&mut p, Input::Start);
        assert!(e.is_empty());
    }

    #[test]
    fn villadangos_dispatch_and_state_is_small() {
        let g = group(3);
        let a = AnyElection::new(rank(1), g, &cfg());
        assert_eq!(a.algorithm(), Algorithm::Villadangos);
        assert_eq!(a.state(), "Passive");
        assert!(std::mem::size_of::<Villadangos>() <= 128, "{}", std::mem::size_of::<Villadangos>());
    }
}

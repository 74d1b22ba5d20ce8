//! Vasudevan, Kurose and Towsley's leader election for ad hoc networks (ICNP 2004), as seed
//! 000 summarises it: an echo (diffusing computation) over a spanning tree of an **arbitrary
//! topology**, electing the node of best capacity, with concurrent elections, partitions,
//! merges, joins and leaves. Details marked "as we recall the paper" come from memory of the
//! paper, not checked against its text (only its abstract and introduction were at hand).
//!
//! # The topology
//! A node's neighbours are the peers reported by `PeerUp` and not since by `PeerDown` (the
//! group is not used); it sends only to them and refuses messages from others. A failed send
//! makes the neighbour unreachable for now, but it stays a neighbour.
//!
//! # From the paper and seed 000
//! - **Capacity**: `(capacity, id)` of a [`Rank`] decides; the best-capacity node wins.
//! - **Election tree**: the source sends `EchoElection{tag}` to all neighbours; the first one
//!   a node receives makes its sender the *parent*; the node forwards to all other neighbours
//!   and acknowledges to its parent, `EchoAck{best: Some(r)}` with the best of its subtree,
//!   once they all answered; a node already in the election "merely acknowledges"
//!   (`best: None`). The source announces the winner with `EchoLeader`, down the tree.
//! - **Concurrent elections**: [`ElectionTag`] `(round, source)`, (as we recall the paper)
//!   the computation index; a node takes part only in the highest it has seen, and starts
//!   elections with a round above all it knows.
//! - **Probes** (as we recall the paper, its heartbeat): every probe interval a node probes
//!   its neighbours; [`PROBE_MISSES`] unanswered in a row take one as gone (*suspected*), and
//!   traffic from it brings it back. Suspected neighbours are still probed, so two ends that
//!   lost each other's probes (loss, a pause) meet again. A node that spends
//!   [`LEADERLESS_ROUNDS`] rounds with no leader outside any election starts one.
//! - A node with no neighbours is its own leader.
//! - **Heartbeats** (as we recall the paper: the leader beats periodically, and a node that
//!   stops hearing them starts an election), on when `cfg.echo_heartbeat_interval()` is set.
//!   The leader sends `EchoHeartbeat{seq}` to its neighbours every interval, `seq` counting
//!   its beats; a node forwards each beat newer than the last it heard from its leader to all
//!   neighbours but the sender (so a beat floods the component once, along whatever paths
//!   exist now) and re-arms a timeout of [`BEAT_MISSES`] intervals, whose expiry starts an
//!   election. A beat of a *better* leader than the node's own (a merged component's) is
//!   adopted and forwarded the same way, and a leader that adopts one stops beating. So with
//!   heartbeats, losing a link never starts an election (only losing every link does: the
//!   node is alone), nor does meeting a component with another leader: the better leader's
//!   beats cross the new link. Nor does a link lost *during* an election restart it: a node
//!   that loses its parent decides for its own subtree (at once if it had acknowledged,
//!   else once its children have), and a neighbour whose reply shows a higher election
//!   counts as answered; the parts' leaders then merge by their beats. In a large component
//!   whose links keep changing, an election restarted at every lost tree link would never
//!   end. A node whose leader beat within the last 1.5 intervals (or that is the leader)
//!   answers a new election at once with `EchoAck{best: leader}` instead of joining it: the
//!   leader of its component is alive and the best there, so an election started by a node
//!   that lost the beats (it was cut off, or its links flapped) covers only the nodes
//!   without a live leader. Without heartbeats the rules below apply. Nodes in an election
//!   ignore beats; a node settles with a fresh count for its leader's beats.
//!
//! # Adapted or added (the seed says "with some minor adjustments")
//! - **Crossing elections count as acknowledgements** (Segall's echo): one election from one
//!   source over N nodes and |E| links costs exactly 2|E| - (N-1) `EchoElection`, N-1
//!   `EchoAck` and N-1 `EchoLeader`: **2|E| + N - 1**, plus two hellos per link. The count
//!   holds when the start-up hellos cross the election too: a hello from a node that has
//!   joined no election (`tag: None`) makes a node in an election owe it nothing, since the
//!   election reaches it anyway.
//! - **Losses**: a neighbour lost while we wait for it counts as answered; losing the parent
//!   or the child holding the best found starts a new election. A settled node records `via`,
//!   its next hop towards the leader; losing `via` or the leader starts one. So each side of a
//!   partition ends with its own best.
//! - **Joins and merges**: on `PeerUp` both ends send their state (`EchoReply{tag, leader}`);
//!   a settled node that sees a different, better leader starts an election above both sides'
//!   rounds, one that sees a worse one replies so that the other end does. A node in an
//!   election marks a neighbour whose state it hears *pending* and sends it its result once
//!   decided. A neighbour a send to which failed is pending too, and the result is resent
//!   (the resync timer, doubling) while the send fails: a cut shorter than the failure
//!   detector's delay still ends in a comparison of leaders.
//! - **Safety-net timers** (`cfg.echo_ack_timeout()`, doubling, [`MAX_RETRIES`] tries): a node
//!   waiting for acks resends `EchoElection` to the silent neighbours, then goes on without
//!   them (they get our result); one waiting for `EchoLeader` resends its ack, then elects
//!   again. A neighbour whose state shows a lower tag than our election is resent it at once
//!   (it may have refused it before it knew the link); a higher tag means our election is
//!   stale, and we elect above both.
//! - Without probes nothing is periodic and runs reach quiescence.
//! - Ranks in messages are believed as sent here; the node checks each against the signed
//!   directory before it gets here (`crate::directory::claims`). Messages of other algorithms, from
//!   non-neighbours or from itself, and rounds above [`MAX_ROUND`] are rejected.
//!
//! States: `Passive`, `Candidate` (waiting for acks), `Waiting` (acknowledged, waiting for
//! `EchoLeader`), `Leader`. State: a few scalars, one small record per neighbour, and the
//! suspected neighbours.

use crate::driver::{Context, Election, Input, Timer};
use crate::election::{ElectionConfig, ElectionTag, Message};
use crate::id::{NodeId, Rank};
use crate::membership::Membership;
use crate::time::Time;
use smallvec::SmallVec;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// Waiting for acknowledgements.
const ACK_TIMER: Timer = Timer::Custom(0xEC40);
/// Acknowledged to the parent, waiting for `EchoLeader`.
const LEADER_TIMER: Timer = Timer::Custom(0xEC41);
/// The probe period.
const PROBE_TIMER: Timer = Timer::Custom(0xEC42);
/// The leader's heartbeat period, or a follower's wait for the next beat.
const BEAT_TIMER: Timer = Timer::Custom(0xEC43);
/// Heartbeat intervals a follower waits without a beat before it starts an election.
pub const BEAT_MISSES: u32 = 3;
/// Resending our state to neighbours a send to which failed.
const RESYNC_TIMER: Timer = Timer::Custom(0xEC44);
/// Resends before a safety-net timer gives up.
pub const MAX_RETRIES: u32 = 3;
/// Rounds above this are refused: honest rounds grow by one per election and never get
/// near it, and a forged huge round must not leave the group unable to go higher.
pub const MAX_ROUND: u64 = u64::MAX / 2;
/// Probes a neighbour may leave unanswered before it is taken as gone.
pub const PROBE_MISSES: u8 = 2;
/// Probe rounds a node may spend with no leader, outside any election, before it starts one
/// (a component that no election reached: cut off before it came, or nobody started one).
pub const LEADERLESS_ROUNDS: u8 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Not in an election.
    Passive,
    /// In an election, waiting for acknowledgements.
    Candidate,
    /// Acknowledged to the parent, waiting for the announcement.
    Waiting,
}

/// What a node keeps per neighbour.
#[derive(Debug, Clone, Copy, Default)]
struct Link {
    /// We sent it our election's `EchoElection` and it has not answered yet.
    waiting: bool,
    /// It acknowledged our election with `Some` (it is our child in the tree).
    child: bool,
    /// It sent us its state while we were in an election: it gets our result when decided.
    pending: bool,
    /// Probes sent to it since its last reply.
    unanswered: u8,
}

/// A node's neighbours and what it keeps per neighbour, sorted by id (the order a
/// `BTreeMap` would give, so every loop over them sends in id order).
///
/// Stored inline for up to [`INLINE_LINKS`] neighbours (a `SmallVec`), so that handling a
/// message does not chase a pointer to a separate heap node: in the simulator at 100,000
/// processes that extra cache miss was most of the election's own time (perf). More neighbours spill to the heap and work the same.
#[derive(Debug, Clone, Default)]
struct Links(SmallVec<[(NodeId, Link); INLINE_LINKS]>);

/// Neighbours kept inline (the simulator's default topology is 4-regular).
const INLINE_LINKS: usize = 4;

impl Links {
    fn find(&self, id: &NodeId) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.cmp(id))
    }
    fn get(&self, id: &NodeId) -> Option<&Link> {
        self.find(id).ok().map(|i| &self.0[i].1)
    }
    fn get_mut(&mut self, id: &NodeId) -> Option<&mut Link> {
        self.find(id).ok().map(move |i| &mut self.0[i].1)
    }
    fn contains_key(&self, id: &NodeId) -> bool {
        self.find(id).is_ok()
    }
    /// The link to `id`, added with default state if new.
    fn get_or_insert(&mut self, id: NodeId) -> &mut Link {
        let i = match self.find(&id) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (id, Link::default()));
                i
            }
        };
        &mut self.0[i].1
    }
    /// Add or replace the link to `id`.
    fn insert(&mut self, id: NodeId, link: Link) {
        *self.get_or_insert(id) = link;
    }
    fn remove(&mut self, id: &NodeId) -> Option<Link> {
        self.find(id).ok().map(|i| self.0.remove(i).1)
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    fn keys(&self) -> impl Iterator<Item = &NodeId> {
        self.0.iter().map(|(k, _)| k)
    }
    fn values(&self) -> impl Iterator<Item = &Link> {
        self.0.iter().map(|(_, l)| l)
    }
    fn values_mut(&mut self) -> impl Iterator<Item = &mut Link> {
        self.0.iter_mut().map(|(_, l)| l)
    }
    fn iter(&self) -> impl Iterator<Item = (&NodeId, &Link)> {
        self.0.iter().map(|(k, l)| (k, l))
    }
    fn iter_mut(&mut self) -> impl Iterator<Item = (&NodeId, &mut Link)> {
        self.0.iter_mut().map(|(k, l)| (&*k, l))
    }
}

/// One node of Vasudevan et al.'s echo election.
#[derive(Debug, Clone)]
pub struct Echo {
    me: Rank,
    ack_timeout: Duration,
    probe_every: Option<Duration>,
    /// The neighbours.
    links: Links,
    /// Neighbours dropped by the probe detector; probe traffic from them readmits them.
    suspected: BTreeSet<NodeId>,
    /// Highest round seen in any tag.
    max_round: u64,
    /// The latest election this node joined (running or finished).
    tag: Option<ElectionTag>,
    phase: Phase,
    parent: Option<NodeId>,
    /// Best rank of our subtree in the current election (ourselves included).
    best: Rank,
    /// The child whose ack carried `best` (`None`: `best` is us).
    best_from: Option<NodeId>,
    /// What we acknowledged to the parent, for resends.
    acked: Option<Rank>,
    retries: u32,
    leader: Option<Rank>,
    /// Next hop towards the leader on the election tree (`None`: we are the leader).
    via: Option<NodeId>,
    probing: bool,
    beat_every: Option<Duration>,
    /// Beats this node sent as leader (never reset: its beats keep growing across elections).
    beats: u64,
    /// The newest beat heard from the current leader (reset when a leader is decided), and
    /// when it came.
    beat_seen: u64,
    beat_at: Option<Time>,
    /// Probe rounds in a row spent passive with no leader.
    leaderless: u8,
    /// Resends of our state since the last decision (backs the resync timer off).
    resyncs: u32,
}

impl Echo {
    /// A fresh node. The group is not the topology and is not used: neighbours arrive as
    /// `PeerUp`.
    pub fn new(me: Rank, _group: Arc<Membership>, cfg: &ElectionConfig) -> Self {
        Echo {
            me,
            ack_timeout: cfg.echo_ack_timeout().max(Duration::from_millis(1)),
            probe_every: cfg.echo_probe_interval(),
            links: Links::default(),
            suspected: BTreeSet::new(),
            max_round: 0,
            tag: None,
            phase: Phase::Passive,
            parent: None,
            best: me,
            best_from: None,
            acked: None,
            retries: 0,
            leader: None,
            via: None,
            probing: false,
            beat_every: cfg.echo_heartbeat_interval(),
            beats: 0,
            beat_seen: 0,
            beat_at: None,
            leaderless: 0,
            resyncs: 0,
        }
    }

    /// The neighbours this node currently has.
    pub fn neighbours(&self) -> impl Iterator<Item = &NodeId> {
        self.links.keys()
    }

    /// The latest election this node joined.
    pub fn tag(&self) -> Option<ElectionTag> {
        self.tag
    }

    /// The leader's full rank (capacity and id).
    pub fn leader_rank(&self) -> Option<Rank> {
        self.leader
    }

    /// Our state as neighbours see it.
    fn reply(&self) -> Message {
        let leader = if self.phase == Phase::Passive { self.leader } else { None };
        Message::EchoReply { tag: self.tag, leader }
    }

    fn backoff(&self) -> Duration {
        self.ack_timeout.saturating_mul(1u32 << self.retries.min(16))
    }

    /// Start a new election, with a round above every round seen.
    fn start_election(&mut self, ctx: &mut Context<'_>) {
        self.max_round = self.max_round.saturating_add(1);
        let tag = ElectionTag { round: self.max_round, source: self.me };
        ctx.started();
        self.join(ctx, tag, None);
    }

    /// Take part in election `tag` with `parent` (`None`: we are its source), dropping any
    /// lower election.
    fn join(&mut self, ctx: &mut Context<'_>, tag: ElectionTag, parent: Option<NodeId>) {
        self.tag = Some(tag);
        self.max_round = self.max_round.max(tag.round);
        self.phase = Phase::Candidate;
        self.parent = parent;
        self.best = self.me;
        self.best_from = None;
        self.acked = None;
        self.retries = 0;
        ctx.cancel_timer(LEADER_TIMER);
        let mut any = false;
        for (id, l) in self.links.iter_mut() {
            l.child = false;
            l.waiting = Some(*id) != parent;
            if l.waiting {
                any = true;
                ctx.send(*id, Message::EchoElection { tag });
            }
        }
        if any {
            ctx.set_timer(ACK_TIMER, self.ack_timeout);
        }
        self.maybe_complete(ctx);
    }

    /// If every neighbour has answered: acknowledge to the parent, or (as the source) decide.
    fn maybe_complete(&mut self, ctx: &mut Context<'_>) {
        if self.phase != Phase::Candidate || self.links.values().any(|l| l.waiting) {
            return;
        }
        ctx.cancel_timer(ACK_TIMER);
        let Some(tag) = self.tag else { return };
        match self.parent {
            None => self.settle(ctx, self.best),
            Some(p) => {
                ctx.send(p, Message::EchoAck { tag, best: Some(self.best) });
                self.acked = Some(self.best);
                self.phase = Phase::Waiting;
                self.retries = 0;
                ctx.set_timer(LEADER_TIMER, self.ack_timeout);
            }
        }
    }

    /// The current election is decided: `leader`.
    fn settle(&mut self, ctx: &mut Context<'_>, leader: Rank) {
        let Some(tag) = self.tag else { return };
        self.phase = Phase::Passive;
        self.leader = Some(leader);
        self.resyncs = 0;
        ctx.cancel_timer(ACK_TIMER);
        ctx.cancel_timer(LEADER_TIMER);
        self.via = if leader == self.me {
            None
        } else if leader == self.best {
            self.best_from
        } else {
            self.parent
        };
        let reply = self.reply();
        for (id, l) in self.links.iter_mut() {
            l.waiting = false;
            if l.child {
                ctx.send(*id, Message::EchoLeader { tag, leader });
            }
            if l.pending {
                l.pending = false;
                ctx.send(*id, reply.clone());
            }
        }
        ctx.decide(leader.id);
        self.beat_seen = 0;
        self.beat_at = None;
        if let Some(every) = self.beat_every {
            let wait = if leader == self.me { every } else { every.saturating_mul(BEAT_MISSES) };
            ctx.set_timer(BEAT_TIMER, wait);
        }
        if self.best > leader {
            // Part of our subtree (a late acknowledgement) was not counted: elect again.
            self.start_election(ctx);
        }
    }

    fn peer_up(&mut self, ctx: &mut Context<'_>, peer: NodeId) {
        if peer == self.me.id {
            return;
        }
        self.suspected.remove(&peer);
        // A repeated `PeerUp` (the peer may have restarted unseen) keeps the link's state
        // but greets again, so that both ends compare their leaders.
        self.links.get_or_insert(peer);
        ctx.send(peer, self.reply());
    }

    fn peer_down(&mut self, ctx: &mut Context<'_>, peer: NodeId) {
        self.suspected.remove(&peer);
        let leader_lost = self.leader.map(|l| l.id) == Some(peer);
        let Some(link) = self.links.remove(&peer) else {
            if self.phase == Phase::Passive && leader_lost {
                self.start_election(ctx);
            }
            return;
        };
        let alone = self.links.is_empty();
        self.after_loss(ctx, peer, link.waiting, alone);
    }

    /// A message to `to` could not be delivered: it is unreachable for now. The election
    /// reacts as to `PeerDown`, but the link stays (only `PeerDown` removes a neighbour;
    /// a crashed neighbour that recovers before any report is still one).
    fn send_failed(&mut self, ctx: &mut Context<'_>, to: NodeId) {
        let Some(l) = self.links.get_mut(&to) else {
            return;
        };
        let waiting = l.waiting;
        l.waiting = false;
        l.child = false;
        // It missed something of ours: it gets our state once we are settled, to compare
        // (a cut shorter than the failure detector's delay is reported by nothing else).
        l.pending = true;
        self.after_loss(ctx, to, waiting, false);
        if self.phase == Phase::Passive {
            self.arm_resync(ctx);
        }
    }

    fn arm_resync(&mut self, ctx: &mut Context<'_>) {
        let after = self.ack_timeout.saturating_mul(1u32 << self.resyncs.min(10));
        ctx.set_timer(RESYNC_TIMER, after);
    }

    /// Settled: send our state to the neighbours owed it.
    fn resync(&mut self, ctx: &mut Context<'_>) {
        if self.phase != Phase::Passive {
            return;
        }
        self.resyncs = self.resyncs.saturating_add(1);
        let reply = self.reply();
        for (id, l) in self.links.iter_mut() {
            if l.pending {
                l.pending = false;
                ctx.send(*id, reply.clone());
            }
        }
    }

    /// What losing contact with `peer` means for the election.
    fn after_loss(&mut self, ctx: &mut Context<'_>, peer: NodeId, was_waiting: bool, alone: bool) {
        let leader_lost = self.leader.map(|l| l.id) == Some(peer);
        match self.phase {
            Phase::Passive => {
                // With heartbeats, only their silence says the leader is gone.
                let cut_off =
                    self.beat_every.is_none() && self.leader.is_some() && (leader_lost || self.via == Some(peer));
                // A node left with no neighbours is its own leader.
                let alone = alone && self.leader != Some(self.me);
                if cut_off || alone {
                    self.start_election(ctx);
                }
            }
            Phase::Candidate | Phase::Waiting if self.beat_every.is_some() => {
                // With heartbeats a lost link never restarts the election: an orphaned node
                // decides for what is left of its subtree, and the leaders' beats then merge
                // the parts. (A lost best child keeps its rank: its beats say if it is gone.)
                if self.parent == Some(peer) {
                    self.parent = None;
                    match self.acked {
                        Some(best) if self.phase == Phase::Waiting => self.settle(ctx, best),
                        _ => self.maybe_complete(ctx),
                    }
                } else if was_waiting {
                    self.maybe_complete(ctx);
                }
            }
            Phase::Candidate | Phase::Waiting => {
                if self.parent == Some(peer) || self.best_from == Some(peer) {
                    self.start_election(ctx);
                } else if was_waiting {
                    self.maybe_complete(ctx);
                }
            }
        }
    }

    fn on_timer(&mut self, ctx: &mut Context<'_>, timer: Timer) {
        match timer {
            ACK_TIMER => {
                let Some(tag) = self.tag else { return };
                if self.phase != Phase::Candidate {
                    return;
                }
                self.retries += 1;
                if self.retries <= MAX_RETRIES {
                    for (id, l) in self.links.iter() {
                        if l.waiting {
                            ctx.send(*id, Message::EchoElection { tag });
                        }
                    }
                    ctx.set_timer(ACK_TIMER, self.backoff());
                } else {
                    // Give up on them; they get our result, to compare with theirs.
                    for l in self.links.values_mut() {
                        if l.waiting {
                            l.waiting = false;
                            l.pending = true;
                        }
                    }
                    self.maybe_complete(ctx);
                }
            }
            LEADER_TIMER => {
                let (Some(tag), Some(p)) = (self.tag, self.parent) else {
                    return;
                };
                if self.phase != Phase::Waiting {
                    return;
                }
                self.retries += 1;
                if self.retries <= MAX_RETRIES {
                    ctx.send(p, Message::EchoAck { tag, best: self.acked });
                    ctx.set_timer(LEADER_TIMER, self.backoff());
                } else {
                    self.start_election(ctx);
                }
            }
            PROBE_TIMER => self.probe_round(ctx),
            BEAT_TIMER => self.beat_timer(ctx),
            RESYNC_TIMER => self.resync(ctx),
            _ => {}
        }
    }

    /// The leader beats; a follower that heard no beat for [`BEAT_MISSES`] intervals elects.
    fn beat_timer(&mut self, ctx: &mut Context<'_>) {
        let Some(every) = self.beat_every else { return };
        if self.phase != Phase::Passive || self.leader.is_none() {
            return;
        }
        if self.leader == Some(self.me) {
            self.beats += 1;
            let beat = Message::EchoHeartbeat { tag: self.tag, leader: self.me, seq: self.beats };
            for id in self.links.keys() {
                ctx.send(*id, beat.clone());
            }
            ctx.set_timer(BEAT_TIMER, every);
        } else {
            self.start_election(ctx);
        }
    }

    /// With heartbeats: our leader, if we are it or heard its beat within 1.5 intervals (a
    /// leader that is gone has been silent for longer before anyone's timeout fires).
    fn live_leader(&self, now: Time) -> Option<Rank> {
        let every = self.beat_every?;
        let leader = self.leader.filter(|_| self.phase == Phase::Passive)?;
        let fresh = self.beat_at.is_some_and(|t| now.since(t) <= every + every / 2);
        (leader == self.me || fresh).then_some(leader)
    }

    /// A beat of `leader` from neighbour `from`: forward it if it is newer than the last beat
    /// of our leader, or if it comes from a better leader (adopted).
    fn on_heartbeat(&mut self, ctx: &mut Context<'_>, from: NodeId, tag: Option<ElectionTag>, leader: Rank, seq: u64) {
        let Some(every) = self.beat_every else { return };
        let Some(mine) = self.leader else { return };
        if self.phase != Phase::Passive || leader == self.me {
            return;
        }
        let newer = if leader == mine { seq > self.beat_seen } else { leader > mine };
        if !newer {
            return;
        }
        if leader != mine {
            self.leader = Some(leader);
            ctx.decide(leader.id);
        }
        self.beat_seen = seq;
        self.beat_at = Some(ctx.now);
        self.via = Some(from);
        let beat = Message::EchoHeartbeat { tag, leader, seq };
        for id in self.links.keys().filter(|id| **id != from) {
            ctx.send(*id, beat.clone());
        }
        ctx.set_timer(BEAT_TIMER, every.saturating_mul(BEAT_MISSES));
    }

    /// Neighbours that left [`PROBE_MISSES`] probes unanswered are gone; probe the others.
    fn probe_round(&mut self, ctx: &mut Context<'_>) {
        let Some(every) = self.probe_every else {
            return;
        };
        let silent: Vec<NodeId> =
            self.links.iter().filter(|(_, l)| l.unanswered >= PROBE_MISSES).map(|(id, _)| *id).collect();
        for id in silent {
            self.peer_down(ctx, id);
            self.suspected.insert(id);
        }
        if self.phase == Phase::Passive && self.leader.is_none() {
            self.leaderless += 1;
            if self.leaderless >= LEADERLESS_ROUNDS {
                self.leaderless = 0;
                self.start_election(ctx);
            }
        } else {
            self.leaderless = 0;
        }
        for (id, l) in self.links.iter_mut() {
            l.unanswered = l.unanswered.saturating_add(1);
            ctx.send(*id, Message::EchoProbe);
        }
        // Suspected neighbours are probed too: two ends that lost each other's probes (loss,
        // a pause) would otherwise never speak again, and their components never merge.
        for id in &self.suspected {
            ctx.send(*id, Message::EchoProbe);
        }
        ctx.set_timer(PROBE_TIMER, every);
    }

    fn on_message(&mut self, ctx: &mut Context<'_>, from: NodeId, msg: Message) {
        let tag = match &msg {
            Message::EchoElection { tag } | Message::EchoAck { tag, .. } => Some(*tag),
            Message::EchoLeader { tag, .. } => Some(*tag),
            Message::EchoReply { tag, .. } | Message::EchoHeartbeat { tag, .. } => *tag,
            Message::EchoProbe => None,
            _ => {
                ctx.reject(from, "echo: message of another election algorithm");
                return;
            }
        };
        if from == self.me.id {
            ctx.reject(from, "echo: message from this node itself");
            return;
        }
        if tag.is_some_and(|t| t.round > MAX_ROUND) {
            ctx.reject(from, "echo: election round out of range");
            return;
        }
        if !self.links.contains_key(&from) {
            let probe_traffic = matches!(msg, Message::EchoProbe | Message::EchoReply { .. });
            if probe_traffic && self.suspected.remove(&from) {
                self.links.insert(from, Link::default());
            } else {
                ctx.reject(from, "echo: message from a peer that is not a neighbour");
                return;
            }
        }
        if let Some(t) = tag {
            self.max_round = self.max_round.max(t.round);
        }
        match msg {
            Message::EchoElection { tag } => self.on_election(ctx, from, tag),
            Message::EchoAck { tag, best } => self.on_ack(ctx, from, tag, best),
            // Only the parent announces, and only for the election we are in.
            Message::EchoLeader { tag, leader }
                if Some(tag) == self.tag && self.phase != Phase::Passive && self.parent == Some(from) =>
            {
                self.settle(ctx, leader)
            }
            Message::EchoProbe => ctx.send(from, self.reply()),
            Message::EchoReply { tag, leader } => self.on_reply(ctx, from, tag, leader),
            Message::EchoHeartbeat { tag, leader, seq } => self.on_heartbeat(ctx, from, tag, leader, seq),
            _ => {}
        }
    }

    fn on_election(&mut self, ctx: &mut Context<'_>, from: NodeId, tag: ElectionTag) {
        if Some(tag) > self.tag {
            if let Some(leader) = self.live_leader(ctx.now) {
                // Our leader beats: answer for it (it is the best of our component) instead
                // of pulling the whole component into the election.
                ctx.send(from, Message::EchoAck { tag, best: Some(leader) });
                return;
            }
            self.join(ctx, tag, Some(from));
            return;
        }
        if Some(tag) < self.tag {
            // A lower election: we take part only in the highest one; ignore.
            return;
        }
        let waiting = self.links.get(&from).is_some_and(|l| l.waiting);
        if waiting && self.phase == Phase::Candidate {
            // Crossing elections: the sender already belongs to this election.
            if let Some(l) = self.links.get_mut(&from) {
                l.waiting = false;
            }
            self.maybe_complete(ctx);
        } else if self.parent == Some(from) {
            // The parent resends: our ack was lost. Resend it if we sent one; if we are
            // still collecting our subtree, it will come.
            if let Some(b) = self.acked {
                ctx.send(from, Message::EchoAck { tag, best: Some(b) });
            }
        } else {
            ctx.send(from, Message::EchoAck { tag, best: None });
        }
    }

    fn on_ack(&mut self, ctx: &mut Context<'_>, from: NodeId, tag: ElectionTag, best: Option<Rank>) {
        if Some(tag) != self.tag || self.parent == Some(from) {
            return;
        }
        let Some(l) = self.links.get_mut(&from) else {
            return;
        };
        match best {
            None => {
                if l.waiting && self.phase == Phase::Candidate {
                    l.waiting = false;
                    self.maybe_complete(ctx);
                }
            }
            Some(b) => {
                l.waiting = false;
                l.child = true;
                match self.phase {
                    Phase::Candidate | Phase::Waiting => {
                        if b > self.best {
                            self.best = b;
                            self.best_from = Some(from);
                        }
                        self.maybe_complete(ctx);
                    }
                    Phase::Passive => {
                        // A late (or resent) ack after the decision: announce to it.
                        if let Some(leader) = self.leader {
                            ctx.send(from, Message::EchoLeader { tag, leader });
                            if b > leader {
                                self.best = b;
                                self.best_from = Some(from);
                                self.start_election(ctx);
                            }
                        }
                    }
                }
            }
        }
    }

    fn on_reply(&mut self, ctx: &mut Context<'_>, from: NodeId, tag: Option<ElectionTag>, leader: Option<Rank>) {
        let Some(l) = self.links.get_mut(&from) else {
            return;
        };
        l.unanswered = 0;
        if self.phase != Phase::Passive && tag.is_none() {
            // A start-up hello from a node that has joined no election yet: the election
            // this node is in reaches it (it floods the component), so it owes it nothing.
            return;
        }
        if self.phase != Phase::Passive {
            l.pending = true;
            if tag > self.tag && self.beat_every.is_some() {
                // A neighbour in or past a higher election will not answer ours; with
                // heartbeats the two results merge by their leaders' beats, so take it as
                // answered instead of electing again.
                if l.waiting {
                    l.waiting = false;
                    self.maybe_complete(ctx);
                }
            } else if tag > self.tag {
                // The neighbour took part in a higher election that did not reach us (our
                // link is newer, or we recovered with fresh state): ours is stale and it
                // ignores it. Elect again, above both.
                self.start_election(ctx);
            } else if self.phase == Phase::Candidate && l.waiting && tag < self.tag {
                // It has not joined our election, so it cannot have had our `EchoElection`
                // (say it came before the sender knew us as a neighbour, and was refused).
                if let Some(t) = self.tag {
                    ctx.send(from, Message::EchoElection { tag: t });
                }
            }
            return;
        }
        if tag.is_some() && leader.is_none() {
            // The sender is in an election: make sure it owes us its result.
            ctx.send(from, self.reply());
            return;
        }
        if leader == self.leader || (self.beat_every.is_some() && self.leader.is_some() && leader.is_some()) {
            // Agreed, or (with heartbeats) both settled: the better leader's beats will cross.
            return;
        }
        if self.leader < leader {
            self.start_election(ctx);
        } else {
            ctx.send(from, self.reply());
        }
    }
}

impl Election for Echo {
    fn id(&self) -> NodeId {
        self.me.id
    }

    fn handle(&mut self, ctx: &mut Context<'_>, input: Input) {
        if !self.probing {
            if let Some(every) = self.probe_every {
                self.probing = true;
                ctx.set_timer(PROBE_TIMER, every);
            }
        }
        match input {
            Input::Start | Input::Recover => self.start_election(ctx),
            Input::Message { from, msg } => self.on_message(ctx, from, msg),
            Input::Timer(t) => self.on_timer(ctx, t),
            Input::PeerUp(p) => self.peer_up(ctx, p),
            Input::PeerDown(p) => self.peer_down(ctx, p),
            Input::SendFailed { to, .. } => self.send_failed(ctx, to),
            Input::Membership(_) => {}
        }
    }

    fn leader(&self) -> Option<NodeId> {
        self.leader.map(|r| r.id)
    }

    fn state(&self) -> &'static str {
        match self.phase {
            Phase::Candidate => "Candidate",
            Phase::Waiting => "Waiting",
            Phase::Passive if self.leader == Some(self.me) => "Leader",
            Phase::Passive => "Passive",
        }
    }

    fn in_election(&self) -> bool {
        self.phase != Phase::Passive
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::Effect;
    use crate::election::Algorithm;
    use crate::testkit::feed;
    use crate::testkit::Net;
    use crate::time::Time;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn cfg(probe_ms: u64) -> ElectionConfig {
        ElectionConfig { algorithm: Algorithm::Echo, echo_probe_interval_ms: probe_ms, ..ElectionConfig::default() }
    }

    /// Seeds for the randomised tests: `PEERAGE_SEED` replays one, else a fixed range.
    fn seeds(default: std::ops::Range<u64>) -> Vec<u64> {
        match std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()) {
            Some(s) => vec![s],
            None => default.collect(),
        }
    }

    /// An undirected topology on nodes `0..n`.
    #[derive(Clone, Debug)]
    struct Topo {
        n: usize,
        edges: BTreeSet<(usize, usize)>,
    }

    impl Topo {
        fn degree(&self, i: usize) -> usize {
            self.edges.iter().filter(|&&(a, b)| a == i || b == i).count()
        }
        fn new(n: usize) -> Topo {
            Topo { n, edges: BTreeSet::new() }
        }
        fn add(&mut self, a: usize, b: usize) -> bool {
            a != b && self.edges.insert((a.min(b), a.max(b)))
        }
        fn remove(&mut self, a: usize, b: usize) -> bool {
            self.edges.remove(&(a.min(b), a.max(b)))
        }
        fn line(n: usize) -> Topo {
            let mut t = Topo::new(n);
            for i in 1..n {
                t.add(i - 1, i);
            }
            t
        }
        fn ring(n: usize) -> Topo {
            let mut t = Topo::line(n);
            t.add(n - 1, 0);
            t
        }
        fn star(n: usize) -> Topo {
            let mut t = Topo::new(n);
            for i in 1..n {
                t.add(0, i);
            }
            t
        }
        fn grid(w: usize, h: usize) -> Topo {
            let mut t = Topo::new(w * h);
            for y in 0..h {
                for x in 0..w {
                    let i = y * w + x;
                    if x + 1 < w {
                        t.add(i, i + 1);
                    }
                    if y + 1 < h {
                        t.add(i, i + w);
                    }
                }
            }
            t
        }
        fn complete(n: usize) -> Topo {
            let mut t = Topo::new(n);
            for i in 0..n {
                for j in i + 1..n {
                    t.add(i, j);
                }
            }
            t
        }
        /// A random tree plus `extra` random edges: connected.
        fn random(n: usize, extra: usize, rng: &mut StdRng) -> Topo {
            let mut t = Topo::new(n);
            for i in 1..n {
                let j = rng.gen_range(0..i);
                t.add(i, j);
            }
            let max_extra = n * (n - 1) / 2 - (n - 1);
            let mut added = 0;
            while added < extra.min(max_extra) {
                let (a, b) = (rng.gen_range(0..n), rng.gen_range(0..n));
                if t.add(a, b) {
                    added += 1;
                }
            }
            t
        }
        /// Connected components of the live nodes.
        fn components(&self, alive: &[bool]) -> Vec<Vec<usize>> {
            let mut adj = vec![Vec::new(); self.n];
            for &(a, b) in &self.edges {
                if alive[a] && alive[b] {
                    adj[a].push(b);
                    adj[b].push(a);
                }
            }
            let mut seen = vec![false; self.n];
            let mut out = Vec::new();
            for s in 0..self.n {
                if seen[s] || !alive[s] {
                    continue;
                }
                let mut comp = vec![s];
                seen[s] = true;
                let mut k = 0;
                while k < comp.len() {
                    for &v in &adj[comp[k]] {
                        if !seen[v] {
                            seen[v] = true;
                            comp.push(v);
                        }
                    }
                    k += 1;
                }
                out.push(comp);
            }
            out
        }
    }

    fn random_caps(n: usize, rng: &mut StdRng) -> Vec<u64> {
        (0..n).map(|_| rng.gen_range(0..1000)).collect()
    }

    /// The start of a randomised case: prints the seed (replay with `PEERAGE_SEED`), then
    /// draws N in `sizes`, a random connected topology over it with fewer than
    /// `extra_per_node * N` extra edges, and random capacities, in that order.
    fn random_case(seed: u64, sizes: std::ops::Range<usize>, extra_per_node: usize) -> (StdRng, usize, Topo, Vec<u64>) {
        println!("PEERAGE_SEED={seed}");
        let mut rng = StdRng::seed_from_u64(seed);
        let n = rng.gen_range(sizes);
        let topo = Topo::random(n, rng.gen_range(0..extra_per_node * n), &mut rng);
        let caps = random_caps(n, &mut rng);
        (rng, n, topo, caps)
    }

    /// A quiet network over `topo` (links reported, nothing started), node `i` with capacity
    /// `caps[i]` and id `i + 1`.
    fn build(topo: &Topo, caps: &[u64], cfg: ElectionConfig) -> Net {
        let ranks = (0..topo.n).map(|i| Rank::new(caps[i], NodeId::from_u64(i as u64 + 1))).collect();
        let mut net = Net::with_ranks(ranks, cfg);
        for &(a, b) in &topo.edges {
            net.connect(a, b);
        }
        net.run();
        net
    }

    fn alive(net: &Net) -> Vec<bool> {
        (0..net.len()).map(|i| net.is_alive(i)).collect()
    }

    /// Every live node names the best-capacity node of its component and is out of any
    /// election.
    fn check_agreement(net: &Net, topo: &Topo, what: &str) {
        check_components(net, topo, what, |_| true)
    }

    /// Like [`check_agreement`], for the components holding a node that `pick` accepts.
    fn check_components(net: &Net, topo: &Topo, what: &str, pick: impl Fn(usize) -> bool) {
        for comp in topo.components(&alive(net)).into_iter().filter(|c| c.iter().any(|&i| pick(i))) {
            let best = comp.iter().map(|&i| net.rank(i)).max().unwrap();
            for &i in &comp {
                let p = net.process(i);
                assert!(!p.in_election(), "{what}: node {i} still in an election ({})", p.state());
                assert_eq!(
                    p.leader(),
                    Some(best.id),
                    "{what}: node {i} names {:?}, its component {comp:?} has best {} (capacity {})",
                    p.leader().map(|l| l.high_u64() - 1),
                    best.id.high_u64() - 1,
                    best.priority,
                );
                let want = if best.id == net.id(i) { "Leader" } else { "Passive" };
                assert_eq!(p.state(), want, "{what}: node {i}");
            }
        }
    }

    fn node(net: &Net, i: usize) -> &Echo {
        match net.process(i) {
            crate::election::AnyElection::Echo(e) => e,
            _ => panic!("not an echo node"),
        }
    }

    fn disconnect(net: &mut Net, topo: &mut Topo, a: usize, b: usize) {
        assert!(topo.remove(a, b));
        net.disconnect(a, b);
    }

    fn connect(net: &mut Net, topo: &mut Topo, a: usize, b: usize) {
        assert!(topo.add(a, b));
        net.connect(a, b);
    }

    /// Crash `i` and report the loss of its links (the transport's `PeerDown`).
    fn crash(net: &mut Net, topo: &mut Topo, i: usize) {
        net.crash(i);
        let gone: Vec<(usize, usize)> = topo.edges.iter().copied().filter(|&(a, b)| a == i || b == i).collect();
        for (a, b) in gone {
            disconnect(net, topo, a, b);
        }
    }

    #[test]
    fn echo_lone_node_is_its_own_leader() {
        let mut net = build(&Topo::new(1), &[5], cfg(0));
        net.start_at(Time::ZERO, 0);
        net.run();
        assert_eq!(net.process(0).leader(), Some(net.id(0)));
        assert_eq!(net.process(0).state(), "Leader");
        assert_eq!(net.total_sent(), 0);
    }

    /// Fault-free election from one source: exactly 2|E| - (N-1) `EchoElection`, N-1
    /// `EchoAck`, N-1 `EchoLeader`, total 2|E| + N - 1.
    fn assert_exact_count(topo: &Topo, caps: &[u64], source: usize, name: &str) -> u64 {
        let mut net = build(topo, caps, cfg(0));
        // Building the topology costs one hello per link end and nothing else.
        assert_eq!(net.total_sent(), 2 * topo.edges.len() as u64, "{name}: hellos");
        net.sent.clear();
        net.start_at(net.now, source);
        net.run();
        check_agreement(&net, topo, name);
        let (n, e) = (topo.n as u64, topo.edges.len() as u64);
        assert_eq!(net.sent_of("EchoElection"), 2 * e - (n - 1), "{name}: elections");
        assert_eq!(net.sent_of("EchoAck"), n - 1, "{name}: acks");
        assert_eq!(net.sent_of("EchoLeader"), n - 1, "{name}: announcements");
        assert_eq!(net.total_sent(), 2 * e + n - 1, "{name}: total");
        assert_eq!(net.rejected, 0, "{name}");
        assert_eq!(net.started.iter().sum::<u64>(), 1, "{name}: one election");
        println!(
            "| {name} | {n} | {e} | {} | {} | {} | {} | {} |",
            net.sent_of("EchoElection"),
            net.sent_of("EchoAck"),
            net.sent_of("EchoLeader"),
            net.total_sent(),
            2 * e + n - 1
        );
        net.total_sent()
    }

    /// The source starts while the start-up hellos (one `EchoReply` per link end) are still
    /// in flight: they cross its election, and the count is still exactly the hellos plus
    /// 2|E| + N - 1.
    #[test]
    fn echo_count_is_exact_when_start_up_hellos_cross_the_election() {
        let caps: Vec<u64> = (0..100).map(|i| (i * 7919 % 101) as u64).collect();
        let mut cases = vec![
            (Topo::line(8), 0usize, "line 8"),
            (Topo::star(8), 0, "star 8 from the hub"),
            (Topo::ring(8), 3, "ring 8"),
            (Topo::grid(4, 3), 5, "grid 4x3"),
            (Topo::complete(6), 2, "complete 6"),
        ];
        for seed in seeds(0..10) {
            let (mut rng, n, topo, _) = random_case(seed, 2..30, 2);
            let src = rng.gen_range(0..n);
            cases.push((topo, src, "random"));
        }
        for (topo, source, name) in cases {
            let ranks = (0..topo.n).map(|i| Rank::new(caps[i], NodeId::from_u64(i as u64 + 1))).collect();
            let mut net = Net::with_ranks(ranks, cfg(0));
            for &(a, b) in &topo.edges {
                net.connect(a, b);
            }
            net.start_at(net.now, source);
            net.run();
            check_agreement(&net, &topo, name);
            let (n, e) = (topo.n as u64, topo.edges.len() as u64);
            let extra = net.total_sent() as i64 - (2 * e + 2 * e + n - 1) as i64;
            assert_eq!(
                extra,
                0,
                "{name}: messages beyond hellos + 2|E| + N - 1 (source degree {})",
                topo.degree(source)
            );
        }
    }

    #[test]
    fn echo_message_count_is_exact_on_trees_and_graphs() {
        let caps: Vec<u64> = (0..16).map(|i| (i * 7919 % 13) as u64).collect();
        // Trees: 3(N-1).
        assert_eq!(assert_exact_count(&Topo::line(8), &caps, 0, "line 8"), 21);
        assert_eq!(assert_exact_count(&Topo::line(8), &caps, 4, "line 8 from the middle"), 21);
        assert_eq!(assert_exact_count(&Topo::star(8), &caps, 0, "star 8 from the hub"), 21);
        assert_eq!(assert_exact_count(&Topo::star(8), &caps, 5, "star 8 from a leaf"), 21);
        // Graphs: 2|E| + N - 1.
        assert_eq!(assert_exact_count(&Topo::ring(8), &caps, 3, "ring 8"), 23);
        assert_eq!(assert_exact_count(&Topo::grid(4, 3), &caps, 0, "grid 4x3"), 45);
        assert_eq!(assert_exact_count(&Topo::complete(6), &caps, 2, "complete 6"), 35);
        let caps: Vec<u64> = (0..100).map(|i| (i * 7919 % 101) as u64).collect();
        assert_eq!(assert_exact_count(&Topo::line(100), &caps, 0, "line 100"), 297);
        assert_eq!(assert_exact_count(&Topo::star(100), &caps, 0, "star 100"), 297);
        assert_eq!(assert_exact_count(&Topo::ring(100), &caps, 0, "ring 100"), 299);
        assert_eq!(assert_exact_count(&Topo::grid(10, 10), &caps, 55, "grid 10x10"), 459);
        assert_eq!(assert_exact_count(&Topo::complete(20), &caps, 0, "complete 20"), 399);
        for seed in seeds(0..10) {
            let (mut rng, n, topo, caps) = random_case(seed, 2..30, 2);
            let src = rng.gen_range(0..n);
            assert_exact_count(&topo, &caps, src, &format!("random seed {seed}"));
        }
    }

    /// Every node starts at once: no exact formula (it depends on timing), but one leader,
    /// and the counts are printed for docs/results/elections.md.
    #[test]
    fn echo_all_start_at_once_counts() {
        let caps: Vec<u64> = (0..100).map(|i| (i * 7919 % 101) as u64).collect();
        let topos = [
            ("line 100", Topo::line(100)),
            ("ring 100", Topo::ring(100)),
            ("star 100", Topo::star(100)),
            ("grid 10x10", Topo::grid(10, 10)),
            ("complete 20", Topo::complete(20)),
        ];
        for (name, topo) in topos {
            let mut net = build(&topo, &caps, cfg(0));
            net.sent.clear();
            net.start_all();
            net.run();
            check_agreement(&net, &topo, name);
            let (n, e) = (topo.n as u64, topo.edges.len() as u64);
            assert!(net.total_sent() >= 2 * e + n - 1, "{name}");
            println!(
                "| {name} (all start) | {n} | {e} | {} | {} | {} | {} | {} |",
                net.sent_of("EchoElection"),
                net.sent_of("EchoAck"),
                net.sent_of("EchoLeader"),
                net.total_sent(),
                2 * e + n - 1
            );
        }
    }

    #[test]
    fn echo_best_capacity_wins_on_every_topology() {
        for seed in seeds(0..20) {
            println!("PEERAGE_SEED={seed}");
            let mut rng = StdRng::seed_from_u64(seed);
            let n = rng.gen_range(2..40);
            let topos = [
                Topo::line(n),
                Topo::ring(n.max(3)),
                Topo::star(n),
                Topo::grid(n.div_ceil(4).max(1), 4),
                Topo::random(n, n / 2, &mut rng),
            ];
            for (k, topo) in topos.iter().enumerate() {
                let caps = random_caps(topo.n, &mut rng);
                let mut net = build(topo, &caps, cfg(0));
                net.start_at(net.now, rng.gen_range(0..topo.n));
                net.run();
                check_agreement(&net, topo, &format!("seed {seed} topology {k}"));
                // The capacity decides, not the id.
                let best = (0..topo.n).max_by_key(|&i| (caps[i], i)).unwrap();
                assert_eq!(net.process(0).leader(), Some(net.id(best)));
            }
        }
    }

    #[test]
    fn echo_concurrent_elections_end_with_one_leader() {
        for seed in seeds(0..20) {
            let (mut rng, n, topo, caps) = random_case(seed, 3..40, 1);
            let mut net = build(&topo, &caps, cfg(0));
            if seed % 2 == 0 {
                net.start_all();
            } else {
                // A few sources, at the same time or staggered by less than an election.
                for _ in 0..rng.gen_range(2..6) {
                    let at = net.now + std::time::Duration::from_micros(rng.gen_range(0..3000));
                    net.start_at(at, rng.gen_range(0..n));
                }
            }
            net.run();
            check_agreement(&net, &topo, &format!("seed {seed}"));
            assert_eq!(net.rejected, 0);
        }
    }

    #[test]
    fn echo_partition_then_merge() {
        for seed in seeds(0..20) {
            let (mut rng, n, mut topo, caps) = random_case(seed, 4..40, 1);
            let mut net = build(&topo, &caps, cfg(0));
            net.start_at(net.now, rng.gen_range(0..n));
            net.run();
            check_agreement(&net, &topo, "before the partition");
            // Split the nodes in two random sides and cut every edge between them.
            let side: Vec<bool> = (0..n).map(|_| rng.gen_bool(0.5)).collect();
            let cut: Vec<(usize, usize)> = topo.edges.iter().copied().filter(|&(a, b)| side[a] != side[b]).collect();
            for &(a, b) in &cut {
                disconnect(&mut net, &mut topo, a, b);
            }
            net.run();
            assert!(topo.components(&alive(&net)).len() >= 2 || cut.is_empty());
            check_agreement(&net, &topo, &format!("seed {seed} partitioned"));
            for &(a, b) in &cut {
                connect(&mut net, &mut topo, a, b);
            }
            net.run();
            assert_eq!(topo.components(&alive(&net)).len(), 1);
            check_agreement(&net, &topo, &format!("seed {seed} merged"));
        }
    }

    #[test]
    fn echo_partition_of_a_line_keeps_the_leader_on_its_side() {
        // Line 0..9, capacities rising to node 9: cutting (4,5) leaves {5..9} with 9 (no
        // new election there) and {0..4} electing 4.
        let caps: Vec<u64> = (0..10).collect();
        let mut topo = Topo::line(10);
        let mut net = build(&topo, &caps, cfg(0));
        net.start_at(net.now, 0);
        net.run();
        check_agreement(&net, &topo, "line");
        net.started.iter_mut().for_each(|s| *s = 0);
        disconnect(&mut net, &mut topo, 4, 5);
        net.run();
        check_agreement(&net, &topo, "cut line");
        assert_eq!(net.process(0).leader(), Some(net.id(4)));
        assert_eq!(net.process(5).leader(), Some(net.id(9)));
        // Only node 4 (cut off from its next hop to the leader) started an election.
        assert_eq!(net.started, vec![0, 0, 0, 0, 1, 0, 0, 0, 0, 0]);
        // Losing a non-tree link of a ring changes nothing.
        let ring = Topo::ring(6);
        let mut net = build(&ring, &caps, cfg(0));
        net.start_at(net.now, 0);
        net.run();
        net.sent.clear();
        // A ring has exactly one edge outside the election tree (it carried crossing
        // elections); find it from the parents.
        let tree_edge = |net: &Net, a: usize, b: usize| {
            node(net, a).parent == Some(net.id(b)) || node(net, b).parent == Some(net.id(a))
        };
        let non_tree: Vec<(usize, usize)> =
            ring.edges.iter().copied().filter(|&(a, b)| !tree_edge(&net, a, b)).collect();
        assert_eq!(non_tree.len(), 1);
        let mut line = ring.clone();
        disconnect(&mut net, &mut line, non_tree[0].0, non_tree[0].1);
        net.run();
        assert_eq!(net.total_sent(), 0, "losing a non-tree link is free");
        check_agreement(&net, &line, "ring minus a non-tree link");
        // Cutting a tree edge of the ring instead: exactly one end was routed to the leader
        // through it, so exactly one election runs, over the remaining line (5 edges, 6
        // nodes): 2|E| + N - 1 = 15 messages.
        let mut net = build(&ring, &caps, cfg(0));
        net.start_at(net.now, 0);
        net.run();
        net.sent.clear();
        net.started.iter_mut().for_each(|s| *s = 0);
        let (a, b) = *ring.edges.iter().find(|&&(a, b)| tree_edge(&net, a, b)).unwrap();
        let mut line = ring.clone();
        disconnect(&mut net, &mut line, a, b);
        net.run();
        check_agreement(&net, &line, "ring minus a tree link");
        assert_eq!(net.started.iter().sum::<u64>(), 1);
        assert_eq!(net.total_sent(), 15);
    }

    /// Heartbeats every 100 ms (a follower elects after 300 ms without one); probes off.
    fn beat_cfg() -> ElectionConfig {
        ElectionConfig { echo_heartbeat_interval_ms: 100, ..cfg(0) }
    }

    /// Run `ms` more of virtual time (heartbeats never let the network go quiet).
    fn run_for(net: &mut Net, ms: u64) {
        let until = net.now + Duration::from_millis(ms);
        net.run_until_quiet(until);
        net.now = until;
    }

    #[test]
    fn echo_heartbeats_keep_the_leader_across_a_lost_link() {
        // Without heartbeats, losing a tree link of a ring costs an election (see
        // `echo_partition_of_a_line_keeps_the_leader_on_its_side`); with them, the beats reach
        // every node along the remaining path and nobody elects.
        let caps: Vec<u64> = (0..8).map(|i| (i * 5) % 8).collect();
        for cut in 0..8 {
            let mut topo = Topo::ring(8);
            let mut net = build(&topo, &caps, beat_cfg());
            net.start_at(net.now, 0);
            run_for(&mut net, 1_000);
            check_agreement(&net, &topo, "ring");
            let started = net.started.iter().sum::<u64>();
            let beats = net.sent_of("EchoHeartbeat");
            disconnect(&mut net, &mut topo, cut, (cut + 1) % 8);
            run_for(&mut net, 2_000);
            check_agreement(&net, &topo, &format!("ring cut at {cut}"));
            assert_eq!(net.started.iter().sum::<u64>(), started, "cut {cut}: no election");
            // About 20 beats in 2 s, each crossing the 7 links of the line once or twice.
            assert!(net.sent_of("EchoHeartbeat") - beats >= 20 * 7, "cut {cut}");
        }
    }

    #[test]
    fn echo_heartbeats_elect_again_only_where_the_leader_is_gone() {
        // Line 0..9, capacities rising to node 9: cutting (4,5) leaves {5..9} with 9 and no
        // election; {0..4} stops hearing beats and elects 4.
        let caps: Vec<u64> = (0..10).collect();
        let mut topo = Topo::line(10);
        let mut net = build(&topo, &caps, beat_cfg());
        net.start_at(net.now, 0);
        run_for(&mut net, 1_000);
        check_agreement(&net, &topo, "line");
        net.started.iter_mut().for_each(|s| *s = 0);
        disconnect(&mut net, &mut topo, 4, 5);
        // Within the timeout nodes 0..4 still name 9: the beats have not been missed yet.
        run_for(&mut net, 150);
        assert_eq!(net.process(0).leader(), Some(net.id(9)));
        run_for(&mut net, 2_000);
        check_agreement(&net, &topo, "cut line");
        assert_eq!(net.process(0).leader(), Some(net.id(4)));
        assert!(net.started[..5].iter().sum::<u64>() >= 1);
        assert_eq!(net.started[5..].iter().sum::<u64>(), 0);
    }

    #[test]
    fn echo_heartbeats_merge_components_without_an_election() {
        for seed in seeds(0..20) {
            let (mut rng, n, mut topo, caps) = random_case(seed, 4..40, 1);
            // Two sides, each elected on its own, then joined by one or more links.
            let side: Vec<bool> = (0..n).map(|_| rng.gen_bool(0.5)).collect();
            let cut: Vec<(usize, usize)> = topo.edges.iter().copied().filter(|&(a, b)| side[a] != side[b]).collect();
            for &(a, b) in &cut {
                assert!(topo.remove(a, b));
            }
            let mut net = build(&topo, &caps, beat_cfg());
            net.start_all();
            run_for(&mut net, 2_000);
            check_agreement(&net, &topo, &format!("seed {seed} apart"));
            let started = net.started.iter().sum::<u64>();
            for &(a, b) in &cut {
                connect(&mut net, &mut topo, a, b);
            }
            run_for(&mut net, 2_000);
            check_agreement(&net, &topo, &format!("seed {seed} merged"));
            assert_eq!(net.started.iter().sum::<u64>(), started, "seed {seed}: the merge elected");
        }
    }

    #[test]
    fn echo_heartbeats_partition_then_merge() {
        for seed in seeds(0..20) {
            let (mut rng, n, mut topo, caps) = random_case(seed, 4..40, 1);
            let mut net = build(&topo, &caps, beat_cfg());
            net.start_at(net.now, rng.gen_range(0..n));
            run_for(&mut net, 2_000);
            check_agreement(&net, &topo, "before the partition");
            let side: Vec<bool> = (0..n).map(|_| rng.gen_bool(0.5)).collect();
            let cut: Vec<(usize, usize)> = topo.edges.iter().copied().filter(|&(a, b)| side[a] != side[b]).collect();
            for &(a, b) in &cut {
                disconnect(&mut net, &mut topo, a, b);
            }
            run_for(&mut net, 3_000);
            check_agreement(&net, &topo, &format!("seed {seed} partitioned"));
            for &(a, b) in &cut {
                connect(&mut net, &mut topo, a, b);
            }
            run_for(&mut net, 3_000);
            check_agreement(&net, &topo, &format!("seed {seed} merged"));
        }
    }

    #[test]
    fn echo_leader_crash_triggers_reelection() {
        for seed in seeds(0..20) {
            let (mut rng, n, mut topo, caps) = random_case(seed, 3..40, 1);
            let mut net = build(&topo, &caps, cfg(0));
            net.start_at(net.now, rng.gen_range(0..n));
            net.run();
            check_agreement(&net, &topo, "before the crash");
            let leader = net.highest_alive().unwrap();
            crash(&mut net, &mut topo, leader);
            net.run();
            check_agreement(&net, &topo, &format!("seed {seed} after the leader crashed"));
            assert!(net.process((leader + 1) % n).leader() != Some(net.id(leader)));
            // It comes back with fresh state and its links: it is the best again.
            net.recover_at(net.now, leader);
            net.run();
            assert_eq!(net.process(leader).leader(), Some(net.id(leader)), "alone at first");
            let back: Vec<usize> = (0..n).filter(|&j| j != leader).filter(|_| rng.gen_bool(0.5)).collect();
            let back = if back.is_empty() { vec![(leader + 1) % n] } else { back };
            for &j in &back {
                connect(&mut net, &mut topo, leader, j);
            }
            net.run();
            check_agreement(&net, &topo, &format!("seed {seed} after recovery"));
        }
    }

    #[test]
    fn echo_link_known_late_by_one_end_needs_no_timer() {
        // Node 2 is cut off, then learns of its links again (and starts an election) 50 ms
        // before its neighbours learn of them (as with a failure detector's delay, or the
        // simulator's recovery): its election is refused at first.
        let caps: Vec<u64> = vec![4, 2, 9, 1, 3];
        let mut topo = Topo::ring(5);
        let mut net = build(&topo, &caps, cfg(0));
        net.start_at(net.now, 0);
        net.run();
        for j in [1, 3] {
            disconnect(&mut net, &mut topo, 2, j);
        }
        net.run();
        check_agreement(&net, &topo, "after the cut");
        let t0 = net.now;
        for j in [1, 3] {
            let id = net.id(j);
            net.input(2, Input::PeerUp(id));
            topo.add(2, j);
        }
        net.input(2, Input::Start);
        net.run_until_quiet(t0 + Duration::from_millis(50));
        assert!(net.rejected > 0, "the early election was refused");
        assert!(net.process(2).in_election());
        for j in [1, 3] {
            let id = net.id(2);
            net.input(j, Input::PeerUp(id));
        }
        net.run();
        check_agreement(&net, &topo, "after the late link reports");
        assert!(net.last_decision.since(t0) < cfg(0).echo_ack_timeout(), "no timer was needed");
    }

    #[test]
    fn echo_joining_node_is_integrated() {
        let caps = [3, 9, 4, 1, 7, 2];
        // Node 5 (capacity 2) and node 1 (capacity 9) join later.
        let mut topo = Topo::new(6);
        for (a, b) in [(0, 2), (2, 3), (3, 4), (4, 0)] {
            topo.add(a, b);
        }
        let mut net = build(&topo, &caps, cfg(0));
        net.start_at(net.now, 0);
        net.run();
        check_components(&net, &topo, "before the joins", |i| i == 0);
        assert_eq!(net.process(1).leader(), None, "never started, no neighbours");
        assert_eq!(net.process(0).leader(), Some(net.id(4)));
        // A weak newcomer that never started: it is pulled into an election and adopts 4.
        connect(&mut net, &mut topo, 5, 3);
        net.run();
        check_components(&net, &topo, "weak join", |i| i == 0);
        // A strong newcomer that started alone first: the component moves to it.
        net.start_at(net.now, 1);
        net.run();
        assert_eq!(net.process(1).state(), "Leader");
        connect(&mut net, &mut topo, 1, 5);
        net.run();
        check_agreement(&net, &topo, "strong join");
        assert_eq!(net.process(0).leader(), Some(net.id(1)));
    }

    #[test]
    fn echo_random_churn_reaches_agreement_at_quiescence() {
        for seed in seeds(0..30) {
            let (mut rng, n, mut topo, caps) = random_case(seed, 3..30, 1);
            let mut net = build(&topo, &caps, cfg(0));
            // Every process starts at boot (`Input::Start`), all at once.
            net.start_all();
            for round in 0..8 {
                // Several changes at once, some while elections are running.
                for _ in 0..rng.gen_range(1..5) {
                    let live: Vec<usize> = (0..n).filter(|&i| net.is_alive(i)).collect();
                    match rng.gen_range(0..6) {
                        0 | 1 if !topo.edges.is_empty() => {
                            let k = rng.gen_range(0..topo.edges.len());
                            let (a, b) = *topo.edges.iter().nth(k).unwrap();
                            disconnect(&mut net, &mut topo, a, b);
                        }
                        2 | 3 if live.len() >= 2 => {
                            let a = live[rng.gen_range(0..live.len())];
                            let b = live[rng.gen_range(0..live.len())];
                            if a != b && !topo.edges.contains(&(a.min(b), a.max(b))) {
                                connect(&mut net, &mut topo, a, b);
                            }
                        }
                        4 if live.len() > 2 => {
                            crash(&mut net, &mut topo, live[rng.gen_range(0..live.len())]);
                        }
                        _ => {
                            if let Some(d) = (0..n).find(|&i| !net.is_alive(i)) {
                                net.recover_at(net.now, d);
                                net.run_until_quiet(net.now);
                                let b = live[rng.gen_range(0..live.len())];
                                connect(&mut net, &mut topo, d, b);
                            } else {
                                net.start_at(net.now, live[rng.gen_range(0..live.len())]);
                            }
                        }
                    }
                    // Let some, not all, of the consequences happen.
                    let until = net.now + std::time::Duration::from_micros(rng.gen_range(0..4000));
                    net.run_until_quiet(until);
                }
                net.run();
                check_agreement(&net, &topo, &format!("seed {seed} round {round}"));
            }
        }
    }

    #[test]
    fn echo_silent_crash_during_an_election_is_survived() {
        // No PeerDown, no probes: the crash is noticed only through failed sends, which the
        // safety-net timers provoke (resent elections, resent acks).
        let mut crashed = 0;
        let seeds = seeds(0..30);
        for &seed in &seeds {
            let (mut rng, n, topo, caps) = random_case(seed, 3..30, 1);
            let mut net = build(&topo, &caps, cfg(0));
            net.sent.clear();
            if seed % 2 == 0 {
                net.start_all();
            } else {
                net.start_at(net.now, rng.gen_range(0..n));
            }
            let at = net.now + std::time::Duration::from_micros(rng.gen_range(0..6000));
            net.run_until_quiet(at);
            // Crash the best node half of the time, else a random one, if still electing.
            let c = if seed % 4 < 2 { net.highest_alive().unwrap() } else { rng.gen_range(0..n) };
            if !net.process(c).in_election() {
                continue;
            }
            crashed += 1;
            net.crash(c);
            net.run();
            let mut rest = topo.clone();
            rest.edges.retain(|&(a, b)| a != c && b != c);
            check_agreement(&net, &rest, &format!("seed {seed}, {c} crashed"));
        }
        assert!(seeds.len() == 1 || crashed >= seeds.len() / 3, "only {crashed} crashes");
    }

    /// Run until quiet with a random delay for every message (0.1 to 5 ms), so that messages
    /// overtake each other, also on the same link.
    fn run_jittered(net: &mut Net, rng: &mut StdRng) {
        loop {
            net.latency = std::time::Duration::from_micros(rng.gen_range(100..5_000));
            if !net.step() {
                break;
            }
        }
    }

    #[test]
    fn echo_random_delays_and_churn_reach_agreement() {
        for seed in seeds(0..30) {
            let (mut rng, n, mut topo, caps) = random_case(seed, 3..30, 2);
            let mut net = build(&topo, &caps, cfg(0));
            for _ in 0..rng.gen_range(1..4) {
                let at = net.now + std::time::Duration::from_micros(rng.gen_range(0..5_000));
                net.start_at(at, rng.gen_range(0..n));
            }
            run_jittered(&mut net, &mut rng);
            check_agreement(&net, &topo, &format!("seed {seed} start"));
            for round in 0..6 {
                for _ in 0..rng.gen_range(1..4) {
                    let live: Vec<usize> = (0..n).filter(|&i| net.is_alive(i)).collect();
                    match rng.gen_range(0..4) {
                        0 if !topo.edges.is_empty() => {
                            let k = rng.gen_range(0..topo.edges.len());
                            let (a, b) = *topo.edges.iter().nth(k).unwrap();
                            disconnect(&mut net, &mut topo, a, b);
                        }
                        1 if live.len() > 2 => {
                            crash(&mut net, &mut topo, live[rng.gen_range(0..live.len())]);
                        }
                        _ => {
                            let a = live[rng.gen_range(0..live.len())];
                            let b = live[rng.gen_range(0..live.len())];
                            if a != b && !topo.edges.contains(&(a.min(b), a.max(b))) {
                                connect(&mut net, &mut topo, a, b);
                            }
                        }
                    }
                    // Part of the consequences, then the next change.
                    for _ in 0..rng.gen_range(0..30) {
                        net.latency = std::time::Duration::from_micros(rng.gen_range(100..5_000));
                        net.step();
                    }
                }
                run_jittered(&mut net, &mut rng);
                check_agreement(&net, &topo, &format!("seed {seed} round {round}"));
            }
        }
    }

    #[test]
    fn echo_probes_with_random_churn() {
        // Probes on (every 50 ms): crashes are silent, link changes are reported.
        for seed in seeds(0..15) {
            let (mut rng, n, mut topo, caps) = random_case(seed, 3..25, 1);
            let ranks = (0..n).map(|i| Rank::new(caps[i], NodeId::from_u64(i as u64 + 1))).collect();
            let mut net = Net::with_ranks(ranks, cfg(50));
            for &(a, b) in &topo.edges.clone() {
                net.connect(a, b);
            }
            net.start_all();
            for round in 0..5 {
                let live: Vec<usize> = (0..n).filter(|&i| net.is_alive(i)).collect();
                match rng.gen_range(0..3) {
                    0 if !topo.edges.is_empty() => {
                        let k = rng.gen_range(0..topo.edges.len());
                        let (a, b) = *topo.edges.iter().nth(k).unwrap();
                        disconnect(&mut net, &mut topo, a, b);
                    }
                    1 if live.len() > 2 => {
                        let c = live[rng.gen_range(0..live.len())];
                        net.crash(c);
                        topo.edges.retain(|&(a, b)| a != c && b != c);
                    }
                    _ => {
                        let a = live[rng.gen_range(0..live.len())];
                        let b = live[rng.gen_range(0..live.len())];
                        if a != b && !topo.edges.contains(&(a.min(b), a.max(b))) {
                            connect(&mut net, &mut topo, a, b);
                        }
                    }
                }
                // Long enough for detection (one or two probe periods) and re-election.
                net.run_until_quiet(net.now + std::time::Duration::from_millis(2_000));
                check_agreement(&net, &topo, &format!("seed {seed} round {round}"));
            }
        }
    }

    #[test]
    fn echo_probes_detect_a_silent_crash_and_merges() {
        // Probes every 100 ms; the leader crashes without any PeerDown.
        let caps: Vec<u64> = vec![5, 1, 8, 2, 6, 3, 9, 4];
        let topo = Topo::grid(4, 2);
        let ranks = (0..8).map(|i| Rank::new(caps[i], NodeId::from_u64(i as u64 + 1))).collect();
        let mut net = Net::with_ranks(ranks, cfg(100));
        for &(a, b) in &topo.edges {
            net.connect(a, b);
        }
        net.start_at(net.now, 0);
        net.run_until_quiet(Time::from_millis(1_000));
        check_agreement(&net, &topo, "with probes");
        let leader = net.highest_alive().unwrap();
        assert_eq!(leader, 6);
        net.crash(leader);
        let mut rest = topo.clone();
        rest.edges.retain(|&(a, b)| a != leader && b != leader);
        net.run_until_quiet(net.now + std::time::Duration::from_millis(2_000));
        check_agreement(&net, &rest, "after a silent crash");
        assert_eq!(net.process(0).leader(), Some(net.id(2)));
        // Probes keep flowing: no quiescence with probes on, by design.
        let before = net.sent_of("EchoProbe");
        net.run_until_quiet(net.now + std::time::Duration::from_millis(500));
        assert!(net.sent_of("EchoProbe") > before);
    }

    #[test]
    fn echo_no_timers_or_messages_left_without_probes() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut topo = Topo::random(20, 15, &mut rng);
        let caps = random_caps(20, &mut rng);
        let mut net = build(&topo, &caps, cfg(0));
        net.start_all();
        net.run();
        // Cut a few links and crash the leader, then let it settle.
        let t0 = net.now;
        for _ in 0..3 {
            let (a, b) = *topo.edges.iter().next().unwrap();
            disconnect(&mut net, &mut topo, a, b);
        }
        let leader = net.highest_alive().unwrap();
        crash(&mut net, &mut topo, leader);
        net.run();
        check_agreement(&net, &topo, "after churn");
        // Quiescent: no event is left at all (no message, no armed timer), so waiting any
        // longer sends nothing.
        let sent = net.total_sent();
        assert_eq!(net.run_until_quiet(Time(u64::MAX)), 0);
        assert_eq!(net.total_sent(), sent);
        // The decisions came within a few message delays, not by a timer (2 s).
        assert!(net.last_decision > t0);
        assert!(net.last_decision.since(t0) < std::time::Duration::from_secs(1));
    }

    /// A tiny pump that loses messages (the testkit never does): every message is dropped
    /// with probability `loss` and delayed 0.1 to 3 ms otherwise; timers as in the testkit.
    struct Lossy {
        nodes: Vec<Echo>,
        index: std::collections::HashMap<NodeId, usize>,
        queue: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u64)>>,
        events: std::collections::HashMap<u64, (usize, Input, Option<u64>)>,
        armed: std::collections::HashMap<(usize, Timer), u64>,
        seq: u64,
        now: u64,
        loss: f64,
        rng: StdRng,
        dropped: u64,
    }

    impl Lossy {
        fn new(ranks: &[Rank], seed: u64) -> Lossy {
            let group = Arc::new(Membership::default());
            Lossy {
                nodes: ranks.iter().map(|r| Echo::new(*r, group.clone(), &cfg(0))).collect(),
                index: ranks.iter().enumerate().map(|(i, r)| (r.id, i)).collect(),
                queue: Default::default(),
                events: Default::default(),
                armed: Default::default(),
                seq: 0,
                now: 0,
                loss: 0.0,
                rng: StdRng::seed_from_u64(seed),
                dropped: 0,
            }
        }
        fn push(&mut self, after_us: u64, to: usize, input: Input, generation: Option<u64>) {
            self.seq += 1;
            self.queue.push(std::cmp::Reverse((self.now + after_us, self.seq)));
            self.events.insert(self.seq, (to, input, generation));
        }
        fn input(&mut self, i: usize, input: Input) {
            let mut effects = Vec::new();
            let mut rng = StdRng::seed_from_u64(self.seq);
            let mut ctx = Context::new(Time(self.now), &mut rng, &mut effects);
            self.nodes[i].handle(&mut ctx, input);
            let from = self.nodes[i].id();
            for e in effects {
                match e {
                    Effect::Send { to, msg } => {
                        let Some(&j) = self.index.get(&to) else {
                            continue;
                        };
                        if self.rng.gen_bool(self.loss) {
                            self.dropped += 1;
                        } else {
                            let d = self.rng.gen_range(100..3_000);
                            self.push(d, j, Input::Message { from, msg }, None);
                        }
                    }
                    Effect::SetTimer { timer, after } => {
                        self.seq += 1;
                        let g = self.seq;
                        self.armed.insert((i, timer), g);
                        self.push(after.as_micros() as u64, i, Input::Timer(timer), Some(g));
                    }
                    Effect::CancelTimer { timer } => {
                        self.armed.remove(&(i, timer));
                    }
                    _ => {}
                }
            }
        }
        fn run(&mut self) {
            while let Some(std::cmp::Reverse((at, seq))) = self.queue.pop() {
                self.now = at;
                let Some((to, input, generation)) = self.events.remove(&seq) else {
                    continue;
                };
                if let (Some(g), Input::Timer(t)) = (generation, &input) {
                    if self.armed.get(&(to, *t)) != Some(&g) {
                        continue;
                    }
                    self.armed.remove(&(to, *t));
                }
                self.input(to, input);
            }
        }
    }

    #[test]
    fn echo_lost_messages_are_recovered_by_the_timers() {
        let mut dropped = 0;
        for seed in seeds(0..40) {
            let (mut rng, n, topo, caps) = random_case(seed, 2..25, 1);
            let ranks: Vec<Rank> = (0..n).map(|i| Rank::new(caps[i], NodeId::from_u64(i as u64 + 1))).collect();
            let mut net = Lossy::new(&ranks, seed);
            for &(a, b) in &topo.edges {
                net.input(a, Input::PeerUp(ranks[b].id));
                net.input(b, Input::PeerUp(ranks[a].id));
            }
            net.run();
            // From here on, 10% of the messages are lost.
            net.loss = 0.1;
            for i in 0..n {
                if i == 0 || rng.gen_bool(0.2) {
                    net.input(i, Input::Start);
                }
            }
            net.run();
            dropped += net.dropped;
            let best = ranks.iter().max().unwrap().id;
            for (i, e) in net.nodes.iter().enumerate() {
                assert!(!e.in_election(), "seed {seed}: node {i} still {}", e.state());
                assert_eq!(e.leader(), Some(best), "seed {seed}: node {i}");
            }
        }
        assert!(seeds(0..40).len() == 1 || dropped > 100, "only {dropped} messages lost");
    }

    /// Drive one node by hand.
    fn sends(effects: &[Effect]) -> Vec<(NodeId, Message)> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Send { to, msg } => Some((*to, msg.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn echo_ack_timer_resends_then_gives_up() {
        let me = Rank::new(1, NodeId::from_u64(1));
        let (a, b) = (NodeId::from_u64(2), NodeId::from_u64(3));
        let mut e = Echo::new(me, Arc::new(Membership::default()), &cfg(0));
        feed(&mut e, Input::PeerUp(a));
        feed(&mut e, Input::PeerUp(b));
        let out = feed(&mut e, Input::Start);
        assert_eq!(sends(&out).len(), 2);
        assert_eq!(e.state(), "Candidate");
        // b answers, a stays silent (its ack was lost).
        let tag = e.tag().unwrap();
        feed(&mut e, Input::Message { from: b, msg: Message::EchoAck { tag, best: None } });
        assert!(e.in_election());
        for k in 1..=MAX_RETRIES {
            let out = feed(&mut e, Input::Timer(ACK_TIMER));
            assert_eq!(sends(&out), vec![(a, Message::EchoElection { tag })], "resend {k}");
            let backoff = out.iter().find_map(|x| match x {
                Effect::SetTimer { timer: ACK_TIMER, after } => Some(*after),
                _ => None,
            });
            assert_eq!(backoff, Some(cfg(0).echo_ack_timeout() * (1 << k)));
        }
        let out = feed(&mut e, Input::Timer(ACK_TIMER));
        // Gave up on a: the source decides on what it has (itself), announces to nobody (no
        // child) and sends a its result to compare.
        assert_eq!(sends(&out), vec![(a, Message::EchoReply { tag: Some(tag), leader: Some(me) })]);
        assert_eq!(e.leader(), Some(me.id));
        assert!(!e.in_election());
        // a's ack arrives late with a better rank: a becomes a child, gets the announcement,
        // and a new election starts.
        let better = Rank::new(9, a);
        let out = feed(&mut e, Input::Message { from: a, msg: Message::EchoAck { tag, best: Some(better) } });
        let s = sends(&out);
        assert!(s.contains(&(a, Message::EchoLeader { tag, leader: me })));
        assert!(out.contains(&Effect::ElectionStarted));
        assert!(e.tag().unwrap() > tag);
    }

    #[test]
    fn echo_stale_election_restarts_above_a_neighbours_tag() {
        // A recovered node (fresh state, round 0) told its neighbour before `Recover`, as the
        // simulator does: its round-1 election is ignored by a neighbour settled on round 5.
        let me = Rank::new(7, NodeId::from_u64(1));
        let a = NodeId::from_u64(2);
        let mut e = Echo::new(me, Arc::new(Membership::default()), &cfg(0));
        feed(&mut e, Input::PeerUp(a));
        feed(&mut e, Input::Recover);
        assert_eq!(e.tag().unwrap().round, 1);
        let theirs = ElectionTag { round: 5, source: Rank::new(3, NodeId::from_u64(9)) };
        let reply = Message::EchoReply { tag: Some(theirs), leader: Some(theirs.source) };
        let out = feed(&mut e, Input::Message { from: a, msg: reply });
        assert!(out.contains(&Effect::ElectionStarted));
        let tag = e.tag().unwrap();
        assert_eq!((tag.round, tag.source), (6, me));
        assert_eq!(sends(&out), vec![(a, Message::EchoElection { tag })]);
    }

    #[test]
    fn echo_extreme_timeouts_do_not_panic() {
        let me = Rank::new(1, NodeId::from_u64(1));
        let a = NodeId::from_u64(2);
        for ms in [0, 1, u64::MAX] {
            let c = ElectionConfig { echo_ack_timeout_ms: ms, ..cfg(0) };
            let mut e = Echo::new(me, Arc::new(Membership::default()), &c);
            feed(&mut e, Input::PeerUp(a));
            feed(&mut e, Input::Start);
            for _ in 0..=MAX_RETRIES {
                feed(&mut e, Input::Timer(ACK_TIMER));
            }
            assert_eq!(e.leader(), Some(me.id), "ack timeout {ms} ms");
        }
    }

    /// Feed one input at `ms` milliseconds.
    fn feed_at(e: &mut Echo, ms: u64, input: Input) -> Vec<Effect> {
        let mut rng = StdRng::seed_from_u64(0);
        let mut effects = Vec::new();
        let mut ctx = Context::new(Time::from_millis(ms), &mut rng, &mut effects);
        e.handle(&mut ctx, input);
        effects
    }

    #[test]
    fn echo_heartbeats_answer_an_election_for_a_live_leader() {
        let me = Rank::new(1, NodeId::from_u64(1));
        let (a, b) = (Rank::new(9, NodeId::from_u64(2)), NodeId::from_u64(3));
        let mut e = Echo::new(me, Arc::new(Membership::default()), &beat_cfg());
        feed_at(&mut e, 0, Input::PeerUp(a.id));
        feed_at(&mut e, 0, Input::PeerUp(b));
        feed_at(&mut e, 0, Input::Start);
        let tag = e.tag().unwrap();
        feed_at(&mut e, 1, Input::Message { from: a.id, msg: Message::EchoAck { tag, best: Some(a) } });
        feed_at(&mut e, 1, Input::Message { from: b, msg: Message::EchoAck { tag, best: None } });
        assert_eq!(e.leader(), Some(a.id));
        // A beat of a at 100 ms, forwarded to b.
        let beat = Message::EchoHeartbeat { tag: Some(tag), leader: a, seq: 1 };
        let out = feed_at(&mut e, 100, Input::Message { from: a.id, msg: beat.clone() });
        assert_eq!(sends(&out), vec![(b, beat)]);
        // b, cut off from its leader, elects: we answer for a, which beat 50 ms ago.
        let high = ElectionTag { round: 9, source: Rank::new(0, b) };
        let out = feed_at(&mut e, 150, Input::Message { from: b, msg: Message::EchoElection { tag: high } });
        assert_eq!(sends(&out), vec![(b, Message::EchoAck { tag: high, best: Some(a) })]);
        assert!(!e.in_election());
        // 200 ms without a beat (over 1.5 intervals): we join the next election instead.
        let higher = ElectionTag { round: 10, source: Rank::new(0, b) };
        let out = feed_at(&mut e, 300, Input::Message { from: b, msg: Message::EchoElection { tag: higher } });
        assert_eq!(sends(&out), vec![(a.id, Message::EchoElection { tag: higher })]);
        assert!(e.in_election());
    }

    #[test]
    fn echo_heartbeats_an_orphan_decides_for_its_subtree() {
        let me = Rank::new(1, NodeId::from_u64(1));
        let (p, c) = (NodeId::from_u64(2), Rank::new(5, NodeId::from_u64(3)));
        for beats in [true, false] {
            let cfg = if beats { beat_cfg() } else { cfg(0) };
            let mut e = Echo::new(me, Arc::new(Membership::default()), &cfg);
            feed(&mut e, Input::PeerUp(p));
            feed(&mut e, Input::PeerUp(c.id));
            let tag = ElectionTag { round: 3, source: Rank::new(0, p) };
            feed(&mut e, Input::Message { from: p, msg: Message::EchoElection { tag } });
            let out = feed(&mut e, Input::Message { from: c.id, msg: Message::EchoAck { tag, best: Some(c) } });
            assert_eq!(sends(&out), vec![(p, Message::EchoAck { tag, best: Some(c) })]);
            assert_eq!(e.state(), "Waiting");
            // The parent is lost before it announced.
            let out = feed(&mut e, Input::PeerDown(p));
            if beats {
                // The subtree's best is announced to it; no new election.
                assert!(!out.contains(&Effect::ElectionStarted));
                assert_eq!(sends(&out), vec![(c.id, Message::EchoLeader { tag, leader: c })]);
                assert_eq!(e.leader(), Some(c.id));
            } else {
                assert!(out.contains(&Effect::ElectionStarted));
            }
        }
    }

    #[test]
    fn echo_heartbeats_a_higher_neighbour_counts_as_answered() {
        // A node elects; its only neighbour shows (in its greeting) that it settled on a
        // higher election. Without heartbeats the node elects again above it; with them the
        // neighbour counts as answered and the node decides (the beats merge the leaders).
        let me = Rank::new(7, NodeId::from_u64(1));
        let a = NodeId::from_u64(2);
        for beats in [true, false] {
            let cfg = if beats { beat_cfg() } else { cfg(0) };
            let mut e = Echo::new(me, Arc::new(Membership::default()), &cfg);
            feed(&mut e, Input::PeerUp(a));
            feed(&mut e, Input::Start);
            let theirs = ElectionTag { round: 5, source: Rank::new(3, NodeId::from_u64(9)) };
            let reply = Message::EchoReply { tag: Some(theirs), leader: Some(theirs.source) };
            let out = feed(&mut e, Input::Message { from: a, msg: reply });
            assert_eq!(out.contains(&Effect::ElectionStarted), !beats);
            assert_eq!(e.in_election(), !beats);
            if beats {
                assert_eq!(e.leader(), Some(me.id));
            }
        }
    }

    #[test]
    fn echo_waiting_node_pulls_the_result_then_restarts() {
        let me = Rank::new(1, NodeId::from_u64(1));
        let p = NodeId::from_u64(2);
        let mut e = Echo::new(me, Arc::new(Membership::default()), &cfg(0));
        feed(&mut e, Input::PeerUp(p));
        let tag = ElectionTag { round: 4, source: Rank::new(0, p) };
        let out = feed(&mut e, Input::Message { from: p, msg: Message::EchoElection { tag } });
        // A leaf: acks at once with itself.
        assert_eq!(sends(&out), vec![(p, Message::EchoAck { tag, best: Some(me) })]);
        assert_eq!(e.state(), "Waiting");
        for _ in 0..MAX_RETRIES {
            let out = feed(&mut e, Input::Timer(LEADER_TIMER));
            assert_eq!(sends(&out), vec![(p, Message::EchoAck { tag, best: Some(me) })]);
        }
        let out = feed(&mut e, Input::Timer(LEADER_TIMER));
        assert!(out.contains(&Effect::ElectionStarted));
        assert_eq!(e.tag().unwrap().round, 5);
        assert_eq!(e.tag().unwrap().source, me);
    }

    #[test]
    fn echo_probe_detector_tolerates_one_miss_and_readmits() {
        let me = Rank::new(1, NodeId::from_u64(1));
        let (a, b) = (NodeId::from_u64(2), NodeId::from_u64(3));
        let mut e = Echo::new(me, Arc::new(Membership::default()), &cfg(100));
        let out = feed(&mut e, Input::PeerUp(a));
        assert!(out.contains(&Effect::SetTimer { timer: PROBE_TIMER, after: Duration::from_millis(100) }));
        feed(&mut e, Input::PeerUp(b));
        feed(&mut e, Input::Start);
        // Settle: both are leaves of our election, b is the best.
        let tag = e.tag().unwrap();
        feed(&mut e, Input::Message { from: a, msg: Message::EchoAck { tag, best: Some(Rank::new(0, a)) } });
        feed(&mut e, Input::Message { from: b, msg: Message::EchoAck { tag, best: Some(Rank::new(5, b)) } });
        assert_eq!(e.leader(), Some(b));
        let probe = |e: &mut Echo| sends(&feed(e, Input::Timer(PROBE_TIMER)));
        // Round 1: both probed. Only a answers.
        assert_eq!(probe(&mut e), vec![(a, Message::EchoProbe), (b, Message::EchoProbe)]);
        let reply = Message::EchoReply { tag: Some(tag), leader: Some(Rank::new(5, b)) };
        feed(&mut e, Input::Message { from: a, msg: reply.clone() });
        // Round 2: one miss is tolerated, b is probed again.
        assert_eq!(probe(&mut e), vec![(a, Message::EchoProbe), (b, Message::EchoProbe)]);
        feed(&mut e, Input::Message { from: a, msg: reply.clone() });
        assert_eq!(e.neighbours().count(), 2);
        // Round 3: b missed two probes: gone. It was the leader: a new election (to a only).
        let out = feed(&mut e, Input::Timer(PROBE_TIMER));
        assert!(out.contains(&Effect::ElectionStarted));
        assert_eq!(e.neighbours().copied().collect::<Vec<_>>(), vec![a]);
        let new_tag = e.tag().unwrap();
        assert!(sends(&out).contains(&(a, Message::EchoElection { tag: new_tag })));
        // The suspected b gets no election, only the probe that lets it come back.
        let to_b: Vec<Message> = sends(&out).into_iter().filter(|(to, _)| *to == b).map(|(_, m)| m).collect();
        assert_eq!(to_b, vec![Message::EchoProbe]);
        // b was only slow: its probe readmits it, and it is answered.
        let out = feed(&mut e, Input::Message { from: b, msg: Message::EchoProbe });
        assert_eq!(sends(&out), vec![(b, Message::EchoReply { tag: Some(new_tag), leader: None })]);
        assert_eq!(e.neighbours().count(), 2);
    }

    #[test]
    fn echo_rejects_bad_input_and_keeps_its_state() {
        let me = Rank::new(1, NodeId::from_u64(1));
        let (a, stranger) = (NodeId::from_u64(2), NodeId::from_u64(99));
        let mut e = Echo::new(me, Arc::new(Membership::default()), &cfg(0));
        feed(&mut e, Input::PeerUp(a));
        feed(&mut e, Input::Start);
        let before = format!("{e:?}");
        let tag = ElectionTag { round: 50, source: Rank::new(0, stranger) };
        let bad = [
            (a, Message::Election),
            (a, Message::CrElected { epoch: 1, leader: me }),
            (stranger, Message::EchoElection { tag }),
            (stranger, Message::EchoReply { tag: Some(tag), leader: None }),
            (me.id, Message::EchoProbe),
            (a, Message::EchoElection { tag: ElectionTag { round: MAX_ROUND + 1, source: me } }),
            (a, Message::EchoReply { tag: Some(ElectionTag { round: u64::MAX, source: me }), leader: None }),
        ];
        for (from, msg) in bad {
            let out = feed(&mut e, Input::Message { from, msg: msg.clone() });
            assert!(matches!(out.as_slice(), [Effect::Rejected { .. }]), "{msg:?} from {from:?} gave {out:?}");
        }
        assert_eq!(format!("{e:?}"), before);
        // Stale or mismatched messages of the right kind are ignored without harm.
        let low = ElectionTag { round: 0, source: Rank::new(0, a) };
        for msg in [
            Message::EchoAck { tag: low, best: Some(Rank::new(1000, a)) },
            Message::EchoLeader { tag: low, leader: Rank::new(1000, a) },
            Message::EchoElection { tag: low },
        ] {
            assert!(sends(&feed(&mut e, Input::Message { from: a, msg })).is_empty());
        }
        assert_eq!(format!("{e:?}"), before);
        // PeerDown of an unknown peer, Membership changes: nothing.
        assert!(feed(&mut e, Input::PeerDown(stranger)).is_empty());
        assert!(feed(&mut e, Input::Membership(Arc::new(Membership::default()))).is_empty());
        assert_eq!(format!("{e:?}"), before);
    }
}

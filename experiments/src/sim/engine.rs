//! The discrete-event engine: runs `overlay` election state machines, unchanged, over a
//! simulated network in virtual time.
//!
//! Determinism: one seeded RNG (`rand_chacha::ChaCha8Rng`) drives everything: the scenario's
//! draws (done by the caller before it hands the RNG over), latencies and per-message faults,
//! and the `Context::rng` the state machines see. Events at the same virtual time run in the
//! order they were scheduled ([`EventQueue`]), so a run is a pure function of its seed and
//! configuration.
//!
//! Representation, chosen for 100,000+ processes and millions of messages per second:
//! processes are `u32` indices; `NodeId -> index` reuses the group's own index
//! ([`Membership::position`]); an event is a few `u32`s; messages wait in a [`Slab`] while in
//! flight; the effect buffer is reused; every process's armed timers are a short vector of
//! `(Timer, generation)`.
//!
//! Semantics:
//! - Timers follow `overlay::driver`: arming replaces an armed timer of the same value,
//!   cancelling an unarmed timer is a no-op, a timer fires at most once per arming, and a
//!   crash drops all timers (the incarnation number changes; stale events check it).
//! - **Boot** ([`Sim::boot`]): every live process gets its group (`Input::Membership`), the
//!   input a node's election gets when its directory first holds the group, so a process that
//!   no message reaches still runs its algorithm's own timers (orphan T1), as a node does.
//! - Each process runs its election as a node does: the bully family inside the node's
//!   staggered detection (`overlay::detect::stagger`, which holds a follower's T1 expiry and its
//!   failure report of the coordinator back), the others bare ([`Process`]).
//! - A **crash** drops the state machine. A **recovery** builds a fresh `AnyElection`, tells
//!   an echo process its live, reachable neighbours (`PeerUp`), then gives it `Input::Recover`.
//! - A **frozen** process handles nothing: every event for it (deliveries, timers, failed
//!   sends, reports, starts) waits and runs, in arrival order, when it thaws. Nothing reports
//!   it (a stopped process's connections stay open). With `request_timeout` set, the sender
//!   of a message still waiting after that long gets `SendFailed` (the request got no
//!   response), and the message is still delivered at the thaw.
//! - The **failure detector** tells each observer the truth about each peer `detect_delay`
//!   after it changes, as a connection-level detector would: *peer reachable* means alive and
//!   on the observer's side of any partition (echo: and a topology neighbour). After a
//!   crash, a recovery, a partition or a heal, every affected (observer, peer) pair is checked
//!   `detect_delay` later against what the observer was last told, and `PeerDown`/`PeerUp` is
//!   reported if they differ; a recovery is also reported as `PeerUp` to observers still
//!   believing the peer up (a new connection). The complete-network algorithms assume all
//!   members up until told otherwise; echo knows only the links it was told of. So no report is
//!   lost, whatever the order of crashes, partitions and heals. Processes down from the start
//!   ([`Sim::down_from_start`]) are never reported: seed 000 says processes "do not know which
//!   ones are currently up"; they learn it from timeouts and failed sends.
//! - A message reaching a crashed process, a process on another side of a partition, or (for
//!   echo) a process that is not a topology neighbour fails: its sender, if still the same
//!   incarnation, gets `SendFailed` after the one-way latency back. With `connect_timeout`
//!   set, a send to a process that is unreachable when sent fails after that timeout instead
//!   (a dial to a dead host). Messages in flight when their sender crashes are still
//!   delivered. A message sent to a process before it crashed is never delivered to its
//!   recovered incarnation (the connection died with the crash).
//! - **Quiescence** is an empty queue (heartbeats and echo probes off);
//!   [`Sim::run_until`] also stops at a virtual time limit, and [`Sim::last_change`] tells
//!   when a process last decided or started an election (for runs with periodic traffic).

use crate::sim::faults::{Fault, FaultPlan, NetworkFaults};
use crate::sim::latency::LatencyModel;
use crate::sim::metrics::Metrics;
use crate::sim::queue::EventQueue;
use crate::sim::slab::Slab;
use crate::sim::topology::Topology;
use overlay::detect::stagger::{hold_for, Staggered};
use overlay::election::{Algorithm, AnyElection, ElectionConfig, Message};
use overlay::{Context, Effect, Election, Input, Membership, NodeId, Rank, Time, Timer};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::Arc;
use std::time::Duration;

/// What the engine needs besides the RNG.
pub struct SimSetup {
    /// Rank of every process; process `i` is `ranks[i]`.
    pub ranks: Vec<Rank>,
    pub election: ElectionConfig,
    pub latency: Box<dyn LatencyModel>,
    pub faults: NetworkFaults,
    /// Failure-detector delay.
    pub detect_delay: Duration,
    /// A send to a process unreachable when sent fails after this (`None`: after the
    /// one-way latency there and back, as a refused connection).
    pub connect_timeout: Option<Duration>,
    /// A message that has waited this long for a frozen process is reported to its sender
    /// as failed (a request that got no response); it is still delivered at the thaw.
    /// `None`: the sender hears nothing.
    pub request_timeout: Option<Duration>,
    /// The echo election's topology (required for echo, ignored otherwise).
    pub topology: Option<Topology>,
    /// Count serialised message bytes (costs one postcard size pass per message).
    pub count_bytes: bool,
}

/// A setup the engine cannot run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SimError {
    #[error("a simulation needs at least one process")]
    Empty,
    #[error("at most {max} processes are supported, got {got}")]
    TooMany { max: usize, got: usize },
    #[error("two processes share the id {0}")]
    DuplicateId(String),
    #[error("the echo election needs a topology")]
    EchoNeedsTopology,
    #[error("the topology has {topology} processes but the group has {group}")]
    TopologySize { topology: usize, group: usize },
    #[error("invalid election config: {0}")]
    Config(String),
    #[error("invalid network faults: {0}")]
    Faults(String),
    #[error("process {0} does not exist")]
    NoSuchProcess(u32),
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunEnd {
    /// The event queue is empty.
    Quiescent,
    /// The next event lies past the time limit.
    TimeLimit,
    /// The event budget ran out.
    EventLimit,
    /// Periodic traffic goes on, but no process decided or started an election for the
    /// caller's settle window (see `Scenario::run_to_end`).
    Settled,
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Start(u32),
    Deliver {
        to: u32,
        to_inc: u32,
        from: u32,
        from_inc: u32,
        slot: u32,
    },
    Failed {
        sender: u32,
        sender_inc: u32,
        dest: u32,
        slot: u32,
    },
    Timer {
        p: u32,
        inc: u32,
        gen: u32,
        timer: Timer,
    },
    Crash(u32),
    Recover(u32),
    Freeze(u32),
    Thaw(u32),
    Partition(u32),
    Heal,
    /// Check the pairs of `checks[k]` (see [`Check`]).
    Detect(u32),
    /// A detector report that waited for a frozen observer.
    Report {
        to: u32,
        inc: u32,
        peer: u32,
        up: bool,
    },
    /// A copy of a message waiting for frozen `dest`: its sender hears of the failure if
    /// `dest` is still frozen.
    RequestTimeout {
        sender: u32,
        sender_inc: u32,
        dest: u32,
        slot: u32,
    },
}

impl Event {
    /// The process an event is handled by (it waits while that process is frozen).
    fn target(&self) -> Option<u32> {
        match *self {
            Event::Start(i) => Some(i),
            Event::Deliver { to, .. } => Some(to),
            Event::Failed { sender, .. } => Some(sender),
            Event::Timer { p, .. } => Some(p),
            Event::Report { to, .. } => Some(to),
            Event::RequestTimeout { sender, .. } => Some(sender),
            _ => None,
        }
    }
}

/// What the failure detector re-checks `detect_delay` after a change.
#[derive(Debug, Clone, Default)]
struct Check {
    /// `(observer, peer)` pairs.
    pairs: Vec<(u32, u32)>,
    /// The change was a recovery: observers that believe the peer up hear of the new
    /// connection too (`PeerUp`).
    recovery: bool,
}

/// How process indices relate to positions in the group (its rank order).
enum Order {
    /// Process `i` is `group.ranks()[i]` (the usual case: callers number in rank order).
    Rank,
    /// Any other numbering: the ranks by process index, and position -> index.
    Permuted { ranks: Vec<Rank>, index_at: Vec<u32> },
}

/// The engine's record of one simulated process, apart from its state machine (kept in
/// `Sim::elections`, a separate array: these records are small and dense, so the liveness and
/// incarnation checks on every send and delivery stay in cache, away from the algorithms'
/// large inline state).
struct Proc {
    /// Armed timers and the generation of their arming.
    timers: Vec<(Timer, u32)>,
    next_gen: u32,
    /// Bumped at every crash; stale timers and failure reports carry the old value.
    incarnation: u32,
    /// The state machine exists (`Sim::elections[i].is_some()`).
    alive: bool,
    /// Time of this incarnation's last `Effect::Leader`.
    decided_at: Option<Time>,
}

/// The simulator.
pub struct Sim {
    now: Time,
    rng: ChaCha8Rng,
    cfg: ElectionConfig,
    group: Arc<Membership>,
    order: Order,
    procs: Vec<Proc>,
    /// The state machine of every live process (`None`: crashed), by process index.
    elections: Vec<Option<Process>>,
    queue: EventQueue<Event>,
    msgs: Slab<Message>,
    latency: Box<dyn LatencyModel>,
    faults: NetworkFaults,
    detect_delay: Duration,
    connect_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    topology: Option<Topology>,
    side: Vec<u16>,
    partitioned: bool,
    partitions: Vec<Vec<u16>>,
    /// Pending failure-detector checks, by `Event::Detect` index.
    checks: Vec<Check>,
    /// Per observer, the peers whose last report differs from the observer's default belief
    /// (complete networks: up until told otherwise; echo: no link until told of one),
    /// sorted. Only observers that have any are present.
    told: FxHashMap<u32, Vec<u32>>,
    /// Echo: a process knows only the links it was told of (others: every member is up until
    /// reported down).
    links_only: bool,
    /// Frozen processes and the events waiting for them.
    frozen: FxHashMap<u32, Vec<Event>>,
    metrics: Metrics,
    effects: Vec<Effect>,
    count_bytes: bool,
    bytes: u64,
    last_decision: Time,
    last_started: Time,
}

impl Sim {
    /// Build a simulator; every process starts alive, with fresh state, and idle.
    pub fn new(setup: SimSetup, rng: ChaCha8Rng) -> Result<Sim, SimError> {
        let n = setup.ranks.len();
        if n == 0 {
            return Err(SimError::Empty);
        }
        if n >= u32::MAX as usize {
            return Err(SimError::TooMany { max: u32::MAX as usize - 1, got: n });
        }
        setup.election.validate().map_err(|e| SimError::Config(e.to_string()))?;
        setup.faults.validate().map_err(|e| SimError::Faults(e.to_string()))?;
        let echo = setup.election.algorithm == Algorithm::Echo;
        if echo {
            match &setup.topology {
                None => return Err(SimError::EchoNeedsTopology),
                Some(t) if t.len() != n => return Err(SimError::TopologySize { topology: t.len(), group: n }),
                _ => {}
            }
        }
        let group = Arc::new(Membership::new(setup.ranks.iter().copied()));
        if group.len() != n {
            let mut seen = FxHashSet::default();
            let dup = setup.ranks.iter().find(|r| !seen.insert(r.id)).map(|r| r.id.to_string());
            return Err(SimError::DuplicateId(dup.unwrap_or_default()));
        }
        let order = if group.ranks() == setup.ranks.as_slice() {
            Order::Rank
        } else {
            let mut index_at = vec![0u32; n];
            for (i, r) in setup.ranks.iter().enumerate() {
                // Every rank is a member (same list, no duplicates), so `position` finds it.
                if let Some(p) = group.position(&r.id) {
                    index_at[p] = i as u32;
                }
            }
            Order::Permuted { ranks: setup.ranks.clone(), index_at }
        };
        let elections = setup.ranks.iter().map(|r| Some(Process::new(*r, &group, &setup.election))).collect();
        let procs = (0..n)
            .map(|_| Proc { timers: Vec::new(), next_gen: 0, incarnation: 0, alive: true, decided_at: None })
            .collect();
        Ok(Sim {
            now: Time::ZERO,
            rng,
            cfg: setup.election,
            group,
            order,
            procs,
            elections,
            queue: EventQueue::with_capacity(n.min(1 << 20)),
            // Messages in flight are about one per process in an election where everyone
            // initiates; reserve that much (capped) instead of growing by doubling.
            msgs: Slab::with_capacity(n.min(1 << 20)),
            latency: setup.latency,
            faults: setup.faults,
            detect_delay: setup.detect_delay,
            connect_timeout: setup.connect_timeout,
            request_timeout: setup.request_timeout,
            topology: if echo { setup.topology } else { None },
            side: vec![0; n],
            partitioned: false,
            partitions: Vec::new(),
            checks: Vec::new(),
            told: FxHashMap::default(),
            links_only: echo,
            frozen: FxHashMap::default(),
            metrics: Metrics::default(),
            effects: Vec::with_capacity(64),
            count_bytes: setup.count_bytes,
            bytes: 0,
            last_decision: Time::ZERO,
            last_started: Time::ZERO,
        })
    }

    // ----- set-up -----

    /// Process `i` is down from the start: no state, never reported to anyone.
    pub fn down_from_start(&mut self, i: u32) -> Result<(), SimError> {
        self.check(i)?;
        self.kill(i);
        Ok(())
    }

    /// Echo only: tell every live process its live neighbours (`PeerUp`), now. Call once,
    /// after [`Sim::down_from_start`] and before the first start.
    pub fn announce_topology(&mut self) {
        let Some(topo) = self.topology.take() else { return };
        for i in 0..self.procs.len() as u32 {
            if !self.is_alive(i) {
                continue;
            }
            for &j in topo.neighbours(i) {
                if self.is_alive(j) && self.same_side(i, j) {
                    self.metrics.peer_up_reports += 1;
                    self.set_told(i, j, true);
                    let id = self.id_of(j);
                    self.input(i, Input::PeerUp(id));
                }
            }
        }
        self.topology = Some(topo);
    }

    /// Every live process learns its group now (`Input::Membership`), as a node's election
    /// does when its member directory first holds the group, before any election starts
    /// there. Call once, after [`Sim::down_from_start`] and [`Sim::announce_topology`] and
    /// before the first start.
    ///
    /// Without it a process that no message, timer or report reaches handles no input at
    /// all, which no node does: a highest process cut off while the others' `Election`s to it
    /// fail, and healed before any detector report, would never arm its orphan T1 (the bully
    /// family's and the heartbeat wrapper's "no leader for T1: hold an election") and would
    /// stay leaderless under a lower coordinator whose heartbeats go only down.
    pub fn boot(&mut self) {
        for i in 0..self.procs.len() as u32 {
            if self.is_alive(i) {
                let group = self.group.clone();
                self.input(i, Input::Membership(group));
            }
        }
    }

    /// Process `i` gets `Input::Start` at `at` (a time in the past means now).
    pub fn start_at(&mut self, at: Time, i: u32) -> Result<(), SimError> {
        self.check(i)?;
        self.queue.push(at.max(self.now), Event::Start(i));
        Ok(())
    }

    /// Queue every fault of `plan` (times in the past mean now).
    pub fn schedule(&mut self, plan: FaultPlan) -> Result<(), SimError> {
        for (at, f) in plan.faults {
            let ev = match f {
                Fault::Crash(i) => {
                    self.check(i)?;
                    Event::Crash(i)
                }
                Fault::Recover(i) => {
                    self.check(i)?;
                    Event::Recover(i)
                }
                Fault::Freeze(i) => {
                    self.check(i)?;
                    Event::Freeze(i)
                }
                Fault::Thaw(i) => {
                    self.check(i)?;
                    Event::Thaw(i)
                }
                Fault::Partition(mut sides) => {
                    sides.resize(self.procs.len(), 0);
                    self.partitions.push(sides);
                    Event::Partition(self.partitions.len() as u32 - 1)
                }
                Fault::Heal => Event::Heal,
            };
            self.queue.push(at.max(self.now), ev);
        }
        Ok(())
    }

    fn check(&self, i: u32) -> Result<(), SimError> {
        if (i as usize) < self.procs.len() {
            Ok(())
        } else {
            Err(SimError::NoSuchProcess(i))
        }
    }

    // ----- running -----

    /// Run until the queue is empty, the next event is later than `limit`, or `max_events`
    /// events have run.
    pub fn run_until(&mut self, limit: Time, max_events: u64) -> RunEnd {
        let mut budget = max_events;
        loop {
            match self.queue.peek_time() {
                None => return RunEnd::Quiescent,
                Some(t) if t > limit => return RunEnd::TimeLimit,
                Some(_) => {}
            }
            if budget == 0 {
                return RunEnd::EventLimit;
            }
            budget -= 1;
            let q = self.queue.len();
            if q > self.metrics.peak_queue {
                self.metrics.peak_queue = q;
            }
            let Some((t, ev)) = self.queue.pop() else { return RunEnd::Quiescent };
            self.now = t;
            self.metrics.events += 1;
            self.dispatch(ev);
        }
    }

    fn dispatch(&mut self, ev: Event) {
        if !self.frozen.is_empty() {
            if let Some(held) = ev.target().and_then(|t| self.frozen.get_mut(&t)) {
                held.push(ev);
                if let (Event::Deliver { to, from, from_inc, slot, .. }, Some(rt)) = (ev, self.request_timeout) {
                    if let Some(copy) = self.msgs.get(slot).cloned() {
                        let slot = self.msgs.insert(copy);
                        let timeout = Event::RequestTimeout { sender: from, sender_inc: from_inc, dest: to, slot };
                        self.queue.push(self.now + rt, timeout);
                    }
                }
                return;
            }
        }
        match ev {
            Event::Start(i) => self.input(i, Input::Start),
            Event::Deliver { to, to_inc, from, from_inc, slot } => {
                let Some(msg) = self.msgs.take(slot) else { return };
                if self.is_incarnation(to, to_inc) && self.reachable(from, to) {
                    self.metrics.delivered += 1;
                    let from_id = self.id_of(from);
                    tracing::trace!(t = self.now.0, from, to, kind = msg.kind(), "deliver");
                    self.input(to, Input::Message { from: from_id, msg });
                } else {
                    self.metrics.failed += 1;
                    if self.is_incarnation(from, from_inc) {
                        let back = self.latency.delay(to, from, &mut self.rng);
                        let slot = self.msgs.insert(msg);
                        self.queue.push(
                            self.now + back,
                            Event::Failed { sender: from, sender_inc: from_inc, dest: to, slot },
                        );
                    }
                }
            }
            Event::Failed { sender, sender_inc, dest, slot } => {
                let Some(msg) = self.msgs.take(slot) else { return };
                if self.is_incarnation(sender, sender_inc) {
                    let to = self.id_of(dest);
                    self.input(sender, Input::SendFailed { to, msg });
                }
            }
            Event::Timer { p, inc, gen, timer } => {
                if !self.is_incarnation(p, inc) {
                    return;
                }
                let timers = &mut self.procs[p as usize].timers;
                if let Some(pos) = timers.iter().position(|&(t, g)| t == timer && g == gen) {
                    timers.swap_remove(pos);
                    self.metrics.timers_fired += 1;
                    self.input(p, Input::Timer(timer));
                }
            }
            Event::Crash(i) => self.crash(i),
            Event::Recover(i) => self.recover(i),
            Event::Freeze(i) => {
                if self.is_alive(i) && !self.frozen.contains_key(&i) {
                    tracing::debug!(t = self.now.0, process = i, "freeze");
                    self.metrics.freezes += 1;
                    self.frozen.insert(i, Vec::new());
                }
            }
            Event::Thaw(i) => {
                if let Some(held) = self.frozen.remove(&i) {
                    tracing::debug!(t = self.now.0, process = i, waiting = held.len(), "thaw");
                    for ev in held {
                        self.queue.push(self.now, ev);
                    }
                }
            }
            Event::Partition(k) => {
                let new = std::mem::take(&mut self.partitions[k as usize]);
                self.change_sides(new, true);
            }
            Event::Heal => {
                let n = self.procs.len();
                self.change_sides(vec![0; n], false);
            }
            Event::Detect(k) => {
                let check = std::mem::take(&mut self.checks[k as usize]);
                for (q, p) in check.pairs {
                    self.detect(q, p, check.recovery);
                }
            }
            Event::RequestTimeout { sender, sender_inc, dest, slot } => {
                let Some(msg) = self.msgs.take(slot) else { return };
                if self.is_frozen(dest) && self.is_incarnation(sender, sender_inc) {
                    let to = self.id_of(dest);
                    self.input(sender, Input::SendFailed { to, msg });
                }
            }
            Event::Report { to, inc, peer, up } => {
                if self.is_incarnation(to, inc) {
                    let id = self.id_of(peer);
                    self.input(to, if up { Input::PeerUp(id) } else { Input::PeerDown(id) });
                }
            }
        }
    }

    // ----- the failure detector -----

    /// What observer `q` was last told about `p`: up or down.
    fn told_up(&self, q: u32, p: u32) -> bool {
        let flipped = self.told.get(&q).is_some_and(|v| v.binary_search(&p).is_ok());
        let default_up = !self.links_only;
        default_up != flipped
    }

    fn set_told(&mut self, q: u32, p: u32, up: bool) {
        let flip = up == self.links_only;
        let v = self.told.entry(q).or_default();
        match (v.binary_search(&p), flip) {
            (Err(at), true) => v.insert(at, p),
            (Ok(at), false) => {
                v.remove(at);
            }
            _ => {}
        }
        if v.is_empty() {
            self.told.remove(&q);
        }
    }

    /// The truth the detector reports: `p` is alive and reachable from `q`.
    fn truth(&self, q: u32, p: u32) -> bool {
        self.is_alive(p) && self.reachable(q, p)
    }

    /// The observers of `p`: its neighbours (echo) or everyone else.
    fn observers(&self, p: u32) -> Vec<u32> {
        match &self.topology {
            Some(t) => t.neighbours(p).to_vec(),
            None => (0..self.procs.len() as u32).filter(|&q| q != p).collect(),
        }
    }

    /// Check `pairs` `detect_delay` from now.
    fn schedule_check(&mut self, pairs: Vec<(u32, u32)>, recovery: bool) {
        if pairs.is_empty() {
            return;
        }
        self.checks.push(Check { pairs, recovery });
        let k = self.checks.len() as u32 - 1;
        self.queue.push(self.now + self.detect_delay, Event::Detect(k));
    }

    /// Tell `q` the truth about `p` if it was told otherwise (or, after a recovery, of the new
    /// connection).
    fn detect(&mut self, q: u32, p: u32, recovery: bool) {
        if !self.is_alive(q) || q == p {
            return;
        }
        let up = self.truth(q, p);
        let was = self.told_up(q, p);
        if up == was && !(recovery && up) {
            return;
        }
        self.set_told(q, p, up);
        if up {
            self.metrics.peer_up_reports += 1;
        } else {
            self.metrics.peer_down_reports += 1;
        }
        if let Some(held) = self.frozen.get_mut(&q) {
            let inc = self.procs[q as usize].incarnation;
            held.push(Event::Report { to: q, inc, peer: p, up });
            return;
        }
        let id = self.id_of(p);
        self.input(q, if up { Input::PeerUp(id) } else { Input::PeerDown(id) });
    }

    fn change_sides(&mut self, new: Vec<u16>, partitioned: bool) {
        let old = std::mem::replace(&mut self.side, new);
        let was_partitioned = self.partitioned;
        self.partitioned = partitioned;
        let joined = |s: &[u16], on: bool, a: u32, b: u32| !on || s[a as usize] == s[b as usize];
        let mut pairs = Vec::new();
        let n = self.procs.len() as u32;
        for a in 0..n {
            let peers: Vec<u32> = match &self.topology {
                Some(t) => t.neighbours(a).to_vec(),
                None => (0..n).filter(|&b| b != a).collect(),
            };
            for b in peers {
                if joined(&old, was_partitioned, a, b) != joined(&self.side, partitioned, a, b) {
                    pairs.push((a, b));
                }
            }
        }
        self.schedule_check(pairs, false);
    }

    fn crash(&mut self, i: u32) {
        if !self.is_alive(i) {
            return;
        }
        tracing::debug!(t = self.now.0, process = i, "crash");
        self.kill(i);
        self.metrics.crashes += 1;
        if let Some(held) = self.frozen.remove(&i) {
            // What waited for it now meets a crashed process (messages fail, timers lapse).
            for ev in held {
                self.queue.push(self.now, ev);
            }
        }
        let pairs = self.observers(i).into_iter().map(|q| (q, i)).collect();
        self.schedule_check(pairs, false);
    }

    fn recover(&mut self, i: u32) {
        if self.is_alive(i) {
            return;
        }
        tracing::debug!(t = self.now.0, process = i, "recover");
        self.metrics.recoveries += 1;
        let fresh = Process::new(self.rank(i), &self.group, &self.cfg);
        self.elections[i as usize] = Some(fresh);
        let p = &mut self.procs[i as usize];
        p.alive = true;
        p.timers.clear();
        // A fresh state machine believes what a new one does.
        self.told.remove(&i);
        if let Some(t) = self.topology.take() {
            for &j in t.neighbours(i) {
                if self.is_alive(j) && self.same_side(i, j) {
                    self.metrics.peer_up_reports += 1;
                    self.set_told(i, j, true);
                    let id = self.id_of(j);
                    self.input(i, Input::PeerUp(id));
                }
            }
            self.topology = Some(t);
        }
        self.input(i, Input::Recover);
        let pairs = self.observers(i).into_iter().map(|q| (q, i)).collect();
        self.schedule_check(pairs, true);
    }

    /// Drop process `i`'s state machine and timers and start its next incarnation (returned).
    fn kill(&mut self, i: u32) -> u32 {
        self.elections[i as usize] = None;
        self.told.remove(&i);
        let p = &mut self.procs[i as usize];
        p.alive = false;
        p.timers.clear();
        p.incarnation += 1;
        p.decided_at = None;
        p.incarnation
    }

    /// Feed one input to process `i` now and carry out its effects.
    fn input(&mut self, i: u32, input: Input) {
        let Some(e) = self.elections[i as usize].as_mut() else { return };
        let mut effects = std::mem::take(&mut self.effects);
        {
            let mut ctx = Context::new(self.now, &mut self.rng, &mut effects);
            e.handle(&mut ctx, input);
        }
        // Effects are carried out in place, in order: a `Send`'s message is moved straight
        // out of the buffer (a unit variant stays behind until `clear`), instead of moving
        // each whole `Effect` out first (profiled: these copies were a visible share).
        for eff in effects.iter_mut() {
            self.apply(i, eff);
        }
        effects.clear();
        self.effects = effects;
    }

    fn apply(&mut self, i: u32, eff: &mut Effect) {
        match eff {
            Effect::Send { to, msg } => {
                let to = *to;
                let msg = std::mem::replace(msg, Message::Election);
                self.send(i, to, msg)
            }
            &mut Effect::SetTimer { timer, after } => {
                let p = &mut self.procs[i as usize];
                p.next_gen = p.next_gen.wrapping_add(1);
                let gen = p.next_gen;
                match p.timers.iter_mut().find(|(t, _)| *t == timer) {
                    Some(slot) => slot.1 = gen,
                    None => p.timers.push((timer, gen)),
                }
                let inc = p.incarnation;
                self.queue.push(self.now + after, Event::Timer { p: i, inc, gen, timer });
            }
            &mut Effect::CancelTimer { timer } => {
                self.procs[i as usize].timers.retain(|(t, _)| *t != timer);
            }
            &mut Effect::Leader(l) => {
                tracing::debug!(t = self.now.0, process = i, leader = %l.short(), "leader");
                self.metrics.decisions += 1;
                self.procs[i as usize].decided_at = Some(self.now);
                self.last_decision = self.now;
            }
            Effect::ElectionStarted => {
                self.metrics.elections_started += 1;
                self.last_started = self.now;
            }
            &mut Effect::Rejected { from, reason, .. } => {
                tracing::debug!(process = i, from = %from.short(), reason, "rejected");
                self.metrics.rejected += 1;
            }
        }
    }

    fn send(&mut self, i: u32, to: NodeId, msg: Message) {
        self.metrics.sent.add(msg.kind());
        if self.count_bytes {
            self.bytes += postcard::experimental::serialized_size(&msg).unwrap_or(0) as u64;
        }
        let inc = self.procs[i as usize].incarnation;
        let Some(j) = self.index_of(&to) else {
            // Not a simulated process: the connection is refused at once.
            self.metrics.unknown_destination += 1;
            let slot = self.msgs.insert(msg);
            self.queue.push(self.now, Event::Failed { sender: i, sender_inc: inc, dest: i, slot });
            return;
        };
        if let Some(ct) = self.connect_timeout {
            if !self.is_alive(j) || !self.reachable(i, j) {
                // A dial to a host that does not answer: fails after the connect timeout.
                self.metrics.failed += 1;
                let slot = self.msgs.insert(msg);
                self.queue.push(self.now + ct, Event::Failed { sender: i, sender_inc: inc, dest: j, slot });
                return;
            }
        }
        if self.faults.is_clean_at(self.now) {
            let d = self.latency.delay(i, j, &mut self.rng);
            let slot = self.msgs.insert(msg);
            let to_inc = self.procs[j as usize].incarnation;
            self.queue.push(self.now + d, Event::Deliver { to: j, to_inc, from: i, from_inc: inc, slot });
        } else {
            if self.faults.loss > 0.0 && self.rng.gen_bool(self.faults.loss) {
                self.metrics.lost += 1;
                return;
            }
            let copies = if self.faults.duplicate > 0.0 && self.rng.gen_bool(self.faults.duplicate) {
                self.metrics.duplicated += 1;
                2
            } else {
                1
            };
            let mut msg = Some(msg);
            for c in 0..copies {
                let m = if c + 1 == copies { msg.take() } else { msg.clone() };
                let Some(m) = m else { break };
                let mut d = self.latency.delay(i, j, &mut self.rng);
                if self.faults.reorder > 0.0 && self.rng.gen_bool(self.faults.reorder) {
                    self.metrics.reordered += 1;
                    let max = self.faults.reorder_delay.as_micros() as u64;
                    d += Duration::from_micros(self.rng.gen_range(0..=max));
                }
                let slot = self.msgs.insert(m);
                let to_inc = self.procs[j as usize].incarnation;
                self.queue.push(self.now + d, Event::Deliver { to: j, to_inc, from: i, from_inc: inc, slot });
            }
        }
        let f = self.msgs.len();
        if f > self.metrics.peak_in_flight {
            self.metrics.peak_in_flight = f;
        }
    }

    // ----- queries -----

    pub fn now(&self) -> Time {
        self.now
    }
    pub fn len(&self) -> usize {
        self.procs.len()
    }
    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }
    pub fn config(&self) -> &ElectionConfig {
        &self.cfg
    }
    #[inline]
    pub fn rank(&self, i: u32) -> Rank {
        self.ranks()[i as usize]
    }
    #[inline]
    fn id_of(&self, i: u32) -> NodeId {
        self.ranks()[i as usize].id
    }
    /// The ranks by process index.
    #[inline]
    pub fn ranks(&self) -> &[Rank] {
        match &self.order {
            Order::Rank => self.group.ranks(),
            Order::Permuted { ranks, .. } => ranks,
        }
    }
    /// Index of the process with id `id`.
    #[inline]
    pub fn index_of(&self, id: &NodeId) -> Option<u32> {
        let p = self.group.position(id)?;
        match &self.order {
            Order::Rank => Some(p as u32),
            Order::Permuted { index_at, .. } => index_at.get(p).copied(),
        }
    }
    #[inline]
    pub fn is_alive(&self, i: u32) -> bool {
        self.procs[i as usize].alive
    }
    fn is_incarnation(&self, i: u32, inc: u32) -> bool {
        let p = &self.procs[i as usize];
        p.alive && p.incarnation == inc
    }
    /// The state machine of a live process.
    pub fn process(&self, i: u32) -> Option<&AnyElection> {
        self.elections[i as usize].as_ref().map(Process::election)
    }
    /// When live process `i` last decided.
    pub fn decided_at(&self, i: u32) -> Option<Time> {
        self.procs[i as usize].decided_at
    }
    /// Partition side of `i` (0 when not partitioned).
    pub fn side(&self, i: u32) -> u16 {
        self.side[i as usize]
    }
    #[inline]
    fn same_side(&self, a: u32, b: u32) -> bool {
        !self.partitioned || self.side[a as usize] == self.side[b as usize]
    }
    /// Whether a message from `a` can reach `b` now (same side; for echo, neighbours).
    #[inline]
    pub fn reachable(&self, a: u32, b: u32) -> bool {
        self.same_side(a, b) && self.topology.as_ref().is_none_or(|t| t.has_edge(a, b))
    }
    /// The echo topology.
    pub fn topology(&self) -> Option<&Topology> {
        self.topology.as_ref()
    }
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
    /// Metrics with the byte count filled in.
    pub fn metrics_snapshot(&self) -> Metrics {
        let mut m = self.metrics.clone();
        m.sent_bytes = self.count_bytes.then_some(self.bytes);
        m
    }
    /// Time of the last `Effect::Leader` by any process.
    pub fn last_decision(&self) -> Time {
        self.last_decision
    }
    /// Time of the last leader decision or election start by any process.
    pub fn last_change(&self) -> Time {
        self.last_decision.max(self.last_started)
    }
    /// Whether any live process is in an unfinished election.
    pub fn any_in_election(&self) -> bool {
        self.elections.iter().flatten().any(|e| e.in_election())
    }
    /// Whether process `i` is frozen now.
    pub fn is_frozen(&self, i: u32) -> bool {
        self.frozen.contains_key(&i)
    }
    /// Events still queued.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// Heap bytes the engine uses per process beyond the algorithms' own state (the
    /// `AnyElection` values themselves and what they allocate are excluded): process records
    /// without their election, the group's ranks and id index, partition sides, timers and the echo
    /// topology. Queue and in-flight messages are reported separately (they scale with
    /// traffic, not processes).
    pub fn engine_bytes_per_process(&self) -> f64 {
        let n = self.procs.len().max(1) as f64;
        let proc_rec = std::mem::size_of::<Proc>();
        let timers: usize = self.procs.iter().map(|p| p.timers.capacity() * std::mem::size_of::<(Timer, u32)>()).sum();
        // The group's rank list and id index serve as the engine's own (counted here in
        // full, although the algorithms share the same copy), plus a permutation if any.
        let order = match &self.order {
            Order::Rank => 0,
            Order::Permuted { ranks, index_at } => {
                ranks.capacity() * std::mem::size_of::<Rank>() + index_at.capacity() * 4
            }
        };
        // The `Option<AnyElection>` slots themselves are the algorithms' inline state.
        let total = self.procs.capacity() * proc_rec
            + timers
            + self.group.heap_bytes()
            + order
            + self.side.capacity() * 2
            + self.topology.as_ref().map_or(0, |t| t.heap_bytes());
        total as f64 / n
    }

    /// Size of one process's election slot (the algorithms' inline state).
    pub fn election_inline_bytes() -> usize {
        std::mem::size_of::<Process>()
    }
}

/// One process's election as a node runs it: the bully family inside
/// `overlay::detect::stagger` (boxed, so that the other algorithms, which run at 10^5-10^6
/// processes, keep their inline size), the others bare.
// The bare variant is the large one on purpose: it is what 10^5-10^6 processes hold.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Process {
    Bare(AnyElection),
    Staggered(Box<Staggered<AnyElection>>),
}

impl Process {
    fn new(me: Rank, group: &Arc<Membership>, cfg: &ElectionConfig) -> Process {
        let e = AnyElection::new(me, group.clone(), cfg);
        match hold_for(cfg) {
            Some(hold) => Process::Staggered(Box::new(Staggered::new(e, me, group.clone(), Some(hold)))),
            None => Process::Bare(e),
        }
    }

    fn election(&self) -> &AnyElection {
        match self {
            Process::Bare(e) => e,
            Process::Staggered(s) => s.inner(),
        }
    }

    fn handle(&mut self, ctx: &mut Context<'_>, input: Input) {
        match self {
            Process::Bare(e) => e.handle(ctx, input),
            Process::Staggered(s) => s.handle(ctx, input),
        }
    }

    fn in_election(&self) -> bool {
        self.election().in_election()
    }
}

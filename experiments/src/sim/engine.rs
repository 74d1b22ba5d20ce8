//! The discrete-event engine: runs `overlay` election state machines, unchanged, over a
//! simulated network in virtual time.
//!
//! Determinism: one seeded RNG (`rand_chacha::ChaCha8Rng`, the fast 8-round ChaCha) drives
//! everything: the scenario's draws (ranks, topology, fault plan; done by the caller before it
//! hands the RNG over), latencies and per-message faults, and the `Context::rng` the state
//! machines see. Events at the same virtual time run in the order they were scheduled
//! ([`EventQueue`]), so a run is a pure function of its seed and configuration.
//!
//! Representation, chosen for 100,000+ processes and millions of messages per second:
//! processes are `u32` indices; `NodeId -> index` reuses the group's own index
//! ([`Membership::position`]; no second hash table), since callers number processes in rank
//! order (a permutation is kept otherwise); an event is a few `u32`s
//! (about 24 bytes; 32 with its time in the queue); messages wait in a [`Slab`] while in flight, so a
//! send allocates nothing beyond the message the state machine built; the effect buffer is
//! reused; every process's armed timers are a short vector of `(Timer, generation)`.
//!
//! Semantics (the brief's, written down where it left room):
//! - Timers follow `overlay::driver`: arming replaces an armed timer of the same value
//!   (a newer generation; the old queue entry is ignored when it pops), cancelling an unarmed
//!   timer is a no-op, a timer fires at most once per arming, and a crash drops all timers
//!   (the process's incarnation number changes, and stale events check it).
//! - A **crash** drops the state machine. A **recovery** builds a fresh `AnyElection`, tells
//!   an echo process its live, reachable neighbours (`PeerUp`), then gives it `Input::Recover`.
//! - The **failure detector** reports a crash as `PeerDown(crashed)` after `detect_delay` to
//!   every live process on the same side of any partition (echo: only to the crashed
//!   process's topology neighbours), unless the process recovered meanwhile; a recovery is
//!   reported as `PeerUp` the same way (`report_recoveries`). Processes that are down from the
//!   start ([`Sim::down_from_start`]) are never reported: seed 000 says processes "do not know
//!   which ones are currently up"; they learn it from timeouts and failed sends.
//! - A message reaching a crashed process, a process on another side of a partition, or (for
//!   echo) a process that is not a topology neighbour fails: its sender, if still the same
//!   incarnation, gets `SendFailed` after the one-way latency back. Messages already in
//!   flight when their sender crashes are still delivered. Links behave like connections
//!   (libp2p runs over TCP/QUIC): a message sent to a process before it crashed is never
//!   delivered to its recovered incarnation (the connection died with the crash); it fails
//!   like a message to a crashed process.
//! - A **partition** cuts traffic between sides. For echo, each topology edge that the
//!   partition cuts (or a heal restores) is reported as `PeerDown` (`PeerUp`) to both live
//!   ends after `detect_delay`, if still true then.
//! - **Quiescence** is an empty queue (use `alive_interval_ms = 0`, so no heartbeats, and
//!   `echo_probe_interval_ms = 0`); [`Sim::run_until`] also stops at a virtual time limit.

use crate::sim::faults::{Fault, FaultPlan, NetworkFaults};
use crate::sim::latency::LatencyModel;
use crate::sim::metrics::Metrics;
use crate::sim::queue::EventQueue;
use crate::sim::slab::Slab;
use crate::sim::topology::Topology;
use overlay::election::{Algorithm, AnyElection, ElectionConfig, Message};
use overlay::{Context, Effect, Election, Input, Membership, NodeId, Rank, Time, Timer};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashSet;
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
    /// Report recoveries as `PeerUp` (see the module doc).
    pub report_recoveries: bool,
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
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Start(u32),
    Deliver { to: u32, to_inc: u32, from: u32, from_inc: u32, slot: u32 },
    Failed { sender: u32, sender_inc: u32, dest: u32, slot: u32 },
    Timer { p: u32, inc: u32, gen: u32, timer: Timer },
    Crash(u32),
    Recover(u32),
    DetectDown { peer: u32, inc: u32 },
    DetectUp { peer: u32, inc: u32 },
    Partition(u32),
    Heal,
    LinkReports(u32),
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
    elections: Vec<Option<AnyElection>>,
    queue: EventQueue<Event>,
    msgs: Slab<Message>,
    latency: Box<dyn LatencyModel>,
    faults: NetworkFaults,
    detect_delay: Duration,
    report_recoveries: bool,
    topology: Option<Topology>,
    side: Vec<u16>,
    partitioned: bool,
    partitions: Vec<Vec<u16>>,
    link_reports: Vec<Vec<(u32, u32, bool)>>,
    metrics: Metrics,
    effects: Vec<Effect>,
    count_bytes: bool,
    bytes: u64,
    last_decision: Time,
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
        let elections =
            setup.ranks.iter().map(|r| Some(AnyElection::new(*r, group.clone(), &setup.election))).collect();
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
            report_recoveries: setup.report_recoveries,
            topology: if echo { setup.topology } else { None },
            side: vec![0; n],
            partitioned: false,
            partitions: Vec::new(),
            link_reports: Vec::new(),
            metrics: Metrics::default(),
            effects: Vec::with_capacity(64),
            count_bytes: setup.count_bytes,
            bytes: 0,
            last_decision: Time::ZERO,
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
                    let id = self.id_of(j);
                    self.input(i, Input::PeerUp(id));
                }
            }
        }
        self.topology = Some(topo);
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
            Event::DetectDown { peer, inc } => {
                let p = &self.procs[peer as usize];
                if p.alive || p.incarnation != inc {
                    return;
                }
                let id = self.id_of(peer);
                self.report_all(peer, Input::PeerDown(id));
            }
            Event::DetectUp { peer, inc } => {
                if !self.is_incarnation(peer, inc) {
                    return;
                }
                let id = self.id_of(peer);
                self.report_all(peer, Input::PeerUp(id));
            }
            Event::Partition(k) => {
                let new = std::mem::take(&mut self.partitions[k as usize]);
                self.change_sides(new, true);
            }
            Event::Heal => {
                let n = self.procs.len();
                self.change_sides(vec![0; n], false);
            }
            Event::LinkReports(k) => {
                let list = std::mem::take(&mut self.link_reports[k as usize]);
                for (a, b, up) in list {
                    for (x, y) in [(a, b), (b, a)] {
                        if !self.is_alive(x) {
                            continue;
                        }
                        let still = self.same_side(x, y);
                        let id = self.id_of(y);
                        if up && still && self.is_alive(y) {
                            self.metrics.peer_up_reports += 1;
                            self.input(x, Input::PeerUp(id));
                        } else if !up && !still {
                            self.metrics.peer_down_reports += 1;
                            self.input(x, Input::PeerDown(id));
                        }
                    }
                }
            }
        }
    }

    /// Give `input` to every live process that should hear about `peer` (echo: its
    /// neighbours; others: everyone), on the same side, except `peer` itself.
    fn report_all(&mut self, peer: u32, input: Input) {
        let up = matches!(input, Input::PeerUp(_));
        if up && !self.report_recoveries {
            return;
        }
        let targets: Vec<u32> = match &self.topology {
            Some(t) => t.neighbours(peer).to_vec(),
            None => (0..self.procs.len() as u32).collect(),
        };
        for q in targets {
            if q != peer && self.is_alive(q) && self.same_side(q, peer) {
                if up {
                    self.metrics.peer_up_reports += 1;
                } else {
                    self.metrics.peer_down_reports += 1;
                }
                self.input(q, input.clone());
            }
        }
    }

    fn change_sides(&mut self, new: Vec<u16>, partitioned: bool) {
        let old = std::mem::replace(&mut self.side, new);
        self.partitioned = partitioned;
        if let Some(t) = &self.topology {
            let mut changes = Vec::new();
            for a in 0..t.len() as u32 {
                for &b in t.neighbours(a) {
                    if b <= a {
                        continue;
                    }
                    let before = old[a as usize] == old[b as usize];
                    let after = self.side[a as usize] == self.side[b as usize];
                    if before != after {
                        changes.push((a, b, after));
                    }
                }
            }
            if !changes.is_empty() {
                self.link_reports.push(changes);
                let k = self.link_reports.len() as u32 - 1;
                self.queue.push(self.now + self.detect_delay, Event::LinkReports(k));
            }
        }
    }

    fn crash(&mut self, i: u32) {
        if !self.is_alive(i) {
            return;
        }
        tracing::debug!(t = self.now.0, process = i, "crash");
        let inc = self.kill(i);
        self.metrics.crashes += 1;
        self.queue.push(self.now + self.detect_delay, Event::DetectDown { peer: i, inc });
    }

    fn recover(&mut self, i: u32) {
        if self.is_alive(i) {
            return;
        }
        tracing::debug!(t = self.now.0, process = i, "recover");
        self.metrics.recoveries += 1;
        let fresh = AnyElection::new(self.rank(i), self.group.clone(), &self.cfg);
        self.elections[i as usize] = Some(fresh);
        let p = &mut self.procs[i as usize];
        p.alive = true;
        p.timers.clear();
        let inc = p.incarnation;
        if let Some(t) = self.topology.take() {
            for &j in t.neighbours(i) {
                if self.is_alive(j) && self.same_side(i, j) {
                    self.metrics.peer_up_reports += 1;
                    let id = self.id_of(j);
                    self.input(i, Input::PeerUp(id));
                }
            }
            self.topology = Some(t);
        }
        self.input(i, Input::Recover);
        self.queue.push(self.now + self.detect_delay, Event::DetectUp { peer: i, inc });
    }

    /// Drop process `i`'s state machine and timers and start its next incarnation (returned).
    fn kill(&mut self, i: u32) -> u32 {
        self.elections[i as usize] = None;
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
            Effect::ElectionStarted => self.metrics.elections_started += 1,
            &mut Effect::Rejected { from, reason } => {
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
        if self.faults.is_clean() {
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
        self.elections[i as usize].as_ref()
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

    /// Size of one `AnyElection` value (the algorithms' inline state).
    pub fn election_inline_bytes() -> usize {
        std::mem::size_of::<AnyElection>()
    }
}

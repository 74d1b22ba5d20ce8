//! A lock-step, deterministic message pump for exact unit tests of the election algorithms.
//!
//! This is not the simulator (that is `experiments::sim`, with latency models, loss, partitions
//! and 100,000+ processes). The testkit is the smallest harness that drives the real state
//! machines: every message takes exactly `latency`, a failed send is reported to its sender
//! after `latency`, and events at the same instant run in the order they were scheduled. That
//! makes message counts exact and reproducible, which is what the theory checks (Chang-Roberts
//! 2N / 3N-1, two ring laps, bully counts) need.
//!
//! Process `i` of [`Net::new`] has id `NodeId::from_u64(i + 1)` and priority 0, so rank order
//! is index order: process `n - 1` is the highest.
//!
//! [`scenarios`] holds the test scenarios the ring elections share (settled checks, crash
//! schedules, random fault schedules), so each algorithm's test of them is one call.
//! [`feed`] drives one lone process by one input, for single-step and bad-input tests.

pub mod scenarios;

use crate::driver::{Context, Effect, Election, Input, Timer};
use crate::election::{AnyElection, ElectionConfig};
use crate::id::{NodeId, Rank};
use crate::membership::Membership;
use crate::time::Time;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Deliver { to: usize, from: usize, msg_slot: usize },
    SendFailed { to: usize, dest: NodeId, msg_slot: usize },
    Timer { at: usize, timer: Timer, generation: u64, incarnation: u32 },
    Crash { at: usize },
    Recover { at: usize },
    Start { at: usize },
}

/// A deterministic network of election processes.
pub struct Net {
    pub cfg: ElectionConfig,
    pub group: Arc<Membership>,
    procs: Vec<AnyElection>,
    ranks: Vec<Rank>,
    index: HashMap<NodeId, usize>,
    alive: Vec<bool>,
    incarnation: Vec<u32>,
    timer_gen: HashMap<(usize, Timer), u64>,
    next_gen: u64,
    queue: BinaryHeap<Reverse<(Time, u64, Event)>>,
    seq: u64,
    msgs: Vec<Option<crate::election::Message>>,
    /// Virtual time now.
    pub now: Time,
    /// One-way delay of every message.
    pub latency: Duration,
    /// Whether a failure detector reports every crash to every live process as `PeerDown`,
    /// and every recovery (after the recovered process handled `Recover`) as `PeerUp`.
    pub detector: bool,
    rng: StdRng,
    /// Messages sent, by kind.
    pub sent: BTreeMap<&'static str, u64>,
    /// Messages refused by their receiver (`Effect::Rejected`).
    pub rejected: u64,
    /// Elections started (`Effect::ElectionStarted`), per process.
    pub started: Vec<u64>,
    /// Time of the last `Effect::Leader`.
    pub last_decision: Time,
    effects: Vec<Effect>,
}

impl Net {
    /// `n` processes, process `i` with id `from_u64(i + 1)` and priority 0.
    pub fn new(n: usize, cfg: ElectionConfig) -> Net {
        let ranks = (0..n).map(|i| Rank::new(0, NodeId::from_u64(i as u64 + 1))).collect();
        Net::with_ranks(ranks, cfg)
    }

    /// Processes with the given ranks (index = position in `ranks`).
    pub fn with_ranks(ranks: Vec<Rank>, cfg: ElectionConfig) -> Net {
        let group = Arc::new(Membership::new(ranks.iter().copied()));
        let procs = ranks.iter().map(|r| AnyElection::new(*r, group.clone(), &cfg)).collect();
        let index = ranks.iter().enumerate().map(|(i, r)| (r.id, i)).collect();
        let n = ranks.len();
        Net {
            cfg,
            group,
            procs,
            ranks,
            index,
            alive: vec![true; n],
            incarnation: vec![0; n],
            timer_gen: HashMap::new(),
            next_gen: 0,
            queue: BinaryHeap::new(),
            seq: 0,
            msgs: Vec::new(),
            now: Time::ZERO,
            latency: Duration::from_millis(1),
            detector: false,
            rng: StdRng::seed_from_u64(0),
            sent: BTreeMap::new(),
            rejected: 0,
            started: vec![0; n],
            last_decision: Time::ZERO,
            effects: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.procs.len()
    }
    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }
    pub fn id(&self, i: usize) -> NodeId {
        self.ranks[i].id
    }
    pub fn rank(&self, i: usize) -> Rank {
        self.ranks[i]
    }
    pub fn process(&self, i: usize) -> &AnyElection {
        &self.procs[i]
    }
    pub fn is_alive(&self, i: usize) -> bool {
        self.alive[i]
    }
    /// Total messages sent.
    pub fn total_sent(&self) -> u64 {
        self.sent.values().sum()
    }
    /// Messages of one kind sent.
    pub fn sent_of(&self, kind: &str) -> u64 {
        self.sent.get(kind).copied().unwrap_or(0)
    }
    /// The leader each process names (`None` for crashed or undecided processes).
    pub fn leaders(&self) -> Vec<Option<NodeId>> {
        (0..self.len()).map(|i| if self.alive[i] { self.procs[i].leader() } else { None }).collect()
    }
    /// The highest-ranked live process.
    pub fn highest_alive(&self) -> Option<usize> {
        (0..self.len()).filter(|&i| self.alive[i]).max_by_key(|&i| self.ranks[i])
    }
    /// True when every live process names the same leader, and it is `expected`.
    pub fn all_agree_on(&self, expected: NodeId) -> bool {
        (0..self.len()).filter(|&i| self.alive[i]).all(|i| self.procs[i].leader() == Some(expected))
    }

    fn push(&mut self, at: Time, ev: Event) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, ev)));
    }

    /// Process `i` starts (initiates an election) at time `at`.
    pub fn start_at(&mut self, at: Time, i: usize) {
        self.push(at, Event::Start { at: i });
    }
    /// Every process starts at time zero, in index order.
    pub fn start_all(&mut self) {
        for i in 0..self.len() {
            self.start_at(Time::ZERO, i);
        }
    }
    /// Process `i` crashes at `at` (loses its state and timers).
    pub fn crash_at(&mut self, at: Time, i: usize) {
        self.push(at, Event::Crash { at: i });
    }
    /// Crash process `i` now, before anything runs.
    pub fn crash(&mut self, i: usize) {
        self.do_crash(i);
    }
    /// Process `i` recovers at `at` with fresh state and receives `Input::Recover`.
    pub fn recover_at(&mut self, at: Time, i: usize) {
        self.push(at, Event::Recover { at: i });
    }
    /// Tell `i` that `j` is a neighbour (`PeerUp`), both ways, now (echo topologies).
    pub fn connect(&mut self, i: usize, j: usize) {
        let (a, b) = (self.id(i), self.id(j));
        self.input(i, Input::PeerUp(b));
        self.input(j, Input::PeerUp(a));
    }
    /// Tell `i` and `j` they are no longer neighbours (`PeerDown`), both ways, now.
    pub fn disconnect(&mut self, i: usize, j: usize) {
        let (a, b) = (self.id(i), self.id(j));
        self.input(i, Input::PeerDown(b));
        self.input(j, Input::PeerDown(a));
    }

    fn do_crash(&mut self, i: usize) {
        if !self.alive[i] {
            return;
        }
        self.alive[i] = false;
        self.incarnation[i] += 1;
        if self.detector {
            let id = self.id(i);
            for j in 0..self.len() {
                if self.alive[j] {
                    self.input(j, Input::PeerDown(id));
                }
            }
        }
    }

    /// Feed one input to process `i` now and carry out its effects.
    pub fn input(&mut self, i: usize, input: Input) {
        if !self.alive[i] {
            return;
        }
        let mut effects = std::mem::take(&mut self.effects);
        effects.clear();
        {
            let mut ctx = Context::new(self.now, &mut self.rng, &mut effects);
            self.procs[i].handle(&mut ctx, input);
        }
        for e in effects.drain(..) {
            match e {
                Effect::Send { to, msg } => {
                    *self.sent.entry(msg.kind()).or_insert(0) += 1;
                    let slot = self.msgs.len();
                    self.msgs.push(Some(msg));
                    let at = self.now + self.latency;
                    match self.index.get(&to).copied() {
                        Some(j) => self.push(at, Event::Deliver { to: j, from: i, msg_slot: slot }),
                        None => self.push(at, Event::SendFailed { to: i, dest: to, msg_slot: slot }),
                    }
                }
                Effect::SetTimer { timer, after } => {
                    self.next_gen += 1;
                    let generation = self.next_gen;
                    self.timer_gen.insert((i, timer), generation);
                    let incarnation = self.incarnation[i];
                    self.push(self.now + after, Event::Timer { at: i, timer, generation, incarnation });
                }
                Effect::CancelTimer { timer } => {
                    self.timer_gen.remove(&(i, timer));
                }
                Effect::Leader(_) => self.last_decision = self.now,
                Effect::ElectionStarted => self.started[i] += 1,
                Effect::Rejected { .. } => self.rejected += 1,
            }
        }
        self.effects = effects;
    }

    /// Run one event. Returns false when the queue is empty.
    pub fn step(&mut self) -> bool {
        let Some(Reverse((at, _, ev))) = self.queue.pop() else { return false };
        self.now = at;
        match ev {
            Event::Deliver { to, from, msg_slot } => {
                let Some(msg) = self.msgs[msg_slot].take() else { return true };
                if self.alive[to] {
                    let from_id = self.id(from);
                    self.input(to, Input::Message { from: from_id, msg });
                } else {
                    let slot = self.msgs.len();
                    self.msgs.push(Some(msg));
                    let dest = self.id(to);
                    self.push(self.now + self.latency, Event::SendFailed { to: from, dest, msg_slot: slot });
                }
            }
            Event::SendFailed { to, dest, msg_slot } => {
                let Some(msg) = self.msgs[msg_slot].take() else { return true };
                self.input(to, Input::SendFailed { to: dest, msg });
            }
            Event::Timer { at, timer, generation, incarnation } => {
                if self.incarnation[at] == incarnation && self.timer_gen.get(&(at, timer)) == Some(&generation) {
                    self.timer_gen.remove(&(at, timer));
                    self.input(at, Input::Timer(timer));
                }
            }
            Event::Crash { at } => self.do_crash(at),
            Event::Recover { at } => {
                if !self.alive[at] {
                    self.alive[at] = true;
                    self.procs[at] = AnyElection::new(self.ranks[at], self.group.clone(), &self.cfg);
                    self.input(at, Input::Recover);
                    if self.detector {
                        let id = self.id(at);
                        for j in 0..self.len() {
                            if j != at && self.alive[j] {
                                self.input(j, Input::PeerUp(id));
                            }
                        }
                    }
                }
            }
            Event::Start { at } => self.input(at, Input::Start),
        }
        true
    }

    /// Run until nothing is left to do, or until virtual time passes `limit`. Returns the
    /// number of events run.
    pub fn run_until_quiet(&mut self, limit: Time) -> u64 {
        let mut n = 0;
        while let Some(Reverse((at, _, _))) = self.queue.peek() {
            if *at > limit {
                break;
            }
            self.step();
            n += 1;
        }
        n
    }

    /// Run until quiet with a generous limit (one virtual hour).
    pub fn run(&mut self) -> u64 {
        self.run_until_quiet(Time::from_millis(3_600_000))
    }
}

/// Feeds one input to a lone process (no network) at time zero and returns the effects it
/// asked for: the harness of the single-step and bad-input tests. The RNG is seeded with 0.
pub fn feed<E: Election + ?Sized>(p: &mut E, input: Input) -> Vec<Effect> {
    let mut rng = StdRng::seed_from_u64(0);
    let mut effects = Vec::new();
    let mut ctx = Context::new(Time::ZERO, &mut rng, &mut effects);
    p.handle(&mut ctx, input);
    effects
}

//! The mobile network: a deterministic discrete-event driver of `overlay`'s echo election
//! (Vasudevan, Kurose and Towsley's) over nodes that move.
//!
//! The echo state machines run unchanged and sans-IO: the driver feeds them
//! `Input::Start`, `PeerUp`/`PeerDown` (from [`super::discovery`]'s hellos), `Message`,
//! `SendFailed` (from the radio's missing acknowledgements) and `Timer`, through a
//! [`Context`] carrying the virtual time and the run's RNG, and carries out their effects.
//! Events wait in the simulator's [`EventQueue`] (time, then push order) and messages in
//! flight in a [`Slab`], as in the fixed-topology engine; that engine is not reused because
//! its topology is fixed for a run.
//!
//! Every `tick` the driver moves every node to its position (the walkers of
//! [`super::waypoint`]), rebuilds the radio graph ([`super::radio::Graph`]), and if it
//! changed recomputes the ground truth: each node's component and its best-capacity node.
//! Then the nodes whose hello falls in this tick say hello and check their neighbours.
//!
//! A unicast frame is decided when it is sent, from the link's length then: its attempts,
//! airtime and whether any attempt got through ([`Radio::unicast`]). Each node sends one frame
//! at a time (a transmit queue: a frame starts when the node's previous one ended), so a node
//! flooding an election to ten neighbours takes ten frames' time. A delivered frame reaches
//! the receiver at the end of its airtime; a lost one comes back to the sender as
//! `SendFailed` then.
//!
//! Every node gets `Input::Start` at time 0 (it knows no neighbour yet, so it names itself
//! until hellos bring neighbours). Measurement ([`super::measure`]) covers `[warmup, warmup +
//! duration)`.
//!
//! Determinism: one `ChaCha8Rng` from the seed draws capacities, hello phases, every frame's
//! fate and the `Context` RNG; each walker has its own stream. Same setup, same seed: the
//! same run, event for event.

use super::discovery::{Discovery, Hellos, Report};
use super::measure::{Measure, NodeTotals, Status};
use super::radio::{Graph, Radio, AIRTIME};
use super::waypoint::{Point, Walker, Waypoint};
use crate::sim::metrics::KindCounter;
use crate::sim::queue::EventQueue;
use crate::sim::slab::Slab;
use overlay::election::echo::Echo;
use overlay::election::{Algorithm, ElectionConfig, Message};
use overlay::{Context, Effect, Election, Input, Membership, NodeId, Rank, Time, Timer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

/// Everything a run needs.
#[derive(Debug, Clone, Serialize)]
pub struct Setup {
    pub nodes: usize,
    pub waypoint: Waypoint,
    pub radio: Radio,
    pub hellos: Hellos,
    /// How often positions and the radio graph are updated.
    pub tick: Duration,
    /// The echo election's timings (its algorithm must be echo).
    pub election: ElectionConfig,
    /// Capacities are drawn uniformly from `0..capacities` (0: all equal, ids decide).
    pub capacities: u64,
    pub warmup: Duration,
    pub duration: Duration,
    pub seed: u64,
}

/// A setup the driver cannot run.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SetupError {
    #[error("a mobile network needs at least one node")]
    Empty,
    #[error("at most {max} nodes are supported, got {got}")]
    TooMany { max: usize, got: usize },
    #[error("the area must be positive and finite, got {0} x {1} m")]
    Area(f64, f64),
    #[error("the radio range must be positive and finite, got {0} m")]
    Range(f64),
    #[error("the speed must be finite and not negative, got {0} m/s")]
    Speed(f64),
    #[error("the edge loss must be a probability in [0, 1), got {0}")]
    EdgeLoss(f64),
    #[error("the tick must be at least 1 ms and at most the hello interval")]
    Tick,
    #[error("the hello interval must be at least 1 ms and allowed_loss at least 1")]
    Hellos,
    #[error("the measurement window must be longer than zero")]
    Window,
    #[error("the mobility driver runs the echo election, not {0}")]
    Algorithm(Algorithm),
    #[error("invalid election config: {0}")]
    Config(String),
}

impl Setup {
    pub fn validate(&self) -> Result<(), SetupError> {
        const MAX: usize = 1 << 24;
        if self.nodes == 0 {
            return Err(SetupError::Empty);
        }
        if self.nodes > MAX {
            return Err(SetupError::TooMany { max: MAX, got: self.nodes });
        }
        let w = &self.waypoint;
        if !(w.width.is_finite() && w.height.is_finite() && w.width > 0.0 && w.height > 0.0) {
            return Err(SetupError::Area(w.width, w.height));
        }
        if !(self.radio.range.is_finite() && self.radio.range > 0.0) {
            return Err(SetupError::Range(self.radio.range));
        }
        if !(w.speed.is_finite() && w.speed >= 0.0) {
            return Err(SetupError::Speed(w.speed));
        }
        if !(0.0..1.0).contains(&self.radio.edge_loss) {
            return Err(SetupError::EdgeLoss(self.radio.edge_loss));
        }
        if self.hellos.interval < Duration::from_millis(1) || self.hellos.allowed_loss == 0 {
            return Err(SetupError::Hellos);
        }
        if self.tick < Duration::from_millis(1) || self.tick > self.hellos.interval {
            return Err(SetupError::Tick);
        }
        if self.duration.is_zero() {
            return Err(SetupError::Window);
        }
        if self.election.algorithm != Algorithm::Echo {
            return Err(SetupError::Algorithm(self.election.algorithm));
        }
        self.election.validate().map_err(|e| SetupError::Config(e.to_string()))
    }
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Tick,
    Start(u32),
    Deliver { to: u32, from: u32, slot: u32 },
    Failed { sender: u32, to: u32, slot: u32 },
    Timer { p: u32, gen: u32, timer: Timer },
}

/// Counters of a whole run (over the measurement window, except `events`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunStats {
    /// Events handled (the whole run).
    pub events: u64,
    /// Unicast frames sent, and those no attempt delivered.
    pub frames: u64,
    pub frames_lost: u64,
    /// Messages the echo nodes refused.
    pub rejected: u64,
    /// Links that came up or went down in the radio graph.
    pub link_changes: u64,
    /// Reports given to the elections.
    pub peer_up: u64,
    pub peer_down: u64,
    /// Integral of the number of components over the window, per microsecond.
    pub components_us: f64,
    /// Election messages by kind.
    #[serde(skip)]
    pub sent: KindCounter,
    /// Elections started, by the kind of input that started them (`Timer`, `PeerDown`,
    /// `SendFailed`, `PeerUp`, `Start`, or a message kind).
    #[serde(skip)]
    pub started_by: KindCounter,
}

/// The simulated mobile network.
pub struct Manet {
    setup: Setup,
    now: Time,
    end: Time,
    rng: ChaCha8Rng,
    walkers: Vec<Walker>,
    pos: Vec<Point>,
    graph: Graph,
    /// Ground truth: component of each node, size and best rank of each component.
    comp: Vec<u32>,
    comp_size: Vec<u32>,
    comp_best: Vec<Rank>,
    last_tick: Time,
    ticks: u64,
    nodes: Vec<Echo>,
    ranks: Vec<Rank>,
    timers: Vec<Vec<(Timer, u32)>>,
    next_gen: Vec<u32>,
    /// When each node's transmit queue is free again.
    busy_until: Vec<Time>,
    queue: EventQueue<Event>,
    msgs: Slab<Message>,
    discovery: Discovery,
    reports: Vec<Report>,
    effects: Vec<Effect>,
    measure: Measure,
    stats: RunStats,
}

impl Manet {
    /// Build the network at time 0: nodes placed (after the walkers' burn-in), nothing
    /// known, every node's `Start` queued.
    pub fn new(setup: Setup) -> Result<Manet, SetupError> {
        setup.validate()?;
        let n = setup.nodes;
        let mut rng = ChaCha8Rng::seed_from_u64(setup.seed);
        let ranks: Vec<Rank> = (0..n)
            .map(|i| {
                let cap = if setup.capacities == 0 { 0 } else { rng.gen_range(0..setup.capacities) };
                Rank::new(cap, NodeId::from_u64(i as u64 + 1))
            })
            .collect();
        let discovery = Discovery::new(n, setup.hellos, setup.tick, &mut rng);
        let group = Arc::new(Membership::default());
        let nodes = ranks.iter().map(|r| Echo::new(*r, group.clone(), &setup.election)).collect();
        let walkers: Vec<Walker> = (0..n as u32).map(|i| Walker::new(&setup.waypoint, setup.seed, i)).collect();
        let from = setup.warmup.as_micros() as u64;
        let to = from + setup.duration.as_micros() as u64;
        let mut queue = EventQueue::new();
        for i in 0..n as u32 {
            queue.push(Time::ZERO, Event::Start(i));
        }
        queue.push(Time::ZERO, Event::Tick);
        Ok(Manet {
            now: Time::ZERO,
            end: Time(to),
            rng,
            pos: vec![Point::default(); n],
            walkers,
            graph: Graph::empty(n),
            comp: (0..n as u32).collect(),
            comp_size: vec![1; n],
            comp_best: ranks.clone(),
            last_tick: Time::ZERO,
            ticks: 0,
            nodes,
            ranks,
            timers: vec![Vec::new(); n],
            next_gen: vec![0; n],
            busy_until: vec![Time::ZERO; n],
            queue,
            msgs: Slab::new(),
            discovery,
            reports: Vec::new(),
            effects: Vec::with_capacity(64),
            measure: Measure::new(n, from, to),
            stats: RunStats::default(),
            setup,
        })
    }

    /// Node `i` gets `Input::Start` at `at` (a time in the past means now).
    pub fn start_at(&mut self, at: Time, i: u32) {
        if (i as usize) < self.nodes.len() {
            self.queue.push(at.max(self.now), Event::Start(i));
        }
    }

    /// Run to the end of the measurement window and close the books.
    pub fn run(&mut self) {
        self.run_until(self.end);
        self.finish();
    }

    /// Handle every event up to `limit` (at most the end of the window).
    pub fn run_until(&mut self, limit: Time) {
        let limit = limit.min(self.end);
        while let Some(t) = self.queue.peek_time() {
            if t > limit {
                break;
            }
            let Some((t, ev)) = self.queue.pop() else { break };
            self.now = t;
            self.stats.events += 1;
            self.dispatch(ev);
        }
        self.now = self.now.max(limit);
    }

    /// Credit every node's time up to now (the window's end, after [`Manet::run`]).
    pub fn finish(&mut self) {
        let now = self.now.as_micros();
        self.credit_topology(now);
        for i in 0..self.nodes.len() as u32 {
            let s = self.status(i);
            self.measure.touch(i, now, s);
        }
    }

    fn dispatch(&mut self, ev: Event) {
        match ev {
            Event::Tick => self.tick(),
            Event::Start(i) => self.input(i, Input::Start),
            Event::Deliver { to, from, slot } => {
                let Some(msg) = self.msgs.take(slot) else { return };
                // A frame heard is a sign of the link, as a hello is (RFC 3561, 6.9); the
                // MAC acknowledgement tells the sender the same.
                let now = self.now.as_micros();
                self.discovery.heard(to, from, now, &mut self.reports);
                self.discovery.heard(from, to, now, &mut self.reports);
                self.flush_reports();
                let from = self.id_of(from);
                self.input(to, Input::Message { from, msg });
            }
            Event::Failed { sender, to, slot } => {
                let Some(msg) = self.msgs.take(slot) else { return };
                let to = self.id_of(to);
                self.input(sender, Input::SendFailed { to, msg });
            }
            Event::Timer { p, gen, timer } => {
                let armed = &mut self.timers[p as usize];
                if let Some(k) = armed.iter().position(|&(t, g)| t == timer && g == gen) {
                    armed.swap_remove(k);
                    self.input(p, Input::Timer(timer));
                }
            }
        }
    }

    /// Move, rebuild the radio graph, update the ground truth, say hello.
    fn tick(&mut self) {
        let now = self.now.as_micros();
        let t = self.now.as_secs_f64();
        for (w, p) in self.walkers.iter_mut().zip(self.pos.iter_mut()) {
            *p = w.at(&self.setup.waypoint, t);
        }
        let (width, height) = (self.setup.waypoint.width, self.setup.waypoint.height);
        let graph = Graph::build(&self.pos, self.setup.radio.range, width, height);
        self.credit_topology(now);
        let changes = graph.changes_from(&self.graph);
        if changes > 0 || self.ticks == 0 {
            if self.measure.counting(now) {
                self.stats.link_changes += changes as u64;
            }
            self.graph = graph;
            self.ground_truth();
            for i in 0..self.nodes.len() as u32 {
                let s = self.status(i);
                self.measure.touch(i, now, s);
            }
        }
        // Hellos, then the reports they give.
        let counting = self.measure.counting(now);
        let radio = self.setup.radio;
        for i in 0..self.nodes.len() as u32 {
            if !self.discovery.hello_due(i, self.ticks) {
                continue;
            }
            if counting {
                self.measure.totals[i as usize].hellos += 1;
            }
            let b = &mut self.busy_until[i as usize];
            *b = (*b).max(self.now) + AIRTIME;
            for (j, d) in self.graph.links_of(i) {
                if radio.broadcast_heard(d, &mut self.rng) {
                    self.discovery.heard(j, i, now, &mut self.reports);
                }
            }
            self.discovery.expire(i, now, &mut self.reports);
        }
        self.flush_reports();
        self.ticks += 1;
        let next = self.now + self.setup.tick;
        if next <= self.end {
            self.queue.push(next, Event::Tick);
        }
    }

    /// Give the elections the discovery's pending reports.
    fn flush_reports(&mut self) {
        if self.reports.is_empty() {
            return;
        }
        let counting = self.measure.counting(self.now.as_micros()) as u64;
        let mut reports = std::mem::take(&mut self.reports);
        for r in &reports {
            match *r {
                Report::Up { node, peer } => {
                    self.stats.peer_up += counting;
                    let id = self.id_of(peer);
                    self.input(node, Input::PeerUp(id));
                }
                Report::Down { node, peer } => {
                    self.stats.peer_down += counting;
                    let id = self.id_of(peer);
                    self.input(node, Input::PeerDown(id));
                }
            }
        }
        reports.clear();
        if self.reports.is_empty() {
            self.reports = reports;
        }
    }

    /// Credit every node with its degree and component size since the last tick.
    fn credit_topology(&mut self, now: u64) {
        let from = self.last_tick.as_micros();
        if now <= from || self.graph.is_empty() {
            self.last_tick = Time(now.max(from));
            return;
        }
        for i in 0..self.nodes.len() as u32 {
            let size = self.comp_size[self.comp[i as usize] as usize] as usize;
            self.measure.topology(i, from, now, self.graph.degree(i), size);
        }
        let span = (now.min(self.end.as_micros())).saturating_sub(from.max(self.window_from())) as f64;
        self.stats.components_us += span * self.comp_best.len() as f64;
        self.last_tick = Time(now);
    }

    fn window_from(&self) -> u64 {
        self.setup.warmup.as_micros() as u64
    }

    fn ground_truth(&mut self) {
        let (comp, count) = self.graph.components();
        self.comp_size = vec![0; count];
        self.comp_best = vec![Rank::new(0, NodeId::MIN); count];
        for (i, &c) in comp.iter().enumerate() {
            self.comp_size[c as usize] += 1;
            let b = &mut self.comp_best[c as usize];
            if self.ranks[i] > *b {
                *b = self.ranks[i];
            }
        }
        self.comp = comp;
    }

    /// Node `i`'s status against the ground truth.
    fn status(&self, i: u32) -> Status {
        let e = &self.nodes[i as usize];
        let Some(l) = e.leader_rank().filter(|_| !e.in_election()) else {
            return Status::default();
        };
        let c = self.comp[i as usize];
        let reachable = self.index_of(&l.id).is_some_and(|li| self.comp[li as usize] == c);
        Status { leader: true, reachable, best: reachable && self.comp_best[c as usize].id == l.id }
    }

    /// Feed one input to node `i` now and carry out its effects.
    fn input(&mut self, i: u32, input: Input) {
        let before = self.nodes[i as usize].leader();
        let cause = match &input {
            Input::Message { msg, .. } => msg.kind(),
            Input::PeerUp(_) => "PeerUp",
            Input::PeerDown(_) => "PeerDown",
            Input::SendFailed { .. } => "SendFailed",
            Input::Timer(_) => "Timer",
            _ => "Start",
        };
        let mut effects = std::mem::take(&mut self.effects);
        {
            let mut ctx = Context::new(self.now, &mut self.rng, &mut effects);
            self.nodes[i as usize].handle(&mut ctx, input);
        }
        for eff in effects.iter_mut() {
            if matches!(eff, Effect::ElectionStarted) && self.measure.counting(self.now.as_micros()) {
                self.stats.started_by.add(cause);
            }
            self.apply(i, eff);
        }
        effects.clear();
        self.effects = effects;
        let now = self.now.as_micros();
        let after = self.nodes[i as usize].leader();
        if after.is_some() && after != before && self.measure.counting(now) {
            self.measure.totals[i as usize].leader_changes += 1;
        }
        let s = self.status(i);
        self.measure.touch(i, now, s);
    }

    fn apply(&mut self, i: u32, eff: &mut Effect) {
        let counting = self.measure.counting(self.now.as_micros());
        match eff {
            Effect::Send { to, msg } => {
                let to = *to;
                let msg = std::mem::replace(msg, Message::EchoProbe);
                self.send(i, to, msg, counting);
            }
            &mut Effect::SetTimer { timer, after } => {
                let g = &mut self.next_gen[i as usize];
                *g = g.wrapping_add(1);
                let gen = *g;
                let armed = &mut self.timers[i as usize];
                match armed.iter_mut().find(|(t, _)| *t == timer) {
                    Some(slot) => slot.1 = gen,
                    None => armed.push((timer, gen)),
                }
                self.queue.push(self.now + after, Event::Timer { p: i, gen, timer });
            }
            &mut Effect::CancelTimer { timer } => self.timers[i as usize].retain(|(t, _)| *t != timer),
            Effect::Leader(_) => {}
            Effect::ElectionStarted => {
                if counting {
                    self.measure.totals[i as usize].elections += 1;
                }
            }
            Effect::Rejected { .. } => self.stats.rejected += counting as u64,
        }
    }

    fn send(&mut self, i: u32, to: NodeId, msg: Message, counting: bool) {
        if counting {
            self.measure.totals[i as usize].messages += 1;
            self.stats.sent.add(msg.kind());
            self.stats.frames += 1;
        }
        // The echo election only sends to neighbours it was told of, all simulated nodes.
        let Some(j) = self.index_of(&to) else { return };
        let frame = self.setup.radio.unicast(self.graph.distance(i, j), &mut self.rng);
        let start = self.busy_until[i as usize].max(self.now);
        let done = start + frame.airtime;
        self.busy_until[i as usize] = done;
        let slot = self.msgs.insert(msg);
        if frame.delivered {
            self.queue.push(done, Event::Deliver { to: j, from: i, slot });
        } else {
            self.stats.frames_lost += counting as u64;
            self.queue.push(done, Event::Failed { sender: i, to: j, slot });
        }
    }

    // ----- queries -----

    #[inline]
    fn id_of(&self, i: u32) -> NodeId {
        self.ranks[i as usize].id
    }

    /// The index of the node with id `id` (ids are `from_u64(i + 1)`).
    #[inline]
    pub fn index_of(&self, id: &NodeId) -> Option<u32> {
        let i = id.high_u64().checked_sub(1)?;
        (i < self.ranks.len() as u64 && NodeId::from_u64(i + 1) == *id).then_some(i as u32)
    }

    pub fn now(&self) -> Time {
        self.now
    }
    pub fn len(&self) -> usize {
        self.nodes.len()
    }
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
    pub fn setup(&self) -> &Setup {
        &self.setup
    }
    pub fn node(&self, i: u32) -> &Echo {
        &self.nodes[i as usize]
    }
    pub fn rank(&self, i: u32) -> Rank {
        self.ranks[i as usize]
    }
    pub fn position(&self, i: u32) -> Point {
        self.pos[i as usize]
    }
    /// The radio graph of the last tick.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }
    /// The component of every node and the best rank of every component (last tick).
    pub fn components(&self) -> (&[u32], &[Rank]) {
        (&self.comp, &self.comp_best)
    }
    /// The neighbours node `i` knows by its hellos.
    pub fn known(&self, i: u32) -> impl Iterator<Item = u32> + '_ {
        self.discovery.known(i)
    }
    pub fn totals(&self) -> &[NodeTotals] {
        &self.measure.totals
    }
    pub fn stats(&self) -> &RunStats {
        &self.stats
    }
    /// The measurement window's length.
    pub fn window(&self) -> Duration {
        Duration::from_micros(self.measure.window_us())
    }
}

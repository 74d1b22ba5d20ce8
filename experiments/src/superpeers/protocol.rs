//! Runs the sans-IO super-peer selection ([`SuperPeerNode`]) for every node of a [`World`]:
//! a round-based, message-level simulation.
//!
//! Every protocol message is a real [`overlay::superpeer::SpMessage`] passed through a FIFO
//! work queue and handled by the receiving node's state machine; nothing of the protocol is
//! computed outside it. Simplifications (documented in RESULTS.md):
//! - **Time** advances in rounds of `tick` (1 s). Within a round, messages are delivered in
//!   FIFO order right away (Internet RTTs, tens to hundreds of ms, are shorter than a round);
//!   election timers fire at their exact virtual time inside the round. Convergence time is
//!   therefore measured in whole rounds.
//! - **DHT queries** are answered by the [`Dht`] oracle and counted as `ceil(log2 N)`
//!   messages each (kad's iterative lookup cost), reported separately.
//! - **Convergence**: the run stops after `stable_rounds` rounds in which every normal node
//!   is attached, every token holder has promoted itself and at most N/1000 attachments or
//!   token moves happened per round (a few nodes keep trading places between full clusters
//!   for ever; we count that as converged); the convergence time is the last round before
//!   that window with more changes.
//! - **Cost** (what a round costs the simulator, measured with `perf` at N = 30,000): most of
//!   it is the nodes' own handling of their round (cache exchange with one neighbour, attach
//!   checks). The driver keeps its own part small: node ids map to indices through the
//!   one-probe [`super::world::IdIndex`], one effect buffer is reused for every delivery,
//!   message kinds are counted in a small vector, and the DHT oracle finds a closest-peers
//!   query's block from a bucket index and the 2k ids around the key . None of this changes what is simulated: the same
//!   seed gives the same run as before.
//! - **Waiting on memory** (`perf annotate` at N = 200,000-300,000): a round is
//!   mostly cache misses, each message landing on a random node's state. The driver asks for
//!   loads before it needs them ([`super::prefetch`]): every receiver's id-index slot when a
//!   node emits several sends at once (a head's view to its members), the receiver's state
//!   when a message is queued, the ids and points of a DHT answer before they are copied, and
//!   the tick-ordered nodes' buffers two turns ahead; the head cache and RTT memory sit inside
//!   the node's state (`SuperPeerNode`'s inline `SmallVec`s) instead of behind a pointer.
//!   Same output, byte for byte.
//! - **Memory layout** : the nodes are stored in the order in which they take
//!   their turn each round (the run's fixed random permutation of the world), so a round
//!   walks the node states front to back instead of jumping across gigabytes at N = 10^6.
//!   Inside [`Sim`] a node is its *slot* in that order; `world_of` / `slot_of` translate
//!   at the edges (world ids, the latency model, the outcome). What is simulated is the same:
//!   the same seed gives the same run as before this layout (checked at N = 10^3 and 10^4).
//! - **Failures** are crash-stop; the driver tells a crashed node's members and neighbours
//!   `PeerDown` (what heartbeats / ping failures tell a real node); other peers learn of it
//!   when a send fails.

use super::churn::Churn;
use super::faults::{self, Faults};
use super::gates::{self, GateStats, Gates, NodeSettings};
use super::prefetch::{prefetch, prefetch_raw};
use super::world::{Dht, IdIndex, World};
use overlay::detect::failure::{self as failure_rule, after_failure, Next};
use overlay::detect::stall::{lateness_changed, tolerated};
use overlay::detect::{Attempt, HeadWatch, SendFailure, Verdict};
use overlay::superpeer::{
    HeadRole, LookupReport, PeerInfo, Query, SpContext, SpEffect, SpInput, SpMessage, SuperPeerConfig, SuperPeerNode,
    TokenId,
};
use overlay::{NodeId, Time, Timer};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// One round's state, for the convergence plot.
#[derive(Clone, Debug, Serialize)]
pub struct RoundStat {
    pub round: u32,
    pub time_s: f64,
    pub heads: u64,
    pub super_peers: u64,
    pub attached_fraction: f64,
    /// Mean TRUE RTT (ms) from a fixed sample of normal nodes to their head.
    pub sample_rtt_ms: f64,
    pub token_moves: u64,
    pub attach_changes: u64,
    pub messages: u64,
    /// Connections established in the round (under the fault model's `gates`; else 0).
    pub new_connections: u64,
    /// Heads holding a crashed head's token (recreated, or moved on since) that are not
    /// super peers (0 before the crash).
    pub crashed_tokens_unpromoted: u64,
    pub phase: &'static str,
}

/// What a crash of super peers did.
#[derive(Clone, Debug, Serialize, Default)]
pub struct FailureOutcome {
    pub crashed: u64,
    pub recovery_rounds: Option<u32>,
    pub unattached_after: u64,
    pub roles_before: u64,
    pub roles_after: u64,
    pub roles_lost: u64,
    pub roles_duplicated: u64,
    pub reelected: u64,
    pub reelected_highest_rank: u64,
}

/// Why members sit far from their nearest head: the members whose head is more than
/// 1/`switch_factor` x as far (TRUE RTT) as the nearest head (the margin a member switches
/// by), by what their own state knew of that nearest head, with the count and the excess over
/// the nearest head's RTT per node of the population (ms). `nearest_ms`: the members' mean
/// TRUE RTT to their nearest head, no cap.
#[derive(Clone, Debug, Default)]
pub struct FarMembers {
    pub members: usize,
    pub nearest_ms: f64,
    pub switch_factor: f64,
    pub classes: BTreeMap<&'static str, (usize, f64)>,
}

/// Classifies the members for [`FarMembers`] (`heads` and `head_of` in world indices).
fn far_members(sim: &Sim<'_>, w: &World, heads: &[u32], head_of: &[u32], cfg: &SuperPeerConfig) -> FarMembers {
    let n = head_of.len();
    let cap = cfg.cluster_cap as usize;
    let node = |i: u32| &sim.nodes[sim.slot_of[i as usize] as usize];
    let full: BTreeMap<u32, bool> = heads.iter().map(|&h| (h, node(h).members().len() >= cap)).collect();
    let switch_factor = cfg.discovery.switch_factor;
    let mut far = FarMembers { switch_factor, ..FarMembers::default() };
    for (i, &h) in head_of.iter().enumerate() {
        if h == u32::MAX || h as usize == i {
            continue;
        }
        far.members += 1;
        let t = w.rtt_ms(i as u32, h);
        let Some((j, best)) = heads.iter().map(|&c| (c, w.rtt_ms(i as u32, c))).min_by(|a, b| a.1.total_cmp(&b.1))
        else {
            continue;
        };
        far.nearest_ms += best;
        let me = node(i as u32);
        let jid = node(j).id();
        let full = full.get(&j).copied().unwrap_or(false);
        let class = if t <= best / switch_factor {
            "near (within the switch margin)"
        } else {
            match me.cached_heads().into_iter().find(|c| c.id == jid) {
                None if full => "far: nearest not cached (full)",
                None => "far: nearest not cached (room)",
                Some(c) if c.backed_off => "far: nearest refused us as full",
                Some(c) if c.rtt.is_some() => "far: nearest measured, no switch",
                Some(c) if c.failed => "far: nearest's measurement failed",
                Some(c) => {
                    let own = w.points[i].rtt(&w.points[h as usize]);
                    if c.predicted >= overlay::superpeer::probe_limit(me.attached_rtt(), own) {
                        "far: nearest predicted beyond the probe limit"
                    } else {
                        "far: nearest not measured yet"
                    }
                }
            }
        };
        let e = far.classes.entry(class).or_default();
        e.0 += 1;
        e.1 += (t - best) / n.max(1) as f64;
    }
    far.nearest_ms /= far.members.max(1) as f64;
    far
}

/// Result of one protocol run.
#[derive(Clone, Debug, Serialize)]
pub struct ProtoOutcome {
    /// Head index of every node (itself for heads), `u32::MAX` when unattached or dead.
    #[serde(skip)]
    pub head_of: Vec<u32>,
    #[serde(skip)]
    pub heads: Vec<u32>,
    #[serde(skip)]
    pub rounds: Vec<RoundStat>,
    pub converged_round: Option<u32>,
    pub convergence_s: Option<f64>,
    pub messages: u64,
    pub messages_per_node: f64,
    pub lookups: u64,
    pub lookup_messages_per_node: f64,
    /// Lookups per node at convergence by purpose (`SuperPeerNode::lookups_by_purpose`).
    pub lookups_per_node_by_purpose: BTreeMap<String, f64>,
    /// Lookups per node at convergence that the nodes found unusable, by reason (the swarm
    /// report's `lookups_failed_per_node_by_reason`).
    pub lookups_failed_per_node_by_reason: BTreeMap<String, f64>,
    /// RTT measurements per node at convergence, and those reported failed because the
    /// node's loop ran late (the swarm report's `rtt_measurements_per_node`,
    /// `rtt_stalled_per_node`).
    pub rtt_measurements_per_node: f64,
    pub rtt_stalled_per_node: f64,
    /// Mean over the members at convergence of the RTT their node measured to their head
    /// minus the TRUE RTT, ms (the swarm report's `head_measured_excess_ms`).
    pub head_measured_excess_ms: Option<f64>,
    /// How long the DHT lookups answered by convergence took from the ask, ms (with the fault
    /// model's `lookup_ms` only; the swarm report's `lookup_wait_ms`).
    pub lookup_wait_ms: Option<overlay::stats::Summary>,
    pub messages_by_kind: BTreeMap<String, u64>,
    pub token_moves: u64,
    pub rejected: u64,
    pub estimate_error_mean: f64,
    pub estimate_error_p95: f64,
    pub wanted_min: u64,
    pub wanted_max: u64,
    pub max_members_seen: u64,
    /// Protocol state per node at convergence: `size_of::<SuperPeerNode>()` plus the mean
    /// of [`SuperPeerNode::heap_bytes`] (allocator overhead not included).
    pub node_struct_bytes: usize,
    pub state_bytes_per_node: f64,
    pub failure: Option<FailureOutcome>,
    /// The connection gates' counts, with the fault model's `gates` ([`super::gates`]).
    pub connections: Option<GateStats>,
    /// Inputs the nodes handled, by kind (`SpInput::KINDS`), over the whole run.
    pub inputs_by_kind: BTreeMap<String, u64>,
    /// Why members sit far from the nearest head at convergence (`ProtoParams::diagnose`).
    #[serde(skip)]
    pub far: Option<FarMembers>,
}

/// Run parameters.
#[derive(Clone, Debug)]
pub struct ProtoParams {
    pub cfg: SuperPeerConfig,
    pub max_rounds: u32,
    pub stable_rounds: u32,
    pub crash_fraction: f64,
    pub recovery_rounds: u32,
    pub seed: u64,
    /// What hurt the real swarm, drawn from seeded distributions (off by default; [`faults`]).
    pub faults: Faults,
    /// Classify, at convergence, the members that sit far from their nearest head
    /// ([`FarMembers`]; costs nodes x heads TRUE RTTs).
    pub diagnose: bool,
}

const TICK_US: u64 = 1_000_000;

/// Kademlia's bucket size, which the simulated routing tables share with the node's.
const BUCKET_SIZE: usize = overlay::superpeer::vicinity::BUCKET_SIZE;

/// Nodes of its far buckets a simulated node's routing table read lists (where it pushes its
/// size sample; a real table holds up to 20 in each).
const FAR_LISTED: usize = 16;

/// A refused message waiting to be sent again (`overlay::detect::failure`).
struct Resend {
    at: u64,
    from: u32,
    to: NodeId,
    msg: SpMessage,
    attempt: Attempt,
}

/// The fault model's state ([`faults`]): its own generator, each node's loop lateness and
/// when its coordinate becomes fit, the members' head watches, and refused messages waiting.
struct FaultSim {
    cfg: Faults,
    rng: ChaCha8Rng,
    loaded: Vec<bool>,
    /// Lateness now, and last told, seconds, by slot.
    late: Vec<f32>,
    late_told: Vec<f32>,
    /// Round at which the coordinate becomes fit (0: fit from the start), by slot.
    fit_at: Vec<u32>,
    /// Round at which the node starts the selection (0: at the setup), by slot.
    start_at: Vec<u32>,
    /// Coordinate drift, from each node's learned point (None without drift).
    drift: Option<faults::Drift>,
    /// Coordinates still being learned (None without `coord_noise_ms`).
    learning: Option<faults::Learning>,
    watches: Vec<Option<Box<HeadWatch>>>,
    resends: Vec<Resend>,
    /// DHT lookups under way (`lookup_ms`), by (when they end, µs; order asked): the asking
    /// slot, the query, what it asks and when it was asked (µs).
    lookups_due: BTreeMap<(u64, u64), (u32, u32, Query, u64)>,
    lookups_asked: u64,
    /// When each slot's lookup under way ends, µs (a node runs one lookup at a time).
    lookup_busy: Vec<u64>,
    /// How long each answered lookup took from the ask, ms.
    lookup_waits: Vec<f32>,
    /// With `gates`: every node's connections and connection gate.
    gates: Option<Gates>,
}

struct Sim<'w> {
    w: &'w World,
    /// Node states by slot (see the module doc, "Memory layout").
    nodes: Vec<SuperPeerNode>,
    /// World index of each slot, and slot of each world index.
    world_of: Vec<u32>,
    slot_of: Vec<u32>,
    /// Node id -> slot (the world's [`super::world::IdIndex`] maps to world indices; this one
    /// saves the `slot_of` look-up, a second cache miss per message at N = 10^6).
    slot_index: IdIndex,
    alive: Vec<bool>,
    dht: Dht,
    rng: ChaCha8Rng,
    work: VecDeque<(u32, SpInput)>,
    timers: BinaryHeap<Reverse<(u64, u64, u32, Timer)>>,
    armed: rustc_hash::FxHashMap<(u32, Timer), u64>,
    seq: u64,
    now: u64,
    lookup_cost: u64,
    // counters
    messages: u64,
    round_messages: u64,
    /// Connections established before this round (`RoundStat::new_connections`).
    established_before: u64,
    lookups: u64,
    /// Lookups the nodes found unusable, by reason (`SpEffect::LookupUnusable`).
    lookups_failed: BTreeMap<&'static str, u64>,
    /// RTT measurements asked for, and those a late loop spoilt (reported failed).
    rtt_measurements: u64,
    rtt_stalled: u64,
    by_kind: Vec<(&'static str, u64)>,
    effects: Vec<SpEffect>,
    token_moves: u64,
    round_moves: u64,
    attach_changes: u64,
    rejected: u64,
    max_members: u64,
    /// The tokens of the crashed heads ([`RoundStat::crashed_tokens_unpromoted`]).
    crashed_tokens: Vec<overlay::superpeer::TokenId>,
    /// Off by default: changes per round by kind (`PEERAGE_SP_CHURN`, [`super::churn`]).
    churn: Option<Box<Churn>>,
    /// Off by default: the fault model.
    faults: Option<Box<FaultSim>>,
    /// Inputs handled, by `SpInput::kind_index`.
    inputs: [u64; SpInput::KINDS.len()],
}

impl<'w> Sim<'w> {
    /// The slot of a node id, if it is a node of the world.
    fn slot(&self, id: &overlay::NodeId) -> Option<u32> {
        self.slot_index.get(id)
    }

    /// Id and point of the node in slot `s`.
    fn info(&self, s: u32) -> PeerInfo {
        self.w.info(self.world_of[s as usize])
    }

    fn deliver(&mut self, node: u32, input: SpInput) {
        if !self.alive[node as usize] {
            return;
        }
        self.inputs[input.kind_index()] += 1;
        if let (Some(f), SpInput::Message { from, .. }) = (self.faults.as_mut(), &input) {
            if let Some(w) = f.watches[node as usize].as_mut() {
                w.heard(*from, Time(self.now));
            }
        }
        // One effect buffer for the whole run (no allocation per delivery); handling an
        // effect never delivers, so the buffer is free again when this returns.
        let mut effects = std::mem::take(&mut self.effects);
        if let Some(c) = self.churn.as_mut() {
            c.before(&self.nodes[node as usize], &input);
        }
        {
            let mut ctx = SpContext::new(Time(self.now), &mut self.rng, &mut effects);
            self.nodes[node as usize].handle(&mut ctx, input);
        }
        if let Some(mut c) = self.churn.take() {
            let me = self.nodes[node as usize].id();
            for e in &effects {
                c.effect(
                    node,
                    me,
                    e,
                    |a, b| {
                        let (a, b) = (self.slot(&a)?, self.slot(&b)?);
                        Some(self.w.rtt_ms(self.world_of[a as usize], self.world_of[b as usize]))
                    },
                    |h| self.slot(&h).map(|h| self.nodes[h as usize].members().len()),
                );
            }
            c.after(node, self.nodes[node as usize].is_head());
            self.churn = Some(c);
        }
        // A head's view goes to all its members at once: start every receiver's look-up
        // before the first one waits on memory.
        if effects.len() > 1 {
            for e in &effects {
                if let SpEffect::Send { to, .. } = e {
                    self.slot_index.prefetch(to);
                }
            }
        }
        for e in effects.drain(..) {
            self.effect(node, e);
        }
        self.effects = effects;
        self.announce_opened();
    }

    /// Both ends of every connection the gates opened learn each other's position
    /// (`PeerUp`), as a node does from the first request or `Hello` over a new connection:
    /// connections that lookups and measurements open reach the state machine's neighbour
    /// list, as in a real swarm.
    fn announce_opened(&mut self) {
        let Some(g) = self.faults.as_mut().and_then(|f| f.gates.as_mut()) else { return };
        if g.opened.is_empty() {
            return;
        }
        for (a, b) in std::mem::take(&mut g.opened) {
            let (ia, ib) = (self.info(a), self.info(b));
            self.work.push_back((a, SpInput::PeerUp(ib)));
            self.work.push_back((b, SpInput::PeerUp(ia)));
        }
    }

    fn count_kind(&mut self, kind: &'static str) {
        // A handful of kinds: a linear scan of a small vector beats a map on this hot path.
        match self.by_kind.iter_mut().find(|(k, _)| std::ptr::eq(*k, kind) || *k == kind) {
            Some((_, c)) => *c += 1,
            None => self.by_kind.push((kind, 1)),
        }
    }

    fn effect(&mut self, node: u32, e: SpEffect) {
        match e {
            SpEffect::Send { to, msg } => {
                self.messages += 1;
                self.round_messages += 1;
                self.count_kind(msg.kind());
                self.send(node, to, msg, Attempt::FIRST);
            }
            SpEffect::Lookup { query, what: Query::Vicinity } => {
                // The node's own routing table, read with no message: a Kademlia table that
                // heard of every live node, out to its first full bucket, and a few of its far
                // buckets' nodes (`overlay::superpeer::vicinity`).
                let me = self.info(node).id;
                let found = self.dht.table(&me, BUCKET_SIZE, FAR_LISTED, &mut self.rng);
                let peers: Vec<PeerInfo> = found.into_iter().filter(|&i| i != node).map(|i| self.info(i)).collect();
                let n = peers.len() as u32;
                let report = LookupReport { found: n, known: n, ..LookupReport::complete(peers) };
                self.work.push_back((node, SpInput::LookupResult { query, report }));
            }
            SpEffect::Lookup { query, what } if self.faults.is_some() => {
                self.lookups += 1;
                self.round_messages += self.lookup_cost;
                let now = self.now;
                if let Some(f) = self.faults.as_mut().filter(|f| f.cfg.lookup_ms > 0.0) {
                    // Runs after the node's lookups under way, and answers when it ends.
                    let start = f.lookup_busy[node as usize].max(now);
                    let end = start + faults::lookup_us(&f.cfg, &mut f.rng);
                    f.lookup_busy[node as usize] = end;
                    f.lookups_asked += 1;
                    f.lookups_due.insert((end, f.lookups_asked), (node, query, what, now));
                    return;
                }
                let report = self.faulty_lookup(node, what);
                self.work.push_back((node, SpInput::LookupResult { query, report }));
            }
            SpEffect::Lookup { query, what } => {
                self.lookups += 1;
                self.round_messages += self.lookup_cost;
                let found = match what {
                    Query::Closest { key } | Query::Sample { key } => self.dht.closest(&key),
                    Query::Providers { key } => self.dht.providers(&key, &mut self.rng),
                    Query::Vicinity => Vec::new(),
                };
                // Up to k ids and points at random places (two misses each, via `world_of`):
                // start every load before reading any.
                for &i in &found {
                    prefetch(&self.world_of[i as usize]);
                }
                for &i in &found {
                    let wi = self.world_of[i as usize] as usize;
                    prefetch(&self.w.ids[wi]);
                    prefetch(&self.w.points[wi]);
                }
                let peers: Vec<PeerInfo> = found.into_iter().map(|i| self.info(i)).collect();
                self.work.push_back((node, SpInput::LookupResult { query, report: LookupReport::complete(peers) }));
            }
            SpEffect::Provide { key } => self.dht.provide(key, node),
            SpEffect::Unprovide { key } => self.dht.unprovide(&key, node),
            SpEffect::SetTimer { timer, after } => {
                self.seq += 1;
                self.armed.insert((node, timer), self.seq);
                // A late loop handles its timers late.
                let late = self.faults.as_ref().map_or(0, |f| (f.late[node as usize] as f64 * 1e6) as u64);
                let at = self.now + after.as_micros() as u64 + late;
                self.timers.push(Reverse((at, self.seq, node, timer)));
            }
            SpEffect::CancelTimer { timer } => {
                self.armed.remove(&(node, timer));
            }
            SpEffect::TokenReleased { .. } => {
                self.token_moves += 1;
                self.round_moves += 1;
            }
            SpEffect::MeasureRtt { peer } => {
                // A ping: request and reply, counted as 2 messages; the answer is what a
                // ping would see (the model's RTT with its jitter), none if the peer is dead.
                self.messages += 2;
                self.round_messages += 2;
                self.count_kind("measure-rtt");
                self.count_kind("measure-rtt");
                self.rtt_measurements += 1;
                // Slots for liveness, world indices for the latency model.
                let now = self.now;
                let rtt = match self.slot(&peer) {
                    // A measurement needs a connection the gates allow.
                    Some(t)
                        if self.faults.as_mut().and_then(|f| f.gates.as_mut()).is_some_and(|g| {
                            self.alive[t as usize] && g.reach(node, t, now, "measure-rtt").is_err()
                        }) =>
                    {
                        None
                    }
                    Some(t) if self.alive[t as usize] => {
                        let (a, b) = (self.world_of[node as usize] as usize, self.world_of[t as usize] as usize);
                        let rtt = self.w.model.sample_rtt_ms(a, b, &mut self.rng) / 1000.0;
                        match self.faults.as_mut() {
                            Some(f) => {
                                // Queueing and both loops' lateness add to what a ping
                                // measures; a sample our own loop's stall spoilt is reported
                                // failed (the node driver's stall gate).
                                let (mine, theirs) = (f.late[node as usize] as f64, f.late[t as usize] as f64);
                                let seen = rtt + faults::exp(&mut f.rng, f.cfg.ping_queue_ms) / 1000.0 + mine + theirs;
                                let spoilt = Duration::from_secs_f64(mine) > tolerated(Duration::from_secs_f64(rtt));
                                self.rtt_stalled += u64::from(spoilt);
                                (!spoilt).then_some(seen)
                            }
                            None => Some(rtt),
                        }
                    }
                    _ => None,
                };
                self.work.push_back((node, SpInput::Rtt { peer, rtt }));
            }
            SpEffect::AttachedTo(h) => {
                self.attach_changes += 1;
                if let Some(w) = self.faults.as_mut().and_then(|f| f.watches[node as usize].as_mut()) {
                    w.follow(Some(h), Time(self.now));
                    w.heard(h, Time(self.now));
                }
            }
            SpEffect::Rejected { .. } => self.rejected += 1,
            SpEffect::LookupUnusable { reason, .. } => *self.lookups_failed.entry(reason).or_default() += 1,
            SpEffect::BecomeSuperPeer
            | SpEffect::StopSuperPeer
            | SpEffect::Detached
            | SpEffect::TokenAcquired { .. }
            | SpEffect::TokenMovePriced(_) => {}
        }
    }

    /// Sends `msg` from `node` to `to` as `attempt`: delivered to a live receiver (or refused
    /// by a gate, under the fault model's `gates`), `SendFailed` from a dead one.
    fn send(&mut self, node: u32, to: NodeId, msg: SpMessage, attempt: Attempt) {
        match self.slot(&to) {
            Some(t) if self.alive[t as usize] => {
                let now = self.now;
                if let Some(g) = self.faults.as_mut().and_then(|f| f.gates.as_mut()) {
                    if let Err(kind) = g.reach(node, t, now, msg.kind()) {
                        self.refused(node, to, msg, kind, attempt);
                        return;
                    }
                }
                let from = self.nodes[node as usize].id();
                // The receiver's state is read when the message's turn comes, at a random
                // place in gigabytes: start loading it now.
                prefetch(&self.nodes[t as usize]);
                self.work.push_back((t, SpInput::Message { from, msg }));
            }
            _ if self.faults.as_ref().is_some_and(|f| f.cfg.head_watch) => {
                self.refused(node, to, msg, SendFailure::NoListener, attempt)
            }
            _ => self.work.push_back((node, SpInput::SendFailed { to, msg })),
        }
    }

    /// A message that failed as `kind`: what the node's own rule says follows
    /// (`overlay::detect::failure::after_failure`).
    fn refused(&mut self, node: u32, to: NodeId, msg: SpMessage, kind: SendFailure, attempt: Attempt) {
        let me = &self.nodes[node as usize];
        let sent = failure_rule::Sent {
            to_head: me.attached_to() == Some(to),
            election_runs: matches!(&msg, SpMessage::Election { dead, .. } if me.election_for() == Some(*dead)),
            handover: matches!(msg, SpMessage::Handover { .. }),
        };
        let now = Time(self.now);
        let Some(f) = self.faults.as_mut() else { return };
        match after_failure(kind, attempt, sent) {
            Next::ProbeHead => {
                if let Some(w) = f.watches[node as usize].as_mut() {
                    w.broke(Some(to), to, now);
                }
            }
            Next::Report => self.work.push_back((node, SpInput::SendFailed { to, msg })),
            Next::Refused => self.work.push_back((node, SpInput::Refused { to, msg })),
            Next::ResendAfter(wait) => {
                let attempt = Attempt { refusals: attempt.refusals + 1, ..attempt };
                let at = self.now + wait.as_micros() as u64;
                f.resends.push(Resend { at, from: node, to, msg, attempt });
            }
            // Refusals and missing listeners are never ambiguous.
            Next::SendAgain | Next::Check | Next::Drop => {}
        }
    }

    /// Node `node`'s lookup answered under the fault model ([`faults::closest_report`]); with
    /// `gates`, each peer it contacts needs a connection ([`gates::Gates::contact`]).
    fn faulty_lookup(&mut self, node: u32, what: Query) -> LookupReport {
        let Some(f) = self.faults.as_mut() else { return LookupReport::default() };
        let FaultSim { cfg, rng, gates, .. } = &mut **f;
        let now = self.now;
        if let Some(g) = gates.as_mut() {
            g.lookup_started(node, now);
        }
        let k = self.dht.k;
        let ids = |found: &[u32], w: &World, world_of: &[u32]| -> Vec<PeerInfo> {
            found.iter().map(|&i| w.info(world_of[i as usize])).collect()
        };
        let mut unreachable = |slots: &[u32], i: usize| gates.as_mut().is_some_and(|g| !g.contact(node, slots[i], now));
        match what {
            Query::Providers { key } => {
                let found = ids(&self.dht.providers(&key, rng), self.w, &self.world_of);
                // The records sit at the peers nearest the key: reaching one of them is enough.
                let near = self.dht.closest_n(&key, k);
                let reached = (0..near.len()).any(|i| !unreachable(&near, i)) || near.is_empty();
                faults::providers_report(cfg, rng, found, reached)
            }
            Query::Closest { key } => {
                let slots = self.dht.closest_n(&key, 2 * k);
                let cand = ids(&slots, self.w, &self.world_of);
                faults::closest_report(cfg, rng, None, &cand, k, |i| unreachable(&slots, i))
            }
            Query::Sample { .. } => {
                // Kad aims at the hash of a random preimage, not at the drawn key.
                let key = NodeId(rng.gen());
                let slots = self.dht.closest_n(&key, 2 * k);
                let cand = ids(&slots, self.w, &self.world_of);
                faults::closest_report(cfg, rng, Some(key), &cand, k, |i| unreachable(&slots, i))
            }
            // Read from the node's own table where the effect is handled, never faulty.
            Query::Vicinity => LookupReport::default(),
        }
    }

    /// The fault model's inputs to node `s` at the start of `round`, before its tick: its
    /// late start, its loop's lateness, its coordinate becoming fit, its point drifting.
    fn fault_inputs(&mut self, s: u32, round: u32) {
        let Some(f) = self.faults.as_mut() else { return };
        let i = s as usize;
        let mut inputs = Vec::new();
        if f.start_at[i] == round && round > 0 {
            inputs.push(SpInput::Start);
        }
        if f.loaded[i] {
            let late = faults::exp(&mut f.rng, f.cfg.lateness_ms) / 1000.0;
            f.late[i] = late as f32;
            let told = Duration::from_secs_f64(f.late_told[i] as f64);
            if lateness_changed(told, Duration::from_secs_f64(late)) {
                f.late_told[i] = late as f32;
                inputs.push(SpInput::Lateness { secs: late });
            }
        }
        if f.fit_at[i] == round && round > 0 {
            inputs.push(SpInput::CoordinateFit { fit: true });
        }
        match f.learning.as_ref() {
            Some(l) if l.learning(round) => {
                if let Some(p) = l.point(i, round) {
                    inputs.push(SpInput::Coordinate(p));
                }
            }
            _ => {
                if let Some(p) = f.drift.as_ref().and_then(|d| d.step(i, &mut f.rng)) {
                    inputs.push(SpInput::Coordinate(p));
                }
            }
        }
        for input in inputs {
            self.deliver(s, input);
            self.drain();
        }
    }

    /// Node `s`'s head watch, after its tick: a probe of its head when due, and the verdict.
    fn probe_head(&mut self, s: u32) {
        let now = Time(self.now);
        let head = self.nodes[s as usize].attached_to();
        let Some(f) = self.faults.as_mut() else { return };
        let Some(w) = f.watches[s as usize].as_mut() else { return };
        let Some(h) = head.filter(|_| w.due(head, now)) else { return };
        w.probe_sent(now);
        let outcome = match self.slot_index.get(&h) {
            Some(t) if self.alive[t as usize] => {
                f.gates.as_mut().and_then(|g| g.reach(s, t, now.0, "head-probe").err())
            }
            _ => Some(SendFailure::NoListener),
        };
        let verdict = match outcome {
            None => {
                w.answered(h, now);
                return;
            }
            Some(kind) => w.failed(h, kind, now, Duration::ZERO),
        };
        let input = match verdict {
            Verdict::Down | Verdict::Gone => SpInput::PeerDown(h),
            Verdict::NotServing => SpInput::HeadNotServing(h),
            _ => return,
        };
        self.deliver(s, input);
        self.drain();
    }

    /// Node `s`'s peer manager, every [`gates::MANAGER_PERIOD_ROUNDS`] rounds: it keeps the
    /// connections its state machine talks over, dials random members when it has too few
    /// connections and rotates one connection a period (candidates drawn only then).
    fn manage_peers(&mut self, s: u32, round: u32) {
        if round % gates::MANAGER_PERIOD_ROUNDS != 0 {
            return;
        }
        let now = self.now;
        let Some(f) = self.faults.as_mut() else { return };
        let FaultSim { rng, gates, .. } = &mut **f;
        let Some(g) = gates.as_mut() else { return };
        let n = self.nodes.len() as u32;
        let candidates: Vec<u32> = if g.wants_candidates(s, now) {
            (0..16).map(|_| rng.gen_range(0..n)).filter(|&c| self.alive[c as usize]).collect()
        } else {
            Vec::new()
        };
        let node = &self.nodes[s as usize];
        let (w, world_of) = (self.w, &self.world_of);
        g.manage(s, now, |p| node.talks_to(&w.ids[world_of[p as usize] as usize]), &candidates, rng);
    }

    /// What node `s` tells its gate after its tick, as the node driver does: whether it serves
    /// a cluster and whom, and its re-election group.
    fn tell_gate(&mut self, s: u32) {
        let now = self.now;
        let Some(g) = self.faults.as_mut().and_then(|f| f.gates.as_mut()) else { return };
        let n = &self.nodes[s as usize];
        let members: Vec<u32> = n.members().iter().filter_map(|m| self.slot_index.get(&m.id)).collect();
        let group: Vec<u32> = n.election_group().filter_map(|id| self.slot_index.get(&id)).collect();
        g.tell(s, n.is_head(), &members, &group, now);
    }

    /// Sends again the refused messages due up to `until` (µs), in time order, while their
    /// election still runs at the sender.
    fn fire_resends(&mut self, until: u64) {
        loop {
            let Some(f) = self.faults.as_mut() else { return };
            let Some(pos) = (0..f.resends.len()).filter(|&i| f.resends[i].at <= until).min_by_key(|&i| f.resends[i].at)
            else {
                return;
            };
            let r = f.resends.swap_remove(pos);
            self.now = self.now.max(r.at);
            let runs = matches!(&r.msg, SpMessage::Election { dead, .. }
                if self.nodes[r.from as usize].election_for() == Some(*dead));
            if runs && self.alive[r.from as usize] {
                self.send(r.from, r.to, r.msg, r.attempt);
                self.drain();
            }
        }
    }

    /// The end of the DHT lookups under way (`lookup_ms`) due up to `until` (µs), in time
    /// order and before the election timers due after them; a dead node's lookups are dropped.
    fn fire_lookups(&mut self, until: u64) {
        loop {
            let Some(f) = self.faults.as_mut() else { return };
            let Some((&(at, order), _)) = f.lookups_due.first_key_value() else { return };
            let timer_first = self.timers.peek().is_some_and(|Reverse((t, ..))| *t < at);
            if at > until || timer_first {
                return;
            }
            let Some((node, query, what, asked)) = f.lookups_due.remove(&(at, order)) else { return };
            if !self.alive[node as usize] {
                continue;
            }
            f.lookup_waits.push(((at - asked) as f64 / 1000.0) as f32);
            self.now = self.now.max(at);
            let report = self.faulty_lookup(node, what);
            self.deliver(node, SpInput::LookupResult { query, report });
            self.drain();
        }
    }

    fn drain(&mut self) {
        let mut guard: u64 = 0;
        let limit = 200 * self.nodes.len() as u64 + 10_000;
        while let Some((node, input)) = self.work.pop_front() {
            self.deliver(node, input);
            guard += 1;
            if guard > limit {
                tracing::warn!("work queue did not drain in one round; carrying over");
                break;
            }
        }
    }

    /// Fires every election timer and ends every DHT lookup due up to `until` (µs), in time
    /// order, and sends again the refused messages due by then.
    fn fire_timers(&mut self, until: u64) {
        self.fire_resends(until);
        loop {
            self.fire_lookups(until);
            let Some(Reverse((at, seq, node, timer))) = self.timers.peek().copied() else { break };
            if at > until {
                break;
            }
            self.timers.pop();
            if self.armed.get(&(node, timer)) != Some(&seq) {
                continue;
            }
            self.armed.remove(&(node, timer));
            self.now = self.now.max(at);
            self.deliver(node, SpInput::Timer(timer));
            self.drain();
        }
    }

    fn head_index(&self, i: usize) -> u32 {
        let n = &self.nodes[i];
        if !self.alive[i] {
            return u32::MAX;
        }
        if n.is_head() {
            return i as u32;
        }
        match n.attached_to().and_then(|id| self.slot(&id)) {
            Some(h) if self.alive[h as usize] && self.nodes[h as usize].is_head() => h,
            _ => u32::MAX,
        }
    }

    fn round_stat(&mut self, round: u32, sample: &[u32], phase: &'static str) -> RoundStat {
        let gates = self.faults.as_ref().and_then(|f| f.gates.as_ref());
        let established = gates.map_or(0, |g| g.stats.established);
        let mut heads = 0;
        let mut sps = 0;
        let mut crashed_unpromoted = 0;
        let mut attached = 0u64;
        let mut normals = 0u64;
        for (i, n) in self.nodes.iter().enumerate() {
            if !self.alive[i] {
                continue;
            }
            if n.is_head() {
                heads += 1;
                self.max_members = self.max_members.max(n.members().len() as u64);
                if n.is_super_peer() {
                    sps += 1;
                } else if n.token().is_some_and(|(t, _)| self.crashed_tokens.contains(&t)) {
                    crashed_unpromoted += 1;
                }
            } else {
                normals += 1;
                if n.attached_to().is_some() {
                    attached += 1;
                }
            }
        }
        let mut s = 0.0;
        let mut c = 0;
        for &i in sample {
            if !self.alive[i as usize] || self.nodes[i as usize].is_head() {
                continue;
            }
            let h = self.head_index(i as usize);
            if h != u32::MAX {
                s += self.w.rtt_ms(self.world_of[i as usize], self.world_of[h as usize]);
                c += 1;
            }
        }
        let st = RoundStat {
            round,
            time_s: round as f64,
            heads,
            super_peers: sps,
            attached_fraction: if normals > 0 { attached as f64 / normals as f64 } else { 1.0 },
            sample_rtt_ms: if c > 0 { s / c as f64 } else { f64::NAN },
            token_moves: self.round_moves,
            attach_changes: self.attach_changes,
            messages: self.round_messages,
            new_connections: established - self.established_before,
            crashed_tokens_unpromoted: crashed_unpromoted,
            phase,
        };
        self.established_before = established;
        self.round_moves = 0;
        self.attach_changes = 0;
        self.round_messages = 0;
        st
    }

    /// One round: every live node ticks, in slot order (= the run's turn order).
    fn run_round(&mut self, round: u32) {
        self.now = round as u64 * TICK_US;
        self.fire_timers(self.now);
        for i in 0..self.nodes.len() as u32 {
            // The node whose turn comes after the next one: its state is next in memory
            // (the hardware prefetches that), its buffers are anywhere on the heap.
            if let Some(later) = self.nodes.get(i as usize + 2) {
                for (addr, bytes) in later.hot_buffers() {
                    prefetch_raw(addr, bytes);
                }
            }
            if self.alive[i as usize] {
                if self.faults.is_some() {
                    self.fault_inputs(i, round);
                }
                self.deliver(i, SpInput::Tick);
                self.drain();
                if self.faults.is_some() {
                    self.probe_head(i);
                    self.tell_gate(i);
                    self.manage_peers(i, round);
                }
            }
        }
        self.fire_timers(self.now + TICK_US - 1);
    }

    /// Roles (token ids or slot keys) held by live heads, with their holders (world indices).
    fn roles(&self) -> BTreeMap<[u8; 32], Vec<u32>> {
        let mut m: BTreeMap<[u8; 32], Vec<u32>> = BTreeMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if !self.alive[i] {
                continue;
            }
            if let Some(r) = n.role() {
                m.entry(role_key(&r)).or_default().push(self.world_of[i]);
            }
        }
        m
    }

    fn stable(&self, stats: &[RoundStat], window: u32, tokens: bool) -> bool {
        if stats.len() < window as usize {
            return false;
        }
        let quiet = (self.nodes.len() as u64 / 1000).max(1);
        stats[stats.len() - window as usize..].iter().all(|s| {
            s.token_moves + s.attach_changes <= quiet
                && s.attached_fraction >= 1.0
                && (!tokens || s.super_peers == s.heads)
        })
    }
}

/// Runs one method over the world. `progress(round)` is called after every round.
pub fn run(w: &World, p: &ProtoParams, mut progress: impl FnMut(u32, &RoundStat)) -> anyhow::Result<ProtoOutcome> {
    p.cfg.validate()?;
    p.faults.validate()?;
    let n = w.len();
    let cfg = Arc::new(p.cfg.clone());
    let mut rng = ChaCha8Rng::seed_from_u64(p.seed ^ 0x5e_ed5e_1ec7);
    // Draws the protocol RNG's seed first, then the turn order.
    let sim_rng = ChaCha8Rng::seed_from_u64(rng.gen());
    let mut world_of: Vec<u32> = (0..n as u32).collect();
    world_of.shuffle(&mut rng);
    let mut slot_of = vec![0u32; n];
    for (s, &i) in world_of.iter().enumerate() {
        slot_of[i as usize] = s as u32;
    }
    let mut nodes: Vec<SuperPeerNode> = Vec::with_capacity(n);
    for (s, &i) in world_of.iter().enumerate() {
        // Turn order is a random permutation of the world: load ids and points ahead.
        if let Some(&a) = world_of.get(s + 8) {
            prefetch(&w.ids[a as usize]);
            prefetch(&w.points[a as usize]);
        }
        nodes.push(SuperPeerNode::new(w.ids[i as usize], w.points[i as usize], cfg.clone()));
    }
    let mut slot_index = IdIndex::with_capacity(n);
    for (s, &i) in world_of.iter().enumerate() {
        // World ids differ in their first 64 bits (`World::generate`), so every insert succeeds.
        slot_index.insert(&w.ids[i as usize], s as u32);
    }
    let lookup_cost = (usize::BITS - n.max(2).leading_zeros()) as u64;
    let dht = Dht::from_ids(world_of.iter().map(|&i| w.ids[i as usize]), 20);
    let mut sim = Sim {
        w,
        nodes,
        world_of,
        slot_of,
        slot_index,
        alive: vec![true; n],
        dht,
        rng: sim_rng,
        work: VecDeque::new(),
        timers: BinaryHeap::new(),
        armed: Default::default(),
        seq: 0,
        now: 0,
        lookup_cost,
        messages: 0,
        round_messages: 0,
        established_before: 0,
        lookups: 0,
        lookups_failed: BTreeMap::new(),
        rtt_measurements: 0,
        rtt_stalled: 0,
        by_kind: Vec::new(),
        effects: Vec::new(),
        token_moves: 0,
        round_moves: 0,
        attach_changes: 0,
        rejected: 0,
        max_members: 0,
        crashed_tokens: Vec::new(),
        churn: Churn::from_env(n, p.cfg.cluster_cap as usize),
        faults: None,
        inputs: [0; SpInput::KINDS.len()],
    };
    if p.faults.any() {
        // Its own generator: with the faults off, the run draws exactly what it drew without.
        let mut rng = ChaCha8Rng::seed_from_u64(p.seed ^ 0xfa17_5eed);
        let loaded: Vec<bool> = (0..n).map(|_| rng.gen::<f64>() < p.faults.loaded).collect();
        let fit_at: Vec<u32> = (0..n).map(|_| faults::exp(&mut rng, p.faults.unfit_rounds).round() as u32).collect();
        let learning = faults::Learning::new(&p.faults, &mut rng, || sim.nodes.iter().map(|x| x.point()).collect());
        let spread = p.faults.start_spread_s;
        let start_at: Vec<u32> =
            if spread > 0.0 { (0..n).map(|_| (rng.gen::<f64>() * spread) as u32).collect() } else { vec![0; n] };
        let watches =
            (0..n).map(|_| p.faults.head_watch.then(|| Box::new(HeadWatch::new(p.cfg.head_watch.watch())))).collect();
        sim.faults = Some(Box::new(FaultSim {
            cfg: p.faults.clone(),
            rng,
            loaded,
            late: vec![0.0; n],
            late_told: vec![0.0; n],
            fit_at,
            start_at,
            learning,
            drift: faults::Drift::new(&p.faults, || sim.nodes.iter().map(|x| x.point()).collect()),
            watches,
            resends: Vec::new(),
            lookups_due: BTreeMap::new(),
            lookups_asked: 0,
            lookup_busy: vec![0; n],
            lookup_waits: Vec::new(),
            gates: p.faults.gates.then(|| Gates::new(n, NodeSettings::of(&p.cfg))),
        }));
    }
    let tokens = p.cfg.method == overlay::superpeer::Method::RepulsionTokens;
    // Neighbours (a node's own inputs only: the order across nodes does not matter), then
    // Start in turn order.
    for s in 0..n {
        let i = sim.world_of[s] as usize;
        // The next node's neighbours' ids and points lie anywhere in the world: start loading
        // them now ([`super::prefetch`]).
        if let Some(&next) = sim.world_of.get(s + 1) {
            for j in w.neighbours_of(next as usize) {
                prefetch(&w.ids[j as usize]);
                prefetch(&w.points[j as usize]);
            }
        }
        for j in w.neighbours_of(i) {
            sim.deliver(s as u32, SpInput::PeerUp(w.info(j)));
        }
    }
    // Each node's nearest RTT (token placement, `overlay::superpeer::token`, "Measured access
    // delay"): the smallest of 3 jittered pings to each of its coordinate neighbours, as its
    // Vivaldi pings see them. Its own RNG stream, so the rest of the run draws the same
    // numbers with or without it.
    let mut ping_rng = ChaCha8Rng::seed_from_u64(p.seed ^ 0xacce_55de_1a7e);
    let nearest = tokens && p.cfg.tokens.access_weight > 0.0;
    for s in 0..n as u32 {
        if nearest {
            let i = sim.world_of[s as usize] as usize;
            let mut m = f64::INFINITY;
            for j in w.neighbours_of(i) {
                // `sample_rtt_ms` three times, with the pair's model RTT computed once.
                let base = w.model.rtt_ms(i, j as usize);
                for _ in 0..3 {
                    let sample = if j as usize == i { 0.0 } else { w.model.jittered_ms(base, &mut ping_rng) };
                    m = m.min(sample);
                }
            }
            if m.is_finite() && m > 0.0 {
                sim.deliver(s, SpInput::NearestRtt { rtt: m / 1000.0 });
            }
        }
        if sim.faults.as_ref().is_some_and(|f| f.fit_at[s as usize] > 0) {
            sim.deliver(s, SpInput::CoordinateFit { fit: false });
        }
        if let Some(q) = sim.faults.as_ref().and_then(|f| f.learning.as_ref()).and_then(|l| l.point(s as usize, 0)) {
            sim.deliver(s, SpInput::Coordinate(q));
        }
        // With the fault model's start spread, a later start comes in its round (`fault_inputs`).
        if sim.faults.as_ref().is_none_or(|f| f.start_at[s as usize] == 0) {
            sim.deliver(s, SpInput::Start);
        }
        sim.drain();
    }
    // A fixed sample of nodes (drawn as world indices, held as slots) for the RTT curve.
    let sample: Vec<u32> = (0..2000.min(n)).map(|_| sim.slot_of[rng.gen_range(0..n as u32) as usize]).collect();
    let mut stats: Vec<RoundStat> = Vec::new();
    let mut converged = None;
    let mut last_change = 0u32;
    for round in 1..=p.max_rounds {
        sim.run_round(round);
        let st = sim.round_stat(round, &sample, "converge");
        churn_round(&mut sim, round, n);
        let quiet = (n as u64 / 1000).max(1);
        if st.token_moves + st.attach_changes > quiet
            || st.attached_fraction < 1.0
            || (tokens && st.super_peers < st.heads)
        {
            last_change = round;
        }
        progress(round, &st);
        stats.push(st);
        if sim.stable(&stats, p.stable_rounds, tokens) {
            converged = Some(last_change);
            break;
        }
    }
    if sim.churn.is_some() {
        // The churn diagnostic: the holders still not promoted, and why .
        for n in sim.nodes.iter().filter(|n| n.is_head() && !n.is_super_peer()) {
            eprintln!("CHURN unpromoted {}: {}", n.id().short(), n.head_summary().unwrap_or_default());
        }
    }
    let messages_at_convergence = sim.messages;
    let lookups_at_convergence = sim.lookups;
    let mut lookups_per_node_by_purpose: BTreeMap<String, f64> = BTreeMap::new();
    for x in &sim.nodes {
        for (purpose, c) in x.lookups_by_purpose() {
            *lookups_per_node_by_purpose.entry(purpose.to_string()).or_default() += f64::from(c);
        }
    }
    for v in lookups_per_node_by_purpose.values_mut() {
        *v /= n.max(1) as f64;
    }
    let per_node = |c: u64| c as f64 / n.max(1) as f64;
    let lookups_failed_per_node_by_reason =
        sim.lookups_failed.iter().map(|(r, c)| (r.to_string(), per_node(*c))).collect();
    let (rtt_measurements_per_node, rtt_stalled_per_node) = (per_node(sim.rtt_measurements), per_node(sim.rtt_stalled));
    let excess: Vec<f64> = (0..sim.nodes.len())
        .filter(|&s| sim.alive[s])
        .filter_map(|s| {
            let node = &sim.nodes[s];
            let measured = node.attached_rtt()?;
            let h = sim.slot(&node.attached_to()?)?;
            let truth = sim.w.rtt_ms(sim.world_of[s], sim.world_of[h as usize]);
            Some(measured * 1000.0 - truth)
        })
        .collect();
    let head_measured_excess_ms = (!excess.is_empty()).then(|| excess.iter().sum::<f64>() / excess.len() as f64);
    let lookup_wait_ms = sim
        .faults
        .as_ref()
        .filter(|f| !f.lookup_waits.is_empty())
        .and_then(|f| overlay::stats::Summary::of(f.lookup_waits.iter().map(|&ms| f64::from(ms))).ok());
    // The outcome in world indices.
    let head_of: Vec<u32> = (0..n)
        .map(|i| match sim.head_index(sim.slot_of[i] as usize) {
            u32::MAX => u32::MAX,
            h => sim.world_of[h as usize],
        })
        .collect();
    let heads: Vec<u32> = (0..n as u32).filter(|&i| sim.nodes[sim.slot_of[i as usize] as usize].is_head()).collect();

    // Why members sit far from their nearest head, as their own state saw it (`--diagnose`).
    let far = p.diagnose.then(|| far_members(&sim, w, &heads, &head_of, &p.cfg));
    // Size-estimate quality.
    let mut errs: Vec<f64> =
        sim.nodes.iter().filter_map(|x| x.estimate()).map(|e| (e / n as f64 - 1.0).abs()).collect();
    errs.sort_by(|a, b| a.total_cmp(b));
    let wanted: Vec<u64> = sim.nodes.iter().map(|x| x.wanted()).collect();
    let node_struct_bytes = std::mem::size_of::<SuperPeerNode>();
    let heap: usize = sim.nodes.iter().map(|x| x.heap_bytes()).sum();
    let state_bytes_per_node = node_struct_bytes as f64 + heap as f64 / n.max(1) as f64;

    // Failures: crash a fraction of the super peers, run until stable again.
    let mut failure = None;
    if p.crash_fraction > 0.0 && !heads.is_empty() {
        let before = sim.roles();
        let mut victims = heads.clone();
        victims.shuffle(&mut rng);
        let k = ((heads.len() as f64 * p.crash_fraction).round() as usize).clamp(1, heads.len());
        victims.truncate(k);
        // Cluster views of the victims, to check who should win.
        let mut expected: BTreeMap<u32, NodeIdRankCheck> = BTreeMap::new();
        // `victims`, `expected` and its members are world indices; `vs` is a victim's slot.
        for &v in &victims {
            let vs = sim.slot_of[v as usize] as usize;
            let mut members: Vec<u32> = sim.nodes[vs].members().iter().filter_map(|m| w.index.get(&m.id)).collect();
            if members.is_empty() {
                // A member-less head's role goes to the backup it named.
                members.extend(sim.nodes[vs].backup().and_then(|b| w.index.get(&b)));
            }
            let heir = sim.nodes[vs].heir().and_then(|h| w.index.get(&h));
            expected.insert(v, NodeIdRankCheck { role: sim.nodes[vs].role(), members, heir });
        }
        // Off by default: what each victim's cluster knew at the crash, printed for the roles
        // that end up lost (`PEERAGE_SP_DIAG=1`; token conservation).
        let diag = std::env::var_os("PEERAGE_SP_DIAG").map(|_| crash_diagnostics(&sim, &victims));
        for &v in &victims {
            let vs = sim.slot_of[v as usize];
            sim.crashed_tokens.extend(sim.nodes[vs as usize].token().map(|(t, _)| t));
            sim.alive[vs as usize] = false;
            sim.dht.remove(&w.ids[v as usize], vs);
            if let Some(g) = sim.faults.as_mut().and_then(|f| f.gates.as_mut()) {
                g.crash(vs);
            }
        }
        let dead_ids: Vec<(u32, overlay::NodeId)> = victims.iter().map(|&v| (v, w.ids[v as usize])).collect();
        // Members learn of their head's crash from their head watch when it runs, else at once.
        let watched = p.faults.head_watch;
        for (v, id) in &dead_ids {
            let mut tell: Vec<u32> = if watched { Vec::new() } else { expected[v].members.clone() };
            tell.extend(w.neighbours_of(*v as usize));
            // Nodes that have the victim as neighbour learn it too (pings fail).
            for j in tell {
                let js = sim.slot_of[j as usize];
                if sim.alive[js as usize] {
                    sim.deliver(js, SpInput::PeerDown(*id));
                    sim.drain();
                }
            }
        }
        let start = stats.last().map_or(0, |s| s.round);
        let mut recovered = None;
        let mut last = start;
        for round in start + 1..=start + p.recovery_rounds {
            sim.run_round(round);
            let st = sim.round_stat(round, &sample, "recover");
            churn_round(&mut sim, round, n);
            if sim.churn.is_some() {
                // And the heads not promoted (recreated tokens and their first move).
                for x in sim.nodes.iter().filter(|x| x.is_head() && !x.is_super_peer()).take(10) {
                    eprintln!("CHURN unpromoted {}: {}", x.id().short(), x.head_summary().unwrap_or_default());
                }
            }
            if st.token_moves + st.attach_changes > (n as u64 / 1000).max(1) || st.attached_fraction < 1.0 {
                last = round;
            }
            progress(round, &st);
            stats.push(st);
            if sim.stable(&stats, p.stable_rounds, false) {
                recovered = Some(last - start);
                break;
            }
        }
        let after = sim.roles();
        let lost = before.keys().filter(|k| !after.contains_key(*k)).count() as u64;
        let dup = after.values().filter(|v| v.len() > 1).count() as u64;
        if let Some(d) = &diag {
            for (k, text) in d {
                if !after.contains_key(k) {
                    eprintln!("LOST {text}");
                    print_after(&sim, text);
                }
            }
            for (k, holders) in after.iter().filter(|(_, v)| v.len() > 1) {
                let hs: Vec<String> = holders
                    .iter()
                    .map(|&i| {
                        let n = &sim.nodes[sim.slot_of[i as usize] as usize];
                        format!("{} {:?} members {}", short(&n.id()), n.role(), n.members().len())
                    })
                    .collect();
                eprintln!("DOUBLED {:02x?} held by {hs:?} (before: {:?})", &k[..8], d.get(k));
            }
        }
        // Did the highest-ranked live member of each dead head's cluster take its role? The
        // heir ranks highest, then the highest id (`overlay::superpeer::heir`).
        let mut reelected = 0;
        let mut highest = 0;
        for ck in expected.values() {
            let Some(role) = ck.role else { continue };
            let key = role_key(&role);
            let Some(holders) = after.get(&key) else { continue };
            reelected += 1;
            let best = ck
                .members
                .iter()
                .filter(|&&m| sim.alive[sim.slot_of[m as usize] as usize])
                .max_by_key(|&&m| (Some(m) == ck.heir, w.ids[m as usize]));
            if best.is_some_and(|b| holders.contains(b)) {
                highest += 1;
            }
        }
        let unattached = (0..n).filter(|&i| sim.alive[i] && sim.head_index(i) == u32::MAX).count() as u64;
        failure = Some(FailureOutcome {
            crashed: k as u64,
            recovery_rounds: recovered,
            unattached_after: unattached,
            roles_before: before.len() as u64,
            roles_after: after.len() as u64,
            roles_lost: lost,
            roles_duplicated: dup,
            reelected,
            reelected_highest_rank: highest,
        });
    }
    let by_kind = sim.by_kind.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let alive = sim.alive.clone();
    let connections = sim.faults.as_mut().and_then(|f| f.gates.as_mut()).map(|g| g.finish(&alive));
    let inputs_by_kind = SpInput::KINDS.iter().zip(sim.inputs.iter()).map(|(k, c)| (k.to_string(), *c)).collect();
    Ok(ProtoOutcome {
        head_of,
        heads,
        converged_round: converged,
        convergence_s: converged.map(|r| r as f64 * TICK_US as f64 / 1e6),
        messages: messages_at_convergence,
        messages_per_node: messages_at_convergence as f64 / n.max(1) as f64,
        lookups: lookups_at_convergence,
        lookup_messages_per_node: (lookups_at_convergence * lookup_cost) as f64 / n.max(1) as f64,
        lookups_per_node_by_purpose,
        lookups_failed_per_node_by_reason,
        rtt_measurements_per_node,
        rtt_stalled_per_node,
        head_measured_excess_ms,
        lookup_wait_ms,
        messages_by_kind: by_kind,
        token_moves: sim.token_moves,
        rejected: sim.rejected,
        estimate_error_mean: errs.iter().sum::<f64>() / errs.len().max(1) as f64,
        estimate_error_p95: errs.get(errs.len() * 95 / 100).copied().unwrap_or(f64::NAN),
        wanted_min: wanted.iter().copied().min().unwrap_or(0),
        wanted_max: wanted.iter().copied().max().unwrap_or(0),
        max_members_seen: sim.max_members,
        node_struct_bytes,
        state_bytes_per_node,
        failure,
        connections,
        inputs_by_kind,
        far,
        rounds: stats,
    })
}

/// The churn diagnostic's end of a round (`PEERAGE_SP_CHURN`): who is unattached now and
/// why, then the state of at most 10 of them.
fn churn_round(sim: &mut Sim<'_>, round: u32, n: usize) {
    let Some(mut c) = sim.churn.take() else { return };
    c.unattached_now((0..n as u32).filter(|&i| sim.head_index(i as usize) == u32::MAX && sim.alive[i as usize]));
    c.end_round(round);
    for i in (0..n).filter(|&i| sim.head_index(i) == u32::MAX && sim.alive[i]).take(10) {
        let x = &sim.nodes[i];
        eprintln!("CHURN unattached {}: {}", x.id().short(), x.attach_summary());
    }
    sim.churn = Some(c);
}

fn short(id: &overlay::NodeId) -> String {
    id.0[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// For each victim (by role key): its role, members, backup, and every live node that holds
/// its cluster view, is attached to it or is its backup (see `PEERAGE_SP_DIAG` in `run`).
fn crash_diagnostics(sim: &Sim<'_>, victims: &[u32]) -> BTreeMap<[u8; 32], String> {
    let vset: BTreeMap<overlay::NodeId, u32> =
        victims.iter().map(|&v| (sim.nodes[sim.slot_of[v as usize] as usize].id(), v)).collect();
    let mut seen: BTreeMap<overlay::NodeId, Vec<String>> = BTreeMap::new();
    for (i, n) in sim.nodes.iter().enumerate() {
        if !sim.alive[i] || vset.contains_key(&n.id()) {
            continue;
        }
        let r = n.round();
        for (what, h) in
            [("view", n.view_head()), ("attached", n.attached_to()), ("backup", n.backup_for().map(|(h, _)| h))]
        {
            if let Some(h) = h.filter(|h| vset.contains_key(h)) {
                let extra = match what {
                    "backup" => format!(" age {}", r.wrapping_sub(n.backup_for().map_or(0, |b| b.1))),
                    _ => String::new(),
                };
                seen.entry(h).or_default().push(format!(
                    "{what}:{}{} head={} att={:?} view={:?}",
                    short(&n.id()),
                    extra,
                    n.is_head(),
                    n.attached_to().map(|a| short(&a)),
                    n.view_head().map(|a| short(&a))
                ));
            }
        }
    }
    let mut out = BTreeMap::new();
    for (id, &v) in &vset {
        let n = &sim.nodes[sim.slot_of[v as usize] as usize];
        let Some(role) = n.role() else { continue };
        let members: Vec<String> = n.members().iter().map(|m| short(&m.id)).collect();
        let backup_state = n.backup().and_then(|b| sim.slot(&b)).map(|b| {
            let x = &sim.nodes[b as usize];
            format!(
                "victim={} head={} att={:?} view={:?} backup_for={:?} election={:?}",
                vset.contains_key(&x.id()),
                x.is_head(),
                x.attached_to().map(|a| short(&a)),
                x.view_head().map(|a| short(&a)),
                x.backup_for().map(|(a, r)| (short(&a), r)),
                x.election_for().map(|a| short(&a))
            )
        });
        out.insert(
            role_key(&role),
            format!(
                "victim {} round {} role {role:?} sp={} members {:?} backup {:?} [{backup_state:?}] | {:?}",
                short(id),
                n.round(),
                n.is_super_peer(),
                members,
                n.backup().map(|b| short(&b)),
                seen.get(id)
            ),
        );
    }
    out
}

/// The state, after recovery, of the nodes a lost role's diagnostic line names.
fn print_after(sim: &Sim<'_>, text: &str) {
    for (i, n) in sim.nodes.iter().enumerate() {
        let s = short(&n.id());
        if text.contains(&format!(":{s}")) {
            eprintln!(
                "   after: {s} alive={} head={} role={:?} att={:?} view={:?} election={:?} backup_for={:?}",
                sim.alive[i],
                n.is_head(),
                n.role(),
                n.attached_to().map(|a| short(&a)),
                n.view_head().map(|a| short(&a)),
                n.election_for().map(|a| short(&a)),
                n.backup_for().map(|(a, r)| (short(&a), r))
            );
        }
    }
}

struct NodeIdRankCheck {
    role: Option<HeadRole>,
    members: Vec<u32>,
    /// The member the head named heir (first in its views), world index.
    heir: Option<u32>,
}

fn role_key(r: &HeadRole) -> [u8; 32] {
    match r {
        HeadRole::Slot { key } => key.0,
        HeadRole::Token { token: TokenId(t), .. } => {
            let mut k = [0u8; 32];
            k[..8].copy_from_slice(&t.to_be_bytes());
            k[31] = 1;
            k
        }
    }
}

//! One Peerage node: the libp2p swarm, the member directory, the election driver, the peer
//! manager and the status/metrics outputs, in one event loop.
//!
//! The loop waits on three things: a swarm event, the earliest election timer or the
//! periodic tick (`members_sync_ms`), and shutdown. Everything the elections learn comes in
//! as `overlay::Input`s:
//! - `Message` from the election request-response protocol or from an addressed gossipsub
//!   election broadcast (`node/src/election/driver.rs` explains the routing);
//! - `Timer` when a timer armed through `Effect::SetTimer` is due;
//! - `Membership` when the member directory changed (at most once per tick);
//! - `SendFailed` when a point-to-point election request fails; a failure to *dial* the
//!   peer also reports it `PeerDown`. A request whose connection closed under it, to a peer
//!   that was not silent, is first sent again, for up to 2 s, when the algorithm takes copies
//!   (`overlay::detect::failure::after_election_failure`); one the live peer rejected is
//!   sent again for up to 2 s and then dropped (`after_election_rejected`);
//! - `PeerUp`/`PeerDown`: for the echo election, which runs over the actual topology, on the
//!   first connection to / loss of the last connection to a peer; for the other algorithms
//!   `PeerDown` is reported only when a peer is lost for good: the connection to the leader
//!   closed with an error and a redial failed, or a dial failed; `PeerUp` when a peer reported
//!   down connects again or is heard from;
//! - a silent peer (frozen, cut off) keeps its connection open in libp2p: a failed ping, or an
//!   election request unanswered for `request_timeout_ms` (libp2p's own timeout starts only
//!   once the peer has opened a stream), closes the peer's connections, and the close counts
//!   as broken (the leader is redialled, and reported down if the redial fails).
//!
//! When elections start (the algorithms leave it to the application):
//! - nothing starts before the member directory has *settled*: unchanged for `settle_ms` and
//!   the last few digest comparisons with random peers equal (`node/src/directory/members.rs`), the node's
//!   local evidence that every node has the same group and so the same highest member;
//! - start-up: the highest-ranked member then starts an election (`Input::Start`); the
//!   others wait, so that start-up costs one election, not N concurrent ones;
//! - fallback: a node that names no leader `fallback_ms` + 20 ms per member (an election over
//!   N members takes O(N) hops) + random up to `fallback_ms` after settling, and has heard no
//!   election message for `fallback_ms`, starts one itself;
//! - a higher-ranked member appears: it is the highest member it knows, so it starts an
//!   election once settled if the leader it names ranks lower;
//! - the leader is reported down (`PeerDown`) and, one answer+coordinator timeout later, the
//!   node still names it and is not in an election: it starts one. The algorithms' own
//!   heartbeats (T1) cover leaders that no one is connected to;
//! - a *late joiner*: a node that is not the highest member, names no leader,
//!   has started nothing yet, and whose directory has not changed since its first snapshot
//!   of the group (nobody joined after it, so the swarm had settled, and elected, before it
//!   came) runs the algorithm's own recovery rule (`Input::Recover`) as soon as it has
//!   settled, instead of waiting for the fallback. Per algorithm: bully
//!   holds an election (seeds 000/001: "a process that comes back up holds an election"; the
//!   coordinator answers and announces itself again); fast bully sends `IamUp` and admits the
//!   coordinator named in the `View`s (seed 002); the list ring holds an election at epoch
//!   0 (the ring's recovery rule); Chang-Roberts holds its recovery election (epoch 1: while
//!   the swarm is still at its start-up epoch 1 it is not answered as a lagging process's,
//!   and the joiner learns the leader only after its lap timeout, 12.6 s measured; weak);
//!   Villadangos starts an epoch; echo starts an echo election over its neighbours. With heartbeats on, a bully-family joiner usually admits
//!   the coordinator's `Alive` while it settles and so never needs to recover. Nodes that
//!   join together see each other arrive and take the fallback path.
//!
//! Node-initiated starts are at least `settle_ms + fallback_ms` apart.
//!
//! Connections: the member directory syncs by digest anti-entropy with one random
//! peer per period (`node/src/directory/members.rs`); Kademlia's routing table is filled from the directory
//! without dialling (`kad_add`), and from identify with peers that serve our DHT protocol
//! (`serves_kad`: a peer that does not cannot answer lookups and is never handed out); for the ring algorithms the peer manager keeps the
//! connections to both ring neighbours, so an election lap does not dial one connection per
//! hop; one-to-many election sends go over the gossipsub mesh (`route`). Once settled a node
//! therefore dials only when it falls below `target_low`, and once per rotation period
//! (`limits.rotate_ms`), when the peer manager swaps its oldest prunable connection for a
//! random member so that the Vivaldi coordinate learns from more than a fixed few peers.
//!
//! Start-up under load (measured at N = 1,000 in one process on a busy machine):
//! a bootstrap round whose dials all fail is retried after 1, 2 and 4 s before the node gives
//! up (a handshake can time out although the peer is there; without the retries such a node
//! stays alone for good), and one that meanwhile has peers carries on. Changed directory entries can also be
//! pushed as rumours once per tick (`node/src/directory/members.rs`, off by default), and the O(N) work on a directory change
//! (group for the election, routing table, address book) runs at most every 2 s while the
//! directory changes every tick.

use crate::config::NodeConfig;
use crate::coords::driver::{CoordsConfig, CoordsDriver, SampleDelays};
use crate::directory::members::{node_id_of, Directory, ACK_EQUAL};
use crate::election::driver::{group_sends, BroadcastFrame, ElectionDriver, Recipients, BROADCAST_VERSION};
use crate::net::behaviour::{build_swarm_with_latency, election_topic, Behaviour, BehaviourEvent, TransportKind};
use crate::net::codec::{Frame, InboundBudget, ReadFailure, ACK_OK, ACK_REJECTED};
use crate::net::guard::Guard;
use crate::net::latency_transport::EmulatedLink;
use crate::net::send_failure::{classify, DialRefusal};
use crate::runtime::clock::Clock;
use crate::runtime::metrics::Metrics;
use crate::runtime::status::{Probe, Snapshot, StatusSink};
use crate::superpeer::driver::SuperPeerDriver;
use futures::StreamExt;
use libp2p::identity::Keypair;
use libp2p::multiaddr::Protocol;
use libp2p::swarm::{dial_opts::DialOpts, ConnectionError, ConnectionId, SwarmEvent};
use libp2p::{gossipsub, identify, kad, request_response, Multiaddr, PeerId, Swarm};
use overlay::connections::{Keep, PeerInfo, PeerManager, Policy};
use overlay::detect::failure::{after_election_failure, after_election_rejected, ElectionNext, ElectionSent};
use overlay::detect::stall::{StallMeter, LATENESS_WINDOW};
use overlay::detect::start::{Facts, Kickoff, StartConfig, StartPolicy};
use overlay::detect::Resends;
use overlay::directory::{check_election, Refusal, Severity, SignedBroadcast, SyncPacer};
use overlay::reputation::Offence;
use overlay::wire::{self, Body};
use overlay::{Algorithm, Effect, Input, Message, NodeId, Rank};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rustc_hash::FxHashSet;
use serde_json::json;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tracing::{debug, info, warn};

/// Inputs processed per batch before yielding back to the swarm (loopback and synthetic
/// failures), so that a misbehaving algorithm cannot spin the loop forever.
const MAX_CHAINED_INPUTS: usize = 10_000;
/// Peer manager period.
pub const PEER_MANAGER_PERIOD: Duration = Duration::from_secs(2);
/// How long the loop's tick lateness is remembered: longer than any ping's round trip
/// (libp2p ping times out after 20 s).
const STALL_HORIZON: Duration = Duration::from_secs(30);

/// Everything needed to start a node.
pub struct NodeOptions {
    pub cfg: NodeConfig,
    pub key: Keypair,
    pub transport: TransportKind,
    pub status: StatusSink,
    pub metrics: Option<Arc<Metrics>>,
    pub seed: u64,
    /// Emulated link latency (in-process swarms only; `node/src/net/latency_transport.rs`).
    pub latency: Option<EmulatedLink>,
}

/// A running node's public face.
pub struct NodeHandle {
    pub peer_id: PeerId,
    pub node_id: NodeId,
    pub rank: Rank,
    pub probe: Arc<Probe>,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl NodeHandle {
    /// Ask the node to stop cleanly and wait for it.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
    }
    /// Crash the node: drop it at once (no goodbye), like a killed process.
    pub fn crash(self) {
        self.task.abort();
    }
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
    /// Wait until the node stops on its own (a fatal error, see `Snapshot::fatal`).
    pub async fn wait(&mut self) {
        let _ = (&mut self.task).await;
    }
}

/// An election request on its way.
struct Pending {
    to: NodeId,
    msg: Message,
    peer: PeerId,
    at: Instant,
    /// How many copies were sent before it after ambiguous failures.
    resends: u8,
    /// Its peer went silent and the node closed the connection (`Node::mark_silent`).
    silent: bool,
}

/// An election message to send again (`ElectionNext::SendAgainAfter`).
struct Resend {
    to: NodeId,
    msg: Message,
    resends: u8,
}

struct Conn {
    since: Instant,
    last_election_use: Option<Instant>,
}

struct Node {
    swarm: Swarm<Behaviour>,
    cfg: NodeConfig,
    me: Rank,
    peer_id: PeerId,
    scope_topic: gossipsub::IdentTopic,
    directory: Directory,
    fed_version: u64,
    pacer: SyncPacer,
    /// Members already offered to the routing table, by the top 64 bits of their node id (a
    /// SHA-256: two members of a million share them with odds of about 3e-8, and the second
    /// would only be left out of the routing table). A peer id is 80 bytes: at 1,000 nodes in
    /// one process that set was 0.19 GB. Hashed with Fx (a multiply): the keys are uniform
    /// already, and the set is probed once per member at every feed.
    kad_seen: FxHashSet<u64>,
    driver: ElectionDriver,
    /// When to start elections, and the leader's failure reports (`overlay::detect::start`).
    start: StartPolicy,
    clock: Clock,
    echo: bool,
    /// Election requests in flight: recipient, message, peer, when sent.
    pending: HashMap<request_response::OutboundRequestId, Pending>,
    /// Election messages waiting to be sent again.
    resends: Resends<Resend>,
    queue: VecDeque<Input>,
    conns: HashMap<PeerId, Conn>,
    /// Which connections to close and open (`overlay::connections::manager`).
    peer_manager: PeerManager,
    last_leader: Option<NodeId>,
    closing: HashSet<PeerId>,
    /// Peers whose connections this node closed because they went silent (a failed ping, or
    /// an election request unanswered for the request timeout): a close that counts as
    /// broken.
    silent: HashSet<PeerId>,
    rng: StdRng,
    status: StatusSink,
    metrics: Option<Arc<Metrics>>,
    probe: Arc<Probe>,
    snap: Snapshot,
    /// Signs this node's broadcasts (`overlay::directory::broadcast`).
    key: Keypair,
    /// When the routing table's entries were last counted for the snapshot (a walk over
    /// every bucket: done at most once per status period, not on every refresh).
    rt_counted: Option<Instant>,
    last_peers_reported: usize,
    last_members_reported: usize,
    bootstrap_dials: HashSet<ConnectionId>,
    bootstrap_errors: Vec<String>,
    bootstrap_ok: bool,
    /// Rounds of bootstrap dials so far, and when the next round is due after all dials of
    /// the last one failed (`retry_bootstrap`).
    bootstrap_rounds: u32,
    bootstrap_retry_at: Option<Instant>,
    /// When the directory was last fed into the election (`tick`).
    last_membership_feed: Option<Instant>,
    /// Inbound frames' memory (`node/src/net/codec.rs`).
    budget: Arc<InboundBudget>,
    /// Misbehaviour reports and bans (`node/src/net/guard.rs`).
    guard: Guard,
    own_bad_frames: u64,
    last_election_rx: Option<overlay::Time>,
    /// The directory version when this node first knew another member; still the version
    /// once settled means nobody joined after it: it joined a swarm that had settled
    /// (`maybe_start`, late joiner).
    first_group_version: Option<u64>,
    /// Vivaldi coordinates from ping (`node/src/coords/driver.rs`).
    coords: CoordsDriver,
    /// Emulated link latency, when on: its recent lateness gates ping samples.
    latency: Option<EmulatedLink>,
    /// How late this node's loop ran its ticks: gates ping samples (`overlay::detect::stall`).
    stall: StallMeter,
    /// Super-peer selection and clusters (`node/src/superpeer/driver.rs`), when configured.
    superpeer: Option<SuperPeerDriver>,
}

/// Build the swarm, start listening and dialling, and spawn the event loop on the current
/// tokio runtime.
pub fn spawn(opts: NodeOptions) -> anyhow::Result<NodeHandle> {
    let peer_id = opts.key.public().to_peer_id();
    let node_id = node_id_of(&peer_id);
    let me = Rank::new(opts.cfg.priority, node_id);
    let bits = crate::identity::puzzle_bits(&opts.key);
    anyhow::ensure!(
        bits >= opts.cfg.directory.id_difficulty,
        "this node's id solves the id puzzle to {bits} bits, below the scope's id_difficulty {}: every member would refuse its record (generate the key with `identity::generate`)",
        opts.cfg.directory.id_difficulty
    );
    let budget =
        InboundBudget::with_share(opts.cfg.limits.max_inbound_bytes, opts.cfg.limits.max_inbound_bytes_per_peer);
    let mut directory = Directory::new(opts.key.clone(), opts.cfg.priority, opts.cfg.directory.bounds(), vec![])?;
    directory.set_rumours(opts.cfg.timing.members_push_fanout > 0);
    let key = opts.key.clone();
    let mut swarm = build_swarm_with_latency(opts.key, &opts.cfg, opts.transport, &budget, opts.latency.as_ref())?;
    let coords_cfg = CoordsConfig::default();
    let coords =
        CoordsDriver::new(crate::coords::driver::node_vivaldi_config(), coords_cfg, opts.seed ^ 0x5eed_c00d_5eed_c00d)?;
    for addr in &opts.cfg.listen {
        swarm.listen_on(addr.clone()).map_err(|e| {
            // `TransportError::Other` displays as nothing: the OS reason is the inner error.
            let reason = match &e {
                libp2p::TransportError::Other(io) => io.to_string(),
                other => other.to_string(),
            };
            anyhow::anyhow!("cannot listen on {addr}: {reason}")
        })?;
    }
    let topic = election_topic(opts.cfg.scope);
    swarm
        .behaviour_mut()
        .gossipsub
        .subscribe(&topic)
        .map_err(|e| anyhow::anyhow!("cannot subscribe to the election topic: {e}"))?;
    let mut bootstrap_dials = HashSet::new();
    let mut bootstrap_errors = Vec::new();
    for b in &opts.cfg.bootstrap {
        if let Some(p) = b.peer {
            swarm.behaviour_mut().gate.want(p);
            // Not into the routing table yet: it enters when identify shows that it serves our
            // DHT protocol, like every other peer (`on_behaviour_event`), so a bootstrap address
            // that leads to a non-DHT peer is never handed out in FIND_NODE answers.
            swarm.behaviour_mut().gate.add_addresses(p, [b.addr.clone()]);
        }
        let dial = match b.peer {
            Some(p) => DialOpts::peer_id(p).addresses(vec![b.addr.clone()]).build(),
            None => DialOpts::unknown_peer_id().address(b.addr.clone()).build(),
        };
        let id = dial.connection_id();
        match swarm.dial(dial) {
            Ok(()) => {
                bootstrap_dials.insert(id);
            }
            Err(e) => {
                warn!(addr = %b.addr, "cannot dial bootstrap address: {e}");
                bootstrap_errors.push(format!("{}: {e}", b.addr));
            }
        }
    }
    if !opts.cfg.bootstrap.is_empty() && bootstrap_dials.is_empty() {
        anyhow::bail!("none of the bootstrap addresses can be dialled: {}", bootstrap_errors.join("; "));
    }
    let clock = Clock::new();
    // The start policy below starts elections, a leaderless node's included.
    let election = if opts.cfg.timing.leader_election {
        opts.cfg.election.with_start_policy()
    } else {
        opts.cfg.election.answering_only()
    };
    let driver = ElectionDriver::new(me, &election, opts.seed, clock);
    let start = StartPolicy::new(StartConfig {
        settle: Duration::from_millis(opts.cfg.timing.settle_ms),
        fallback: Duration::from_millis(opts.cfg.timing.fallback_ms),
        grace: Duration::from_millis(opts.cfg.election.answer_timeout_ms + opts.cfg.election.coordinator_timeout_ms),
        redial_timeout: Duration::from_millis(opts.cfg.limits.request_timeout_ms),
        enabled: opts.cfg.timing.leader_election,
    });
    let probe = Arc::new(Probe::default());
    let (tx, rx) = watch::channel(false);
    let now = Instant::now();
    let superpeer =
        opts.cfg.superpeer.clone().map(|sp| SuperPeerDriver::new(peer_id, sp, opts.seed, opts.status.clone(), clock));
    let node = Node {
        swarm,
        me,
        peer_id,
        scope_topic: topic,
        directory,
        fed_version: 0,
        pacer: SyncPacer::new(
            Duration::from_millis(opts.cfg.timing.members_sync_ms),
            Duration::from_millis(opts.cfg.timing.members_sync_max_ms),
            clock.at(now),
        ),
        kad_seen: FxHashSet::default(),
        driver,
        start,
        clock,
        echo: opts.cfg.election.algorithm == Algorithm::Echo,
        pending: HashMap::new(),
        resends: Resends::default(),
        queue: VecDeque::new(),
        conns: HashMap::new(),
        peer_manager: PeerManager::new(Policy {
            target_low: opts.cfg.limits.target_low as usize,
            target_high: opts.cfg.limits.target_high as usize,
            prune_min_age: Duration::from_millis(opts.cfg.limits.prune_min_age_ms),
            election_keep: Duration::from_millis(opts.cfg.limits.election_keep_ms),
            rotate_every: opts.cfg.limits.rotate_every(opts.cfg.timing.ping_s),
        }),
        last_leader: None,
        closing: HashSet::new(),
        silent: HashSet::new(),
        rng: StdRng::seed_from_u64(opts.seed ^ 0x9e37_79b9_7f4a_7c15),
        status: opts.status,
        metrics: opts.metrics,
        probe: probe.clone(),
        snap: Snapshot::default(),
        key,
        rt_counted: None,
        last_peers_reported: 0,
        last_members_reported: 0,
        bootstrap_dials,
        bootstrap_errors,
        bootstrap_ok: false,
        bootstrap_rounds: 1,
        bootstrap_retry_at: None,
        last_membership_feed: None,
        budget,
        guard: Guard::default(),
        own_bad_frames: 0,
        last_election_rx: None,
        first_group_version: None,
        coords,
        latency: opts.latency,
        stall: StallMeter::new(tick_period(&opts.cfg), STALL_HORIZON),
        superpeer,
        cfg: opts.cfg,
    };
    node.status.emit(
        "started",
        json!({ "node_id": node_id.to_string(), "priority": me.priority, "algorithm": node.cfg.election.algorithm.name() }),
    );
    let task = tokio::spawn(node.run(rx));
    Ok(NodeHandle { peer_id, node_id, rank: me, probe, shutdown: tx, task })
}

/// Period of the node's housekeeping tick (also the stall meter's resolution).
fn tick_period(cfg: &NodeConfig) -> Duration {
    Duration::from_millis(cfg.timing.members_sync_ms.max(50))
}

impl Node {
    async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let tick = tick_period(&self.cfg);
        let mut next_tick = Instant::now() + tick;
        let mut next_manage = Instant::now() + PEER_MANAGER_PERIOD;
        let mut next_status = Instant::now() + Duration::from_millis(self.cfg.timing.status_ms.max(100));
        loop {
            let wake = self.driver.next_deadline().map_or(next_tick, |d| d.min(next_tick));
            let wake = self.superpeer.as_ref().map_or(wake, |sp| wake.min(sp.next_deadline()));
            let wake = self.resends.next_due().map_or(wake, |t| wake.min(self.clock.instant(t)));
            tokio::select! {
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() {
                        break;
                    }
                }
                ev = self.swarm.select_next_some() => {
                    self.on_swarm_event(ev);
                    self.stop_kad_walks();
                }
                _ = tokio::time::sleep_until(wake.into()) => {}
            }
            self.misread();
            if let Some(f) = &self.snap.fatal {
                tracing::error!("{f}");
                self.status.emit("fatal", json!({ "error": f }));
                self.probe.set(self.snap.clone());
                return;
            }
            let now = Instant::now();
            for t in self.driver.take_due(now) {
                self.feed(Input::Timer(t));
            }
            for r in self.resends.take_due(self.clock.at(now)) {
                self.unicast_attempt(r.to, r.msg, r.resends);
            }
            if let Some(sp) = self.superpeer.as_mut() {
                if now >= sp.next_deadline() {
                    // The application coordinate (`node/src/coords/driver.rs`, "Application coordinate").
                    let point = overlay::superpeer::Point::from(self.coords.app_coordinate());
                    let late = self.stall.worst_since(self.clock.at(now.checked_sub(LATENESS_WINDOW).unwrap_or(now)));
                    // The super-peer selection waits for the directory that fills the
                    // routing table (`overlay::superpeer::vicinity::table_ready`).
                    let settled = !sp.is_started()
                        && self.directory.settled(now, Duration::from_millis(self.cfg.timing.settle_ms));
                    sp.poll(&mut self.swarm, &self.directory, now, point, self.coords.is_fit(), late, settled);
                }
            }
            if now >= next_tick {
                self.stall.record(self.clock.at(next_tick), self.clock.at(now));
                next_tick = now + tick;
                self.tick(now);
            }
            if now >= next_manage {
                next_manage = now + PEER_MANAGER_PERIOD;
                self.manage_peers(now);
            }
            if now >= next_status {
                next_status = now + Duration::from_millis(self.cfg.timing.status_ms.max(100));
                if self.status.is_enabled() {
                    self.status.emit("status", json!(self.snap));
                }
            }
        }
        self.status.emit("shutdown", json!({}));
        info!(peer = %self.peer_id, "node stopped");
    }

    // ---------------------------------------------------------------- elections

    /// Feed one input and everything it causes (loopback sends, synthetic failures).
    /// Returns true when the state machine rejected a message of `input`'s sender.
    fn feed(&mut self, input: Input) -> bool {
        let sender = if let Input::Message { from, .. } = &input { Some(*from) } else { None };
        let mut rejected = false;
        self.queue.push_back(input);
        let mut n = 0;
        while let Some(i) = self.queue.pop_front() {
            n += 1;
            if n > MAX_CHAINED_INPUTS {
                warn!("more than {MAX_CHAINED_INPUTS} chained election inputs; dropping the rest");
                self.queue.clear();
                break;
            }
            debug!(input = ?i, "election input");
            let effects = self.driver.feed(i);
            rejected |= effects.iter().any(|e| matches!(e, Effect::Rejected { from, .. } if Some(*from) == sender));
            self.apply(effects);
        }
        self.after_election_change();
        rejected
    }

    fn apply(&mut self, effects: Vec<Effect>) {
        for (msg, to) in group_sends(&effects) {
            self.route(msg, to);
        }
        for e in effects {
            match e {
                Effect::ElectionStarted => {
                    if let Some(m) = &self.metrics {
                        m.elections_started.inc();
                    }
                    self.status.emit("election_started", json!({ "state": self.driver.state() }));
                }
                Effect::Rejected { from, reason, offence } => {
                    debug!(from = %from.short(), reason, "election message rejected");
                    self.status.emit("rejected", json!({ "from": from.to_string(), "reason": reason }));
                    // A lie of its sender, as the state machine judged it (for example a
                    // `Coordinator` the live coordinator's beat contradicted).
                    if let Some(o) = offence {
                        if let Some(peer) = self.directory.peer_of(&from) {
                            self.guard.report(&mut self.swarm, peer, o);
                        }
                    }
                }
                Effect::Leader(l) if l == self.me.id => {
                    if let Some(m) = &self.metrics {
                        m.elections_won.inc();
                    }
                }
                _ => {}
            }
        }
    }

    fn after_election_change(&mut self) {
        let leader = self.driver.leader();
        if leader != self.last_leader {
            let old = self.last_leader.map(|l| l.to_string());
            let new = leader.map(|l| l.to_string());
            if let Some(m) = &self.metrics {
                m.set_leader(old.as_deref(), new.as_deref(), leader == Some(self.me.id));
            }
            let leader_peer = leader.and_then(|l| self.directory.peer_of(&l)).map(|p| p.to_string());
            info!(leader = ?leader.map(|l| l.short()), group = self.driver.group().len(), me = %self.me.id.short(), "leader changed");
            self.status.emit(
                "leader",
                json!({ "leader": new, "leader_peer": leader_peer, "previous": old,
                        "is_me": leader == Some(self.me.id), "state": self.driver.state() }),
            );
            self.last_leader = leader;
            self.start.leader_changed(leader);
        }
        self.refresh_snapshot();
    }

    /// Carry out one grouped send (see `node/src/election/driver.rs` for the routing choice).
    fn route(&mut self, msg: Message, to: Vec<NodeId>) {
        let kind = msg.kind();
        debug!(kind, to = ?to.iter().map(|t| t.short()).collect::<Vec<_>>(), "election send");
        let far =
            to.iter().filter(|id| self.directory.peer_of(id).is_none_or(|p| !self.swarm.is_connected(&p))).count();
        // Echo runs over the actual topology and refuses messages from non-neighbours: it
        // only ever sends point to point.
        let broadcast_min = 3;
        if !self.echo && to.len() >= broadcast_min && far * 2 >= to.len() {
            let recipients = Recipients::describe(self.driver.group(), self.me, &to);
            match self.broadcast(&msg, recipients) {
                Ok(()) => {
                    self.snap.broadcasts_sent += 1;
                    self.snap.messages_sent += to.len() as u64;
                    if let Some(m) = &self.metrics {
                        m.message("sent", kind);
                    }
                    return;
                }
                Err(e) => debug!("broadcast of {kind} failed ({e}); sending point to point"),
            }
        }
        for id in to {
            self.unicast(id, msg.clone());
        }
    }

    fn broadcast(&mut self, msg: &Message, to: Recipients) -> anyhow::Result<()> {
        let frame = wire::encode(&Body::Election { scope: self.cfg.scope, msg: msg.clone() })?;
        let payload = postcard::to_stdvec(&BroadcastFrame { version: BROADCAST_VERSION, to, frame })?;
        let signed = SignedBroadcast::sign(&self.key, self.directory.wall_us(Instant::now()), payload)?;
        let bytes = postcard::to_stdvec(&signed)?;
        self.swarm.behaviour_mut().gossipsub.publish(self.scope_topic.clone(), bytes)?;
        Ok(())
    }

    fn unicast(&mut self, to: NodeId, msg: Message) {
        self.unicast_attempt(to, msg, 0);
    }

    /// Sends `msg` to `to` point to point; `resends` counts the copies sent before it after
    /// ambiguous failures (`overlay::detect::failure::after_election_failure`).
    fn unicast_attempt(&mut self, to: NodeId, msg: Message, resends: u8) {
        if let Some(m) = &self.metrics {
            m.message("sent", msg.kind());
        }
        self.snap.messages_sent += 1;
        if to == self.me.id {
            self.queue.push_back(Input::Message { from: self.me.id, msg });
            return;
        }
        let Some(member) = self.directory.member_of(&to).cloned() else {
            debug!(to = %to.short(), "election message to an unknown member");
            self.queue.push_back(Input::SendFailed { to, msg });
            return;
        };
        let bytes = match wire::encode(&Body::Election { scope: self.cfg.scope, msg: msg.clone() }) {
            Ok(b) => b,
            Err(e) => {
                warn!("cannot encode {}: {e}", msg.kind());
                self.queue.push_back(Input::SendFailed { to, msg });
                return;
            }
        };
        let peer = member.peer;
        let b = self.swarm.behaviour_mut();
        b.gate.want(peer);
        let rid = b.election.send_request_with_addresses(&peer, bytes.into(), member.addrs.clone());
        if let Some(c) = self.conns.get_mut(&peer) {
            c.last_election_use = Some(Instant::now());
        }
        self.pending.insert(rid, Pending { to, msg, peer, at: Instant::now(), resends, silent: false });
    }

    /// A frame that arrived (point to point or addressed broadcast) from `peer`. True when it
    /// was accepted: it decoded, its claims agree with the directory
    /// (`overlay::directory::claims`) and the state machine did not reject it.
    fn on_election_frame(&mut self, peer: PeerId, bytes: &[u8]) -> bool {
        match wire::decode(bytes) {
            Ok(Body::Election { scope, msg }) if scope == self.cfg.scope => {
                if let Err(refusal) = check_election(self.directory.inner(), self.me, node_id_of(&peer), &msg) {
                    debug!(%peer, kind = msg.kind(), reason = refusal.reason, "election claim refused");
                    self.snap.claims_refused += 1;
                    if refusal.severity == Severity::Lie {
                        self.guard.report(&mut self.swarm, peer, Offence::FalseClaim);
                    }
                    return false;
                }
                if let Some(m) = &self.metrics {
                    m.message("received", msg.kind());
                }
                self.snap.messages_received += 1;
                self.last_election_rx = Some(self.clock.now());
                if let Some(c) = self.conns.get_mut(&peer) {
                    c.last_election_use = Some(Instant::now());
                }
                let from = node_id_of(&peer);
                if self.start.heard_from(from) {
                    self.queue.push_back(Input::PeerUp(from));
                }
                !self.feed(Input::Message { from, msg })
            }
            Ok(Body::Election { scope, .. }) => {
                debug!(%peer, scope, my_scope = self.cfg.scope, "election message for another scope, ignored");
                self.bad_frame(peer);
                false
            }
            Err(e) => {
                debug!(%peer, len = bytes.len(), "malformed election frame: {e}");
                self.bad_frame(peer);
                false
            }
        }
    }

    /// A frame from `peer` that does not decode: counted, and reported to the guard.
    fn bad_frame(&mut self, peer: PeerId) {
        self.own_bad_frames += 1;
        if let Some(m) = &self.metrics {
            m.bad_frames.inc();
        }
        self.guard.report(&mut self.swarm, peer, Offence::MalformedFrame);
    }

    /// An inbound request of `peer` that failed after it was read (its answer could not be
    /// written): nobody's fault. A failed read is reported by the codec instead
    /// ([`Self::misread`]).
    fn unreadable(&mut self, peer: PeerId, error: &request_response::InboundFailure) {
        debug!(%peer, "inbound request failed: {error}");
    }

    /// What the codec's failed reads say about their senders (`node/src/net/codec.rs`,
    /// "Reports"): a malformed frame, or a frame beyond the sender's share of the budget.
    fn misread(&mut self) {
        for (peer, failure) in self.budget.take_reports() {
            match failure {
                ReadFailure::Malformed => self.bad_frame(peer),
                ReadFailure::OverShare => {
                    debug!(%peer, "inbound frame beyond the peer's share");
                    self.guard.report(&mut self.swarm, peer, Offence::OverBudget);
                }
                ReadFailure::Busy | ReadFailure::Cut | ReadFailure::Other => {}
            }
        }
    }

    /// Starts an election when the start policy says so (`overlay::detect::start`).
    fn maybe_start(&mut self, now: Instant) {
        let now = self.clock.at(now);
        let group = self.driver.group().clone();
        let facts = Facts {
            settled: self.directory.settled(self.clock.instant(now), Duration::from_millis(self.cfg.timing.settle_ms)),
            isolated: self.cfg.bootstrap.is_empty() && self.conns.is_empty() && self.directory.len() == 1,
            directory_changed_at: self.clock.at(self.directory.changed_at()),
            joined_settled: self.first_group_version == Some(self.directory.version()),
            in_election: self.driver.in_election(),
            group: &group,
            me: self.me,
            leader: self.driver.leader(),
            last_election_rx: self.last_election_rx,
        };
        match self.start.poll(now, &mut self.rng, facts) {
            Some(Kickoff::Start(reason)) => {
                info!(reason, "starting an election");
                self.feed(Input::Start);
            }
            Some(Kickoff::Recover) => {
                info!("joined a settled swarm: recovering (the algorithm's recovery rule)");
                self.feed(Input::Recover);
            }
            None => {}
        }
    }

    fn report_down(&mut self, node: NodeId) {
        if self.start.report_down(node, self.clock.now()) {
            self.feed(Input::PeerDown(node));
        }
    }

    // ---------------------------------------------------------------- periodic work

    /// Every dial of a bootstrap round failed. Under load (a 1,000-node swarm in one process
    /// on a busy machine) a handshake can miss its timeout although the peer is there; a
    /// node that gave up then stayed alone for good (measured: ~10% of the nodes at N =
    /// 1,000). So: another round after 1, 2, 4 s ([`BOOTSTRAP_ROUNDS`] in all); after the
    /// last, a node that meanwhile has peers (someone dialled it) carries on, one that has
    /// none stops with a clear error.
    fn bootstrap_round_failed(&mut self) {
        if self.bootstrap_rounds < BOOTSTRAP_ROUNDS {
            let wait = Duration::from_secs(1 << (self.bootstrap_rounds - 1));
            warn!(round = self.bootstrap_rounds, "no bootstrap peer reached; retrying in {wait:?}");
            self.bootstrap_retry_at = Some(Instant::now() + wait);
        } else if self.conns.is_empty() {
            self.snap.fatal = Some(format!(
                "no bootstrap peer could be reached ({} rounds): {}",
                self.bootstrap_rounds,
                self.bootstrap_errors.join("; ")
            ));
        } else {
            warn!("no bootstrap peer reached, but other peers connected to this node; carrying on");
        }
    }

    /// The next round of bootstrap dials, when due (`bootstrap_round_failed`).
    fn retry_bootstrap(&mut self, now: Instant) {
        if self.bootstrap_retry_at.is_none_or(|t| now < t) {
            return;
        }
        self.bootstrap_retry_at = None;
        if self.bootstrap_ok {
            return;
        }
        self.bootstrap_rounds += 1;
        for b in self.cfg.bootstrap.clone() {
            if let Some(p) = b.peer {
                if self.swarm.is_connected(&p) {
                    self.bootstrap_ok = true;
                    continue;
                }
                self.swarm.behaviour_mut().gate.want(p);
            }
            let dial = match b.peer {
                Some(p) => DialOpts::peer_id(p).addresses(vec![b.addr.clone()]).build(),
                None => DialOpts::unknown_peer_id().address(b.addr.clone()).build(),
            };
            let id = dial.connection_id();
            match self.swarm.dial(dial) {
                Ok(()) => {
                    self.bootstrap_dials.insert(id);
                }
                Err(e) => self.bootstrap_errors.push(format!("{}: {e}", b.addr)),
            }
        }
        if self.bootstrap_dials.is_empty() && !self.bootstrap_ok {
            self.bootstrap_round_failed();
        }
    }

    fn tick(&mut self, now: Instant) {
        self.swarm.behaviour_mut().gate.expire(now);
        self.guard.tick(&mut self.swarm, now);
        for gone in self.directory.upkeep(now) {
            debug!(peer = %gone, "member left: its record expired");
        }
        self.retry_bootstrap(now);
        // Own addresses into the directory.
        let mine: Vec<Multiaddr> = self.swarm.listeners().filter(|a| !is_unspecified(a)).cloned().collect();
        self.directory.set_my_addrs(mine);
        // Member-directory anti-entropy: one digest to one random connected peer per period.
        if !self.conns.is_empty() && self.pacer.due(self.clock.at(now)) {
            let i = self.rng.gen_range(0..self.conns.len());
            if let Some(p) = self.conns.keys().nth(i).copied() {
                self.send_digest(p);
            }
        }
        self.push_rumours();
        // Group changes into the election. Building the group, refilling the routing table
        // and the address book are O(N) each; while the directory still changes every tick
        // (joining), do it at most every MEMBERSHIP_FEED_EVERY, and at once when a tick
        // brought no change. Elections start only once the directory has been quiet for
        // `settle_ms`, so they always see the whole group.
        let feed_due =
            self.last_membership_feed.is_none_or(|t| now.saturating_duration_since(t) >= MEMBERSHIP_FEED_EVERY)
                || now.saturating_duration_since(self.directory.changed_at())
                    >= Duration::from_millis(self.cfg.timing.members_sync_ms.min(self.cfg.timing.settle_ms));
        if self.directory.version() != self.fed_version {
            self.pacer.on_change(self.clock.at(now));
        }
        if self.directory.version() != self.fed_version && feed_due {
            self.last_membership_feed = Some(now);
            self.fed_version = self.directory.version();
            if self.first_group_version.is_none() && self.directory.len() > 1 {
                self.first_group_version = Some(self.fed_version);
            }
            self.fill_routing_table();
            let m = self.directory.membership();
            self.feed(Input::Membership(m));
            if self.directory.len() != self.last_members_reported {
                self.last_members_reported = self.directory.len();
                if let Some(m) = &self.metrics {
                    m.members.set(self.directory.len() as i64);
                }
                self.status.emit("members", json!({ "members": self.directory.len() }));
            }
        }
        self.close_stalled(now);
        // Leader lost for good?
        let connected = |id: NodeId| self.directory.peer_of(&id).is_some_and(|p| self.swarm.is_connected(&p));
        if let Some(leader) = self.start.redial_expired(self.clock.at(now), connected) {
            self.report_down(leader);
        }
        self.maybe_start(now);
        self.refresh_snapshot();
    }

    /// Closes the connections to peers with an election request unanswered for the request
    /// timeout. libp2p's request timeout starts only once the peer has agreed to open a
    /// stream, so on a connection that went quiet (the peer frozen or cut off) a request
    /// otherwise waits for the stream upgrade's own 10 s. The close fails the request
    /// (`SendFailed`) and counts as broken (`ConnectionClosed`).
    fn close_stalled(&mut self, now: Instant) {
        let limit = Duration::from_millis(self.cfg.limits.request_timeout_ms);
        let stalled: HashSet<PeerId> = self
            .pending
            .values()
            .filter(|p| now.saturating_duration_since(p.at) > limit && !self.silent.contains(&p.peer))
            .map(|p| p.peer)
            .filter(|p| self.swarm.is_connected(p))
            .collect();
        for peer in stalled {
            debug!(%peer, "election request unanswered for {limit:?}; closing the connection");
            self.snap.requests_stalled += 1;
            self.mark_silent(peer);
            let _ = self.swarm.disconnect_peer_id(peer);
        }
    }

    /// `peer` went silent and its connections are being closed: the close counts as broken,
    /// and the election requests it fails are not sent again (`ElectionSent::silent`).
    fn mark_silent(&mut self, peer: PeerId) {
        self.silent.insert(peer);
        for p in self.pending.values_mut().filter(|p| p.peer == peer) {
            p.silent = true;
        }
    }

    /// The ring neighbours this node keeps connections to (ring algorithms only): the
    /// neighbour its ring messages go to, which it dials, and the one they come from, which
    /// dials it. Both are kept out of pruning, so an election lap runs over open connections
    /// instead of dialling (and later pruning) one connection per hop.
    fn ring_neighbours(&self) -> (Option<PeerId>, Option<PeerId>) {
        let group = self.driver.group();
        let (to, from) = match self.cfg.election.algorithm {
            // Villadangos sends to the next lower rank (seed 004's `neighbor`).
            Algorithm::Villadangos => (group.predecessor(&self.me.id), group.successor(&self.me.id)),
            Algorithm::Ring | Algorithm::ChangRoberts => (group.successor(&self.me.id), group.predecessor(&self.me.id)),
            _ => (None, None),
        };
        let peer = |r: Option<Rank>| r.filter(|r| r.id != self.me.id).and_then(|r| self.directory.peer_of(&r.id));
        (peer(to), peer(from))
    }

    fn manage_peers(&mut self, now: Instant) {
        let mesh: HashSet<PeerId> = self.swarm.behaviour().gossipsub.all_mesh_peers().copied().collect();
        let settled = self.directory.settled(now, Duration::from_millis(self.cfg.timing.settle_ms));
        let (ring_to, ring_from) = if settled { self.ring_neighbours() } else { (None, None) };
        let clock = self.clock;
        let infos: Vec<PeerInfo<PeerId>> = self
            .conns
            .iter()
            .map(|(p, c)| PeerInfo {
                peer: *p,
                connected_since: clock.at(c.since),
                last_use: c
                    .last_election_use
                    .max(self.superpeer.as_ref().and_then(|sp| sp.last_use(p)))
                    .map(|t| clock.at(t)),
                keep: Keep {
                    mesh: mesh.contains(p),
                    ring: Some(*p) == ring_to || Some(*p) == ring_from,
                    superpeer: self.superpeer.as_ref().is_some_and(|sp| sp.keeps(p)),
                },
            })
            .collect();
        // Candidates to dial below `target_low` or to rotate in: the directory's members (it
        // knows every member's addresses; no lookup needed).
        let now_t = clock.at(now);
        let candidates: Vec<PeerId> = if self.peer_manager.wants_candidates(infos.len(), now_t) {
            self.directory.iter().map(|(p, _)| *p).filter(|p| *p != self.peer_id).collect()
        } else {
            Vec::new()
        };
        let plan = self.peer_manager.plan(&infos, &candidates, ring_to, now_t, &mut self.rng);
        for p in plan.close {
            debug!(peer = %p, "pruning");
            self.closing.insert(p);
            let _ = self.swarm.disconnect_peer_id(p);
        }
        for p in plan.dial {
            self.swarm.behaviour_mut().gate.want(p);
            if let Err(e) = self.swarm.dial(self.dial_member(p)) {
                debug!(peer = %p, "peer manager dial failed: {e}");
            }
        }
    }

    fn refresh_snapshot(&mut self) {
        let counters = self.swarm.behaviour().gate.counters();
        let now = Instant::now();
        let status_period = Duration::from_millis(self.cfg.timing.status_ms.max(100));
        if self.rt_counted.is_none_or(|t| now.saturating_duration_since(t) >= status_period) {
            self.rt_counted = Some(now);
            self.snap.routing_table = self.swarm.behaviour_mut().kad.kbuckets().map(|b| b.num_entries()).sum();
        }
        let s = &mut self.snap;
        s.leader = self.driver.leader().map(|l| l.to_string());
        s.state = self.driver.state().to_string();
        s.in_election = self.driver.in_election();
        s.peers = self.conns.len();
        s.connections = self.swarm.behaviour().gate.established();
        s.members = self.directory.len();
        s.members_paced = self.directory.is_paced();
        s.sync = self.directory.stats();
        s.sync_period_ms = self.pacer.period().as_millis() as u64;
        s.members_changed_at = Some(self.directory.changed_at());
        s.elections_started = self.driver.started;
        s.elections_won = self.driver.won;
        s.connections_opened = counters.established_total;
        s.refused_inbound = counters.refused_inbound;
        s.refused_outbound = counters.refused_outbound;
        s.bad_frames = self.own_bad_frames + self.budget.oversized();
        s.guard = self.guard.stats();
        s.inbound_bytes_peak = self.budget.peak();
        s.inbound_streams_cut = self.budget.cut();
        s.inbound_over_share = self.budget.over_share();
        s.inbound_reports_dropped = self.budget.reports_dropped();
        s.tombstones = self.directory.inner().tombstones();
        s.coordinate = Some(*self.coords.coordinate());
        s.vivaldi_samples = self.coords.stats().applied;
        s.vivaldi_dropped_late = self.coords.stats().dropped_late;
        s.vivaldi_dropped_stall = self.coords.stats().dropped_stall;
        s.app_coordinate_updates = self.coords.app_updates();
        s.loop_lateness_ms = self.stall.last().as_secs_f64() * 1e3;
        s.loop_lateness_worst_ms = self.stall.worst_ever().as_secs_f64() * 1e3;
        s.superpeer = self.superpeer.as_ref().map(|sp| sp.status().clone());
        if let (Some(m), Some(sp)) = (&self.metrics, &s.superpeer) {
            m.superpeer_role.set(sp.role_code());
            m.superpeer_cluster_size.set(sp.cluster_size as i64);
            m.superpeer_messages_sent.set(sp.messages_sent as i64);
            m.superpeer_token_moves.set(sp.token_moves as i64);
        }
        if let Some(m) = &self.metrics {
            m.vivaldi_error.set(self.coords.coordinate().error);
            m.vivaldi_height_seconds.set(self.coords.coordinate().height);
            m.vivaldi_samples.set(self.coords.stats().applied as i64);
        }
        self.probe.set(s.clone());
        if self.conns.len() != self.last_peers_reported {
            self.last_peers_reported = self.conns.len();
            if let Some(m) = &self.metrics {
                m.peers.set(self.conns.len() as i64);
            }
            self.status.emit("peers", json!({ "peers": self.conns.len() }));
        }
    }

    // ---------------------------------------------------------------- swarm events

    fn on_swarm_event(&mut self, ev: SwarmEvent<BehaviourEvent>) {
        if let Some(m) = &self.metrics {
            use libp2p::metrics::Recorder;
            m.libp2p.record(&ev);
        }
        match ev {
            SwarmEvent::NewListenAddr { address, .. } => {
                let full = address.clone().with(Protocol::P2p(self.peer_id));
                info!(%full, "listening");
                self.snap.listen.push(full.to_string());
                self.status.emit("listening", json!({ "addr": full.to_string() }));
            }
            SwarmEvent::ConnectionEstablished { peer_id, endpoint, num_established, connection_id, .. } => {
                if self.bootstrap_dials.remove(&connection_id) {
                    self.bootstrap_ok = true;
                }
                if num_established.get() == 1 {
                    self.conns.insert(peer_id, Conn { since: Instant::now(), last_election_use: None });
                    // A dialled peer is not put into the routing table here: it enters when
                    // identify shows that it serves our DHT (`on_behaviour_event`).
                    if endpoint.is_dialer() {
                        let addr = endpoint.get_remote_address().clone();
                        self.swarm.behaviour_mut().gate.add_addresses(peer_id, [addr]);
                    }
                    let node = node_id_of(&peer_id);
                    if self.start.heard_from(node) || self.echo {
                        self.feed(Input::PeerUp(node));
                    }
                    // A joining node pulls a snapshot of the directory from its first peer at
                    // once (`node/src/directory/members.rs`); everyone else waits for the periodic digest.
                    if !self.directory.has_exchanged() {
                        self.send_digest(peer_id);
                    }
                    if let Some(sp) = self.superpeer.as_mut() {
                        let addr = endpoint.is_dialer().then(|| endpoint.get_remote_address().clone());
                        sp.on_connection_established(&mut self.swarm, &self.directory, peer_id, addr);
                    }
                }
            }
            SwarmEvent::ConnectionClosed { peer_id, num_established: 0, cause, .. } => {
                self.conns.remove(&peer_id);
                self.coords.peer_gone(&peer_id);
                if let Some(sp) = self.superpeer.as_mut() {
                    sp.on_connection_closed(&mut self.swarm, &self.directory, peer_id, cause.as_ref());
                }
                let pruned = self.closing.remove(&peer_id);
                let silent = self.silent.remove(&peer_id);
                let node = node_id_of(&peer_id);
                let broke = silent || (!pruned && !matches!(cause, None | Some(ConnectionError::KeepAliveTimeout)));
                if self.echo {
                    self.feed(Input::PeerDown(node));
                } else if self.start.connection_closed(node, broke, self.clock.now()) {
                    // The leader's connection broke: find out whether it is gone for good.
                    debug!(%peer_id, ?cause, "connection to the leader lost; redialling");
                    self.swarm.behaviour_mut().gate.want(peer_id);
                    let _ = self.swarm.dial(self.dial_member(peer_id));
                }
            }
            SwarmEvent::OutgoingConnectionError { peer_id, error, connection_id } => {
                if self.bootstrap_dials.remove(&connection_id) {
                    warn!("bootstrap dial failed: {error}");
                    self.bootstrap_errors.push(error.to_string());
                    if self.bootstrap_dials.is_empty() && !self.bootstrap_ok {
                        self.bootstrap_round_failed();
                    }
                }
                let Some(p) = peer_id else { return };
                debug!(peer = %p, "dial failed: {error}");
                if let Some(sp) = self.superpeer.as_mut() {
                    sp.on_dial_error(p, &error);
                }
                if self.start.dial_failed(node_id_of(&p), self.swarm.is_connected(&p)) {
                    self.report_down(node_id_of(&p));
                }
            }
            SwarmEvent::IncomingConnectionError { error, .. } => debug!("incoming connection failed: {error}"),
            SwarmEvent::Behaviour(b) => self.on_behaviour_event(b),
            _ => {}
        }
    }

    fn on_behaviour_event(&mut self, ev: BehaviourEvent) {
        match ev {
            BehaviourEvent::Election(e) => self.on_election_rr(e),
            BehaviourEvent::Members(e) => self.on_members_rr(e),
            BehaviourEvent::Gossipsub(e) => {
                if let Some(m) = &self.metrics {
                    use libp2p::metrics::Recorder;
                    m.libp2p.record(&e);
                }
                if let gossipsub::Event::Message { propagation_source, message_id, message } = e {
                    self.on_broadcast(propagation_source, message_id, message);
                }
            }
            BehaviourEvent::Identify(e) => {
                if let Some(m) = &self.metrics {
                    use libp2p::metrics::Recorder;
                    m.libp2p.record(&e);
                }
                if let identify::Event::Received { peer_id, info, .. } = e {
                    let serves_dht = serves_kad(&info.protocols, &self.cfg.kad_protocol);
                    let addrs: Vec<Multiaddr> =
                        info.listen_addrs.into_iter().filter(|a| !is_unspecified(a)).take(8).collect();
                    if serves_dht {
                        self.kad_add(peer_id, &addrs);
                    }
                    self.swarm.behaviour_mut().gate.add_addresses(peer_id, addrs);
                }
            }
            BehaviourEvent::Kad(e) => {
                if let Some(m) = &self.metrics {
                    use libp2p::metrics::Recorder;
                    m.libp2p.record(&e);
                }
                if let Some(sp) = self.superpeer.as_mut() {
                    sp.on_kad(&mut self.swarm, &self.directory, &e);
                }
                if let kad::Event::RoutingUpdated { peer, addresses, .. } = e {
                    self.swarm.behaviour_mut().gate.add_addresses(peer, addresses.iter().cloned());
                }
            }
            BehaviourEvent::Ping(e) => {
                if let Some(m) = &self.metrics {
                    use libp2p::metrics::Recorder;
                    m.libp2p.record(&e);
                }
                if let (Some(sp), Ok(rtt)) = (self.superpeer.as_mut(), &e.result) {
                    sp.on_ping(e.peer, *rtt);
                }
                self.on_ping(e);
            }
            BehaviourEvent::Coords(e) => self.on_coords_rr(e),
            BehaviourEvent::Superpeer(e) => {
                if let Some(sp) = self.superpeer.as_mut() {
                    sp.on_rr(&mut self.swarm, &self.directory, &self.stall, e);
                    for (peer, offence) in sp.take_offences() {
                        self.guard.report(&mut self.swarm, peer, offence);
                    }
                } else if let request_response::Event::Message {
                    peer,
                    message: request_response::Message::Request { channel, .. },
                    ..
                } = e
                {
                    debug!(%peer, "super-peer request while super peers are off; refused");
                    let _ = self.swarm.behaviour_mut().superpeer.send_response(channel, vec![ACK_REJECTED]);
                }
            }
            BehaviourEvent::Blocked(v) | BehaviourEvent::Limits(v) | BehaviourEvent::Gate(v) => match v {},
        }
    }

    /// A gossipsub message (gossipsub validates nothing itself: `validate_messages`, and it
    /// runs unsigned, see `overlay::directory::broadcast`). The author's signature is checked
    /// here, once per distinct message. Garbage and forgeries are rejected, so gossipsub
    /// neither relays them nor forgets them against the peer that relayed them (which it
    /// scores, and the guard hears of); a broadcast outside its time window (a replay, or a
    /// clock far off) and a message of another scope are ignored; a well-formed one is
    /// accepted (relayed) and handled if it is addressed here.
    fn on_broadcast(&mut self, via: PeerId, id: gossipsub::MessageId, message: gossipsub::Message) {
        use gossipsub::MessageAcceptance::{Accept, Ignore, Reject};
        let now_us = self.directory.wall_us(Instant::now());
        let verdict = match postcard::from_bytes::<SignedBroadcast>(&message.data) {
            Err(_) => Err("malformed election broadcast"),
            Ok(signed) => match signed.open(now_us) {
                Err(Refusal::Expired | Refusal::Future) => Ok(None),
                Err(_) => Err("election broadcast with a bad signature or key"),
                Ok((author, payload)) => match postcard::from_bytes::<BroadcastFrame>(payload) {
                    Err(_) => Err("malformed election broadcast"),
                    Ok(f) if f.version != BROADCAST_VERSION => Err("election broadcast of an unknown version"),
                    Ok(f) => match wire::decode(&f.frame) {
                        Err(_) => Err("election broadcast carrying a malformed frame"),
                        Ok(Body::Election { scope, .. }) if scope != self.cfg.scope => Ok(None),
                        Ok(_) => Ok(Some((author, f))),
                    },
                },
            },
        };
        let acceptance = match &verdict {
            Err(_) => Reject,
            Ok(None) => Ignore,
            Ok(Some(_)) => Accept,
        };
        self.swarm.behaviour_mut().gossipsub.report_message_validation_result(&id, &via, acceptance);
        match verdict {
            Err(why) => {
                debug!(%via, "{why}");
                self.own_bad_frames += 1;
                self.guard.report(&mut self.swarm, via, Offence::InvalidGossip);
            }
            Ok(Some((source, frame)))
                if source != self.peer_id && frame.to.includes(&self.me, &node_id_of(&source)) =>
            {
                self.on_election_frame(source, &frame.frame);
            }
            Ok(_) => {}
        }
    }

    fn on_election_rr(&mut self, e: request_response::Event<Frame, Vec<u8>>) {
        use request_response::{Event, Message as RrMessage, OutboundFailure};
        match e {
            Event::Message { peer, message: RrMessage::Request { request, channel, .. }, .. } => {
                let ok = self.on_election_frame(peer, &request);
                let ack = vec![if ok { ACK_OK } else { ACK_REJECTED }];
                let _ = self.swarm.behaviour_mut().election.send_response(channel, ack);
            }
            Event::Message { peer, message: RrMessage::Response { request_id, response }, .. } => {
                let sent = self.pending.remove(&request_id);
                if response.first() != Some(&ACK_OK) {
                    debug!(%peer, "peer refused our election frame");
                    // The peer's view may lag ours (`overlay::detect::failure::after_election_rejected`).
                    if let Some(Pending { to, msg, resends, .. }) = sent {
                        if let Some(wait) = after_election_rejected(resends) {
                            debug!(%peer, kind = msg.kind(), ?wait, "sending the rejected election message again");
                            self.resend_later(wait, to, msg, resends);
                        }
                    }
                }
            }
            Event::OutboundFailure { peer, request_id, error, .. } => {
                if let Some(Pending { to, msg, resends, silent, .. }) = self.pending.remove(&request_id) {
                    debug!(%peer, kind = msg.kind(), "election send failed: {error}");
                    let refusal = if matches!(error, OutboundFailure::DialFailure) {
                        self.swarm.behaviour_mut().gate.dial_refusal(&peer)
                    } else {
                        DialRefusal::None
                    };
                    let class = classify(&error, self.swarm.is_connected(&peer), refusal);
                    let sent = ElectionSent {
                        resends,
                        silent: silent || matches!(error, OutboundFailure::Timeout) || self.silent.contains(&peer),
                        copies_safe: !self.cfg.election.algorithm.assumptions().no_duplicates,
                    };
                    match after_election_failure(class, sent) {
                        ElectionNext::SendAgainAfter(wait) => {
                            debug!(%peer, kind = msg.kind(), ?wait, "sending the election message again");
                            self.resend_later(wait, to, msg, resends);
                        }
                        ElectionNext::Feed { report_down } => {
                            self.feed(Input::SendFailed { to, msg });
                            if report_down {
                                self.report_down(to);
                            }
                        }
                    }
                }
            }
            Event::InboundFailure { peer, error, .. } => self.unreadable(peer, &error),
            Event::ResponseSent { .. } => {}
        }
    }

    fn on_members_rr(&mut self, e: request_response::Event<Frame, Vec<u8>>) {
        use request_response::{Event, Message as RrMessage};
        match e {
            Event::Message { peer, message: RrMessage::Request { request, channel, .. }, .. } => {
                let ack = match self.directory.handle(peer, &request) {
                    Ok(h) => {
                        if !h.equal {
                            // Someone differs from us: the swarm has not converged, sync at
                            // the base period again.
                            self.pacer.on_change(self.clock.now());
                        }
                        // Records no honest relay forwards, a flood, or records refused for
                        // pace (`overlay::directory::admission`).
                        let lies = h.refused.lies();
                        self.guard.report_n(&mut self.swarm, peer, Offence::InvalidRecord, lies.min(5));
                        if h.flood {
                            self.guard.report(&mut self.swarm, peer, Offence::Flood);
                        } else if h.refused.get(overlay::directory::Refusal::Rate) > 0 {
                            self.guard.report(&mut self.swarm, peer, Offence::Overrun);
                        }
                        if let Some(reply) = h.reply {
                            self.swarm.behaviour_mut().members.send_request(&peer, reply.into());
                        }
                        if h.equal {
                            self.on_equal_digest();
                            ACK_EQUAL
                        } else if h.changed == 0 && h.refused.lies() > 0 {
                            ACK_REJECTED
                        } else {
                            ACK_OK
                        }
                    }
                    Err(e) => {
                        debug!(%peer, "{e}");
                        self.bad_frame(peer);
                        ACK_REJECTED
                    }
                };
                let _ = self.swarm.behaviour_mut().members.send_response(channel, vec![ack]);
            }
            Event::Message { message: RrMessage::Response { response, .. }, .. }
                if response.first() == Some(&ACK_EQUAL) =>
            {
                self.directory.digest_acknowledged_equal();
                self.on_equal_digest();
            }
            Event::OutboundFailure { peer, error, .. } => {
                // Anti-entropy repairs a lost frame in a later round; nothing to undo.
                debug!(%peer, "members sync failed: {error}");
                use overlay::directory::members::SyncFailure;
                let kind = match error {
                    request_response::OutboundFailure::Timeout => SyncFailure::Timeout,
                    request_response::OutboundFailure::ConnectionClosed => SyncFailure::Closed,
                    request_response::OutboundFailure::DialFailure => SyncFailure::Dial,
                    // request-response refuses a request beyond the connection's stream cap
                    // (`MEMBERS_STREAMS`) with an I/O error of this text, before sending it.
                    request_response::OutboundFailure::Io(e) if e.to_string() == "max sub-streams reached" => {
                        SyncFailure::StreamCap
                    }
                    _ => SyncFailure::Other,
                };
                self.directory.note_failure(kind);
            }
            Event::InboundFailure { peer, error, .. } => self.unreadable(peer, &error),
            _ => {}
        }
    }

    /// A ping RTT: a Vivaldi sample (asks the peer for its coordinate when needed). A ping
    /// that timed out or failed (not one the peer does not support) closes its connection: the peer is frozen, cut off or gone, and libp2p keeps such a
    /// connection open. The close counts as broken (`ConnectionClosed`): a leader's connection
    /// is redialled, and a failed redial reports the leader down.
    fn on_ping(&mut self, e: libp2p::ping::Event) {
        let rtt = match e.result {
            Ok(rtt) => rtt,
            // A peer without the ping protocol is not silent: nothing to learn.
            Err(libp2p::ping::Failure::Unsupported) => return,
            Err(failure) => {
                debug!(peer = %e.peer, "ping failed: {failure}; closing the connection");
                self.snap.ping_failures += 1;
                self.mark_silent(e.peer);
                self.swarm.close_connection(e.connection);
                return;
            }
        };
        let now = Instant::now();
        let delays = SampleDelays {
            emulation: self.latency.as_ref().and_then(|l| l.recent_lateness(&e.peer)).unwrap_or_default(),
            scheduling: self.stall.worst_during(self.clock.at(now.checked_sub(rtt).unwrap_or(now))),
        };
        if let Some(frame) = self.coords.on_rtt_late(e.peer, rtt, delays, now) {
            self.swarm.behaviour_mut().coords.send_request(&e.peer, frame.into());
        }
    }

    fn on_coords_rr(&mut self, e: request_response::Event<Frame, Vec<u8>>) {
        use request_response::{Event, Message as RrMessage};
        let now = Instant::now();
        match e {
            Event::Message { peer, message: RrMessage::Request { request, channel, .. }, .. } => {
                match self.coords.on_request(peer, &request, now) {
                    Ok(answer) => {
                        let _ = self.swarm.behaviour_mut().coords.send_response(channel, answer);
                    }
                    Err(e) => {
                        debug!(%peer, "coordinate request refused: {e}");
                        self.bad_frame(peer);
                    }
                }
            }
            Event::Message { peer, message: RrMessage::Response { response, .. }, .. } => {
                if let Err(e) = self.coords.on_response(peer, &response, now) {
                    debug!(%peer, "coordinate answer refused: {e}");
                    self.bad_frame(peer);
                }
            }
            Event::OutboundFailure { peer, error, .. } => debug!(%peer, "coordinate request failed: {error}"),
            Event::InboundFailure { peer, error, .. } => self.unreadable(peer, &error),
            Event::ResponseSent { .. } => {}
        }
    }

    /// A dial to `peer` at its member record's addresses, and at what the gate's address book
    /// knows of it (the book holds hints from identify, lookups and bootstrap, not the
    /// directory: a copy of every member's addresses in every node was 0.35 GB at 1,000 nodes
    /// in one process).
    fn dial_member(&self, peer: PeerId) -> DialOpts {
        let addrs: Vec<Multiaddr> = self.directory.get(&peer).map(|m| m.addrs.clone()).unwrap_or_default();
        DialOpts::peer_id(peer).addresses(addrs).extend_addresses_through_behaviour().build()
    }

    /// A digest comparison found our directory equal to a peer's (the pacer decides whether
    /// that slows the sync down: `overlay::directory::pacer`).
    fn on_equal_digest(&mut self) {
        self.pacer.on_equal(self.directory.equal_streak());
    }

    /// End Kademlia's automatic bootstrap walks at the first chance, unless periodic walks
    /// were asked for (`kad_bootstrap_s` > 0). libp2p-kad 0.49 starts a walk whenever an entry
    /// is inserted while the table holds fewer than 20 (this cannot be switched off from
    /// outside), and a walk tries every peer it hears of: the gate refused ~470 such dials per
    /// node at N = 200. The routing table is filled from the member directory instead
    /// (`fill_routing_table`), so the walk has nothing to add. Limit of this cut: a dial the
    /// gate refuses produces no swarm event, so within one poll of the swarm a walk step
    /// runs through every disconnected table entry until it waits on a request to a
    /// connected peer; it is finished there, before the answers bring more peers to dial.
    fn stop_kad_walks(&mut self) {
        if self.cfg.timing.kad_bootstrap_s > 0 {
            return;
        }
        for mut q in self.swarm.behaviour_mut().kad.iter_queries_mut() {
            if matches!(q.info(), kad::QueryInfo::Bootstrap { .. }) {
                q.finish();
            }
        }
    }

    /// Member-directory rumours (`node/src/directory/members.rs`): the entries that changed here since the last
    /// tick, pushed once to `members_push_fanout` random connected peers (infect-and-die; the
    /// digest exchange repairs what this misses). With fan-out 0 the directory tracks no changes.
    fn push_rumours(&mut self) {
        let fanout = self.cfg.timing.members_push_fanout as usize;
        if fanout == 0 || self.conns.is_empty() {
            return;
        }
        let Some(frame) = self.directory.hot_frame() else { return };
        let peers: Vec<PeerId> = self.conns.keys().copied().collect();
        for p in peers.choose_multiple(&mut self.rng, fanout) {
            self.swarm.behaviour_mut().members.send_request(p, frame.clone().into());
        }
    }

    /// Send an election message again after `wait`, as its `resends + 1`-th resend.
    fn resend_later(&mut self, wait: Duration, to: NodeId, msg: Message, resends: u8) {
        let at = self.clock.now() + wait;
        self.resends.push(at, Resend { to, msg, resends: resends + 1 });
    }

    /// Send this node's member digest to `peer` (`node/src/directory/members.rs`).
    fn send_digest(&mut self, peer: PeerId) {
        if let Some(frame) = self.directory.digest_frame() {
            self.swarm.behaviour_mut().members.send_request(&peer, frame.into());
        }
    }

    /// Put `peer` into the Kademlia routing table, but only into a k-bucket that has room:
    /// adding to a full bucket makes kad dial the bucket's oldest disconnected entry to test
    /// it (libp2p-kad 0.49 `add_address`), which is exactly the dialling a quiet overlay must
    /// not do. Buckets are filled with `BucketInserts::Manual` (`node/src/net/behaviour.rs`), so this is
    /// the only way entries get in.
    fn kad_add(&mut self, peer: PeerId, addrs: &[Multiaddr]) {
        let kad = &mut self.swarm.behaviour_mut().kad;
        let room = kad.kbucket(peer).is_some_and(|b| b.num_entries() < KAD_K);
        if room {
            for a in addrs {
                kad.add_address(&peer, a.clone());
            }
        }
    }

    /// Fill the routing table from the member directory: every member not offered yet, into
    /// a bucket with room, without dialling (`dht_filled` in the swarm report measures this).
    fn fill_routing_table(&mut self) {
        let fresh: Vec<(PeerId, u64, Vec<Multiaddr>)> = self
            .directory
            .iter()
            .filter(|(p, m)| !self.kad_seen.contains(&m.node.high_u64()) && !m.addrs.is_empty() && **p != self.peer_id)
            .map(|(p, m)| (*p, m.node.high_u64(), m.addrs.clone()))
            .collect();
        for (p, seen, addrs) in fresh {
            self.kad_seen.insert(seen);
            self.kad_add(p, &addrs);
        }
    }
}

/// Rounds of bootstrap dials before a node with no peer gives up (`bootstrap_round_failed`).
pub const BOOTSTRAP_ROUNDS: u32 = 4;
/// While the directory changes every tick, feed it into the election (and the routing table
/// and address book) at most this often (`tick`).
const MEMBERSHIP_FEED_EVERY: Duration = Duration::from_secs(2);

/// Kademlia's bucket size (`node/src/net/behaviour.rs` sets it; libp2p's `K_VALUE`): the one
/// the super-peer core reads a routing table with.
pub const KAD_K: usize = overlay::superpeer::vicinity::BUCKET_SIZE;

/// Does a peer that offers `protocols` serve our DHT? Only such a peer enters the routing
/// table from identify: one that does not (a peer in Kademlia client mode, a light client)
/// cannot answer lookups, and the libp2p Kademlia spec keeps client-mode peers out of routing
/// tables, so it is never handed to others as a closer peer.
fn serves_kad(protocols: &[libp2p::StreamProtocol], kad_protocol: &str) -> bool {
    protocols.iter().any(|p| p.as_ref() == kad_protocol)
}

fn is_unspecified(a: &Multiaddr) -> bool {
    a.iter().any(|p| match p {
        Protocol::Ip4(ip) => ip.is_unspecified(),
        Protocol::Ip6(ip) => ip.is_unspecified(),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::serves_kad;
    use libp2p::StreamProtocol;

    #[test]
    fn only_kademlia_servers_enter_the_routing_table_from_identify() {
        let kad = "/peerage/kad/1.0.0";
        let server = [StreamProtocol::new("/ipfs/id/1.0.0"), StreamProtocol::new(kad)];
        let client = [StreamProtocol::new("/ipfs/id/1.0.0"), StreamProtocol::new("/meshsub/1.1.0")];
        let other_dht = [StreamProtocol::new("/ipfs/kad/1.0.0")];
        assert!(serves_kad(&server, kad));
        assert!(!serves_kad(&client, kad));
        assert!(!serves_kad(&other_dht, kad));
        assert!(!serves_kad(&[], kad));
    }
}

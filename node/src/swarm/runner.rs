//! `peerage swarm`: N nodes in one process (or a shard's slice of them,
//! `node/src/swarm/shard.rs`), and the [`LocalSwarm`] API the integration tests use.
//!
//! Transport: libp2p's memory transport by default (`/memory/<port>`): a TCP swarm of N
//! nodes holds both ends of every loopback connection in this process and the descriptor
//! limit here is 20,000; TCP on 127.0.0.1 is an option for small N. Shards use TCP or QUIC
//! between hosts.
//!
//! Keys and bootstrap: node i has the key `keys::node_key(seed, i, difficulty)`. Node 0 starts alone;
//! node i > 0 dials up to 3 random earlier nodes (by peer id and address; the choices come
//! from the seed, so every shard makes the same ones). From there kad, membership sync and
//! the peer manager take over.
//!
//! Report (JSON on stdout; a progress bar on stderr meanwhile): seconds until every node has a
//! peer, knows every member, has a filled routing table and names the same live leader; then,
//! after `settle_s`, a steady-state window of `measure_s`: CPU (% of one core, every process
//! of the swarm), RSS (the same, and per node), connections per node, new connections per
//! second; then each scheduled kill (the leader, or a random fraction) with the time until the
//! survivors agree again. Last, one row per node (`node/src/swarm/rows.rs`) and the summary
//! recomputed from the rows.
//!
//! `dht_filled_s`: the first time every node's Kademlia routing table holds at least
//! min(k, N-1) peers, k = 20 (`node::KAD_K`). Entries come from the member directory into
//! k-buckets with room, without dialling (`node/src/runtime/node.rs`, `fill_routing_table`),
//! so the measure says "every node could start a Kademlia lookup now, with a full first hop",
//! not "kad's random walks finished" (periodic walks are off by default).

use crate::config::{BootstrapPeer, FileConfig, NodeConfig};
use crate::coords::report::{CoordsReport, CoordsSampler};
use crate::net::behaviour::TransportKind;
use crate::net::latency_transport::{EmulatedLink, LatencyNet};
use crate::runtime::node::{self, NodeHandle, NodeOptions};
use crate::runtime::status::{Snapshot, StatusSink};
use crate::runtime::sysstat;
use crate::swarm::control::RunKey;
use crate::swarm::rows::{self, NodeRow, RoleChange, RoleLog, RowsSummary};
use crate::swarm::shard::{Remote, ShardPlan};
use indicatif::{ProgressBar, ProgressStyle};
use libp2p::multiaddr::Protocol;
use libp2p::Multiaddr;
use overlay::ElectionConfig;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// New connections a second that the peer managers' rotations of a one-process swarm may
/// open together, by default (`peerage swarm --rotate-s`). Every node of the swarm shares
/// this machine's two cores, and a new connection costs a handshake, identify, gossipsub's
/// subscriptions and the coordinate exchange: at N = 1,000 with emulated latency, rotations
/// every 6 s (167 new connections a second) kept the nodes' loops 10-16 ms late (median) and
/// the late-sample gate dropped 98 % of the RTT samples, so the coordinates grew worse; every
/// 30 s (33 a second) they dropped 57 %, against 29 % without rotation (docs/results/coordinates.md).
pub const SWARM_ROTATIONS_PER_S: u64 = 10;

/// The default rotation period of a one-process swarm of `nodes` pinging every `ping_s`:
/// the node's own (three pings), or longer so that the swarm opens at most
/// [`SWARM_ROTATIONS_PER_S`] connections a second for it.
pub fn swarm_rotate_ms(nodes: u64, ping_s: u64) -> u64 {
    (ping_s.max(1).saturating_mul(3_000)).max(nodes.saturating_mul(1_000) / SWARM_ROTATIONS_PER_S)
}

/// Node ping rounds a second (one node pinging each of its connections once) that a
/// one-process swarm with emulated latency runs together, by default (`peerage swarm
/// --ping-s`). Every ping crosses the emulated link twice and wakes both connections' tasks;
/// at N = 1,000 (about 11 connections a node) pinging every 2 s (500 rounds a second) cost
/// 142-162 % of one core in the steady window and the lateness gate dropped 40-56 % of the
/// RTT samples; every 5 s (200 a second) 94-104 % and 16-18 %, for the same coordinate error
/// (docs/results/coordinates.md).
pub const SWARM_PING_ROUNDS_PER_S: u64 = 200;

/// The shortest default ping period of a swarm with emulated latency: the one Vivaldi's
/// 200-node swarm measurements run at.
pub const SWARM_MIN_PING_S: u64 = 2;

/// The default ping period of a one-process swarm of `nodes`: with emulated latency
/// [`SWARM_MIN_PING_S`], or longer so that its nodes run at most [`SWARM_PING_ROUNDS_PER_S`]
/// ping rounds a second together; without, [`SWARM_LOOPBACK_PING_S`].
pub fn swarm_ping_s(nodes: u64, emulated: bool) -> u64 {
    if emulated {
        SWARM_MIN_PING_S.max(nodes.div_ceil(SWARM_PING_ROUNDS_PER_S))
    } else {
        SWARM_LOOPBACK_PING_S
    }
}

/// The default ping period of a one-process swarm without emulated latency. Its RTTs are
/// loopback's, so Vivaldi has nothing to learn from them and a ping only checks that the
/// connection is alive, and a killed node's connections close at once anyway (its memory
/// channels or sockets are dropped). At N = 1,000 the node's own 15 s period cost about 8
/// points of one core in the steady window: 49-54 % (mean 52) against 39-53 % (mean 44) at
/// 60 s (docs/results/leader-swarm.md).
pub const SWARM_LOOPBACK_PING_S: u64 = 60;

/// The default prune line (the peer manager's `target_high`) of a one-process swarm without
/// emulated latency and without super peers. Its coordinates learn nothing from loopback, so
/// a connection beyond what the election's traffic needs is only cost, and every connection
/// costs the shared CPU and memory: this is the most a gossipsub mesh holds
/// ([`crate::config::GOSSIP_MESH_HIGH`], 8), a ring's two neighbours and two more. At
/// N = 1,000 with Villadangos the node's own line (24) left 11.5-12.4 connections a node, a
/// steady CPU of 42-53 % of one core and 2.56-2.71 GiB; this one about 9, 29-37 % and
/// 2.12-2.21 GiB (docs/results/leader-swarm.md).
pub const SWARM_LOOPBACK_PRUNE_ABOVE: u32 = crate::config::GOSSIP_MESH_HIGH + 4;
const _: () = assert!(SWARM_LOOPBACK_PRUNE_ABOVE >= crate::config::GOSSIP_MESH_HIGH + 2, "a full mesh and a ring");

/// The default prune line of a one-process swarm, when it differs from the node's own:
/// [`SWARM_LOOPBACK_PRUNE_ABOVE`] without emulated latency and without super peers (a
/// super-peer node needs room for its overlay neighbours and its cluster).
pub fn swarm_prune_above(emulated: bool, superpeers: bool) -> Option<u32> {
    (!emulated && !superpeers).then_some(SWARM_LOOPBACK_PRUNE_ABOVE)
}

/// How to build a local swarm.
#[derive(Debug, Clone)]
pub struct LocalSwarmConfig {
    pub nodes: usize,
    pub election: ElectionConfig,
    pub transport: TransportKind,
    pub seed: u64,
    /// Per-node priorities (default: all 0, the id decides).
    pub priorities: Option<Vec<u64>>,
    /// Template for every node's settings (limits, timing); listen/bootstrap are set here.
    pub template: FileConfig,
    /// Bootstrap peers per joining node.
    pub bootstrap_peers: usize,
    /// `Some(seed)`: emulate the Internet latency model (`overlay::latency`, seeded) on every
    /// link (`node/src/net/latency_transport.rs`); node i is model node i. `None`: no added latency.
    pub latency_seed: Option<u64>,
    /// Run only this shard's slice (`node/src/swarm/shard.rs`); `None`: every node here.
    pub shard: Option<ShardPlan>,
}

impl LocalSwarmConfig {
    pub fn new(nodes: usize, election: ElectionConfig, seed: u64) -> Self {
        LocalSwarmConfig {
            nodes,
            election,
            transport: TransportKind::Memory,
            seed,
            priorities: None,
            template: FileConfig::default(),
            bootstrap_peers: 3,
            latency_seed: None,
            shard: None,
        }
    }
}

/// N nodes running on the current tokio runtime.
pub struct LocalSwarm {
    nodes: Vec<Option<NodeHandle>>,
    node_ids: Vec<String>,
    addrs: Vec<Multiaddr>,
    peers: Vec<libp2p::PeerId>,
    pub started: Instant,
    net: Option<Arc<LatencyNet>>,
    probes: Vec<Arc<crate::runtime::status::Probe>>,
    /// Node i runs in this process.
    here: Vec<bool>,
    /// The other shards' nodes, when this process conducts a sharded swarm.
    remote: Option<Arc<Remote>>,
    shard: usize,
}

/// Swarms started in this process (`LocalSwarm::start`, memory ports).
static SWARMS_STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl LocalSwarm {
    /// Start every node. Node i bootstraps from up to `bootstrap_peers` earlier nodes.
    pub async fn start(cfg: &LocalSwarmConfig) -> anyhow::Result<LocalSwarm> {
        Self::start_with(cfg, None).await
    }

    /// Start the nodes of this process: all of them, or this shard's slice (`cfg.shard`), the
    /// others then known by address only, or through `remote` when this process conducts.
    pub async fn start_with(cfg: &LocalSwarmConfig, remote: Option<Arc<Remote>>) -> anyhow::Result<LocalSwarm> {
        let mut rng = StdRng::seed_from_u64(cfg.seed);
        // Memory ports: drawn from the seed, moved by a per-process count so that two swarms
        // of one seed can run in one process (ports decide nothing in the protocols).
        let base: u64 = rng.gen_range(1_000_000..u64::MAX / 4)
            + SWARMS_STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) * (1 << 32);
        let mut nodes = Vec::with_capacity(cfg.nodes);
        let mut node_ids = Vec::with_capacity(cfg.nodes);
        let mut addrs: Vec<Multiaddr> = Vec::with_capacity(cfg.nodes);
        let mut peers = Vec::with_capacity(cfg.nodes);
        let mut here = Vec::with_capacity(cfg.nodes);
        let started = Instant::now();
        let net = match cfg.latency_seed {
            Some(s) => Some(LatencyNet::internet(cfg.nodes, s)?),
            None => None,
        };
        if let (Some(r), Some(n)) = (&remote, &net) {
            r.set_net(n.clone());
        }
        // Over the emulated network one message takes at most its largest RTT (one way, with
        // queueing up to as much again), so that a ring election's lap timer covers a lap of
        // the whole swarm (`ElectionConfig::hop_delay_ms`); every shard derives the same.
        let mut election = cfg.election.clone();
        if let Some(n) = &net {
            election.hop_delay_ms = election.hop_delay_ms.max(n.model().largest_rtt_ms().ceil() as u64);
        }
        if let Some(plan) = &cfg.shard {
            plan.validate(cfg.nodes)?;
        }
        let mut probes = Vec::with_capacity(cfg.nodes);
        for i in 0..cfg.nodes {
            let key = crate::swarm::keys::node_key(cfg.seed, i, cfg.template.directory.id_difficulty);
            let peer = key.public().to_peer_id();
            // Registered before the node starts, so every peer that can connect is known.
            let latency = match &net {
                Some(net) => {
                    net.register(peer, i)?;
                    Some(EmulatedLink::new(net.clone(), i)?)
                }
                None => None,
            };
            let mut earlier: Vec<usize> = (0..i).collect();
            earlier.shuffle(&mut rng);
            if let Some(plan) = cfg.shard.as_ref().filter(|p| !p.here(i)) {
                // Another shard's node: the same choices were made above, nothing starts here.
                addrs.push(plan.addr(i).with(Protocol::P2p(peer)));
                peers.push(peer);
                node_ids.push(crate::directory::members::node_id_of(&peer).to_string());
                nodes.push(None);
                here.push(false);
                probes.push(match &remote {
                    Some(r) => r.probe(i),
                    None => Arc::new(crate::runtime::status::Probe::default()),
                });
                continue;
            }
            let mut fc = cfg.template.clone();
            fc.election = election.clone();
            fc.algorithm = None;
            fc.metrics = None;
            fc.identity = None;
            fc.priority = cfg.priorities.as_ref().and_then(|p| p.get(i).copied()).unwrap_or(0);
            fc.listen = vec![match (&cfg.shard, cfg.transport) {
                (Some(plan), _) => plan.addr(i).to_string(),
                (None, TransportKind::Memory) => format!("/memory/{}", base + i as u64),
                (None, TransportKind::TcpQuic) => "/ip4/127.0.0.1/tcp/0".to_string(),
            }];
            fc.bootstrap = vec![];
            let mut ncfg: NodeConfig = fc.resolve()?;
            ncfg.bootstrap = earlier
                .into_iter()
                .take(cfg.bootstrap_peers)
                .map(|j| BootstrapPeer { addr: addrs[j].clone(), peer: Some(peers[j]) })
                .collect();
            let handle = node::spawn(NodeOptions {
                cfg: ncfg,
                key,
                transport: cfg.transport,
                status: StatusSink::silent(),
                metrics: None,
                seed: cfg.seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                latency,
            })?;
            probes.push(handle.probe.clone());
            let addr = match (&cfg.shard, cfg.transport) {
                (Some(plan), _) => plan.addr(i),
                (None, TransportKind::Memory) => format!("/memory/{}", base + i as u64).parse::<Multiaddr>()?,
                (None, TransportKind::TcpQuic) => wait_listen(&handle).await?,
            };
            addrs.push(addr.with(Protocol::P2p(peer)));
            peers.push(peer);
            node_ids.push(handle.node_id.to_string());
            nodes.push(Some(handle));
            here.push(true);
            if i % 25 == 24 {
                tokio::task::yield_now().await;
            }
        }
        let shard = cfg.shard.as_ref().map_or(0, |p| p.index);
        Ok(LocalSwarm { nodes, node_ids, addrs, peers, started, net, probes, here, remote, shard })
    }

    /// The nodes that run in this process.
    pub fn local_nodes(&self) -> Vec<usize> {
        (0..self.len()).filter(|&i| self.here[i]).collect()
    }

    /// Snapshots of this process's live nodes, and the indices of its nodes that are gone.
    pub fn local_snapshots(&self) -> (Vec<(usize, Snapshot)>, Vec<usize>) {
        let mut gone = Vec::new();
        let mut snaps = Vec::new();
        for i in 0..self.len() {
            if !self.here[i] {
                continue;
            }
            match &self.nodes[i] {
                Some(h) => snaps.push((i, h.probe.get())),
                None => gone.push(i),
            }
        }
        (snaps, gone)
    }

    /// The status probes of this process's nodes.
    pub fn local_probes(&self) -> Vec<Arc<crate::runtime::status::Probe>> {
        self.local_nodes().into_iter().map(|i| self.probes[i].clone()).collect()
    }

    /// The other shards, when this process conducts.
    pub fn remote(&self) -> Option<&Arc<Remote>> {
        self.remote.as_ref()
    }

    /// The shard this process runs (0 in a one-process swarm).
    pub fn shard(&self) -> usize {
        self.shard
    }

    /// The role log of this process's nodes (`node/src/swarm/rows.rs`), timed from `t0`.
    pub fn role_log(&self, t0: Instant) -> RoleLog {
        let index: HashMap<String, usize> = self.node_ids.iter().enumerate().map(|(i, id)| (id.clone(), i)).collect();
        let probes = self.local_nodes().into_iter().map(|i| (i, self.probes[i].clone())).collect();
        RoleLog::start(probes, t0, Arc::new(move |id: &str| index.get(id).copied()))
    }

    /// One row per node of this process, from its last snapshot and its role log.
    pub fn rows(&self, mut logs: HashMap<usize, Vec<RoleChange>>) -> Vec<NodeRow> {
        let index: HashMap<&str, usize> = self.node_ids.iter().enumerate().map(|(i, id)| (id.as_str(), i)).collect();
        let index_of = |id: &str| index.get(id).copied();
        self.local_nodes()
            .into_iter()
            .map(|i| {
                let snap = self.nodes[i].as_ref().map(|h| h.probe.get());
                let mut changes = logs.remove(&i).unwrap_or_default();
                if snap.is_none() && changes.last().is_some_and(|c| c.state.role != "crashed") {
                    // Crashed between two polls of the log.
                    changes.push(RoleChange {
                        t_s: self.started.elapsed().as_secs_f64(),
                        state: rows::RoleState::crashed(),
                    });
                }
                rows::row(
                    i,
                    self.shard,
                    self.peers[i].to_string(),
                    self.node_ids[i].clone(),
                    snap.as_ref(),
                    changes,
                    &index_of,
                )
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
    pub fn alive(&self) -> usize {
        (0..self.len()).filter(|&i| self.is_alive(i)).count()
    }
    /// Node i's address, ending in `/p2p/<peer id>`.
    pub fn addr(&self, i: usize) -> &Multiaddr {
        &self.addrs[i]
    }
    pub fn peer_id(&self, i: usize) -> libp2p::PeerId {
        self.peers[i]
    }
    pub fn node_id(&self, i: usize) -> &str {
        &self.node_ids[i]
    }
    pub fn index_of(&self, node_id: &str) -> Option<usize> {
        self.node_ids.iter().position(|n| n == node_id)
    }
    pub fn is_alive(&self, i: usize) -> bool {
        match self.here.get(i) {
            Some(true) => self.nodes.get(i).is_some_and(|n| n.is_some()),
            Some(false) => self.remote.as_ref().is_some_and(|r| r.is_alive(i)),
            None => false,
        }
    }

    /// Snapshots of the live nodes, by index (with a conductor's remote nodes, as their shard
    /// last sent them).
    pub fn snapshots(&self) -> Vec<(usize, Snapshot)> {
        (0..self.len())
            .filter_map(|i| match &self.nodes[i] {
                Some(h) => Some((i, h.probe.get())),
                None if !self.here[i] && self.is_alive(i) => Some((i, self.probes[i].get())),
                None => None,
            })
            .collect()
    }

    /// The leader every live node names, if they all name the same live node.
    pub fn agreed_leader(&self) -> Option<String> {
        self.agreed_in(&self.snapshots())
    }

    /// [`Self::agreed_leader`] from snapshots already taken (the runner polls 1,000 nodes
    /// every 100 ms: one copy of every snapshot per poll, not two).
    pub fn agreed_in(&self, snaps: &[(usize, Snapshot)]) -> Option<String> {
        let first = snaps.first()?.1.leader.clone()?;
        let alive = self.index_of(&first).is_some_and(|i| self.is_alive(i));
        (alive && snaps.iter().all(|(_, s)| s.leader.as_deref() == Some(first.as_str()))).then_some(first)
    }

    /// How many live nodes name the most common leader.
    pub fn largest_agreement(&self) -> usize {
        let mut count: HashMap<String, usize> = HashMap::new();
        for (_, s) in self.snapshots() {
            if let Some(l) = s.leader {
                *count.entry(l).or_default() += 1;
            }
        }
        count.values().copied().max().unwrap_or(0)
    }

    /// Crash node `i` (dropped at once, no goodbye; a remote node by its shard).
    pub fn crash(&mut self, i: usize) {
        if !self.here.get(i).copied().unwrap_or(true) {
            if let Some(r) = &self.remote {
                r.crash(i);
            }
            return;
        }
        if let Some(h) = self.nodes.get_mut(i).and_then(|n| n.take()) {
            let probe = h.probe.clone();
            h.crash();
            // Readers of the shared probes (the coordinate sampler) skip crashed nodes.
            probe.set(Snapshot { fatal: Some("crashed by the swarm runner".into()), ..Snapshot::default() });
        }
    }

    /// The emulated network, when latency emulation is on.
    pub fn latency_net(&self) -> Option<&Arc<LatencyNet>> {
        self.net.as_ref()
    }

    /// Every node's status probe, by index (also crashed nodes', marked `fatal`).
    pub fn probes(&self) -> &[Arc<crate::runtime::status::Probe>] {
        &self.probes
    }

    /// Wait until every live node names the same live leader; `None` on timeout.
    pub async fn wait_agreement(&self, timeout: Duration, bar: Option<&ProgressBar>) -> Option<String> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(l) = self.agreed_leader() {
                return Some(l);
            }
            if let Some(b) = bar {
                b.set_position(self.largest_agreement() as u64);
            }
            if Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stop every node cleanly (and tell the other shards to stop).
    pub async fn shutdown(self) {
        if let Some(r) = &self.remote {
            r.stop_all();
        }
        for h in self.nodes.into_iter().flatten() {
            h.shutdown().await;
        }
    }
}

async fn wait_listen(h: &NodeHandle) -> anyhow::Result<Multiaddr> {
    for _ in 0..200 {
        if let Some(a) = h.probe.get().listen.first() {
            // The snapshot's address ends in /p2p/<id>; strip it, the caller adds it back.
            let mut addr: Multiaddr = a.parse()?;
            addr.pop();
            return Ok(addr);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    anyhow::bail!("node {} did not report a listen address", h.peer_id)
}

/// A scheduled fault.
#[derive(Debug, Clone, Copy)]
pub enum Kill {
    /// Crash the current leader `at` after the steady-state window.
    Leader { at: Duration },
    /// Crash a random fraction of the nodes (the leader may be among them).
    Fraction { fraction: f64, at: Duration },
}

/// `peerage swarm` options.
#[derive(Debug, Clone)]
pub struct SwarmOptions {
    pub swarm: LocalSwarmConfig,
    pub timeout: Duration,
    pub settle: Duration,
    pub measure: Duration,
    pub kills: Vec<Kill>,
    pub progress: bool,
    /// Super-peer phase (`node/src/superpeer/report.rs`): with it, `run` measures super-peer
    /// selection (and its kills) instead of the leader milestones and leader kills.
    pub superpeers: Option<crate::superpeer::report::SpPhaseOptions>,
    /// Keep the swarm running this long after its measurements (faults from outside, such
    /// as the testbed's partitions, land in the role logs meanwhile).
    pub hold: Duration,
    /// Gauges of this process's nodes for `/metrics` (`node/src/swarm/serve.rs`).
    pub http: Option<Arc<crate::swarm::serve::SwarmHttp>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Steady {
    pub window_s: f64,
    pub cpu_percent_of_one_core: Option<f64>,
    pub rss_bytes: Option<u64>,
    pub rss_bytes_per_node: Option<u64>,
    pub connections_per_node_mean: f64,
    pub connections_per_node_max: usize,
    pub connections_per_node_min: usize,
    pub new_connections_per_s: f64,
    pub election_messages_per_s: f64,
    pub broadcasts_per_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct KillReport {
    pub after_steady_s: f64,
    pub killed: usize,
    pub killed_leader: bool,
    pub old_leader: Option<String>,
    pub new_leader: Option<String>,
    pub reelected_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SwarmReport {
    pub nodes: usize,
    pub transport: String,
    pub algorithm: String,
    pub seed: u64,
    pub t1_ms: Option<u64>,
    pub t2_ms: u64,
    pub start_s: f64,
    pub all_connected_s: Option<f64>,
    pub members_complete_s: Option<f64>,
    pub dht_filled_s: Option<f64>,
    pub leader_agreed_s: Option<f64>,
    pub leader: Option<String>,
    pub elections_started: u64,
    pub refused_inbound: u64,
    pub refused_outbound: u64,
    pub bad_frames: u64,
    /// Misbehaviour reports and bans, summed over the nodes (`node/src/net/guard.rs`).
    pub offences: u64,
    pub offences_by_kind: overlay::reputation::OffenceCounts,
    pub bans: u64,
    pub steady: Option<Steady>,
    pub kills: Vec<KillReport>,
    /// Vivaldi accuracy against the emulated latency model (only with latency emulation).
    pub coords: Option<CoordsReport>,
    /// Super-peer measures (`peerage swarm --superpeers`).
    pub superpeers: Option<crate::superpeer::report::SuperPeerReport>,
    /// The member directory's convergence, node by node (`node/src/directory/report.rs`).
    pub sync: Option<crate::directory::report::MembersReport>,
    /// The swarm's start (Unix ms); the rows' times count from it.
    pub started_unix_ms: u64,
    /// Processes that ran the swarm (1, or the shard count).
    pub shards: usize,
    /// The final state recomputed from the per-node rows (`node/src/swarm/rows.rs`).
    pub rows_summary: Option<RowsSummary>,
    /// Faults from outside the swarm (the testbed's partitions and heals) and what they did,
    /// judged from the rows by `peerage report merge --events` (`node/src/swarm/heal.rs`).
    pub faults: Option<Vec<crate::swarm::heal::HealReport>>,
    /// One row per node, by index.
    pub node_rows: Vec<NodeRow>,
}

fn totals(snaps: &[(usize, Snapshot)]) -> (u64, u64, u64) {
    snaps
        .iter()
        .fold((0, 0, 0), |(c, m, b), (_, s)| (c + s.connections_opened, m + s.messages_sent, b + s.broadcasts_sent))
}

/// Run `peerage swarm` and return its report.
pub async fn run(opts: SwarmOptions) -> anyhow::Result<SwarmReport> {
    let n = opts.swarm.nodes;
    let bar = if opts.progress {
        let b = ProgressBar::new(n as u64);
        b.set_style(
            ProgressStyle::with_template("{elapsed_precise} {msg:<28} [{bar:40}] {pos}/{len}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Some(b)
    } else {
        None
    };
    let remote = match opts.swarm.shard.as_ref().filter(|p| p.count > 1) {
        Some(plan) if plan.index == 0 => Some(Remote::conduct(plan, run_key(&opts.swarm)).await?),
        Some(_) => anyhow::bail!("only shard 0 measures the swarm; the other shards run `work`"),
        None => None,
    };
    let t0 = Instant::now();
    let t0_unix_ms = remote.as_ref().map_or_else(crate::swarm::shard::unix_ms, |r| r.t0_unix_ms);
    let swarm = LocalSwarm::start_with(&opts.swarm, remote).await?;
    let start_s = t0.elapsed().as_secs_f64();
    let log = swarm.role_log(t0);
    let observer = opts.http.as_ref().map(|h| h.observe(swarm.local_probes()));
    let sampler = swarm
        .latency_net()
        .map(|net| CoordsSampler::start(net.clone(), swarm.probes().to_vec(), t0, Duration::from_secs(2)));
    if let Some(sp) = &opts.superpeers {
        let mut swarm = swarm;
        let spr = crate::superpeer::report::run_phase(&mut swarm, sp, t0, bar.as_ref()).await;
        finish(bar);
        let leader = swarm.agreed_leader();
        let mut r = report(&opts, start_s, None, None, None, None, leader, None, Vec::new(), &swarm);
        r.superpeers = Some(spr);
        if let Some(s) = sampler {
            r.coords = s.finish().await;
        }
        return conclude(r, swarm, log, observer, &opts, t0, t0_unix_ms).await;
    }
    let (mut connected, mut members, mut dht, mut agreed) = (None, None, None, None);
    let dht_target = (n.saturating_sub(1)).min(crate::runtime::node::KAD_K);
    let deadline = t0 + opts.timeout;
    let mut tracker = crate::directory::report::MembersTracker::new(n, t0);
    while Instant::now() < deadline {
        let snaps = swarm.snapshots();
        tracker.observe(&snaps);
        let el = t0.elapsed().as_secs_f64();
        if connected.is_none() && snaps.iter().all(|(_, s)| s.peers > 0 || n == 1) {
            connected = Some(el);
        }
        if members.is_none() && snaps.iter().all(|(_, s)| s.members == n) {
            members = Some(el);
        }
        if dht.is_none() && snaps.iter().all(|(_, s)| s.routing_table >= dht_target) {
            dht = Some(el);
        }
        if agreed.is_none() && swarm.agreed_in(&snaps).is_some() {
            agreed = Some(el);
        }
        if let Some(b) = &bar {
            let phase = if members.is_none() {
                b.set_position(snaps.iter().filter(|(_, s)| s.members == n).count() as u64);
                "learning members"
            } else {
                b.set_position(swarm.largest_agreement() as u64);
                "agreeing on a leader"
            };
            b.set_message(phase);
        }
        if connected.is_some() && members.is_some() && dht.is_some() && agreed.is_some() {
            break;
        }
        // Once agreed, give the slower milestones (a full routing table) at most 10 s more.
        if agreed.is_some_and(|a| el > a + 10.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let leader = swarm.agreed_leader();
    let sync = Some(tracker.finish(&swarm.snapshots()));
    let mut steady = None;
    let mut kills = Vec::new();
    if agreed.is_some() {
        if let Some(b) = &bar {
            b.set_message("settling");
        }
        tokio::time::sleep(opts.settle).await;
        if let Some(b) = &bar {
            b.set_message("measuring steady state");
        }
        let before = totals(&swarm.snapshots());
        let cpu = sysstat::CpuWindow::start();
        let remote_cpu0 = swarm.remote().map(|r| r.processes().0);
        let w0 = Instant::now();
        tokio::time::sleep(opts.measure).await;
        let window = w0.elapsed().as_secs_f64();
        let snaps = swarm.snapshots();
        let after = totals(&snaps);
        let conns: Vec<usize> = snaps.iter().map(|(_, s)| s.connections).collect();
        // A conductor adds the other shards' processes.
        let (remote_cpu, remote_rss) = match (swarm.remote(), remote_cpu0) {
            (Some(r), Some(c0)) => {
                let (c1, rss) = r.processes();
                (100.0 * (c1 - c0).max(0.0) / window, rss)
            }
            _ => (0.0, 0),
        };
        let rss = sysstat::rss_bytes().map(|r| r + remote_rss);
        steady = Some(Steady {
            window_s: window,
            cpu_percent_of_one_core: cpu.percent_of_one_core().map(|c| c + remote_cpu),
            rss_bytes: rss,
            rss_bytes_per_node: rss.map(|r| r / n.max(1) as u64),
            connections_per_node_mean: overlay::stats::Sample::collect(conns.iter().map(|&c| c as f64))
                .ok()
                .and_then(|s| s.mean())
                .unwrap_or(0.0),
            connections_per_node_max: conns.iter().copied().max().unwrap_or(0),
            connections_per_node_min: conns.iter().copied().min().unwrap_or(0),
            new_connections_per_s: after.0.saturating_sub(before.0) as f64 / window,
            election_messages_per_s: after.1.saturating_sub(before.1) as f64 / window,
            broadcasts_per_s: after.2.saturating_sub(before.2) as f64 / window,
        });
        let mut swarm = swarm;
        let mut rng = StdRng::seed_from_u64(opts.swarm.seed ^ 0xdead);
        let steady_end = Instant::now();
        for k in &opts.kills {
            let at = match k {
                Kill::Leader { at } | Kill::Fraction { at, .. } => *at,
            };
            if let Some(wait) = (steady_end + at).checked_duration_since(Instant::now()) {
                if let Some(b) = &bar {
                    b.set_message("waiting to kill");
                }
                tokio::time::sleep(wait).await;
            }
            let old = swarm.agreed_leader();
            let victims: Vec<usize> = match k {
                Kill::Leader { .. } => old.as_deref().and_then(|l| swarm.index_of(l)).into_iter().collect(),
                Kill::Fraction { fraction, .. } => {
                    let mut alive: Vec<usize> = (0..swarm.len()).filter(|&i| swarm.is_alive(i)).collect();
                    alive.shuffle(&mut rng);
                    let count = ((alive.len() as f64) * fraction.clamp(0.0, 1.0)).round() as usize;
                    alive.into_iter().take(count.min(swarm.alive().saturating_sub(1))).collect()
                }
            };
            let killed_leader = old.as_deref().is_some_and(|l| victims.iter().any(|&v| swarm.node_id(v) == l));
            let t_kill = Instant::now();
            for &v in &victims {
                swarm.crash(v);
            }
            if let Some(b) = &bar {
                b.set_length(swarm.alive() as u64);
                b.set_message("re-electing");
            }
            let new = swarm.wait_agreement(opts.timeout, bar.as_ref()).await;
            kills.push(KillReport {
                after_steady_s: at.as_secs_f64(),
                killed: victims.len(),
                killed_leader,
                old_leader: old,
                reelected_s: new.as_ref().map(|_| t_kill.elapsed().as_secs_f64()),
                new_leader: new,
            });
        }
        finish(bar);
        let mut r = report(&opts, start_s, connected, members, dht, agreed, leader, steady, kills, &swarm);
        r.sync = sync;
        if let Some(s) = sampler {
            r.coords = s.finish().await;
        }
        return conclude(r, swarm, log, observer, &opts, t0, t0_unix_ms).await;
    }
    finish(bar);
    let mut r = report(&opts, start_s, connected, members, dht, agreed, leader, steady, kills, &swarm);
    r.sync = sync;
    if let Some(s) = sampler {
        r.coords = s.finish().await;
    }
    conclude(r, swarm, log, observer, &opts, t0, t0_unix_ms).await
}

/// What every shard of this swarm must agree on.
pub fn run_key(cfg: &LocalSwarmConfig) -> RunKey {
    RunKey {
        nodes: cfg.nodes,
        shards: cfg.shard.as_ref().map_or(1, |p| p.count),
        seed: cfg.seed,
        latency_seed: cfg.latency_seed,
    }
}

/// Hold the swarm if asked, then add this process's rows and their summary, and stop the
/// other shards.
async fn conclude(
    mut r: SwarmReport,
    swarm: LocalSwarm,
    log: RoleLog,
    observer: Option<tokio::task::JoinHandle<()>>,
    opts: &SwarmOptions,
    t0: Instant,
    t0_unix_ms: u64,
) -> anyhow::Result<SwarmReport> {
    r.started_unix_ms = t0_unix_ms;
    if !opts.hold.is_zero() {
        eprintln!(
            "{}",
            serde_json::json!({ "event": "measured", "t_s": t0.elapsed().as_secs_f64(), "hold_s": opts.hold.as_secs_f64() })
        );
        tokio::time::sleep(opts.hold).await;
    }
    if let Some(o) = observer {
        o.abort();
    }
    let rows = swarm.rows(log.finish());
    r.rows_summary = Some(rows::summarize(&rows, swarm.latency_net().map(|n| &**n)));
    r.node_rows = rows;
    r.shards = opts.swarm.shard.as_ref().map_or(1, |p| p.count);
    if let Some(remote) = swarm.remote() {
        remote.stop_all();
        // Let the stop messages leave before the process ends.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Ok(r)
}

fn finish(bar: Option<ProgressBar>) {
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}

#[allow(clippy::too_many_arguments)]
fn report(
    opts: &SwarmOptions,
    start_s: f64,
    connected: Option<f64>,
    members: Option<f64>,
    dht: Option<f64>,
    agreed: Option<f64>,
    leader: Option<String>,
    steady: Option<Steady>,
    kills: Vec<KillReport>,
    swarm: &LocalSwarm,
) -> SwarmReport {
    let snaps = swarm.snapshots();
    let e = &opts.swarm.election;
    SwarmReport {
        nodes: opts.swarm.nodes,
        transport: match opts.swarm.transport {
            TransportKind::Memory => "memory".into(),
            TransportKind::TcpQuic => "tcp".into(),
        },
        algorithm: e.algorithm.name().into(),
        seed: opts.swarm.seed,
        t1_ms: e.t1().map(|d| d.as_millis() as u64),
        t2_ms: e.answer_timeout_ms,
        start_s,
        all_connected_s: connected,
        members_complete_s: members,
        dht_filled_s: dht,
        leader_agreed_s: agreed,
        leader,
        elections_started: snaps.iter().map(|(_, s)| s.elections_started).sum(),
        refused_inbound: snaps.iter().map(|(_, s)| s.refused_inbound).sum(),
        refused_outbound: snaps.iter().map(|(_, s)| s.refused_outbound).sum(),
        bad_frames: snaps.iter().map(|(_, s)| s.bad_frames).sum(),
        offences: snaps.iter().map(|(_, s)| s.guard.offences).sum(),
        offences_by_kind: snaps.iter().fold(Default::default(), |mut c: overlay::reputation::OffenceCounts, (_, s)| {
            c.merge(&s.guard.by_kind);
            c
        }),
        bans: snaps.iter().map(|(_, s)| s.guard.bans).sum(),
        steady,
        kills,
        coords: None,
        superpeers: None,
        sync: None,
        started_unix_ms: 0,
        shards: 1,
        rows_summary: None,
        faults: None,
        node_rows: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_swarms_rotations_open_at_most_its_budget_of_connections_a_second() {
        for (nodes, ping_s) in [(1_u64, 2_u64), (20, 2), (60, 2), (200, 5), (1_000, 2), (5_000, 15)] {
            let ms = swarm_rotate_ms(nodes, ping_s);
            assert!(ms >= 3_000 * ping_s, "{nodes} nodes: a peer is measured three times before it goes");
            let per_s = nodes as f64 * 1_000.0 / ms as f64;
            assert!(per_s <= SWARM_ROTATIONS_PER_S as f64 + 1e-9, "{nodes} nodes: {per_s} a second");
        }
        assert_eq!(swarm_rotate_ms(20, 2), 6_000, "a small swarm rotates as a node does");
        assert_eq!(swarm_rotate_ms(1_000, 2), 100_000);
    }

    #[test]
    fn the_swarms_pings_stay_within_its_budget_of_rounds_a_second() {
        for nodes in [1_u64, 20, 200, 399, 400, 401, 1_000, 5_000, 100_000] {
            assert_eq!(swarm_ping_s(nodes, false), SWARM_LOOPBACK_PING_S, "loopback: liveness only");
            let s = swarm_ping_s(nodes, true);
            assert!(s >= SWARM_MIN_PING_S, "{nodes} nodes: {s} s");
            assert!(nodes as f64 / s as f64 <= SWARM_PING_ROUNDS_PER_S as f64, "{nodes} nodes ping every {s} s");
            assert!(
                s == SWARM_MIN_PING_S || nodes as f64 / (s - 1) as f64 > SWARM_PING_ROUNDS_PER_S as f64,
                "{nodes} nodes: {s} s is longer than the budget needs"
            );
        }
        assert_eq!(swarm_ping_s(200, true), 2, "the 200-node swarm pings as its measurements did");
        assert_eq!(swarm_ping_s(1_000, true), 5);
    }

    #[test]
    fn the_loopback_prune_line_holds_a_full_mesh_and_a_rings_neighbours() {
        let node = crate::config::Limits::default();
        assert!(SWARM_LOOPBACK_PRUNE_ABOVE > node.target_low, "the peer manager must have room to dial");
        assert!(SWARM_LOOPBACK_PRUNE_ABOVE < node.target_high, "a swarm on loopback keeps fewer than a node");
        let mut l = node.clone();
        l.set_target_high(SWARM_LOOPBACK_PRUNE_ABOVE);
        assert_eq!((l.inbound_gate, l.max_established), (node.inbound_gate, node.max_established), "the gates stay");
        assert_eq!(swarm_prune_above(false, false), Some(SWARM_LOOPBACK_PRUNE_ABOVE));
        for (emulated, superpeers) in [(true, false), (false, true), (true, true)] {
            assert_eq!(swarm_prune_above(emulated, superpeers), None, "the node's own line");
        }
    }
}

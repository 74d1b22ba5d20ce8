//! `peerage swarm --shard i/M`: one N-node swarm run as M processes, on one host or many.
//!
//! A run of M shards is the swarm a single process would run with the same seed: node `g`
//! has the key `node_key(seed, g, difficulty)` (`node/src/swarm/keys.rs`), sits at place `g` of the same
//! latency model, and bootstraps from the same earlier nodes (every shard replays the
//! runner's seeded choices for all N nodes and starts only its own). Node `g` runs in shard
//! `g mod M` (round robin: every shard starts its nodes at the same pace, so the earlier nodes
//! a joining node dials are up in the other shards too) and listens at
//! `host(g mod M):port_base + g` over TCP or QUIC, an address every shard computes.
//!
//! Shard 0 is the *conductor*: it runs the nodes of its slice and the whole measurement of
//! `peerage swarm`, on every node's status snapshot, which the other shards send it over the
//! control channel (`node/src/swarm/control.rs`) every 500 ms. It starts the run (all shards
//! start their nodes at one moment, the swarm's start), crashes remote nodes through their
//! shard when a kill strikes, and stops the shards at the end. A shard that goes away (its
//! process killed) counts as all its nodes crashed.
//!
//! What a shard sees is 500 ms old at most: a convergence or re-election time measured by
//! the conductor is up to that much later than the same in one process. The process CPU and
//! RSS of the steady-state window add every shard's; the super-peer timeline's CPU is the
//! conductor's own.
//!
//! Each shard writes its part of the report (`node/src/swarm/merge.rs`): its nodes' rows, and
//! for shard 0 the swarm's report; `peerage report merge` makes the one report.

use crate::net::latency_transport::LatencyNet;
use crate::runtime::status::{Probe, Snapshot};
use crate::runtime::sysstat;
use crate::swarm::control::{self, Batch, ControlAddr, NodeSnap, RunKey, ToConductor, ToShard, CONTROL_VERSION};
use anyhow::Context as _;
use libp2p::multiaddr::Protocol;
use libp2p::Multiaddr;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;
use tracing::{info, warn};

/// How far ahead of the `Start` message the shards start their nodes.
const START_DELAY: Duration = Duration::from_millis(500);

/// How shard nodes reach each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardTransport {
    Tcp,
    /// One UDP socket per node, whatever its connection count (TCP costs a descriptor per
    /// connection, and the descriptor limit here is 20,000 per process).
    Quic,
}

/// Which slice of the swarm this process runs, and where every node listens.
#[derive(Debug, Clone)]
pub struct ShardPlan {
    pub index: usize,
    pub count: usize,
    /// The host of each shard (one entry: every shard on that host).
    pub hosts: Vec<IpAddr>,
    pub port_base: u16,
    pub transport: ShardTransport,
    pub control: ControlAddr,
    /// How long shards wait for each other (connect, hello, start).
    pub join_timeout: Duration,
}

/// Why a shard plan cannot be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlanError {
    #[error("--shard wants i/M with 0 <= i < M, got {0:?}")]
    BadShard(String),
    #[error("{shards} shards need 1 or {shards} --shard-hosts, got {hosts}")]
    Hosts { shards: usize, hosts: usize },
    #[error("{shards} shards for {nodes} nodes: every shard needs a node")]
    TooManyShards { shards: usize, nodes: usize },
    #[error("ports {base}..{base}+{nodes} do not fit below 65536 (--port-base)")]
    Ports { base: u16, nodes: usize },
}

/// Parse `i/M`.
pub fn parse_shard(s: &str) -> Result<(usize, usize), PlanError> {
    let bad = || PlanError::BadShard(s.to_string());
    let (i, m) = s.split_once('/').ok_or_else(bad)?;
    let (i, m): (usize, usize) = (i.trim().parse().map_err(|_| bad())?, m.trim().parse().map_err(|_| bad())?);
    if m == 0 || i >= m {
        return Err(bad());
    }
    Ok((i, m))
}

impl ShardPlan {
    pub fn validate(&self, nodes: usize) -> Result<(), PlanError> {
        if self.hosts.len() != 1 && self.hosts.len() != self.count {
            return Err(PlanError::Hosts { shards: self.count, hosts: self.hosts.len() });
        }
        if self.count > nodes {
            return Err(PlanError::TooManyShards { shards: self.count, nodes });
        }
        if self.port_base as usize + nodes > 65_536 {
            return Err(PlanError::Ports { base: self.port_base, nodes });
        }
        Ok(())
    }

    /// The shard that runs node `g`.
    pub fn owner(&self, g: usize) -> usize {
        g % self.count
    }

    pub fn here(&self, g: usize) -> bool {
        self.owner(g) == self.index
    }

    fn host(&self, g: usize) -> IpAddr {
        if self.hosts.len() == 1 {
            self.hosts[0]
        } else {
            self.hosts[self.owner(g)]
        }
    }

    /// Where node `g` listens (without `/p2p`).
    pub fn addr(&self, g: usize) -> Multiaddr {
        let port = self.port_base.saturating_add(g as u16);
        let ip = match self.host(g) {
            IpAddr::V4(a) => Protocol::Ip4(a),
            IpAddr::V6(a) => Protocol::Ip6(a),
        };
        let base = Multiaddr::empty().with(ip);
        match self.transport {
            ShardTransport::Tcp => base.with(Protocol::Tcp(port)),
            ShardTransport::Quic => base.with(Protocol::Udp(port)).with(Protocol::QuicV1),
        }
    }
}

/// Resolve shard host names (or IP literals), retrying until `within` (on a cluster a pod's
/// name resolves once the pod is scheduled).
pub async fn resolve_hosts(names: &[String], within: Duration) -> anyhow::Result<Vec<IpAddr>> {
    let until = tokio::time::Instant::now() + within;
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        if let Ok(ip) = name.parse::<IpAddr>() {
            out.push(ip);
            continue;
        }
        loop {
            match tokio::net::lookup_host((name.as_str(), 0)).await {
                Ok(mut addrs) => {
                    if let Some(a) = addrs.next() {
                        out.push(a.ip());
                        break;
                    }
                }
                Err(e) if tokio::time::Instant::now() >= until => {
                    anyhow::bail!("cannot resolve shard host {name:?}: {e}")
                }
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(out)
}

pub fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

type ProcessLoad = (Option<f64>, Option<u64>);

/// The conductor's view of the other shards: their nodes' latest snapshots, which are alive,
/// and a way to tell each shard what to do.
pub struct Remote {
    plan: ShardPlan,
    probes: Vec<Arc<Probe>>,
    alive: Mutex<Vec<bool>>,
    senders: Mutex<HashMap<usize, mpsc::UnboundedSender<ToShard>>>,
    /// Per shard: CPU seconds and RSS of its process, as it last reported them.
    procs: Mutex<HashMap<usize, ProcessLoad>>,
    net: OnceLock<Arc<LatencyNet>>,
    pub t0_unix_ms: u64,
    _listener: control::Listener,
}

impl Remote {
    /// Listen for the other M-1 shards, check that they run the same swarm, and start them.
    /// Returns once the start moment has come.
    pub async fn conduct(plan: &ShardPlan, run: RunKey) -> anyhow::Result<Arc<Remote>> {
        let listener = control::Listener::bind(&plan.control)
            .await
            .with_context(|| format!("cannot listen for shards at {}", plan.control))?;
        info!(control = %plan.control, shards = plan.count, "waiting for the other shards");
        let mut joined: HashMap<usize, control::Stream> = HashMap::new();
        let deadline = tokio::time::Instant::now() + plan.join_timeout;
        while joined.len() + 1 < plan.count {
            let accepted = tokio::time::timeout_at(deadline, listener.accept()).await.map_err(|_| {
                anyhow::anyhow!(
                    "only {} of {} shards joined within {:?}",
                    joined.len() + 1,
                    plan.count,
                    plan.join_timeout
                )
            })?;
            let mut s = match accepted {
                Ok(s) => s,
                Err(e) => {
                    warn!("control accept failed: {e}");
                    continue;
                }
            };
            let hello = tokio::time::timeout(Duration::from_secs(10), control::recv::<_, ToConductor>(&mut s)).await;
            let refusal = match hello {
                Ok(Ok(Some(ToConductor::Hello { version, shard, run: theirs }))) => {
                    if version != CONTROL_VERSION {
                        Some(format!("control version {version}, the conductor speaks {CONTROL_VERSION}"))
                    } else if theirs != run {
                        Some(format!("shard runs {theirs:?}, the conductor {run:?}"))
                    } else if shard == 0 || shard >= plan.count || joined.contains_key(&shard) {
                        Some(format!("shard index {shard} is taken or out of range"))
                    } else {
                        joined.insert(shard, s);
                        None
                    }
                }
                _ => None,
            };
            if let Some(reason) = refusal {
                warn!("refused a shard: {reason}");
            }
        }
        let t0_unix_ms = unix_ms() + START_DELAY.as_millis() as u64;
        let n = run.nodes;
        let remote = Arc::new(Remote {
            plan: plan.clone(),
            probes: (0..n).map(|_| Arc::new(Probe::default())).collect(),
            alive: Mutex::new((0..n).map(|g| !plan.here(g)).collect()),
            senders: Mutex::new(HashMap::new()),
            procs: Mutex::new(HashMap::new()),
            net: OnceLock::new(),
            t0_unix_ms,
            _listener: listener,
        });
        for (shard, stream) in joined {
            let (mut rd, mut wr) = tokio::io::split(stream);
            let (tx, mut rx) = mpsc::unbounded_channel::<ToShard>();
            let start =
                ToShard::Start { version: CONTROL_VERSION, delay_ms: START_DELAY.as_millis() as u64, t0_unix_ms };
            control::send(&mut wr, &start).await.with_context(|| format!("cannot start shard {shard}"))?;
            tokio::spawn(async move {
                while let Some(m) = rx.recv().await {
                    let stop = matches!(m, ToShard::Stop);
                    if let Err(e) = control::send(&mut wr, &m).await {
                        warn!(shard, "control send failed: {e}");
                        break;
                    }
                    if stop {
                        break;
                    }
                }
            });
            remote.senders.lock().unwrap_or_else(|p| p.into_inner()).insert(shard, tx);
            let r = remote.clone();
            tokio::spawn(async move {
                loop {
                    match control::recv::<_, ToConductor>(&mut rd).await {
                        Ok(Some(ToConductor::Batch(b))) => r.take_batch(shard, b),
                        Ok(Some(ToConductor::Hello { .. })) => warn!(shard, "a second hello; ignored"),
                        Ok(None) => {
                            r.lose_shard(shard, "its control channel closed");
                            break;
                        }
                        Err(e) => {
                            r.lose_shard(shard, &e.to_string());
                            break;
                        }
                    }
                }
            });
        }
        tokio::time::sleep(START_DELAY).await;
        Ok(remote)
    }

    fn take_batch(&self, shard: usize, b: Batch) {
        let now = Instant::now();
        {
            let mut alive = self.alive.lock().unwrap_or_else(|p| p.into_inner());
            for NodeSnap { node, mut snap, members_changed_ms_ago } in b.nodes {
                // Only the shard's own nodes, and never one the conductor already crashed.
                if node >= alive.len() || self.plan.owner(node) != shard || !alive[node] {
                    continue;
                }
                snap.members_changed_at =
                    members_changed_ms_ago.and_then(|ms| now.checked_sub(Duration::from_millis(ms)));
                self.probes[node].set(snap);
            }
            for node in b.gone {
                if node < alive.len() && self.plan.owner(node) == shard && alive[node] {
                    alive[node] = false;
                    self.mark_gone(node, "stopped in its shard");
                }
            }
        }
        if let (Some(net), Some(l)) = (self.net.get(), b.lateness) {
            net.add_remote_lateness(shard, l);
        }
        self.procs.lock().unwrap_or_else(|p| p.into_inner()).insert(shard, (b.cpu_s, b.rss_bytes));
    }

    fn mark_gone(&self, node: usize, why: &str) {
        self.probes[node].set(Snapshot { fatal: Some(why.to_string()), ..Snapshot::default() });
    }

    fn lose_shard(&self, shard: usize, why: &str) {
        let mut alive = self.alive.lock().unwrap_or_else(|p| p.into_inner());
        let mut lost = 0;
        for node in 0..alive.len() {
            if self.plan.owner(node) == shard && alive[node] {
                alive[node] = false;
                lost += 1;
                self.mark_gone(node, &format!("shard {shard} lost: {why}"));
            }
        }
        if lost > 0 {
            warn!(shard, lost, "shard lost ({why}): its nodes count as crashed");
        }
        self.senders.lock().unwrap_or_else(|p| p.into_inner()).remove(&shard);
    }

    /// Adds the other shards' emulation lateness to this net's report.
    pub fn set_net(&self, net: Arc<LatencyNet>) {
        let _ = self.net.set(net);
    }

    pub fn probe(&self, node: usize) -> Arc<Probe> {
        self.probes[node].clone()
    }

    pub fn is_alive(&self, node: usize) -> bool {
        self.alive.lock().unwrap_or_else(|p| p.into_inner()).get(node).copied().unwrap_or(false)
    }

    /// Crash a remote node (its shard drops it at once).
    pub fn crash(&self, node: usize) {
        {
            let mut alive = self.alive.lock().unwrap_or_else(|p| p.into_inner());
            match alive.get_mut(node) {
                Some(a) if *a => *a = false,
                _ => return,
            }
        }
        self.mark_gone(node, "crashed by the swarm runner");
        if let Some(tx) = self.senders.lock().unwrap_or_else(|p| p.into_inner()).get(&self.plan.owner(node)) {
            let _ = tx.send(ToShard::Crash { node });
        }
    }

    /// Tell every shard to stop (it writes its part and ends).
    pub fn stop_all(&self) {
        for tx in self.senders.lock().unwrap_or_else(|p| p.into_inner()).values() {
            let _ = tx.send(ToShard::Stop);
        }
    }

    /// CPU seconds and RSS of the other shards' processes, as they last reported them.
    pub fn processes(&self) -> (f64, u64) {
        let p = self.procs.lock().unwrap_or_else(|p| p.into_inner());
        (p.values().filter_map(|x| x.0).sum(), p.values().filter_map(|x| x.1).sum())
    }
}

/// A worker shard's side of the channel: connected, hello said, start received.
pub struct Joined {
    pub stream: control::Stream,
    pub t0_unix_ms: u64,
    pub delay: Duration,
}

/// Connect to the conductor and wait for the start.
pub async fn join(plan: &ShardPlan, run: RunKey) -> anyhow::Result<Joined> {
    let mut s = control::connect(&plan.control, plan.join_timeout)
        .await
        .with_context(|| format!("cannot reach the conductor (shard 0) at {}", plan.control))?;
    control::send(&mut s, &ToConductor::Hello { version: CONTROL_VERSION, shard: plan.index, run }).await?;
    let start = tokio::time::timeout(plan.join_timeout + Duration::from_secs(10), control::recv::<_, ToShard>(&mut s))
        .await
        .map_err(|_| anyhow::anyhow!("the conductor did not start the run within {:?}", plan.join_timeout))??;
    match start {
        Some(ToShard::Start { version, delay_ms, t0_unix_ms }) if version == CONTROL_VERSION => {
            Ok(Joined { stream: s, t0_unix_ms, delay: Duration::from_millis(delay_ms.min(60_000)) })
        }
        Some(ToShard::Refused { reason }) => anyhow::bail!("the conductor refused this shard: {reason}"),
        Some(other) => anyhow::bail!("the conductor sent {other:?} instead of a start"),
        None => anyhow::bail!("the conductor closed the control channel (it refused this shard; see its log)"),
    }
}

/// This process's snapshots of `nodes` for the conductor.
pub fn batch(snaps: Vec<(usize, Snapshot)>, gone: Vec<usize>, net: Option<&LatencyNet>) -> Batch {
    let now = Instant::now();
    Batch {
        nodes: snaps
            .into_iter()
            .map(|(node, snap)| NodeSnap {
                node,
                members_changed_ms_ago: snap
                    .members_changed_at
                    .map(|t| now.saturating_duration_since(t).as_millis() as u64),
                snap,
            })
            .collect(),
        gone,
        lateness: net.map(|n| n.local_lateness()),
        cpu_s: sysstat::cpu_seconds(),
        rss_bytes: sysstat::rss_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(count: usize, hosts: Vec<IpAddr>) -> ShardPlan {
        ShardPlan {
            index: 1,
            count,
            hosts,
            port_base: 20_000,
            transport: ShardTransport::Tcp,
            control: ControlAddr::Unix("/nonexistent".into()),
            join_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn shard_flags_parse_and_plans_validate() {
        assert_eq!(parse_shard("2/4"), Ok((2, 4)));
        for bad in ["4/4", "1", "a/2", "0/0", "-1/3"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(plan(4, vec![ip("10.0.0.1")]).validate(100).is_ok());
        assert_eq!(plan(4, vec![ip("10.0.0.1"); 3]).validate(100), Err(PlanError::Hosts { shards: 4, hosts: 3 }));
        assert!(matches!(plan(4, vec![ip("10.0.0.1")]).validate(3), Err(PlanError::TooManyShards { .. })));
        assert!(matches!(plan(4, vec![ip("10.0.0.1")]).validate(50_000), Err(PlanError::Ports { .. })));
    }

    #[test]
    fn nodes_go_round_robin_and_listen_on_their_shards_host() {
        let hosts: Vec<IpAddr> = (1..=4).map(|i| format!("10.9.0.{i}").parse().unwrap()).collect();
        let p = plan(4, hosts);
        assert_eq!((0..8).filter(|&g| p.here(g)).collect::<Vec<_>>(), vec![1, 5]);
        assert_eq!(p.addr(6).to_string(), "/ip4/10.9.0.3/tcp/20006");
        let q = ShardPlan { transport: ShardTransport::Quic, ..p };
        assert_eq!(q.addr(7).to_string(), "/ip4/10.9.0.4/udp/20007/quic-v1");
    }
}

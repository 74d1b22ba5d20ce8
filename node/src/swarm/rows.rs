//! Per-node rows of a swarm report, and the summaries recomputed from them.
//!
//! Every process of a swarm (the one process, or each shard) keeps, for each node it runs, a
//! log of the node's super-peer state: every change of role, head, role key or coordinate
//! fitness seen at a [`RECORD_EVERY`] poll, timed from the swarm's start. At the end it writes
//! one [`NodeRow`] per node: that log and the node's final state. From the rows alone:
//! - [`RowsSummary`]: the final state (heads, attached nodes, the model RTT from every member to
//!   its head, cluster sizes, roles held twice), the same whether the rows came from one
//!   process or were merged from M shards;
//! - [`state_at`]: every node's state at any time of the run, which `heal` uses to judge a
//!   partition's heal (`node/src/swarm/heal.rs`).
//!
//! Heads are named by node index (every process derives every node's id from the seed,
//! `node/src/swarm/keys.rs`); a head that is not a swarm node is `None`, with its id kept.

use crate::net::latency_transport::LatencyNet;
use crate::runtime::status::{Probe, Snapshot};
use overlay::stats::{Sample, Summary};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the role log polls the nodes.
pub const RECORD_EVERY: Duration = Duration::from_millis(250);

/// A node's super-peer state at one time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoleState {
    /// `starting`, `unattached`, `member`, `head`, `super-peer`; `crashed` once gone; `none`
    /// without super peers.
    pub role: String,
    /// The head's node index, if a member of a swarm node.
    pub head: Option<usize>,
    /// The head's node id when it is not a swarm node.
    pub head_id: Option<String>,
    pub role_key: Option<String>,
    pub fit: bool,
}

impl RoleState {
    pub fn is_head(&self) -> bool {
        self.role == "super-peer" || self.role == "head"
    }
    pub fn crashed() -> RoleState {
        RoleState { role: "crashed".into(), ..RoleState::default() }
    }
}

/// One change of a node's [`RoleState`], `t_s` seconds after the swarm's start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoleChange {
    pub t_s: f64,
    #[serde(flatten)]
    pub state: RoleState,
}

/// One node of the swarm, as the process that ran it saw it at the end.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeRow {
    pub index: usize,
    /// The shard that ran it (0 in a one-process swarm).
    pub shard: usize,
    pub peer_id: String,
    pub node_id: String,
    pub alive: bool,
    pub connections: usize,
    pub peers: usize,
    pub members: usize,
    pub leader: Option<String>,
    pub messages_sent: u64,
    pub vivaldi_samples: u64,
    /// Super-peer counters at the end (0 without super peers).
    pub sp_messages_sent: u64,
    pub lookups: u64,
    /// Misbehaviour this node reported of its peers, and the bans it decided
    /// (`node/src/net/guard.rs`): in a swarm of honest nodes, both 0.
    #[serde(default)]
    pub offences: u64,
    #[serde(default)]
    pub bans: u64,
    /// The last state, and the log of every change.
    pub last: RoleState,
    pub cluster_size: usize,
    /// Last ping RTT to its head (ms).
    pub ping_to_head_ms: Option<f64>,
    pub changes: Vec<RoleChange>,
}

/// The state of a snapshot (`index_of` maps node ids to indices).
pub fn role_state(s: &Snapshot, index_of: &dyn Fn(&str) -> Option<usize>) -> RoleState {
    if s.fatal.is_some() {
        return RoleState::crashed();
    }
    match &s.superpeer {
        None => RoleState { role: "none".into(), ..RoleState::default() },
        Some(p) => {
            let head = p.head.as_deref().and_then(index_of);
            RoleState {
                role: p.role.clone(),
                head,
                head_id: if head.is_none() { p.head.clone() } else { None },
                role_key: p.role_key.clone(),
                fit: p.coordinate_fit,
            }
        }
    }
}

/// Maps a node id to its index in the swarm.
pub type IndexOf = Arc<dyn Fn(&str) -> Option<usize> + Send + Sync>;

/// The role logs of the nodes this process runs, filled by a polling task.
pub struct RoleLog {
    logs: Arc<Mutex<HashMap<usize, Vec<RoleChange>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RoleLog {
    /// Poll `probes` (node index, probe) every [`RECORD_EVERY`]; times from `t0`.
    pub fn start(probes: Vec<(usize, Arc<Probe>)>, t0: Instant, index_of: IndexOf) -> RoleLog {
        let logs: Arc<Mutex<HashMap<usize, Vec<RoleChange>>>> = Arc::new(Mutex::new(HashMap::new()));
        let l = logs.clone();
        let task = tokio::spawn(async move {
            loop {
                let t_s = t0.elapsed().as_secs_f64();
                let states: Vec<(usize, RoleState)> =
                    probes.iter().map(|(i, p)| (*i, p.read(|s| role_state(s, &*index_of)))).collect();
                {
                    let mut logs = l.lock().unwrap_or_else(|p| p.into_inner());
                    for (i, state) in states {
                        let log = logs.entry(i).or_default();
                        if log.last().map(|c| &c.state) != Some(&state) {
                            log.push(RoleChange { t_s, state });
                        }
                    }
                }
                tokio::time::sleep(RECORD_EVERY).await;
            }
        });
        RoleLog { logs, task }
    }

    /// Stop polling and hand over the logs.
    pub fn finish(self) -> HashMap<usize, Vec<RoleChange>> {
        self.task.abort();
        std::mem::take(&mut *self.logs.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The row of node `index` from its last snapshot (`None`: crashed) and its log.
pub fn row(
    index: usize,
    shard: usize,
    peer_id: String,
    node_id: String,
    snap: Option<&Snapshot>,
    changes: Vec<RoleChange>,
    index_of: &dyn Fn(&str) -> Option<usize>,
) -> NodeRow {
    let alive = snap.is_some_and(|s| s.fatal.is_none());
    let s = snap.cloned().unwrap_or_default();
    let sp = s.superpeer.as_ref();
    let last = if alive { role_state(&s, index_of) } else { RoleState::crashed() };
    NodeRow {
        index,
        shard,
        peer_id,
        node_id,
        alive,
        connections: s.connections,
        peers: s.peers,
        members: s.members,
        leader: s.leader.clone(),
        messages_sent: s.messages_sent,
        vivaldi_samples: s.vivaldi_samples,
        sp_messages_sent: sp.map_or(0, |p| p.messages_sent),
        lookups: sp.map_or(0, |p| p.lookups),
        offences: s.guard.offences,
        bans: s.guard.bans,
        last,
        cluster_size: sp.map_or(0, |p| p.cluster_size),
        ping_to_head_ms: sp.and_then(|p| p.head_rtt_ms),
        changes,
    }
}

/// Every node's state at `t_s` (seconds from the start), from the rows' logs: the last change
/// at or before `t_s` (`None`: no state yet).
pub fn state_at(rows: &[NodeRow], t_s: f64) -> Vec<Option<&RoleState>> {
    rows.iter().map(|r| r.changes.iter().take_while(|c| c.t_s <= t_s).last().map(|c| &c.state)).collect()
}

/// The final state of a swarm, from its rows (the same computation for one process and for
/// merged shards).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RowsSummary {
    pub rows: usize,
    pub alive: usize,
    pub heads: usize,
    /// Live non-heads attached to a live head.
    pub attached: usize,
    pub unattached: usize,
    /// Model RTT from each attached node to its head (emulated swarms), ms.
    pub rtt_to_head_ms: Option<Summary>,
    /// Members per live head: min, mean, max.
    pub cluster_size_min: usize,
    pub cluster_size_mean: f64,
    pub cluster_size_max: usize,
    /// Role keys held by more than one live node.
    pub roles_held_twice: usize,
    /// Distinct role keys held.
    pub roles: usize,
}

/// Judge states (by node index; `None` or crashed: not alive) the way [`RowsSummary`] does.
pub fn summarize_states(states: &[Option<&RoleState>], net: Option<&LatencyNet>) -> RowsSummary {
    let live = |s: &Option<&RoleState>| s.is_some_and(|s| s.role != "crashed");
    let is_head = |i: usize| states.get(i).copied().flatten().is_some_and(|s| s.role != "crashed" && s.is_head());
    let mut sum = RowsSummary { rows: states.len(), ..Default::default() };
    let mut members: BTreeMap<usize, usize> = BTreeMap::new();
    let mut keys: BTreeMap<&str, usize> = BTreeMap::new();
    let mut rtt = Vec::new();
    for (i, s) in states.iter().enumerate() {
        if !live(s) {
            continue;
        }
        let Some(s) = s else { continue };
        sum.alive += 1;
        if let Some(k) = &s.role_key {
            *keys.entry(k.as_str()).or_default() += 1;
        }
        if s.is_head() {
            sum.heads += 1;
            members.entry(i).or_default();
            continue;
        }
        match s.head.filter(|&h| is_head(h)) {
            Some(h) => {
                sum.attached += 1;
                *members.entry(h).or_default() += 1;
                if let Some(net) = net {
                    if i < net.model().len() && h < net.model().len() {
                        rtt.push(net.model().rtt_ms(i, h));
                    }
                }
            }
            None => sum.unattached += 1,
        }
    }
    if let Some(net) = net.filter(|_| !rtt.is_empty()) {
        let _ = net;
        sum.rtt_to_head_ms = Sample::new(rtt).ok().map(|s| s.summary());
    }
    let sizes: Vec<usize> = members.values().copied().collect();
    sum.cluster_size_min = sizes.iter().copied().min().unwrap_or(0);
    sum.cluster_size_max = sizes.iter().copied().max().unwrap_or(0);
    sum.cluster_size_mean =
        if sizes.is_empty() { 0.0 } else { sizes.iter().sum::<usize>() as f64 / sizes.len() as f64 };
    sum.roles = keys.len();
    sum.roles_held_twice = keys.values().filter(|n| **n > 1).count();
    sum
}

/// The final state's summary from rows sorted by index (`rows[i].index == i`).
pub fn summarize(rows: &[NodeRow], net: Option<&LatencyNet>) -> RowsSummary {
    let states: Vec<Option<&RoleState>> = rows.iter().map(|r| r.alive.then_some(&r.last)).collect();
    summarize_states(&states, net)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(role: &str, head: Option<usize>, key: Option<&str>) -> RoleState {
        RoleState { role: role.into(), head, head_id: None, role_key: key.map(String::from), fit: true }
    }

    fn row_with(index: usize, changes: Vec<(f64, RoleState)>) -> NodeRow {
        let last = changes.last().map(|c| c.1.clone()).unwrap_or_default();
        NodeRow {
            index,
            shard: 0,
            peer_id: String::new(),
            node_id: String::new(),
            alive: last.role != "crashed",
            connections: 0,
            peers: 0,
            members: 0,
            leader: None,
            messages_sent: 0,
            vivaldi_samples: 0,
            sp_messages_sent: 0,
            offences: 0,
            bans: 0,
            lookups: 0,
            last,
            cluster_size: 0,
            ping_to_head_ms: None,
            changes: changes.into_iter().map(|(t_s, state)| RoleChange { t_s, state }).collect(),
        }
    }

    #[test]
    fn summary_counts_heads_members_and_twice_held_roles() {
        let net = LatencyNet::internet(6, 1).unwrap();
        let rows = vec![
            row_with(0, vec![(1.0, st("super-peer", None, Some("slot:a")))]),
            row_with(1, vec![(1.0, st("member", Some(0), None))]),
            row_with(2, vec![(1.0, st("member", Some(0), None))]),
            row_with(3, vec![(1.0, st("super-peer", None, Some("slot:a")))]),
            // Attached to a node that is not a head: unattached.
            row_with(4, vec![(1.0, st("member", Some(1), None))]),
            row_with(5, vec![(1.0, st("member", Some(0), None)), (2.0, st("crashed", None, None))]),
        ];
        let s = summarize(&rows, Some(&net));
        assert_eq!((s.alive, s.heads, s.attached, s.unattached), (5, 2, 2, 1));
        assert_eq!((s.cluster_size_min, s.cluster_size_max), (0, 2));
        assert_eq!(s.roles_held_twice, 1);
        let want = (net.model().rtt_ms(1, 0) + net.model().rtt_ms(2, 0)) / 2.0;
        assert!((s.rtt_to_head_ms.unwrap().mean - want).abs() < 1e-9);
        // At t = 1.5 node 5 is still a live member of node 0.
        let early = summarize_states(&state_at(&rows, 1.5), Some(&net));
        assert_eq!((early.alive, early.attached), (6, 3));
        assert_eq!(summarize_states(&state_at(&rows, 0.5), None).alive, 0, "no state before the first poll");
    }
}

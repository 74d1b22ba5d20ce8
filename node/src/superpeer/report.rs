//! `peerage swarm --superpeers prefix|tokens`: watches super-peer selection in an in-process
//! swarm, measures it the way `peerage-lab superpeers` measures the simulator, and optionally kills super peers and measures their replacement.
//!
//! Read from every node's status snapshot (`SpStatus`), polled every 250 ms:
//! - **Convergence**: the swarm has converged when, for `stable` (10 s by default), every
//!   live node is a head (super peer or, with tokens, a provisional holder) or attached to a
//!   live head, with the token method every head promoted, every node's coordinate fit to
//!   place by (`SpStatus::coordinate_fit`: placement chosen before that is not
//!   the placement yet), and in every second at most
//!   `max(1, N/1000)` nodes changed their role, head or role key (the simulator's rule). The
//!   convergence time is the end of the last second that broke this, from swarm start.
//! - **Latency to the super peer** of every attached node: with latency emulation on, the
//!   latency model's RTT between the two (the *true* latency, `latency: "model"`); without
//!   it, the node's last ping RTT to its head (`latency: "ping"`), which on loopback is
//!   scheduling noise, not distance. Mean, p50, p95, max. A member that names a live node
//!   which is no longer a head (it gave its role away) counts as unattached.
//! - **Evenness**: cluster sizes (members naming each head): min, mean, max, coefficient of
//!   variation; with the model, each head's RTT to its nearest other head (mean, min).
//! - **Share**: heads and promoted super peers over live nodes; the nodes' own N estimates.
//! - **Load**: the largest cluster against `cluster_cap`.
//! - **Cost**: super-peer messages and DHT lookups per node, token moves.
//! - **Kills** (`--kill-superpeers F --kill-superpeers-at S`): S seconds after convergence a
//!   fraction F of the heads that serve members (at least one) is crashed (a head without
//!   members has no cluster to elect its replacement: the known limit of the protocol); the report gives the time until every
//!   live node is attached again and stable, the roles (token ids / slot keys) held before and
//!   after, how many were lost (held by a victim and by no live node afterwards) and how many
//!   are held twice.
//! - **Vivaldi error** (with the model): median and 90th percentile of the relative error of
//!   the super-peer points over a deterministic sample of pairs.
//! - **Timeline**: load and progress every 5 s (`node/src/superpeer/timeline.rs`).
//!
//! Each measurement keeps its per-node rows and the pairs behind its Vivaldi error
//! (`node/src/superpeer/rows.rs`), from the same snapshots; `peerage swarm --out` writes them
//! beside the report and `scripts/swarm_superpeers_check.py` recomputes the figures above
//! (latency, evenness, share, Vivaldi error) from them.

use crate::net::latency_transport::LatencyNet;
use crate::runtime::status::Snapshot;
use crate::superpeer::driver::SpStatus;
use crate::superpeer::rows::{self, NodeFacts, Placement};
use crate::superpeer::timeline::{SpSample, Timeline};
use crate::swarm::runner::LocalSwarm;
use indicatif::ProgressBar;
use overlay::stats::{Sample, Summary};
use overlay::superpeer::{probe_limit, Point, SuperPeerConfig};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What to do in the super-peer phase.
#[derive(Debug, Clone)]
pub struct SpPhaseOptions {
    pub cluster_cap: u32,
    pub method: String,
    /// No change for this long counts as converged.
    pub stable: Duration,
    /// Give up waiting (for convergence, and for each replacement) after this long.
    pub timeout: Duration,
    /// Crash this fraction of the heads (at least one) ...
    pub kill_fraction: Option<f64>,
    /// ... this long after convergence.
    pub kill_at: Duration,
    pub seed: u64,
}

/// Count, mean, p50, p95, max of a latency set ([`overlay::stats`]; all zeros when empty).
pub type Dist = Summary;

/// A NaN latency is a bug: logged, and that set is reported empty.
fn sample(v: Vec<f64>, what: &str) -> Sample {
    Sample::new(v).unwrap_or_else(|e| {
        tracing::warn!("super-peer report: {what}: {e}; reported empty");
        Sample::default()
    })
}

/// A status's point (components, then the height) back as a [`Point`].
fn point_of(v: &[f32]) -> Option<Point> {
    let (h, x) = v.split_last()?;
    let x: Vec<f64> = x.iter().map(|c| *c as f64).collect();
    let p = Point::new(&x, *h as f64);
    p.is_valid().then_some(p)
}

fn dist(v: Vec<f64>, what: &str) -> Dist {
    sample(v, what).summary()
}

/// Why attached nodes are not at their TRUE nearest head (the 200-node tokens
/// swarms placed worse than random selection does in the simulator at the same N). Each
/// attached node is put in one class by its own view: its super-peer point predicts the RTT
/// to every head (the heads' points as they report them, a stand-in for what the node has
/// heard).
#[derive(Debug, Clone, Serialize, Default)]
pub struct PlacementCheck {
    /// Attached to their TRUE nearest head.
    pub at_nearest: usize,
    /// Attached elsewhere, and their point predicts their own head within 10 % of the nearest
    /// predicted: the coordinates err.
    pub coordinates_err: usize,
    /// Attached elsewhere though their point predicts another head over 10 % nearer: they did
    /// not switch (head full, not known, or not measured nearer).
    pub not_switched: usize,
    /// Of `not_switched`: the predicted nearer head had room (fewer members than the cap).
    pub not_switched_room: usize,
    /// Mean TRUE RTT above the nearest head's, ms, over the two classes.
    pub excess_ms_coordinates_err: f64,
    pub excess_ms_not_switched: f64,
    /// Of `not_switched`, where the predicted nearer head stands in the member's own cache
    /// (`SpStatus::cache`): not in it; in it but backed off (it refused the member as
    /// full); in it, unmeasured; measured and `switch_factor` nearer than the member's
    /// measured head (it should have switched); measured and not that much nearer.
    pub nearer_not_cached: usize,
    pub nearer_backed_off: usize,
    pub nearer_unmeasured: usize,
    pub nearer_measured_nearer: usize,
    pub nearer_measured_not_nearer: usize,
    /// Over `nearer_measured_not_nearer`: mean measured minus TRUE RTT, ms, to the nearer
    /// head and to the member's own head (a sample spoilt by load is kept as the minimum
    /// for as long as the entry lives).
    pub nearer_measured_excess_ms: f64,
    pub own_measured_excess_ms: f64,
    /// Of `nearer_measured_not_nearer`: predicted below `switch_factor` x the member's
    /// measured head, so the member measures it again now and then (the state machine's
    /// "doubtful measurement"); and how often it had been, on average.
    pub measured_not_nearer_doubtful: usize,
    pub measured_not_nearer_repeats: f64,
    /// Of `nearer_unmeasured`: its measurement failed; it is predicted beyond the
    /// member's `probe_limit` (the probe margin times the larger of its head's measured and
    /// predicted RTT), so it is never probed; the member's own head is not measured yet (it
    /// is probed first).
    pub unmeasured_failed: usize,
    pub unmeasured_beyond_margin: usize,
    pub unmeasured_own_unmeasured: usize,
}

/// What a member's state machine knows of the heads (see [`SpStatus::cache`]): its cached
/// heads, and the measured RTT to its own head (ms).
#[derive(Debug, Clone, Default)]
struct MemberCache {
    heads: Vec<MemberEntry>,
    own_measured_ms: Option<f64>,
}

/// One cached head of a member (see [`crate::superpeer::driver::CacheStatus`]), by node index.
#[derive(Debug, Clone, Copy, Default)]
struct MemberEntry {
    head: usize,
    rtt_ms: Option<f64>,
    predicted_ms: f64,
    backed_off: bool,
    failed: bool,
    remeasured: u8,
}

/// Classifies attached nodes (see [`PlacementCheck`]). `attached`: (node, its head);
/// `heads`: (head, its point, its members).
fn placement_check(
    net: &LatencyNet,
    points: &HashMap<usize, Point>,
    attached: &[(usize, usize)],
    heads: &[(usize, usize)],
    caches: &HashMap<usize, MemberCache>,
    cap: u32,
) -> Option<PlacementCheck> {
    if heads.is_empty() {
        return None;
    }
    let switch_factor = SuperPeerConfig::default().discovery.switch_factor;
    let mut c = PlacementCheck::default();
    let (mut ex_c, mut ex_s) = (0.0, 0.0);
    let (mut ex_near, mut ex_own, mut n_ex) = (0.0, 0.0, 0usize);
    let mut repeats = 0.0;
    for &(i, own) in attached {
        let true_rtt = |j: usize| net.model().rtt_ms(i, j);
        let nearest = heads.iter().map(|&(j, _)| true_rtt(j)).fold(f64::MAX, f64::min);
        let excess = true_rtt(own) - nearest;
        if excess <= 1e-9 {
            c.at_nearest += 1;
            continue;
        }
        let Some(me) = points.get(&i) else { continue };
        let predicted = |j: usize| points.get(&j).map_or(f64::MAX, |p| me.rtt(p));
        let own_pred = predicted(own);
        let best = heads.iter().filter(|(j, _)| *j != own).min_by(|a, b| predicted(a.0).total_cmp(&predicted(b.0)));
        match best {
            Some(&(j, members)) if predicted(j) < own_pred / 1.1 => {
                c.not_switched += 1;
                c.not_switched_room += usize::from((members as u32) < cap);
                ex_s += excess;
                let Some(mc) = caches.get(&i) else { continue };
                match mc.heads.iter().find(|e| e.head == j) {
                    None => c.nearer_not_cached += 1,
                    Some(e) if e.backed_off => c.nearer_backed_off += 1,
                    Some(&MemberEntry { rtt_ms: None, predicted_ms, failed, .. }) => {
                        c.nearer_unmeasured += 1;
                        let own_pred_ms =
                            mc.heads.iter().find(|e| e.head == own).map_or(1000.0 * own_pred, |e| e.predicted_ms);
                        if failed {
                            c.unmeasured_failed += 1;
                        } else if predicted_ms >= probe_limit(mc.own_measured_ms, own_pred_ms) {
                            c.unmeasured_beyond_margin += 1;
                        } else if mc.own_measured_ms.is_none() {
                            c.unmeasured_own_unmeasured += 1;
                        }
                    }
                    Some(&MemberEntry { rtt_ms: Some(near), predicted_ms, remeasured, .. }) => {
                        match mc.own_measured_ms {
                            Some(o) if near < switch_factor * o => c.nearer_measured_nearer += 1,
                            measured_own => {
                                c.nearer_measured_not_nearer += 1;
                                if let Some(o) = measured_own {
                                    ex_near += near - true_rtt(j);
                                    ex_own += o - true_rtt(own);
                                    n_ex += 1;
                                    if predicted_ms < switch_factor * o {
                                        c.measured_not_nearer_doubtful += 1;
                                        repeats += f64::from(remeasured);
                                    }
                                }
                            }
                        }
                    }
                }
            }
            _ => {
                c.coordinates_err += 1;
                ex_c += excess;
            }
        }
    }
    c.excess_ms_coordinates_err = ex_c / c.coordinates_err.max(1) as f64;
    c.excess_ms_not_switched = ex_s / c.not_switched.max(1) as f64;
    c.nearer_measured_excess_ms = ex_near / n_ex.max(1) as f64;
    c.own_measured_excess_ms = ex_own / n_ex.max(1) as f64;
    c.measured_not_nearer_repeats = repeats / c.measured_not_nearer_doubtful.max(1) as f64;
    Some(c)
}

/// The measures at one moment.
#[derive(Debug, Clone, Serialize, Default)]
pub struct SpMeasures {
    pub live_nodes: usize,
    pub heads: usize,
    pub super_peers: usize,
    pub head_share: f64,
    pub unattached: usize,
    /// `model` (latency emulation's RTT) or `ping` (measured RTT to the head).
    pub latency: String,
    pub latency_to_head_ms: Dist,
    /// Measured ping RTT to the head, for comparison (always).
    pub ping_to_head_ms: Dist,
    pub cluster_size_min: usize,
    pub cluster_size_mean: f64,
    pub cluster_size_max: usize,
    pub cluster_size_cv: f64,
    pub cluster_cap: u32,
    /// Largest member count a head reports itself.
    pub largest_load: usize,
    pub nearest_other_head_ms: Option<Dist>,
    /// Why attached nodes are not at their TRUE nearest head (emulated swarms only).
    pub placement_check: Option<PlacementCheck>,
    pub estimate_mean: Option<f64>,
    pub estimate_min: Option<f64>,
    pub estimate_max: Option<f64>,
    pub wanted_min: u64,
    pub wanted_max: u64,
    pub messages_per_node: f64,
    /// `Hello` requests per node (coordinate learning, head probes).
    pub hellos_per_node: f64,
    /// RTT measurements (timed `Hello`s) per node, and those dropped because the node's loop
    /// stalled during them (`overlay::detect::stall`).
    pub rtt_measurements_per_node: f64,
    pub rtt_stalled_per_node: f64,
    pub lookups_per_node: f64,
    pub token_moves: u64,
    pub send_failures: u64,
    /// Messages dropped after a failure that did not show the peer down (`node/src/net/send_failure.rs`).
    pub sends_dropped: u64,
    /// Failed requests whose dial the live peer refused before the handshake.
    pub refused_by_peer: u64,
    /// Election messages sent again after the peer refused them (`node/src/superpeer/driver.rs`).
    pub election_resends: u64,
    /// Election timer checks held back while a message of the election was on its way.
    pub election_timers_deferred: u64,
    /// Heads that members' probes reported down.
    pub heads_reported_down: u64,
    /// Of those, reported because the probes found nothing listening (`overlay::detect::head_watch`).
    pub heads_found_gone: u64,
    /// Heads that members left because they refused them and served nothing for the whole
    /// silence (`overlay::detect::head_watch`, "Refusing is not serving").
    pub heads_not_serving: u64,
    /// Peers taken for down because a message to them found nothing listening
    /// (`overlay::detect::failure::after_failure`).
    pub peers_found_gone: u64,
    /// Failed head probes not counted because the member's own loop stalled meanwhile
    /// (`overlay::detect::head_watch`, "A stalled loop judges nobody").
    pub probes_stalled: u64,
    /// Cluster re-elections joined, summed over the nodes.
    pub elections_joined: u64,
    pub rejected: u64,
    pub bad_frames: u64,
    /// Super-peer messages sent per live node, by kind (what a storm is made of); the
    /// `election` messages also by the cluster election's own kind, as `election:<kind>`.
    pub messages_per_node_by_kind: BTreeMap<String, f64>,
    /// DHT lookups per live node by purpose (`estimate`, `claim-closest`, `claim-providers`,
    /// `slot-check`, `seed`; a retried lookup counts again).
    pub lookups_per_node_by_purpose: BTreeMap<String, f64>,
    /// Failed lookups per live node by why (`SpStatus::lookups_failed_by_reason`).
    pub lookups_failed_per_node_by_reason: BTreeMap<String, f64>,
    /// How long the nodes' DHT lookups took, from the state machine's request to the answer
    /// (`SpStatus::lookup_wait_ms`, each node's first 32), ms.
    pub lookup_wait_ms: Option<Dist>,
    /// Mean over the members whose state machine measured its head of that measured RTT
    /// (`SpStatus::head_measured_ms`, the one its switch rule compares) minus the TRUE RTT, ms
    /// (with the model only; the lab's `own_measured_excess_ms`).
    pub head_measured_excess_ms: Option<f64>,
    /// Relative error of the super-peer points over the sampled pairs (with the model only;
    /// `node/src/superpeer/rows.rs`): how many pairs, median, 90th percentile.
    pub vivaldi_pairs: usize,
    pub vivaldi_err_p50: Option<f64>,
    pub vivaldi_err_p90: Option<f64>,
    /// The per-node rows and pairs these figures come from (written beside the report).
    #[serde(skip)]
    pub placement: Placement,
}

/// Why a wait for convergence took as long as it did: the seconds it watched, those that
/// were busy (see [`wait_stable`]) and why, and the changes it saw. A swarm that never
/// converges shows here whether nodes were unattached, heads unpromoted, or nodes kept
/// changing role, head or role key (and which).
#[derive(Debug, Clone, Serialize, Default)]
pub struct SpBusy {
    pub seconds: u64,
    pub busy_seconds: u64,
    /// Seconds in which some node was neither a head nor attached to a live head at a poll.
    pub unattached_seconds: u64,
    /// Seconds in which some head was a provisional token holder at a poll (tokens only).
    pub unpromoted_seconds: u64,
    /// Seconds in which some node's coordinate was not fit yet (`settled`).
    pub unfit_seconds: u64,
    /// Changes seen, by what changed (a node can change several at once).
    pub role_changes: u64,
    pub head_changes: u64,
    pub key_changes: u64,
    /// Busy seconds among the last 60 watched.
    pub busy_seconds_last_60: u64,
    /// At the last poll, up to 8 nodes that kept the swarm from being settled: `node <i>
    /// <role> -> <head i> (<head's role>)`.
    pub stray: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SpKillReport {
    pub after_convergence_s: f64,
    pub killed: usize,
    pub killed_roles: Vec<String>,
    /// Seconds from the kill until every killed role was held by a live node again and every
    /// live node was a head or attached to a live head (tokens: every head promoted), at the
    /// first poll where all of that held; `None` if it never did before the timeout.
    pub restored_s: Option<f64>,
    /// Seconds from the kill until the swarm was settled *and quiet* (no more than
    /// `max(1, N/1000)` role, head or key changes a second) for the stable window, counted to
    /// the end of the last busy second: after the restoration, members may still move between
    /// clusters for a while. `None` if that did not happen before the timeout.
    pub settled_s: Option<f64>,
    pub roles_before: usize,
    pub roles_after: usize,
    /// Roles of victims that no live node holds afterwards.
    pub roles_lost: usize,
    /// Roles held by more than one live node afterwards.
    pub roles_duplicated: usize,
    /// Victims' roles taken over by a live node.
    pub roles_taken_over: usize,
    /// Times a surviving node's probes found its head dead after the kill (summed over the
    /// survivors, each node's own counter after minus before; the victims' counters are left
    /// out). A member can also learn of the death from its cluster's re-election without
    /// probing, so this is at most, not exactly, the victims' member count.
    pub heads_reported_down: u64,
    pub after: SpMeasures,
    pub busy: SpBusy,
}

#[derive(Debug, Clone, Serialize)]
pub struct SuperPeerReport {
    pub method: String,
    /// When the nodes' selection started (`SpStatus::started_unix_ms`), seconds after the
    /// swarm started: the simulator's round 0, which `converged_s` minus this compares with.
    pub selection_started_s: Option<Dist>,
    pub converged_s: Option<f64>,
    /// Until convergence (or the timeout).
    pub busy: SpBusy,
    pub at_convergence: SpMeasures,
    pub kill: Option<SpKillReport>,
    /// Load and progress every 5 s through the phase, the kill's wait included
    /// (`node/src/superpeer/timeline.rs`).
    pub timeline: Vec<SpSample>,
}

fn sp_of(s: &Snapshot) -> Option<&SpStatus> {
    s.superpeer.as_ref()
}

fn is_head(s: &SpStatus) -> bool {
    s.role == "super-peer" || s.role == "head"
}

/// The (role, head, role key) of every live node: what "a change" means.
fn signature(snaps: &[(usize, Snapshot)]) -> Vec<(usize, String, Option<String>, Option<String>)> {
    snaps
        .iter()
        .filter_map(|(i, s)| sp_of(s).map(|p| (*i, p.role.clone(), p.head.clone(), p.role_key.clone())))
        .collect()
}

/// Whether the swarm is settled: (every node attached to a live head (no head at all counts
/// as unattached), every head promoted (tokens), every node's coordinate fit
/// (`SpStatus::coordinate_fit`), up to 8 stray nodes described). Fitness is part of
/// convergence: attachments and token
/// positions chosen before the coordinates were fit are not the placement yet; in the
/// 200-node swarms they were 1.5-2 times farther from their heads than after.
fn settled(swarm: &LocalSwarm, snaps: &[(usize, Snapshot)], tokens: bool) -> (bool, bool, bool, Vec<String>) {
    let heads: HashSet<String> = snaps
        .iter()
        .filter(|(_, s)| sp_of(s).is_some_and(is_head))
        .map(|(i, _)| swarm.node_id(*i).to_string())
        .collect();
    let role_of: HashMap<usize, &str> =
        snaps.iter().filter_map(|(i, s)| sp_of(s).map(|p| (*i, p.role.as_str()))).collect();
    let mut stray = Vec::new();
    let mut attached = !heads.is_empty();
    let mut promoted = true;
    let mut unfit = 0usize;
    for (i, s) in snaps {
        if sp_of(s).is_some_and(|p| !p.coordinate_fit) {
            unfit += 1;
            if stray.len() < 8 {
                stray.push(format!("node {i}: coordinate not fit yet ({} Vivaldi samples)", s.vivaldi_samples));
            }
        }
        let ok = match sp_of(s) {
            None => false,
            Some(p) if is_head(p) => {
                if tokens && p.role != "super-peer" {
                    promoted = false;
                    if stray.len() < 8 {
                        stray.push(format!("node {i} {} (not promoted)", p.role));
                    }
                }
                true
            }
            Some(p) => p.head.as_ref().is_some_and(|h| heads.contains(h)),
        };
        if !ok {
            attached = false;
            if stray.len() < 8 {
                let (role, head) = sp_of(s).map_or(("no status", None), |p| (p.role.as_str(), p.head.as_deref()));
                let target = match head.map(|h| (h, swarm.index_of(h))) {
                    None => "no head".to_string(),
                    Some((h, None)) => format!("{h} (not a swarm node)"),
                    Some((_, Some(j))) => format!("{j} ({})", role_of.get(&j).copied().unwrap_or("dead")),
                };
                // What the node knows: enough to tell an isolated node from one whose
                // lookups fail or whose heads refuse it.
                let known = sp_of(s).map_or(String::new(), |p| {
                    format!(
                        " [{} connections, {} neighbours, {} heads known, lookups {} of which failed {}, send failures {}]",
                        s.connections, p.neighbours, p.known_heads, p.lookups, p.lookups_failed, p.send_failures
                    )
                });
                stray.push(format!("node {i} {role} -> {target}{known}"));
            }
        }
    }
    (attached, promoted || !tokens, unfit == 0, stray)
}

/// What [`wait_stable`] saw.
struct Waited {
    /// The end of the last busy second before a quiet `stable` window; `None` on timeout.
    stable: Option<Instant>,
    /// The first poll at which every node was attached and every head promoted (fitness
    /// not asked) and every role of `restore` was held by a live node.
    restored: Option<Instant>,
    busy: SpBusy,
}

/// Wait until settled and quiet for `stable` (see [`Waited`]); `restore` names the role keys
/// (token ids, slot keys) that must be held again for the swarm to count as restored.
///
/// As in the simulator (`experiments/src/superpeers/protocol.rs`), a second is *busy* when the
/// swarm is not settled or more than `max(1, N/1000)` nodes changed their role, head or role
/// key in it: with measured (noisy) coordinates a node now and then switches to a head that
/// became 10 % nearer, which is not a failure to converge.
async fn wait_stable(
    swarm: &LocalSwarm,
    tokens: bool,
    stable: Duration,
    timeout: Duration,
    bar: Option<&ProgressBar>,
    timeline: &mut Timeline,
    restore: &[String],
) -> Waited {
    let until = Instant::now() + timeout;
    let mut last_sig: HashMap<usize, (String, Option<String>, Option<String>)> = HashMap::new();
    let mut last_busy = Instant::now();
    let mut second_start = Instant::now();
    let mut changes = 0usize;
    let (mut all_attached, mut all_promoted, mut all_fit) = (true, true, true);
    let mut first = true;
    let mut busy = SpBusy::default();
    let mut recent: std::collections::VecDeque<bool> = std::collections::VecDeque::new();
    let mut restored = None;
    // Node id -> index, built once (the timeline looks up every attached node's head).
    let index: HashMap<&str, usize> = (0..swarm.len()).map(|i| (swarm.node_id(i), i)).collect();
    loop {
        let snaps = swarm.snapshots();
        timeline.poll(&snaps, |id| index.get(id).copied());
        let now = Instant::now();
        for (i, role, head, key) in signature(&snaps) {
            let v = (role, head, key);
            if last_sig.get(&i) == Some(&v) {
                continue;
            }
            let old = last_sig.insert(i, v.clone());
            if first {
                continue;
            }
            changes += 1;
            if let Some(old) = old {
                busy.role_changes += u64::from(old.0 != v.0);
                busy.head_changes += u64::from(old.1 != v.1);
                busy.key_changes += u64::from(old.2 != v.2);
            }
        }
        first = false;
        let (attached, promoted, fit, stray) = settled(swarm, &snaps, tokens);
        busy.stray = stray;
        let ok = attached && promoted && fit;
        if attached && promoted && restored.is_none() {
            let held: HashSet<&str> =
                snaps.iter().filter_map(|(_, s)| sp_of(s).and_then(|p| p.role_key.as_deref())).collect();
            if restore.iter().all(|k| held.contains(k.as_str())) {
                restored = Some(now);
            }
        }
        all_attached &= attached;
        all_promoted &= promoted;
        all_fit &= fit;
        if now.duration_since(second_start) >= Duration::from_secs(1) {
            let quiet = (snaps.len() / 1000).max(1);
            let was_busy = changes > quiet || !all_attached || !all_promoted || !all_fit;
            if was_busy {
                last_busy = now;
            }
            busy.seconds += 1;
            busy.busy_seconds += u64::from(was_busy);
            busy.unattached_seconds += u64::from(!all_attached);
            busy.unpromoted_seconds += u64::from(!all_promoted);
            busy.unfit_seconds += u64::from(!all_fit);
            recent.push_back(was_busy);
            if recent.len() > 60 {
                recent.pop_front();
            }
            busy.busy_seconds_last_60 = recent.iter().filter(|b| **b).count() as u64;
            second_start = now;
            changes = 0;
            all_attached = true;
            all_promoted = true;
            all_fit = true;
        }
        if let Some(b) = bar {
            let attached =
                snaps.iter().filter(|(_, s)| sp_of(s).is_some_and(|p| is_head(p) || p.head.is_some())).count();
            b.set_length(snaps.len() as u64);
            b.set_position(attached as u64);
        }
        if ok && now.duration_since(last_busy) >= stable {
            return Waited { stable: Some(last_busy), restored, busy };
        }
        if now >= until {
            return Waited { stable: None, restored, busy };
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The measures over the live nodes now.
pub fn measure(swarm: &LocalSwarm, cap: u32) -> SpMeasures {
    let snaps = swarm.snapshots();
    let net = swarm.latency_net();
    let mut m = SpMeasures { live_nodes: snaps.len(), cluster_cap: cap, ..Default::default() };
    let mut members_of: HashMap<String, usize> = HashMap::new();
    let mut heads: Vec<usize> = Vec::new();
    let mut attached: Vec<(usize, usize)> = Vec::new();
    let points: HashMap<usize, Point> =
        snaps.iter().filter_map(|(i, s)| sp_of(s).and_then(|p| point_of(&p.point)).map(|pt| (*i, pt))).collect();
    let index: HashMap<&str, usize> = snaps.iter().map(|(i, _)| (swarm.node_id(*i), *i)).collect();
    let caches: HashMap<usize, MemberCache> = snaps
        .iter()
        .filter_map(|(i, s)| sp_of(s).map(|p| (*i, p)))
        .map(|(i, p)| {
            let heads = p
                .cache
                .iter()
                .filter_map(|e| {
                    index.get(e.head.as_str()).map(|&head| MemberEntry {
                        head,
                        rtt_ms: e.rtt_ms,
                        predicted_ms: e.predicted_ms,
                        backed_off: e.backed_off,
                        failed: e.failed,
                        remeasured: e.remeasured,
                    })
                })
                .collect();
            (i, MemberCache { heads, own_measured_ms: p.head_measured_ms })
        })
        .collect();
    let mut lat = Vec::new();
    let mut ping = Vec::new();
    let (mut est, mut wanted) = (Vec::new(), Vec::new());
    let (mut msgs, mut lookups, mut hellos) = (0u64, 0u64, 0u64);
    let (mut measured, mut stalled) = (0u64, 0u64);
    let mut waits = Vec::new();
    let mut excess = Vec::new();
    // A member counts as attached only to a node that is a head now (not to a live node that
    // gave its role away), as in `settled`.
    let head_ids: HashSet<String> = snaps
        .iter()
        .filter(|(_, s)| sp_of(s).is_some_and(is_head))
        .map(|(i, _)| swarm.node_id(*i).to_string())
        .collect();
    for (i, s) in &snaps {
        let Some(p) = sp_of(s) else {
            m.unattached += 1;
            continue;
        };
        msgs += p.messages_sent;
        hellos += p.hellos_sent;
        measured += p.rtt_measurements;
        stalled += p.rtt_stalled;
        lookups += p.lookups;
        m.token_moves += p.token_moves;
        m.send_failures += p.send_failures;
        m.sends_dropped += p.sends_dropped;
        m.refused_by_peer += p.refused_by_peer;
        m.election_resends += p.election_resends;
        m.election_timers_deferred += p.election_timers_deferred;
        m.heads_reported_down += p.heads_reported_down;
        m.heads_found_gone += p.heads_found_gone;
        m.heads_not_serving += p.heads_not_serving;
        m.peers_found_gone += p.peers_found_gone;
        m.probes_stalled += p.probes_stalled;
        m.elections_joined += p.elections_joined;
        for (kind, n) in &p.messages_by_kind {
            *m.messages_per_node_by_kind.entry(kind.clone()).or_default() += *n as f64;
        }
        for (kind, n) in &p.election_by_kind {
            *m.messages_per_node_by_kind.entry(format!("election:{kind}")).or_default() += *n as f64;
        }
        for (purpose, n) in &p.lookups_by_purpose {
            *m.lookups_per_node_by_purpose.entry(purpose.clone()).or_default() += *n as f64;
        }
        for (reason, n) in &p.lookups_failed_by_reason {
            *m.lookups_failed_per_node_by_reason.entry(reason.clone()).or_default() += *n as f64;
        }
        waits.extend(p.lookup_wait_ms.iter().map(|&ms| f64::from(ms)));
        m.rejected += p.rejected;
        m.bad_frames += p.bad_frames;
        if let Some(e) = p.estimate {
            est.push(e);
        }
        wanted.push(p.wanted);
        if is_head(p) {
            m.heads += 1;
            heads.push(*i);
            if p.role == "super-peer" {
                m.super_peers += 1;
            }
            m.largest_load = m.largest_load.max(p.cluster_size);
            members_of.entry(swarm.node_id(*i).to_string()).or_default();
            continue;
        }
        let Some(h) = p.head.as_ref().filter(|h| head_ids.contains(*h)) else {
            m.unattached += 1;
            continue;
        };
        *members_of.entry(h.clone()).or_default() += 1;
        if let Some(r) = p.head_rtt_ms {
            ping.push(r);
        }
        if let (Some(net), Some(&j)) = (net, index.get(h.as_str())) {
            let truth = net.model().rtt_ms(*i, j);
            lat.push(truth);
            attached.push((*i, j));
            if let Some(measured) = p.head_measured_ms {
                excess.push(measured - truth);
            }
        }
    }
    m.head_share = m.heads as f64 / m.live_nodes.max(1) as f64;
    m.latency = if net.is_some() { "model".into() } else { "ping".into() };
    m.latency_to_head_ms =
        if net.is_some() { dist(lat, "model RTT to head") } else { dist(ping.clone(), "ping to head") };
    m.ping_to_head_ms = dist(ping, "ping to head");
    let sizes = sample(members_of.values().map(|v| *v as f64).collect(), "cluster size");
    if let (Some(mean), Some(min), Some(max)) = (sizes.mean(), sizes.min(), sizes.max()) {
        m.cluster_size_mean = mean;
        m.cluster_size_cv = sizes.cv().unwrap_or(0.0);
        m.cluster_size_min = min as usize;
        m.cluster_size_max = max as usize;
    }
    let mut nearest_head: HashMap<usize, f64> = HashMap::new();
    if let Some(net) = net {
        if heads.len() > 1 {
            let near: Vec<f64> = heads
                .iter()
                .map(|&a| heads.iter().filter(|&&b| b != a).map(|&b| net.model().rtt_ms(a, b)).fold(f64::MAX, f64::min))
                .collect();
            nearest_head = heads.iter().copied().zip(near.iter().copied()).collect();
            m.nearest_other_head_ms = Some(dist(near, "model RTT to nearest other head"));
        }
        let with_members: Vec<(usize, usize)> =
            heads.iter().map(|&h| (h, members_of.get(swarm.node_id(h)).copied().unwrap_or(0))).collect();
        m.placement_check = placement_check(net, &points, &attached, &with_members, &caches, cap);
    }
    let size_of = |h: usize| members_of.get(swarm.node_id(h)).map(|v| *v as u64);
    let node_rows = snaps
        .iter()
        .map(|(i, s)| {
            let p = sp_of(s);
            let head = match p {
                Some(p) if is_head(p) => Some(*i),
                Some(p) => {
                    p.head.as_ref().filter(|h| head_ids.contains(*h)).and_then(|h| index.get(h.as_str()).copied())
                }
                None => None,
            };
            let facts = NodeFacts {
                index: *i,
                head,
                measured_ms: p.and_then(|p| p.head_rtt_ms),
                cluster_size: head.and_then(size_of),
                nearest_head_ms: nearest_head.get(i).copied(),
            };
            rows::node_row(facts, &points, net.map(|n| &**n))
        })
        .collect();
    let pairs = net.map(|n| rows::pairs(n, &points)).unwrap_or_default();
    let errs = sample(pairs.iter().map(|p| p.relative_error()).collect(), "Vivaldi pair error");
    m.vivaldi_pairs = errs.len();
    (m.vivaldi_err_p50, m.vivaldi_err_p90) = (errs.quantile(0.5), errs.quantile(0.9));
    m.placement = Placement { nodes: node_rows, pairs };
    let est = sample(est, "size estimate");
    (m.estimate_mean, m.estimate_min, m.estimate_max) = (est.mean(), est.min(), est.max());
    m.wanted_min = wanted.iter().copied().min().unwrap_or(0);
    m.wanted_max = wanted.iter().copied().max().unwrap_or(0);
    m.messages_per_node = msgs as f64 / m.live_nodes.max(1) as f64;
    for v in m
        .messages_per_node_by_kind
        .values_mut()
        .chain(m.lookups_per_node_by_purpose.values_mut())
        .chain(m.lookups_failed_per_node_by_reason.values_mut())
    {
        *v /= m.live_nodes.max(1) as f64;
    }
    m.lookups_per_node = lookups as f64 / m.live_nodes.max(1) as f64;
    m.lookup_wait_ms = (!waits.is_empty()).then(|| dist(waits, "lookup wait"));
    m.head_measured_excess_ms = (!excess.is_empty()).then(|| excess.iter().sum::<f64>() / excess.len() as f64);
    m.hellos_per_node = hellos as f64 / m.live_nodes.max(1) as f64;
    m.rtt_measurements_per_node = measured as f64 / m.live_nodes.max(1) as f64;
    m.rtt_stalled_per_node = stalled as f64 / m.live_nodes.max(1) as f64;
    m
}

/// Roles (token ids / slot keys) held by live heads, with their holders.
pub fn roles(swarm: &LocalSwarm) -> BTreeMap<String, Vec<usize>> {
    let mut out: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, s) in swarm.snapshots() {
        if let Some(k) = sp_of(&s).and_then(|p| p.role_key.clone()) {
            out.entry(k).or_default().push(i);
        }
    }
    out
}

/// When the live nodes' selection started, seconds after `t0` (None before any started).
fn selection_started(swarm: &LocalSwarm, t0: Instant) -> Option<Dist> {
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_millis() as f64;
    let t0_ms = now_ms - t0.elapsed().as_secs_f64() * 1000.0;
    let at: Vec<f64> = swarm
        .snapshots()
        .iter()
        .filter_map(|(_, s)| sp_of(s)?.started_unix_ms)
        .map(|ms| ((ms as f64 - t0_ms) / 1000.0).max(0.0))
        .collect();
    (!at.is_empty()).then(|| dist(at, "selection start"))
}

/// Run the super-peer phase on a started swarm: wait for convergence, measure, kill, measure.
pub async fn run_phase(
    swarm: &mut LocalSwarm,
    opts: &SpPhaseOptions,
    t0: Instant,
    bar: Option<&ProgressBar>,
) -> SuperPeerReport {
    let tokens = opts.method == "tokens";
    if let Some(b) = bar {
        b.set_message("super peers: attaching");
    }
    let remaining = opts.timeout.saturating_sub(t0.elapsed());
    let mut timeline = Timeline::new(t0, swarm.latency_net().cloned(), &swarm.snapshots());
    let Waited { stable: conv, busy, .. } =
        wait_stable(swarm, tokens, opts.stable, remaining, bar, &mut timeline, &[]).await;
    let converged_s = conv.map(|c| c.duration_since(t0).as_secs_f64());
    let selection_started_s = selection_started(swarm, t0);
    let at_convergence = measure(swarm, opts.cluster_cap);
    let mut kill = None;
    if let (Some(fraction), Some(_)) = (opts.kill_fraction, conv) {
        if let Some(b) = bar {
            b.set_message("super peers: waiting to kill");
        }
        tokio::time::sleep(opts.kill_at).await;
        let before = roles(swarm);
        // Victims are drawn from the heads that serve members (a cluster that can elect a
        // replacement); heads without members only if there are no others.
        let snaps = swarm.snapshots();
        let mut heads: Vec<usize> = snaps
            .iter()
            .filter(|(_, s)| sp_of(s).is_some_and(|p| is_head(p) && p.cluster_size > 0))
            .map(|(i, _)| *i)
            .collect();
        if heads.is_empty() {
            heads = snaps.iter().filter(|(_, s)| sp_of(s).is_some_and(is_head)).map(|(i, _)| *i).collect();
        }
        let mut rng = StdRng::seed_from_u64(opts.seed ^ 0x5b_c0de);
        heads.shuffle(&mut rng);
        let count = ((heads.len() as f64 * fraction.clamp(0.0, 1.0)).round() as usize).clamp(1, heads.len().max(1));
        let victims: Vec<usize> = heads.into_iter().take(count).collect();
        let killed_roles: Vec<String> = before
            .iter()
            .filter(|(_, holders)| holders.iter().any(|h| victims.contains(h)))
            .map(|(k, _)| k.clone())
            .collect();
        let down_before: HashMap<usize, u64> =
            swarm.snapshots().iter().filter_map(|(i, s)| sp_of(s).map(|p| (*i, p.heads_reported_down))).collect();
        let t_kill = Instant::now();
        for &v in &victims {
            swarm.crash(v);
        }
        if let Some(b) = bar {
            b.set_message("super peers: replacing");
        }
        let Waited { stable: done, restored, busy: kill_busy } =
            wait_stable(swarm, tokens, opts.stable, opts.timeout, bar, &mut timeline, &killed_roles).await;
        let after_roles = roles(swarm);
        let lost = killed_roles.iter().filter(|k| !after_roles.contains_key(*k)).count();
        let dup = after_roles.values().filter(|h| h.len() > 1).count();
        // Per survivor (a crashed node's snapshot is not among the live ones).
        let down_after: u64 = swarm
            .snapshots()
            .iter()
            .filter_map(|(i, s)| {
                sp_of(s).map(|p| p.heads_reported_down.saturating_sub(down_before.get(i).copied().unwrap_or(0)))
            })
            .sum();
        kill = Some(SpKillReport {
            after_convergence_s: opts.kill_at.as_secs_f64(),
            killed: victims.len(),
            roles_taken_over: killed_roles.len() - lost,
            killed_roles,
            restored_s: restored.map(|d| d.saturating_duration_since(t_kill).as_secs_f64()),
            settled_s: done.map(|d| d.saturating_duration_since(t_kill).as_secs_f64()),
            roles_before: before.len(),
            roles_after: after_roles.len(),
            roles_lost: lost,
            roles_duplicated: dup,
            heads_reported_down: down_after,
            after: measure(swarm, opts.cluster_cap),
            busy: kill_busy,
        });
    }
    SuperPeerReport {
        method: opts.method.clone(),
        selection_started_s,
        converged_s,
        busy,
        at_convergence,
        kill,
        timeline: timeline.into_samples(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_check_tells_coordinates_from_missed_switches() {
        let net = LatencyNet::internet(30, 3).unwrap();
        let heads = [0usize, 1, 2];
        let nearest = |i: usize| {
            *heads.iter().min_by(|a, b| net.model().rtt_ms(i, **a).total_cmp(&net.model().rtt_ms(i, **b))).unwrap()
        };
        let other = |i: usize| *heads.iter().find(|h| **h != nearest(i)).unwrap();
        let on_line = |x: f64| Point::new(&[x], 0.0);
        // Heads at 0, 1, 2 on a line (seconds); the nodes' points are placed per case.
        let mut points: HashMap<usize, Point> = heads.iter().map(|&h| (h, on_line(h as f64))).collect();
        let mut attached = Vec::new();
        // Node 3: at its nearest head.
        attached.push((3, nearest(3)));
        points.insert(3, on_line(0.0));
        // Node 4: elsewhere, and its point sits on its own head (coordinates err).
        let own4 = other(4);
        attached.push((4, own4));
        points.insert(4, on_line(own4 as f64));
        // Nodes 5, 6: elsewhere, their point sits on another head (not switched); that head
        // has room for node 5's case only (see the member counts below).
        for i in [5, 6] {
            let own = other(i);
            let near = *heads.iter().find(|h| **h != own).unwrap();
            attached.push((i, own));
            points.insert(i, on_line(near as f64));
        }
        let full = |i: usize| *heads.iter().find(|h| **h != other(i)).unwrap();
        let members: Vec<(usize, usize)> =
            heads.iter().map(|&h| (h, if h == full(6) && h != full(5) { 40 } else { 1 })).collect();
        // Node 5 measured its nearer head 30 ms above the model and its own head exactly;
        // node 6 never heard of its nearer head.
        let true_ms = |i: usize, j: usize| net.model().rtt_ms(i, j);
        let near5 = *heads.iter().find(|h| **h != other(5)).unwrap();
        let mut caches = HashMap::new();
        let entry = |head: usize, rtt_ms: Option<f64>| MemberEntry { head, rtt_ms, ..Default::default() };
        // Its prediction of the nearer head (0 ms) is below 0.9 x its own: doubtful, and
        // measured again 3 times so far.
        let doubted = MemberEntry { remeasured: 3, ..entry(near5, Some(true_ms(5, near5) + 30.0)) };
        let heads5 = vec![doubted, entry(other(5), Some(true_ms(5, other(5))))];
        caches.insert(5, MemberCache { heads: heads5, own_measured_ms: Some(true_ms(5, other(5))) });
        caches.insert(6, MemberCache { heads: vec![entry(other(6), None)], own_measured_ms: None });
        let c = placement_check(&net, &points, &attached, &members, &caches, 40).unwrap();
        assert_eq!(c.at_nearest, 1);
        assert_eq!(c.coordinates_err, 1);
        assert_eq!(c.not_switched, 2);
        let expect_room = if full(5) == full(6) { 2 } else { 1 };
        assert_eq!(c.not_switched_room, expect_room);
        assert!(c.excess_ms_coordinates_err > 0.0 && c.excess_ms_not_switched > 0.0);
        // Node 5's measured nearer head is only "nearer" if 30 ms of inflation still leaves
        // it under 0.9 x its own head's RTT.
        let nearer5 = true_ms(5, near5) + 30.0 < 0.9 * true_ms(5, other(5));
        assert_eq!((c.nearer_measured_nearer, c.nearer_measured_not_nearer), if nearer5 { (1, 0) } else { (0, 1) });
        assert_eq!(c.nearer_not_cached, 1);
        if !nearer5 {
            assert!((c.nearer_measured_excess_ms - 30.0).abs() < 1e-9 && c.own_measured_excess_ms.abs() < 1e-9);
            assert_eq!(c.measured_not_nearer_doubtful, 1);
            assert!((c.measured_not_nearer_repeats - 3.0).abs() < 1e-9);
        } else {
            assert_eq!((c.measured_not_nearer_doubtful, c.measured_not_nearer_repeats), (0, 0.0));
        }
        assert!(placement_check(&net, &points, &attached, &[], &caches, 40).is_none());
    }
}

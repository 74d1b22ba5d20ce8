//! Token loss windows that only a network with message delays shows
//! (`overlay::superpeer`, module doc of `node`, steps 4-6): real [`SuperPeerNode`]s on an
//! event-driven network where every message takes its own seeded delay, ticks of different
//! nodes fall at different moments, and a chosen node crashes at a chosen moment.
//!
//! The simulator (`experiments::sim`) delivers a round's messages within that round, so a
//! node that crashes there has always sent its messages. On a real network a node can crash
//! after one message went out and before another did. This harness models that: a crashed
//! node's messages still in flight are lost, except the kinds a test lets through (e.g. the
//! `HandoverAck` reached the old holder, the new holder's `ClusterView` did not).
//!
//! Network model (*ours*): one protocol round is 1 s; node `i` ticks at `k s + phase_i`
//! (phases drawn per seed); a message takes a delay drawn uniformly from
//! [`Net::min_delay`, `Net::max_delay`] = [5, 200] ms (a round trip stays under the bully's
//! 500 ms answer timeout, the clusters' election assumption) and messages on one link keep their order (one
//! stream per pair, as a TCP connection); a message to a crashed node is reported back to
//! its sender (`SendFailed`) one delay later; every live node learns of a crash
//! (`PeerDown`) after `Net::detect` plus a per-node jitter (longer than two message delays:
//! the failure detector is slower than the messages). DHT lookups are answered by an oracle
//! over the live nodes after one delay.
//!
//! Randomised: every test prints its seeds; `PEERAGE_SEED=<n>` replays one seed (and prints
//! the token's story and every node's state); `PEERAGE_TRACE0=<i>` also prints node `i`'s
//! inputs and effects; `PEERAGE_SEEDS=<from>..<to>` runs other seeds than the fixed ones.
//!
//! The re-election storm of the 200-node tokens swarms: a cluster whose
//! messages are slower than its election's answer timeout (`a_slow_clusters_reelection_ends`).
//!
//! Further windows: a minter, a backup that just took a role over, a
//! re-election winner, and a relaying node, each crashing right after it took or sent the
//! role; tests may crash a second node (`Net::then`), and may keep crashed nodes' provider
//! records (`Net::keep_dead_providers`, as a real DHT does until they expire).

use crate::common;
use crate::common::{peer, token_view, xor};
use overlay::superpeer::estimate::PARALLEL_LOOKUPS;
use overlay::superpeer::{
    HeadRole, LookupReport, PeerInfo, Point, Query, SpContext, SpEffect, SpInput, SpMessage, SuperPeerConfig,
    SuperPeerNode, TokenId,
};
use overlay::{NodeId, Time, Timer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

const ROUND_US: u64 = 1_000_000;

enum Ev {
    /// A message from node `from` (an index; `usize::MAX` for an outside sender).
    Deliver {
        to: usize,
        from: usize,
        msg: SpMessage,
    },
    Input {
        to: usize,
        input: SpInput,
    },
    Tick {
        to: usize,
    },
    Timer {
        to: usize,
        timer: Timer,
        generation: u64,
    },
}

/// When to crash a node.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Trigger {
    /// Never.
    None,
    /// The first node that takes a token handed to it (a `Handover` with members), right
    /// after it took it.
    TakesHandover,
    /// The first node that takes a relayed token (a `Handover` without members).
    TakesRelay,
    /// The first node that mints a token (takes one at epoch 0, not by a `Handover`), right
    /// after it took it.
    Mints,
    /// The first member-less holder right after its backup's `Detach` (its confirmation that
    /// it holds the backup view) arrived.
    BackupConfirmed,
    /// The first node that takes the token of the node crashed before (a recreation), right
    /// after it took it (a second crash).
    Acquires,
    /// The first node that hands a recreated token on (a relay `Handover`), right after it
    /// sent it.
    Relays,
}

struct Net {
    nodes: Vec<SuperPeerNode>,
    alive: Vec<bool>,
    /// Ids of nodes that do not run here: every message to them fails (crashed peers that
    /// a test set up by hand).
    phantoms: Vec<NodeId>,
    providers: HashMap<NodeId, Vec<usize>>,
    /// Providers every provider lookup also returns (phantoms: nobody claims a slot).
    extra_providers: Vec<PeerInfo>,
    /// Provider records of crashed nodes are still returned (as a real DHT does until they
    /// expire), so that a node deciding late does not mint the crashed minter's token again
    ///.
    keep_dead_providers: bool,
    events: BinaryHeap<Reverse<(u64, u64, usize)>>,
    slab: Vec<Option<Ev>>,
    seq: u64,
    now: u64,
    /// Delays and phases.
    rng: ChaCha8Rng,
    /// The nodes' own randomness.
    node_rng: ChaCha8Rng,
    min_delay: u64,
    max_delay: u64,
    detect: u64,
    /// Last delivery time per link (FIFO per link).
    link: HashMap<(usize, usize), u64>,
    timer_gen: HashMap<(usize, Timer), u64>,
    next_gen: u64,
    trigger: Trigger,
    /// The trigger armed once `trigger` fired (a second crash).
    then: Trigger,
    /// Every triggered crash: (node, time, token, epoch); for `Relays` the relayed token.
    crashes: Vec<(usize, u64, TokenId, u32)>,
    /// Message kinds of a crashed node that still arrive.
    let_through: Vec<&'static str>,
    /// (node, time) of the triggered crash, and the token and epoch the node took.
    crashed: Option<(usize, u64, TokenId, u32)>,
    /// Every token acquisition: (time, node, token, epoch).
    acquired: Vec<(u64, usize, TokenId, u32)>,
    log: Vec<(u64, usize, usize, &'static str)>,
    /// Inputs a node rejected: (time, node, from, reason).
    rejected: Vec<(u64, usize, usize, &'static str)>,
}

impl Net {
    fn new(points: Vec<Point>, ids: Vec<NodeId>, cfg: SuperPeerConfig, seed: u64) -> Net {
        // A node needs no more samples than the lookups it starts with `Start` (the net
        // answers at once), so each node decides within it: the relay scenes feed a node
        // `Start` by hand and expect it to attach at once.
        let cfg = Arc::new(common::with(cfg, |c| c.estimate.samples = PARALLEL_LOOKUPS));
        let nodes: Vec<SuperPeerNode> =
            ids.iter().zip(&points).map(|(id, p)| SuperPeerNode::new(*id, *p, cfg.clone())).collect();
        let n = nodes.len();
        Net {
            nodes,
            alive: vec![true; n],
            phantoms: Vec::new(),
            providers: HashMap::new(),
            extra_providers: Vec::new(),
            keep_dead_providers: false,
            events: BinaryHeap::new(),
            slab: Vec::new(),
            seq: 0,
            now: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
            node_rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5eed),
            min_delay: 5_000,
            max_delay: 200_000,
            detect: 500_000,
            link: HashMap::new(),
            timer_gen: HashMap::new(),
            next_gen: 0,
            trigger: Trigger::None,
            then: Trigger::None,
            crashes: Vec::new(),
            let_through: Vec::new(),
            crashed: None,
            acquired: Vec::new(),
            log: Vec::new(),
            rejected: Vec::new(),
        }
    }

    /// Every node learns every other, starts at its phase and ticks once a round.
    fn start_all(&mut self) {
        let n = self.nodes.len();
        for i in 0..n {
            for j in 0..n {
                if i != j {
                    let info = self.info(j);
                    self.handle(i, SpInput::PeerUp(info), false);
                }
            }
        }
        for i in 0..n {
            let phase = self.rng.gen_range(0..ROUND_US);
            self.schedule(phase, Ev::Input { to: i, input: SpInput::Start });
            self.schedule(phase + 1, Ev::Tick { to: i });
        }
    }

    fn info(&self, i: usize) -> PeerInfo {
        PeerInfo { id: self.nodes[i].id(), point: self.nodes[i].point() }
    }

    fn index(&self, id: &NodeId) -> Option<usize> {
        self.nodes.iter().position(|n| n.id() == *id)
    }

    fn schedule(&mut self, at: u64, ev: Ev) {
        self.slab.push(Some(ev));
        self.seq += 1;
        self.events.push(Reverse((at, self.seq, self.slab.len() - 1)));
    }

    fn delay(&mut self) -> u64 {
        self.rng.gen_range(self.min_delay..=self.max_delay)
    }

    /// Runs every event up to `until` (microseconds).
    fn run_until(&mut self, until: u64) {
        while let Some(Reverse((at, _, slot))) = self.events.peek().copied() {
            if at > until {
                break;
            }
            self.events.pop();
            self.now = at;
            let Some(ev) = self.slab[slot].take() else { continue };
            match ev {
                Ev::Deliver { to, from, msg } => {
                    if from != usize::MAX && !self.alive[from] && !self.let_through.contains(&msg.kind()) {
                        // The sender crashed before this message left it.
                        continue;
                    }
                    if self.alive[to] {
                        let from_id = if from == usize::MAX { NodeId::from_u64(0) } else { self.nodes[from].id() };
                        self.handle(to, SpInput::Message { from: from_id, msg }, true);
                    } else if from != usize::MAX && self.alive[from] {
                        let d = self.delay();
                        let to_id = self.nodes[to].id();
                        self.schedule(at + d, Ev::Input { to: from, input: SpInput::SendFailed { to: to_id, msg } });
                    }
                }
                Ev::Input { to, input } => self.handle(to, input, false),
                Ev::Tick { to } => {
                    self.handle(to, SpInput::Tick, false);
                    self.schedule(at + ROUND_US, Ev::Tick { to });
                }
                Ev::Timer { to, timer, generation } => {
                    if self.timer_gen.get(&(to, timer)) == Some(&generation) {
                        self.handle(to, SpInput::Timer(timer), false);
                    }
                }
            }
        }
        self.now = until;
    }

    fn rounds(&mut self, n: u64) {
        let until = self.now + n * ROUND_US;
        self.run_until(until);
    }

    fn handle(&mut self, i: usize, input: SpInput, _msg: bool) {
        if !self.alive[i] {
            return;
        }
        let handover = match &input {
            SpInput::Message { msg: SpMessage::Handover { members, .. }, .. } => Some(members.is_empty()),
            _ => None,
        };
        let detach_from = match &input {
            SpInput::Message { from, msg: SpMessage::Detach } => Some(*from),
            _ => None,
        };
        let mut effects = Vec::new();
        if std::env::var("PEERAGE_TRACE0").is_ok_and(|v| v == i.to_string())
            && std::env::var("PEERAGE_TRACE0").is_ok()
            && !matches!(
                input,
                SpInput::Tick
                    | SpInput::Message {
                        msg: SpMessage::ClusterView { .. }
                            | SpMessage::Announce { .. }
                            | SpMessage::TokenGossip { .. }
                            | SpMessage::CacheExchange { .. },
                        ..
                    }
            )
        {
            eprintln!("TRACE-IN {} {:?}", self.now, input);
        }
        {
            let mut ctx = SpContext::new(Time(self.now), &mut self.node_rng, &mut effects);
            self.nodes[i].handle(&mut ctx, input);
        }
        if std::env::var("PEERAGE_TRACE0").is_ok_and(|v| v == i.to_string()) && std::env::var("PEERAGE_TRACE0").is_ok()
        {
            for e in &effects {
                if !matches!(
                    e,
                    SpEffect::Send {
                        msg: SpMessage::Announce { .. }
                            | SpMessage::TokenGossip { .. }
                            | SpMessage::CacheExchange { .. },
                        ..
                    }
                ) {
                    eprintln!("TRACE {} {:?}", self.now, e);
                }
            }
        }
        let mut took = None;
        for e in &effects {
            if let SpEffect::TokenAcquired { token, epoch } = e {
                self.acquired.push((self.now, i, *token, *epoch));
                took = Some((*token, *epoch));
            }
        }
        let relayed = effects.iter().find_map(|e| match e {
            SpEffect::Send { msg: SpMessage::Handover { token, epoch, promoted: true, members, .. }, .. }
                if members.is_empty() =>
            {
                Some((*token, *epoch))
            }
            _ => None,
        });
        for e in effects {
            self.effect(i, e);
        }
        let node = &self.nodes[i];
        let fire = match self.trigger {
            Trigger::TakesHandover => handover == Some(false) && took.is_some(),
            Trigger::TakesRelay => handover == Some(true) && took.is_some(),
            Trigger::Mints => handover.is_none() && took.is_some_and(|(_, e)| e == 0),
            Trigger::BackupConfirmed => {
                node.is_head() && node.members().is_empty() && detach_from.is_some_and(|b| node.backup() == Some(b))
            }
            Trigger::Acquires => took.is_some_and(|(t, _)| self.crashes.first().is_some_and(|c| c.2 == t)),
            Trigger::Relays => relayed.is_some(),
            Trigger::None => false,
        };
        if fire {
            let (token, epoch) = relayed.or(took).or(node.token()).unwrap_or((TokenId(0), 0));
            if self.crashed.is_none() {
                self.crashed = Some((i, self.now, token, epoch));
            }
            self.crashes.push((i, self.now, token, epoch));
            self.trigger = std::mem::replace(&mut self.then, Trigger::None);
            self.crash(i);
        }
    }

    fn crash(&mut self, v: usize) {
        self.alive[v] = false;
        let id = self.nodes[v].id();
        for j in 0..self.nodes.len() {
            if self.alive[j] {
                let d = self.detect + self.rng.gen_range(0..self.max_delay);
                self.schedule(self.now + d, Ev::Input { to: j, input: SpInput::PeerDown(id) });
            }
        }
    }

    fn effect(&mut self, i: usize, e: SpEffect) {
        match e {
            SpEffect::Send { to, msg } => {
                self.log.push((self.now, i, self.index(&to).unwrap_or(usize::MAX), msg.kind()));
                let d = self.delay();
                match self.index(&to) {
                    Some(t) => {
                        let last = self.link.get(&(i, t)).copied().unwrap_or(0);
                        let at = (self.now + d).max(last);
                        self.link.insert((i, t), at);
                        self.schedule(at, Ev::Deliver { to: t, from: i, msg });
                    }
                    None => {
                        assert!(self.phantoms.contains(&to), "send to an unknown id");
                        self.schedule(self.now + 2 * d, Ev::Input { to: i, input: SpInput::SendFailed { to, msg } });
                    }
                }
            }
            SpEffect::Lookup { query, what } => {
                let live: Vec<usize> = (0..self.nodes.len()).filter(|&j| self.alive[j]).collect();
                let peers: Vec<PeerInfo> = match what {
                    Query::Closest { key } | Query::Sample { key } => {
                        let mut v = live.clone();
                        v.sort_by_key(|&j| xor(&self.nodes[j].id(), &key));
                        v.into_iter().take(20).map(|j| self.info(j)).collect()
                    }
                    Query::Providers { key } => {
                        let mut v: Vec<PeerInfo> = self
                            .providers
                            .get(&key)
                            .map(|v| {
                                v.iter()
                                    .filter(|&&j| self.alive[j] || self.keep_dead_providers)
                                    .map(|&j| self.info(j))
                                    .collect()
                            })
                            .unwrap_or_default();
                        v.extend(self.extra_providers.iter().copied());
                        v
                    }
                    // An empty table settles nothing: the node asks the DHT.
                    Query::Vicinity => Vec::new(),
                };
                // A table read is local: answered at once, not over the network.
                let d = if what == Query::Vicinity { 0 } else { self.delay() };
                self.schedule(
                    self.now + d,
                    Ev::Input { to: i, input: SpInput::LookupResult { query, report: LookupReport::complete(peers) } },
                );
            }
            SpEffect::Provide { key } => {
                let v = self.providers.entry(key).or_default();
                if !v.contains(&i) {
                    v.push(i);
                }
            }
            SpEffect::Unprovide { key } => {
                if let Some(v) = self.providers.get_mut(&key) {
                    v.retain(|&j| j != i);
                }
            }
            SpEffect::SetTimer { timer, after } => {
                self.next_gen += 1;
                let g = self.next_gen;
                self.timer_gen.insert((i, timer), g);
                self.schedule(self.now + after.as_micros() as u64, Ev::Timer { to: i, timer, generation: g });
            }
            SpEffect::CancelTimer { timer } => {
                self.timer_gen.remove(&(i, timer));
            }
            SpEffect::MeasureRtt { peer } => {
                let rtt = self
                    .index(&peer)
                    .filter(|&j| self.alive[j])
                    .map(|j| self.nodes[i].point().rtt(&self.nodes[j].point()));
                let d = self.delay();
                self.schedule(self.now + d, Ev::Input { to: i, input: SpInput::Rtt { peer, rtt } });
            }
            SpEffect::Rejected { from, reason, .. } => {
                let f = self.index(&from).unwrap_or(usize::MAX);
                self.rejected.push((self.now, i, f, reason));
            }
            SpEffect::TokenReleased { token, epoch } if std::env::var("PEERAGE_SEED").is_ok() => {
                eprintln!("{:>9} node {i} released {token:?} epoch {epoch}", self.now);
            }
            SpEffect::TokenAcquired { .. }
            | SpEffect::TokenReleased { .. }
            | SpEffect::LookupUnusable { .. }
            | SpEffect::BecomeSuperPeer
            | SpEffect::StopSuperPeer
            | SpEffect::AttachedTo(_)
            | SpEffect::TokenMovePriced(_)
            | SpEffect::Detached => {}
        }
    }

    /// With `PEERAGE_SEED` set (a replay), prints the token's story: acquisitions and the
    /// handover, view and election messages.
    fn dump(&self) {
        if std::env::var("PEERAGE_SEED").is_err() {
            return;
        }
        eprintln!("crashed: {:?}", self.crashed);
        for (i, n) in self.nodes.iter().enumerate() {
            eprintln!(
                "node {i}: alive {} in_election {} head {:?} attached {:?} view_head {:?} election_for {:?} backup_for {:?}",
                self.alive[i],
                n.in_election(),
                n.role(),
                n.attached_to().and_then(|a| self.index(&a)),
                n.view_head().map(|a| self.index(&a)),
                n.election_for().map(|a| self.index(&a)),
                n.backup_for().map(|(a, _)| self.index(&a))
            );
        }
        for (t, from, to, k) in &self.log {
            if !["cluster-view", "announce", "token-gossip", "cache-exchange"].contains(k) && (*from == 0 || *to == 0) {
                eprintln!("  all {t} {from} -> {to} {k}");
            }
        }
        for a in &self.acquired {
            eprintln!("{:>9} node {} acquired {:?} epoch {}", a.0, a.1, a.2, a.3);
        }
        for r in &self.rejected {
            eprintln!("{:>9} node {} rejected from {}: {}", r.0, r.1, r.2, r.3);
        }
        let kinds = [
            "handover",
            "handover-ack",
            "handover-refuse",
            "moved",
            "cluster-view",
            "election",
            "takeover",
            "attach",
            "accept",
            "detach",
            "refuse-full",
            "refuse-not-head",
        ];
        for l in &self.log {
            if kinds.contains(&l.3) {
                eprintln!("{:>9} {} -> {} {}", l.0, l.1, l.2, l.3);
            }
        }
    }

    /// Live nodes holding `token`, with their epochs.
    fn holders_of(&self, token: TokenId) -> Vec<(usize, u32)> {
        (0..self.nodes.len())
            .filter(|&i| self.alive[i])
            .filter_map(|i| self.nodes[i].token().filter(|(t, _)| *t == token).map(|(_, e)| (i, e)))
            .collect()
    }
}

/// The seeds a randomised test runs: `PEERAGE_SEED` alone if set, else the range
/// `PEERAGE_SEEDS=<from>..<to>` if set (to look for scenarios beyond the fixed ones), else
/// `0..n`.
fn seeds(n: u64) -> Vec<u64> {
    if let Some(s) = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![s];
    }
    let range = std::env::var("PEERAGE_SEEDS").ok().and_then(|r| {
        let (a, b) = r.split_once("..")?;
        Some(a.trim().parse::<u64>().ok()?..b.trim().parse::<u64>().ok()?)
    });
    match range {
        Some(r) => r.collect(),
        None => (0..n).collect(),
    }
}

/// `n` nodes (2 to 8, from the seed) named by the seed; the one that mints the only token
/// (XOR-closest to slot key 0) at (0, 0) with no one near, the others around (50 ms, 0), so
/// that the members' pull moves the token to one of them.
fn pull_setup(seed: u64) -> Net {
    let mut r = ChaCha8Rng::seed_from_u64(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let n = r.gen_range(2..=8usize);
    let ids: Vec<NodeId> = (0..n).map(|i| NodeId::hash_of(format!("window-{seed}-{i}").as_bytes())).collect();
    let minter = (0..n).min_by_key(|&i| ids[i]).unwrap_or(0);
    let points: Vec<Point> = (0..n)
        .map(|i| {
            if i == minter {
                Point::new(&[0.0, 0.0], 0.001)
            } else {
                let x = 0.05 + r.gen_range(-0.004..0.004);
                let y = r.gen_range(-0.004..0.004);
                Point::new(&[x, y], 0.001 + r.gen_range(0.0..0.001))
            }
        })
        .collect();
    let cfg = SuperPeerConfig { share: 0.01, cluster_cap: 10, ..Default::default() };
    cfg.validate().unwrap();
    let mut net = Net::new(points, ids, cfg, seed);
    net.start_all();
    net
}

/// Checks that exactly one live node holds the token the crashed node took (at epoch `e`),
/// and that it was recreated (at `e + 1`) at most once: exactly once if the old holder let
/// go of it, not at all if the old holder learned of the crash before the `HandoverAck`
/// (then it kept the token). Returns an error text.
fn check_recreated_once(net: &Net) -> Result<(), String> {
    let Some((dead, at, token, epoch)) = net.crashed else { return Err("no crash".into()) };
    let holders = net.holders_of(token);
    let recreated: Vec<_> = net.acquired.iter().filter(|a| a.0 > at && a.3 == epoch + 1 && a.2 == token).collect();
    if holders.len() != 1 || recreated.len() > 1 {
        net.dump();
        return Err(format!(
            "node {dead} crashed holding {token:?} at epoch {epoch}: live holders {holders:?}, recreations at epoch {} {recreated:?}",
            epoch + 1
        ));
    }
    Ok(())
}

/// Runs `body` for every seed, collects the failing seeds with their message, and fails
/// listing them (replay one with `PEERAGE_SEED`).
fn for_seeds(n: u64, body: impl Fn(u64) -> Result<bool, String>) {
    for_seeds_firing(n, 0.75, body)
}

/// [`for_seeds`], with the share of seeds that must reach the crash.
fn for_seeds_firing(n: u64, min_fired: f64, body: impl Fn(u64) -> Result<bool, String>) {
    let mut failed = Vec::new();
    let mut fired = 0;
    let list = seeds(n);
    for &seed in &list {
        match body(seed) {
            Ok(true) => fired += 1,
            Ok(false) => {}
            Err(e) => failed.push(format!("seed {seed}: {e}")),
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} seeds failed (replay with PEERAGE_SEED):\n{}",
        failed.len(),
        list.len(),
        failed.join("\n")
    );
    // The token moves in nearly every seed (179 of the first 200); a scenario that stopped
    // reaching the crash would test nothing. One replayed seed says nothing of the share.
    if list.len() > 1 {
        assert!(
            fired as f64 >= min_fired * list.len() as f64,
            "the crash fired in only {fired} of {} seeds",
            list.len()
        );
    } else if fired == 0 {
        println!("the crash did not fire on this seed: nothing to check");
    }
}

/// Window 1's crash on a [`pull_setup`] net: the node that takes the moved token crashes
/// right after it took it, and only the kinds in `let_through` of what it sent arrive. Runs
/// until the crash (at most 40 rounds), then 40 rounds more; `None` if it never crashed.
fn new_holder_crashed(seed: u64, let_through: Vec<&'static str>) -> Option<Net> {
    let mut net = pull_setup(seed);
    net.trigger = Trigger::TakesHandover;
    net.let_through = let_through;
    for _ in 0..40 {
        net.rounds(1);
        if net.crashed.is_some() {
            break;
        }
    }
    net.crashed?;
    net.rounds(40);
    Some(net)
}

/// Window 1 (module doc, step 4): the new holder crashes right after it took a handed-over
/// token. Its `HandoverAck` reached the old holder (which then told its members `Moved`),
/// its first `ClusterView` reached nobody. The members and the old holder must still
/// recreate the token, exactly once, at the next epoch.
#[test]
fn a_new_holder_crashed_before_its_view_arrived_is_replaced_once() {
    for_seeds(200, |seed| {
        let Some(net) = new_holder_crashed(seed, vec!["handover-ack"]) else { return Ok(false) };
        check_recreated_once(&net).map(|_| true)
    });
}

/// The same crash with the new holder's messages all arriving (the ack and its view): also
/// recreated exactly once (the view path).
#[test]
fn a_new_holder_crashed_after_its_view_went_out_is_replaced_once() {
    for_seeds(100, |seed| {
        let let_through = vec!["handover-ack", "cluster-view", "token-gossip", "announce"];
        let Some(net) = new_holder_crashed(seed, let_through) else { return Ok(false) };
        check_recreated_once(&net).map(|_| true)
    });
}

/// The new holder crashes right after it took the token and nothing it sent arrived (not
/// even the `HandoverAck`): the old holder, still holding the token in transit, keeps it;
/// nothing is recreated and nothing is duplicated.
#[test]
fn a_new_holder_crashed_before_its_ack_left_leaves_the_token_with_the_old_holder() {
    for_seeds(100, |seed| {
        let Some(net) = new_holder_crashed(seed, Vec::new()) else { return Ok(false) };
        let Some((_, _, token, epoch)) = net.crashed else { return Ok(false) };
        let holders = net.holders_of(token);
        if holders.len() != 1 {
            return Err(format!("node crashed holding {token:?} at epoch {epoch}: live holders {holders:?}"));
        }
        Ok(true)
    });
}

/// Feeds one input to a node outside any network, answering its lookups at once (closest
/// peers: none; providers: `providers`); returns its other effects.
fn prefeed(node: &mut SuperPeerNode, rng: &mut ChaCha8Rng, input: SpInput, providers: &[PeerInfo]) -> Vec<SpEffect> {
    let mut out = Vec::new();
    let mut queue = std::collections::VecDeque::from([input]);
    while let Some(input) = queue.pop_front() {
        let mut effects = Vec::new();
        {
            let mut ctx = SpContext::new(Time(0), rng, &mut effects);
            node.handle(&mut ctx, input);
        }
        for e in effects {
            match e {
                SpEffect::Lookup { query, what } => {
                    let peers = match what {
                        Query::Providers { .. } => providers.to_vec(),
                        _ => Vec::new(),
                    };
                    queue.push_back(SpInput::LookupResult { query, report: LookupReport::complete(peers) });
                }
                other => out.push(other),
            }
        }
    }
    out
}

/// The relay (module doc, step 6): node B is the only member of holder V
/// (token `TV` at epoch 4) and the backup of the member-less holder W (token `TW` at epoch
/// 1); V and W crash together (they are phantoms here: every message to them fails). B takes
/// W's token as its backup, wins V's re-election alone and relays V's token, recreated at
/// epoch 5, to its nearest neighbour C. Four more live nodes C, D, E, F; a phantom X
/// provides every key, so that none of them mints a token of its own.
const TV: TokenId = TokenId(21);
const TW: TokenId = TokenId(23);

/// The relay scenes' net, not started: the live nodes B, C, D, E, F (named `relay-b` ...)
/// 10 ms apart on a line, and the phantoms V and W (token holders) and X (provides every
/// key). Returns it with V, W and the live nodes' ids.
fn relay_net(seed: u64) -> (Net, PeerInfo, PeerInfo, Vec<NodeId>) {
    let v = peer("relay-holder-v", 0.2);
    let w = peer("relay-holder-w", -0.2);
    let x = peer("relay-provider-x", 0.5);
    let names = ["relay-b", "relay-c", "relay-d", "relay-e", "relay-f"];
    let ids: Vec<NodeId> = names.iter().map(|n| NodeId::hash_of(n.as_bytes())).collect();
    let points: Vec<Point> = (0..names.len()).map(|i| Point::new(&[0.01 * i as f64, 0.0], 0.001)).collect();
    let cfg = SuperPeerConfig { share: 0.01, cluster_cap: 10, ..Default::default() };
    cfg.validate().unwrap();
    let mut net = Net::new(points, ids.clone(), cfg, seed);
    net.phantoms = vec![v.id, w.id, x.id];
    net.extra_providers = vec![x];
    (net, v, w, ids)
}

fn relay_setup(seed: u64) -> Net {
    let (mut net, v, w, ids) = relay_net(seed);
    // B: attached to V with V's view, and W's backup.
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let b = &mut net.nodes[0];
    let fx = prefeed(b, &mut rng, SpInput::Start, &[v]);
    assert!(
        fx.iter().any(|e| matches!(e, SpEffect::Send { to, msg: SpMessage::Attach { .. } } if *to == v.id)),
        "{fx:?}"
    );
    let from_v = |msg| SpInput::Message { from: v.id, msg };
    prefeed(b, &mut rng, from_v(SpMessage::Accept { role: HeadRole::Token { token: TV, epoch: 4 }, head: v }), &[v]);
    prefeed(b, &mut rng, from_v(token_view(TV, 4, &[v.id, ids[0]])), &[v]);
    prefeed(b, &mut rng, SpInput::Message { from: w.id, msg: token_view(TW, 1, &[w.id, ids[0]]) }, &[v]);
    assert_eq!(b.attached_to(), Some(v.id));
    assert_eq!(b.view_head(), Some(v.id));
    assert_eq!(b.backup_for().map(|(h, _)| h), Some(w.id));
    net.start_all();
    // W's crash reaches B first, then V's, within the first round.
    let at = net.rng.gen_range(200_000..400_000u64);
    net.schedule(at, Ev::Input { to: 0, input: SpInput::PeerDown(w.id) });
    let later = at + net.rng.gen_range(0..300_000u64);
    net.schedule(later, Ev::Input { to: 0, input: SpInput::PeerDown(v.id) });
    net
}

/// Checks that each of the two tokens is held by exactly one live node.
fn check_both_held_once(net: &Net) -> Result<(), String> {
    let (hv, hw) = (net.holders_of(TV), net.holders_of(TW));
    if hv.len() != 1 || hw.len() != 1 {
        net.dump();
        return Err(format!("crashed {:?}: holders of V's token {hv:?}, of W's token {hw:?}", net.crashed));
    }
    Ok(())
}

/// Window 2's crash on a [`relay_setup`] net: the node that takes the relayed token crashes
/// right after it took it, and only the kinds in `let_through` of what it sent arrive; after
/// 30 rounds each token must be held exactly once. `Ok(false)` if it never crashed.
fn relay_receiver_crashed(seed: u64, let_through: Vec<&'static str>) -> Result<bool, String> {
    let mut net = relay_setup(seed);
    net.trigger = Trigger::TakesRelay;
    net.let_through = let_through;
    net.rounds(30);
    if net.crashed.is_none() {
        return Ok(false);
    }
    check_both_held_once(&net).map(|_| true)
}

/// Window 2 (module doc, step 6, "relay"): the neighbour that takes the relayed token
/// crashes right after it took it; its backup view reached nobody (its `HandoverAck`, if it
/// sent one, did reach the relaying node). The relaying node must hand the token to the
/// next neighbour: each token ends up held exactly once.
#[test]
fn a_relay_receiver_crashed_before_its_backup_view_arrived_loses_nothing() {
    // Since the cluster election's timeouts follow the RTT, B wins V's election
    // about 1.5 s after the crash; by then it has often handed W's token to a member and
    // takes V's itself, without a relay: the relay fires in about a third of the seeds.
    for_seeds_firing(200, 0.3, |seed| relay_receiver_crashed(seed, vec!["handover-ack"]));
}

/// The same crash after the receiver's backup view went out (the backup takes the token
/// over at the next epoch while the relaying node may hand it on again): still each token
/// held exactly once at the end (a race between the two copies is resolved at the higher
/// epoch).
#[test]
fn a_relay_receiver_crashed_after_its_backup_view_went_out_duplicates_nothing() {
    // The relay fires in about a third of the seeds (see the test above).
    for_seeds_firing(200, 0.3, |seed| {
        relay_receiver_crashed(seed, vec!["handover-ack", "cluster-view", "announce", "token-gossip"])
    });
}

/// Without a crash the relay settles: each token held once, and the relaying node stops
/// asking (its relay was acknowledged).
#[test]
fn a_relay_without_a_crash_is_acknowledged_once_its_backup_confirmed() {
    for_seeds(50, |seed| {
        let mut net = relay_setup(seed);
        net.rounds(30);
        check_both_held_once(&net)?;
        let last = net.log.iter().filter(|l| l.1 == 0 && l.3 == "handover").map(|l| l.0).max();
        match last {
            Some(t) if t + 5 * ROUND_US < net.now => Ok(true),
            other => Err(format!("the relaying node still hands the token on (last at {other:?})")),
        }
    });
}

/// Runs `net` round by round until the armed triggers fired (at most 40 rounds), then 40
/// rounds more; returns whether every trigger fired.
fn run_crashes(net: &mut Net, crashes: usize) -> bool {
    for _ in 0..40 {
        net.rounds(1);
        if net.crashes.len() >= crashes {
            break;
        }
    }
    net.rounds(40);
    net.crashes.len() >= crashes
}

/// Checks that the token of the first crash is held by exactly one live node (any epoch),
/// and that no epoch after the last crash was taken twice.
fn check_held_once(net: &Net) -> Result<(), String> {
    let Some(&(_, _, token, _)) = net.crashes.first() else { return Err("no crash".into()) };
    let holders = net.holders_of(token);
    let last = net.crashes.last().map_or(0, |c| c.1);
    let mut epochs: Vec<u32> = net.acquired.iter().filter(|a| a.0 > last && a.2 == token).map(|a| a.3).collect();
    epochs.sort_unstable();
    let twice = epochs.windows(2).any(|w| w[0] == w[1]);
    if holders.len() != 1 || twice {
        net.dump();
        return Err(format!(
            "crashes {:?}: live holders of {token:?} {holders:?}, epochs taken after the last crash {epochs:?}",
            net.crashes
        ));
    }
    Ok(())
}

/// A [`pull_setup`] net of at least `min_nodes` nodes that keeps crashed nodes' provider
/// records, its crashes armed by `arm`: runs it until `crashes` crashes fired (then 40 rounds
/// more) and checks the first crash's token held once ([`check_held_once`]). `Ok(false)` if
/// the net is smaller or not every crash fired.
fn held_once_after_crashes(
    seed: u64,
    min_nodes: usize,
    crashes: usize,
    arm: impl FnOnce(&mut Net),
) -> Result<bool, String> {
    let mut net = pull_setup(seed);
    if net.nodes.len() < min_nodes {
        return Ok(false);
    }
    net.keep_dead_providers = true;
    arm(&mut net);
    if !run_crashes(&mut net, crashes) {
        return Ok(false);
    }
    check_held_once(&net).map(|_| true)
}

/// Window 3a (module doc, step 6): the node that mints a token crashes right
/// after it took it, and nothing it sent after that arrives. Its backup must hold the view
/// already (the minter takes the token only once its backup confirmed), and take it over.
#[test]
fn a_minter_crashed_right_after_minting_loses_nothing() {
    for_seeds(200, |seed| held_once_after_crashes(seed, 2, 1, |net| net.trigger = Trigger::Mints));
}

/// Window 3b (module doc, step 6): a member-less holder crashes once its backup
/// has its view; the backup takes the token over and crashes right after it took it (nothing
/// it sent after that arrives). The backup's own backup must hold the view already and take
/// the token over once more. With 2 nodes nobody is left, the seed does not count.
#[test]
fn a_backup_crashed_right_after_its_takeover_loses_nothing() {
    for_seeds(200, |seed| {
        held_once_after_crashes(seed, 3, 2, |net| {
            net.trigger = Trigger::BackupConfirmed;
            net.then = Trigger::Acquires;
        })
    });
}

/// Window 4 (module doc, step 5): the new holder of a moved token crashes before
/// its view arrived (as in window 1), its cluster re-elects, and the winner crashes right
/// after it took the token over: its election messages (the `Coordinator`) arrive, its
/// `Takeover` (or, if it won alone, its backup view) is lost with it. The other members know
/// the leader but are not attached to it: they hold the leader's group as a stand-in view
/// and re-elect again (or its backup takes over). With 2 nodes nobody is left, the seed
/// does not count. (Without the stand-in views it fails in 170 of 200 seeds.)
#[test]
fn a_reelection_winner_crashed_right_after_its_takeover_loses_nothing() {
    for_seeds(200, |seed| {
        held_once_after_crashes(seed, 3, 2, |net| {
            net.trigger = Trigger::TakesHandover;
            net.then = Trigger::Acquires;
            net.let_through = vec!["handover-ack", "election"];
        })
    });
}

/// As [`relay_setup`], but V's cluster has a second live member M, and B is the node with
/// the highest id (M the next), so that B wins V's re-election and relays V's token, holding
/// W's. Returns the net and B's index.
fn relay_setup_with_member(seed: u64) -> (Net, usize) {
    let (mut net, v, w, ids) = relay_net(seed);
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_by_key(|&i| Reverse(ids[i]));
    let (b, m) = (order[0], order[1]);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let from_v = |msg| SpInput::Message { from: v.id, msg };
    for i in [b, m] {
        let n = &mut net.nodes[i];
        prefeed(n, &mut rng, SpInput::Start, &[v]);
        prefeed(
            n,
            &mut rng,
            from_v(SpMessage::Accept { role: HeadRole::Token { token: TV, epoch: 4 }, head: v }),
            &[v],
        );
        prefeed(n, &mut rng, from_v(token_view(TV, 4, &[v.id, ids[b], ids[m]])), &[v]);
        assert_eq!(n.attached_to(), Some(v.id));
    }
    prefeed(
        &mut net.nodes[b],
        &mut rng,
        SpInput::Message { from: w.id, msg: token_view(TW, 1, &[w.id, ids[b]]) },
        &[v],
    );
    assert_eq!(net.nodes[b].backup_for().map(|(h, _)| h), Some(w.id));
    net.start_all();
    // W's crash reaches B first, then V's reaches B and M, within the first round.
    let at = net.rng.gen_range(200_000..400_000u64);
    net.schedule(at, Ev::Input { to: b, input: SpInput::PeerDown(w.id) });
    for i in [b, m] {
        let later = at + net.rng.gen_range(0..300_000u64);
        net.schedule(later, Ev::Input { to: i, input: SpInput::PeerDown(v.id) });
    }
    (net, b)
}

/// Window 5's crash on a [`relay_setup_with_member`] net: B crashes right after its relay
/// `Handover` left it, and only the kinds in `let_through` of what it sent arrive; after 40
/// rounds V's token must be held exactly once and W's at most once. `Ok(false)` if B did
/// not crash relaying.
fn relaying_node_crashed(seed: u64, let_through: Vec<&'static str>) -> Result<bool, String> {
    let (mut net, b) = relay_setup_with_member(seed);
    net.trigger = Trigger::Relays;
    net.let_through = let_through;
    net.rounds(40);
    let Some(&(r, _, token, _)) = net.crashes.first() else { return Ok(false) };
    if r != b {
        return Ok(false);
    }
    let (hv, hw) = (net.holders_of(TV), net.holders_of(TW));
    if hv.len() != 1 || hw.len() > 1 {
        net.dump();
        return Err(format!("node {r} crashed relaying {token:?}: holders of V's token {hv:?}, of W's {hw:?}"));
    }
    Ok(true)
}

/// Window 5 (module doc, step 6, "relay"): B, entitled to two tokens, relays V's
/// and crashes right after the relay `Handover` left it; nothing it sent after that arrives
/// (the `Handover` too is lost). M, the other member of V's cluster, knows that B led: it
/// holds B's group as a stand-in view and re-elects, so V's token is held exactly once.
/// W's token is held at most once (B may die before its own backup had the view: W and
/// all of its group are then gone).
#[test]
fn a_relaying_node_crashed_before_its_relay_arrived_loses_nothing() {
    for_seeds(200, |seed| relaying_node_crashed(seed, Vec::new()));
}

/// The same crash after the relay `Handover` arrived: the relayed token is held, and the
/// stand-in re-election that recreates it as well is resolved by the duplicate safety net
/// (the higher epoch stays): each token held at most once, V's exactly once.
#[test]
fn a_relaying_node_crashed_after_its_relay_arrived_duplicates_nothing() {
    for_seeds(200, |seed| relaying_node_crashed(seed, vec!["handover"]));
}

/// The post-kill election storm of the 200-node tokens swarms:
/// `n` nodes (24 to 32, from the seed) close together form one cluster under one token
/// holder on a fast network (5-200 ms); then the messages slow down to 0.2-1.5 s (a loaded
/// machine: the cluster election's answer timeout is 0.5 s, so members time out on one
/// another and several win at once) and the holder crashes. Returns the net right after the
/// crash, with the crashed holder and its token; `None` if the cluster never formed.
fn storm_setup(seed: u64) -> Option<(Net, usize, TokenId)> {
    let mut r = ChaCha8Rng::seed_from_u64(seed.wrapping_mul(0x2545_f491_4f6c_dd1d));
    let n = r.gen_range(24..=32usize);
    let ids: Vec<NodeId> = (0..n).map(|i| NodeId::hash_of(format!("storm-{seed}-{i}").as_bytes())).collect();
    let points: Vec<Point> = (0..n)
        .map(|_| Point::new(&[r.gen_range(-0.01..0.01), r.gen_range(-0.01..0.01)], 0.001 + r.gen_range(0.0..0.002)))
        .collect();
    let cfg = SuperPeerConfig { share: 0.01, cluster_cap: 40, ..Default::default() };
    cfg.validate().ok()?;
    let mut net = Net::new(points, ids, cfg, seed);
    net.start_all();
    for _ in 0..120 {
        net.rounds(1);
        let holders: Vec<usize> = (0..n).filter(|&i| net.nodes[i].is_super_peer()).collect();
        if let [h] = holders[..] {
            let hid = net.nodes[h].id();
            if (0..n).all(|i| i == h || net.nodes[i].attached_to() == Some(hid)) {
                // Every member has the view of the full cluster.
                net.rounds(2 * net.nodes[h].round().min(1) as u64 + 6);
                let (token, _) = net.nodes[h].token()?;
                net.min_delay = 200_000;
                net.max_delay = 1_500_000;
                net.detect = 2_000_000;
                net.crash(h);
                return Some((net, h, token));
            }
        }
    }
    None
}

/// The storm (module doc of `node`, step 5, "Late elections end"): after the holder of a
/// slow cluster crashed, exactly one live node holds its token, every live node is attached
/// to it, and the cluster's election ends: no election message is sent in the last 40 of
/// 80 rounds. A member that knows the outcome does not take a late `Election` (or a
/// `Coordinator` from below its leader) as a reason to hold the election again: every such
/// restart would make the whole cluster answer.
#[test]
fn a_slow_clusters_reelection_ends() {
    for_seeds_firing(24, 0.9, |seed| {
        let Some((mut net, dead, token)) = storm_setup(seed) else { return Ok(false) };
        let crashed_at = net.now;
        net.rounds(80);
        let holders = net.holders_of(token);
        let late: Vec<_> = net.log.iter().filter(|l| l.3 == "election" && l.0 > crashed_at + 40 * ROUND_US).collect();
        let all: usize = net.log.iter().filter(|l| l.3 == "election" && l.0 > crashed_at).count();
        let n = net.nodes.len();
        let unattached: Vec<usize> = (0..n)
            .filter(|&i| net.alive[i] && !net.nodes[i].is_head())
            .filter(|&i| {
                let head = net.nodes[i].attached_to().and_then(|h| net.index(&h));
                !head.is_some_and(|h| net.alive[h] && net.nodes[h].is_head())
            })
            .collect();
        eprintln!(
            "seed {seed}: n {n}, holder {dead} crashed; election messages {all}, in the last 40 rounds {}; holders {holders:?}",
            late.len()
        );
        if std::env::var("PEERAGE_STORM_DIAG").is_ok() {
            let mut reasons: HashMap<&str, usize> = HashMap::new();
            for r in net.rejected.iter().filter(|r| r.0 > crashed_at + 40 * ROUND_US) {
                *reasons.entry(r.3).or_default() += 1;
            }
            eprintln!("late rejections {reasons:?}");
            let mut by: HashMap<(usize, usize), usize> = HashMap::new();
            for l in net.log.iter().filter(|l| l.3 == "election" && l.0 > crashed_at + 40 * ROUND_US) {
                *by.entry((l.1, l.2)).or_default() += 1;
            }
            eprintln!("late election messages by (from, to): {by:?}");
            let mut per_round: std::collections::BTreeMap<u64, usize> = Default::default();
            for l in net.log.iter().filter(|l| l.3 == "election" && l.0 > crashed_at) {
                *per_round.entry((l.0 - crashed_at) / ROUND_US).or_default() += 1;
            }
            eprintln!("election messages per round after the crash: {per_round:?}");
            for i in 0..n {
                let node = &net.nodes[i];
                eprintln!(
                    "node {i}: alive {} head {} attached {:?} in_election {} election_for {:?} state {}",
                    net.alive[i],
                    node.is_head(),
                    node.attached_to().and_then(|a| net.index(&a)),
                    node.in_election(),
                    node.election_for().and_then(|a| net.index(&a)),
                    node.attach_summary()
                );
            }
        }
        if holders.len() != 1 || !late.is_empty() || !unattached.is_empty() {
            net.dump();
            return Err(format!(
                "holders of the token {holders:?}, {} election messages in the last 40 rounds (of {all}), unattached {unattached:?}",
                late.len()
            ));
        }
        Ok(true)
    });
}

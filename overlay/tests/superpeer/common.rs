//! The harness the super-peer tests share: the printed, replayable seed, points and named
//! peers, one input into a node, the effects a test looks for (lookups, attaches,
//! measurements, handovers, cluster views), a DHT oracle, and the set-up of a token holder fed
//! by hand (seeded ids, a start whose lookups are answered by the oracle, a token handed over).

use overlay::superpeer::estimate::{estimate_from_closest, MAX_SAMPLES_PER_MESSAGE};
use overlay::superpeer::{
    token_directory_key, HeadRole, LookupReport, PeerInfo, Point, Query, SizeSample, SpContext, SpEffect, SpInput,
    SpMessage, SuperPeerConfig, SuperPeerNode, TokenEntry, TokenId,
};
use overlay::{NodeId, Time};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

/// The run's seed: `PEERAGE_SEED` if set, else `default`; printed so a failure replays.
pub fn seed(default: u64) -> u64 {
    let seed = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    println!("seed {seed} (replay with PEERAGE_SEED={seed})");
    seed
}

/// A point in the plane with a small height.
pub fn at(x: f64, y: f64) -> Point {
    Point::new(&[x, y], 0.001)
}

/// Feeds `node` one input at time `now` (µs) and returns its effects.
pub fn step(node: &mut SuperPeerNode, rng: &mut ChaCha8Rng, now: u64, input: SpInput) -> Vec<SpEffect> {
    let mut fx = Vec::new();
    let mut ctx = SpContext::new(Time(now), rng, &mut fx);
    node.handle(&mut ctx, input);
    answer_table_reads(node, rng, now, fx)
}

/// Answers a node's reads of its own routing table (`Query::Vicinity`) among `fx` as reads of
/// an empty table, which settle nothing: the node then looks the DHT up, which is what these
/// tests drive (`tests/superpeer/vicinity.rs` gives nodes real tables). The reads are taken
/// out of the effects, the answers' effects put in.
pub fn answer_table_reads(
    node: &mut SuperPeerNode,
    rng: &mut ChaCha8Rng,
    now: u64,
    fx: Vec<SpEffect>,
) -> Vec<SpEffect> {
    let mut out = Vec::with_capacity(fx.len());
    for e in fx {
        match e {
            SpEffect::Lookup { query, what: Query::Vicinity } => {
                let mut more = Vec::new();
                let mut ctx = SpContext::new(Time(now), rng, &mut more);
                node.handle(&mut ctx, SpInput::LookupResult { query, report: LookupReport::default() });
                out.extend(answer_table_reads(node, rng, now, more));
            }
            e => out.push(e),
        }
    }
    out
}

/// The DHT lookups among a node's effects: (query number, what it asks).
pub fn lookups(fx: &[SpEffect]) -> Vec<(u32, Query)> {
    fx.iter()
        .filter_map(|e| match e {
            SpEffect::Lookup { query, what } => Some((*query, *what)),
            _ => None,
        })
        .collect()
}

/// `n` node ids drawn from a ChaCha8 RNG seeded with `seed`, and that RNG (which then feeds the
/// node, so that a seed replays the whole test).
pub fn seeded_ids(seed: u64, n: usize) -> (ChaCha8Rng, Vec<NodeId>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let ids = (0..n).map(|_| NodeId(rng.gen())).collect();
    (rng, ids)
}

/// The XOR distance of two ids, as the DHT orders them.
pub fn xor(a: &NodeId, b: &NodeId) -> [u8; 32] {
    let mut x = [0u8; 32];
    for (i, v) in x.iter_mut().enumerate() {
        *v = a.0[i] ^ b.0[i];
    }
    x
}

/// How the DHT answers a hand-fed node's lookups: an oracle over a fixed set of ids, in which
/// every slot is claimed already, so the node claims nothing.
pub struct Oracle {
    /// Where the peers that `Closest` and `Sample` lookups find sit.
    pub found_at: Point,
    /// The token directory's providers.
    pub directory: Vec<PeerInfo>,
    /// Where `ids[3]`, the provider of every other key (a slot's), sits.
    pub provider_at: Point,
}

impl Default for Oracle {
    /// Everybody at (0.3, 0.3), an empty token directory.
    fn default() -> Oracle {
        Oracle { found_at: at(0.3, 0.3), directory: Vec::new(), provider_at: at(0.3, 0.3) }
    }
}

/// `count` size samples over `ids` as other nodes' lookups would make them, of fixed keys
/// (hashes of their index: no randomness used), from the 20 ids nearest each key but `me`.
pub fn shared_samples(ids: &[NodeId], me: NodeId, count: usize) -> Vec<SizeSample> {
    (0..count).map(|i| sample_of(ids, me, NodeId::hash_of(format!("shared sample {i}").as_bytes()))).collect()
}

/// The size sample a lookup of `key` makes over `ids`: from the 20 ids nearest the key but
/// `me`.
pub fn sample_of(ids: &[NodeId], me: NodeId, key: NodeId) -> SizeSample {
    let mut v: Vec<NodeId> = ids.iter().copied().filter(|x| *x != me).collect();
    v.sort_by_key(|x| xor(x, &key));
    v.truncate(20);
    let n = estimate_from_closest(&key, &v).expect("a sample from 20 peers");
    SizeSample { tag: key.high_u64(), n: n as f32 }
}

/// Starts `node` at time `now` (after peers shared all but two of its size samples, see
/// [`shared_samples`]) and answers every DHT lookup it makes (and every lookup the
/// answers lead to) from `oracle` over `ids`: a `Closest` or `Sample` lookup finds the 20 ids
/// closest to the key (not the node's own); the token directory has `oracle.directory`; any
/// other key is provided by `ids[3]`. Panics on more than 100 lookups or if the node claimed
/// a slot. Returns the effects of the answers.
pub fn start_claiming_nothing(
    node: &mut SuperPeerNode,
    rng: &mut ChaCha8Rng,
    now: u64,
    ids: &[NodeId],
    oracle: &Oracle,
) -> Vec<SpEffect> {
    let me = node.id();
    // Peers shared all but two of the samples it needs: its own two lookups complete them.
    // Each message's first sample is its sender's own vicinity sample (counted as any other).
    let need = (node.config().estimate.samples as usize).saturating_sub(2);
    let shared = shared_samples(ids, me, need);
    let senders: Vec<NodeId> = ids.iter().copied().filter(|x| *x != me).skip(1).collect();
    for (chunk, from) in shared.chunks(MAX_SAMPLES_PER_MESSAGE).zip(senders) {
        let mut samples = chunk.to_vec();
        samples[0].tag = from.high_u64();
        step(node, rng, now, SpInput::Message { from, msg: SpMessage::SizeSamples { samples } });
    }
    let mut pending: Vec<(u32, Query)> = lookups(&step(node, rng, now, SpInput::Start));
    let mut all = Vec::new();
    let mut guard = 0;
    while let Some((query, what)) = pending.pop() {
        guard += 1;
        assert!(guard < 100, "lookup storm");
        let peers = match what {
            Query::Closest { key } | Query::Sample { key } => {
                let mut v: Vec<NodeId> = ids.iter().copied().filter(|i| *i != me).collect();
                v.sort_by_key(|i| xor(i, &key));
                v.into_iter().take(20).map(|id| PeerInfo { id, point: oracle.found_at }).collect()
            }
            Query::Providers { key } if key == token_directory_key() => oracle.directory.clone(),
            // A claim's provider lookup: somebody provides it already.
            Query::Providers { .. } => vec![PeerInfo { id: ids[3], point: oracle.provider_at }],
            // An empty table settles nothing: the node asks the DHT.
            Query::Vicinity => Vec::new(),
        };
        let fx = step(node, rng, now, SpInput::LookupResult { query, report: LookupReport::complete(peers) });
        pending.extend(lookups(&fx));
        all.extend(fx);
    }
    assert!(!node.is_head(), "the test node must not claim a slot");
    all
}

/// Other token holders at `points`: token 100 + i at epoch 0, held by `ids[400 + i]`, fresh
/// (age 0), no members reported.
pub fn holders_at(ids: &[NodeId], points: &[Point]) -> Vec<TokenEntry> {
    points
        .iter()
        .enumerate()
        .map(|(i, p)| TokenEntry {
            token: TokenId(100 + i as u64),
            epoch: 0,
            holder: PeerInfo { id: ids[400 + i], point: *p },
            age: 0,
            members: 0,
        })
        .collect()
}

/// `from` hands `node` token 7 at epoch 1 (not promoted) with `members` and the holders in
/// `view`; panics if the node did not take it. Returns the node's effects.
pub fn hand_token(
    node: &mut SuperPeerNode,
    rng: &mut ChaCha8Rng,
    now: u64,
    from: NodeId,
    members: Vec<PeerInfo>,
    view: Vec<TokenEntry>,
) -> Vec<SpEffect> {
    let msg = SpMessage::Handover { token: TokenId(7), epoch: 1, promoted: false, members, view };
    let fx = step(node, rng, now, SpInput::Message { from, msg });
    assert!(node.is_head(), "the handover was not taken: {fx:?}");
    fx
}

/// Twelve members on a ring of 2 ms around the origin, `ids[10..22]` (the holder there sits at
/// their median: no net pull).
pub fn ring(ids: &[NodeId]) -> Vec<PeerInfo> {
    (0..12)
        .map(|i| {
            let t = i as f64 * std::f64::consts::TAU / 12.0;
            PeerInfo { id: ids[10 + i], point: at(0.002 * t.cos(), 0.002 * t.sin()) }
        })
        .collect()
}

/// The handovers among a node's effects: (to whom, how many members go with the token).
pub fn handovers(fx: &[SpEffect]) -> Vec<(NodeId, usize)> {
    fx.iter()
        .filter_map(|e| match e {
            SpEffect::Send { to, msg: SpMessage::Handover { members, .. } } => Some((*to, members.len())),
            _ => None,
        })
        .collect()
}

/// A DHT oracle over `ids` for tests that feed one node by hand: `closest` is the usable
/// answer of a closest-peers lookup (the 20 ids nearest to the key, not the asking node's),
/// and the RNG that drew the ids feeds the nodes.
pub struct DhtWorld {
    pub ids: Vec<NodeId>,
    pub rng: ChaCha8Rng,
    pub now: u64,
}

impl DhtWorld {
    /// `n` random ids drawn from `seed` ([`seeded_ids`]).
    pub fn new(seed: u64, n: usize) -> DhtWorld {
        let (rng, ids) = seeded_ids(seed, n);
        DhtWorld { ids, rng, now: 0 }
    }

    /// The 20 ids closest to `key` other than `me`, at (0.01, 0.01).
    pub fn closest(&self, me: NodeId, key: &NodeId) -> Vec<PeerInfo> {
        let mut v: Vec<NodeId> = self.ids.iter().copied().filter(|i| *i != me).collect();
        v.sort_by_key(|i| xor(i, key));
        v.into_iter().take(20).map(|id| PeerInfo { id, point: at(0.01, 0.01) }).collect()
    }

    pub fn feed(&mut self, node: &mut SuperPeerNode, input: SpInput) -> Vec<SpEffect> {
        step(node, &mut self.rng, self.now, input)
    }

    /// One round (1 s) later, a `Tick`.
    pub fn tick(&mut self, node: &mut SuperPeerNode) -> Vec<SpEffect> {
        self.now += 1_000_000;
        self.feed(node, SpInput::Tick)
    }

    /// Answers the size-estimate (`Sample`) lookups among `fx`'s and those that follow from
    /// the oracle until `node` decided; nobody shares samples with it, so it makes them all.
    /// Returns the other lookups asked meanwhile (the decision's claims and seeds) and the
    /// number of sample lookups answered.
    pub fn decide(&mut self, node: &mut SuperPeerNode, fx: &[SpEffect]) -> (Vec<(u32, Query)>, usize) {
        let me = node.id();
        let (mut todo, mut other, mut answered) = (Vec::new(), Vec::new(), 0);
        let sort = |l: Vec<(u32, Query)>, todo: &mut Vec<(u32, Query)>, other: &mut Vec<(u32, Query)>| {
            for x in l {
                if matches!(x.1, Query::Sample { .. }) {
                    todo.push(x);
                } else {
                    other.push(x);
                }
            }
        };
        sort(lookups(fx), &mut todo, &mut other);
        for _ in 0..20 {
            while let Some((q, what)) = todo.pop() {
                let Query::Sample { key } = what else { unreachable!() };
                let peers = self.closest(me, &key);
                let fx = self.feed(node, SpInput::LookupResult { query: q, report: LookupReport::complete(peers) });
                answered += 1;
                assert!(answered <= 100, "an estimate lookup storm");
                sort(lookups(&fx), &mut todo, &mut other);
            }
            if node.wanted() > 0 {
                break;
            }
            // The next lookups start with the round.
            let fx = self.tick(node);
            sort(lookups(&fx), &mut todo, &mut other);
        }
        assert!(node.wanted() > 0, "the node never decided");
        (other, answered)
    }

    /// A size sample as another node's lookup of a fresh random key would make it.
    pub fn sample(&mut self) -> SizeSample {
        let key = NodeId(self.rng.gen());
        sample_of(&self.ids, NodeId([0; 32]), key)
    }
}

/// One node fed by hand: its RNG and clock (µs), one input at a time, a round (1 s) per tick.
pub struct Fed {
    pub rng: ChaCha8Rng,
    pub now: u64,
    pub node: SuperPeerNode,
}

impl Fed {
    pub fn feed(&mut self, input: SpInput) -> Vec<SpEffect> {
        step(&mut self.node, &mut self.rng, self.now, input)
    }

    pub fn tick(&mut self) -> Vec<SpEffect> {
        self.now += 1_000_000;
        self.feed(SpInput::Tick)
    }
}

/// A started node at `point` with `cfg` (its nearest RTT 1 ms), not a head yet, and five
/// peers: four 10 ms around the origin and one at the origin.
pub fn fresh(seed: u64, point: Point, cfg: SuperPeerConfig) -> (Fed, Vec<PeerInfo>) {
    let (rng, ids) = seeded_ids(seed, 6);
    let b = SuperPeerNode::new(ids[0], point, Arc::new(cfg));
    let mut b = Fed { rng, now: 0, node: b };
    b.feed(SpInput::NearestRtt { rtt: 0.001 });
    b.feed(SpInput::Start);
    let spots = [(0.010, 0.0), (-0.010, 0.0), (0.0, 0.010), (0.0, -0.010), (0.0, 0.0)];
    let others = (0..5).map(|i| PeerInfo { id: ids[1 + i], point: at(spots[i].0, spots[i].1) }).collect();
    (b, others)
}

/// B at (5 ms, 0) takes token 7 from A at the origin with four members 10 ms around the
/// origin (as `superpeer_member_positions.rs`), each of which reported its access: by these
/// positions A is the better head, so B's first round hands the token back to A. Returns B
/// and A.
pub fn holder_beside(seed: u64, cfg: SuperPeerConfig) -> (Fed, PeerInfo) {
    let (mut b, others) = fresh(seed, at(0.005, 0.0), cfg);
    let now = b.now;
    hand_token(&mut b.node, &mut b.rng, now, others[4].id, others.clone(), Vec::new());
    for m in &others {
        b.feed(SpInput::Message { from: m.id, msg: SpMessage::Access { nearest_rtt: 0.001 } });
    }
    (b, others[4])
}

/// `base` changed by `f`: a test's settings in one expression (the sections nest).
pub fn with(mut base: SuperPeerConfig, f: impl FnOnce(&mut SuperPeerConfig)) -> SuperPeerConfig {
    f(&mut base);
    base
}

/// A node at `x` on a line, its id the hash of `name`.
pub fn peer(name: &str, x: f64) -> PeerInfo {
    PeerInfo { id: NodeId::hash_of(name.as_bytes()), point: Point::new(&[x, 0.0], 0.001) }
}

/// The cluster view a holder of `token` at `epoch` sends, `members` first the holder.
pub fn token_view(token: TokenId, epoch: u32, members: &[NodeId]) -> SpMessage {
    SpMessage::ClusterView { role: HeadRole::Token { token, epoch }, members: Arc::from(members.to_vec()) }
}

/// The heads a node's effects send `Attach` to.
pub fn attaches(fx: &[SpEffect]) -> Vec<NodeId> {
    fx.iter()
        .filter_map(|e| match e {
            SpEffect::Send { to, msg: SpMessage::Attach { .. } } => Some(*to),
            _ => None,
        })
        .collect()
}

/// The peers a node's effects ask the driver to measure (`MeasureRtt`).
pub fn measures(fx: &[SpEffect]) -> Vec<NodeId> {
    fx.iter()
        .filter_map(|e| match e {
            SpEffect::MeasureRtt { peer } => Some(*peer),
            _ => None,
        })
        .collect()
}

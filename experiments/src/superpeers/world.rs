//! The simulated population shared by every method of one `superpeers` run: the Internet
//! latency model, node ids, each node's neighbours, and the Vivaldi coordinate phase.
//!
//! What is simulated and what is computed:
//! - **Latency**: [`overlay::latency::LatencyModel`] (cities, regions, access links, detours);
//!   the TRUE RTT of a pair is `rtt_ms(a, b)`; Vivaldi measures samples with jitter.
//! - **Neighbours** (what the DHT routing table and the Vivaldi sample set give a real node):
//!   `near` peers, half from the node's own city and half from its 4 nearest other cities
//!   (a stand-in for proximity neighbour selection, which a real node gets from low-RTT kad
//!   buckets), and `random` peers drawn from the whole population. Computed once, shared by both methods.
//! - **Coordinates**: every node runs the real [`VivaldiClient`] (`overlay::coords`),
//!   message-level in effect: in each of `rounds` rounds every node pings one random
//!   neighbour, gets a jittered RTT sample from the model and updates. Shared by both methods
//!   (the coordinate phase is method-independent), then frozen into compact [`Point`]s.
//! - **DHT** ([`Dht`]): closest-peer and provider queries are answered by an oracle from a
//!   sorted id index (what kad's iterative lookup returns when it succeeds), charged as
//!   `ceil(log2 N)` messages each in the message counts.

use super::prefetch::prefetch;
use overlay::coords::{Coordinate, VivaldiClient, VivaldiConfig};
use overlay::latency::{LatencyModel, ModelConfig};
use overlay::superpeer::{PeerInfo, Point};
use overlay::NodeId;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// How many nearest other cities a node draws its non-local near neighbours from.
pub const NEARBY_CITIES: usize = 4;

/// The population.
pub struct World {
    pub model: LatencyModel,
    pub ids: Vec<NodeId>,
    pub index: IdIndex,
    /// `neighbours[i * per .. (i + 1) * per]`, `u32::MAX` for none.
    pub neighbours: Vec<u32>,
    pub per: usize,
    pub points: Vec<Point>,
    /// Median relative error of the coordinates' predicted RTT (sampled pairs).
    pub coord_error_p50: f64,
    pub coord_error_p90: f64,
}

impl World {
    /// Gives the nodes the ids `ids` (by index; `super::ids`, a real swarm's): an error, and
    /// nothing changed, if their number is not the world's or two share their first 64 bits
    /// ([`IdIndex`]).
    pub fn set_ids(&mut self, ids: Vec<NodeId>) -> anyhow::Result<()> {
        anyhow::ensure!(ids.len() == self.ids.len(), "{} ids for a world of {} nodes", ids.len(), self.ids.len());
        let mut index = IdIndex::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            anyhow::ensure!(index.insert(id, i as u32), "node {i}'s id shares its first 64 bits with another's");
        }
        (self.ids, self.index) = (ids, index);
        Ok(())
    }

    /// Latency model, ids and neighbour sets for `n` nodes.
    pub fn generate(n: usize, near: usize, random: usize, seed: u64, rng: &mut dyn RngCore) -> anyhow::Result<World> {
        let model = LatencyModel::generate(n, &ModelConfig::default(), seed)?;
        let mut ids = Vec::with_capacity(n);
        let mut index = IdIndex::with_capacity(n);
        while ids.len() < n {
            let mut b = [0u8; 32];
            rng.fill_bytes(&mut b);
            let id = NodeId(b);
            if index.insert(&id, ids.len() as u32) {
                ids.push(id);
            }
        }
        // Nodes by city, and each city's nearest other cities (by the TRUE RTT between one
        // representative node of each: a stand-in for the proximity a real node learns from
        // its low-RTT kad buckets and Vivaldi samples).
        let mut by_city: FxHashMap<usize, Vec<u32>> = FxHashMap::default();
        for i in 0..n {
            by_city.entry(model.city_of(i)).or_default().push(i as u32);
        }
        let reps: Vec<(usize, u32)> = by_city.iter().map(|(c, v)| (*c, v[0])).collect();
        let mut nearby: FxHashMap<usize, Vec<usize>> = FxHashMap::default();
        for &(c, r) in &reps {
            let mut others: Vec<(f64, usize)> =
                reps.iter().filter(|(d, _)| *d != c).map(|&(d, s)| (model.rtt_ms(r as usize, s as usize), d)).collect();
            others.sort_by(|a, b| a.0.total_cmp(&b.0));
            nearby.insert(c, others.into_iter().take(NEARBY_CITIES).map(|(_, d)| d).collect());
        }
        let per = near + random;
        let mut neighbours = vec![u32::MAX; n * per];
        for i in 0..n {
            let c = model.city_of(i);
            let city = &by_city[&c];
            let slot = &mut neighbours[i * per..(i + 1) * per];
            let mut k = 0;
            // Half of the near ones from the own city, the rest from the nearby cities.
            let own = if nearby[&c].is_empty() { near } else { near.div_ceil(2) };
            let mut tries = 0;
            while k < near && tries < near * 8 {
                tries += 1;
                let pool = if k < own || nearby[&c].is_empty() {
                    city
                } else {
                    &by_city[&nearby[&c][rng.gen_range(0..nearby[&c].len())]]
                };
                let j = pool[rng.gen_range(0..pool.len())];
                if j as usize != i && !slot[..k].contains(&j) {
                    slot[k] = j;
                    k += 1;
                }
            }
            while k < per && n > 1 {
                let j = rng.gen_range(0..n) as u32;
                if j as usize != i && !slot[..k].contains(&j) {
                    slot[k] = j;
                    k += 1;
                }
                if k >= n - 1 {
                    break;
                }
            }
        }
        Ok(World {
            model,
            ids,
            index,
            neighbours,
            per,
            points: Vec::new(),
            coord_error_p50: f64::NAN,
            coord_error_p90: f64::NAN,
        })
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Neighbour indices of node `i`.
    pub fn neighbours_of(&self, i: usize) -> impl Iterator<Item = u32> + '_ {
        self.neighbours[i * self.per..(i + 1) * self.per].iter().copied().filter(|j| *j != u32::MAX)
    }

    pub fn info(&self, i: u32) -> PeerInfo {
        PeerInfo { id: self.ids[i as usize], point: self.points[i as usize] }
    }

    /// TRUE round-trip time, ms.
    pub fn rtt_ms(&self, a: u32, b: u32) -> f64 {
        self.model.rtt_ms(a as usize, b as usize)
    }

    /// The Vivaldi phase (see [`VivaldiPhase`]): `rounds` rounds in which every node samples
    /// each of its neighbours and `fresh` random peers. `progress` is called after each round.
    pub fn run_vivaldi(
        &mut self,
        phase: &VivaldiPhase,
        rng: &mut dyn RngCore,
        mut progress: impl FnMut(),
    ) -> anyhow::Result<()> {
        let n = self.len();
        // No adjustment term: a super peer's `Point` carries none (see `VivaldiPhase`).
        let cfg = Arc::new(VivaldiConfig {
            adjustment_window: 0,
            latency_filter_peers: (self.per + phase.fresh).clamp(1, 1024) as u16,
            ..VivaldiConfig::default()
        });
        let mut clients = Vec::with_capacity(n);
        for _ in 0..n {
            clients.push(VivaldiClient::new(cfg.clone())?);
        }
        let seed = rng.next_u64();
        let jobs = phase.jobs.max(1);
        let base = self.neighbour_base_rtts(jobs);
        let base = &base[..];
        let mut prev: Vec<Coordinate> = clients.iter().map(|c| *c.coordinate()).collect();
        for round in 0..phase.rounds {
            if phase.in_place {
                // Sequential: every sample reads the peer's current coordinate.
                for (chunk_no, chunk) in clients.chunks_mut(VIVALDI_CHUNK).enumerate() {
                    let mut rng = chunk_rng(seed, round, chunk_no);
                    for (k, client) in chunk.iter_mut().enumerate() {
                        let i = chunk_no * VIVALDI_CHUNK + k;
                        self.vivaldi_node(client, i, phase.fresh, base, &prev, &mut rng);
                        prev[i] = *client.coordinate();
                    }
                }
            } else {
                let (world, snapshot) = (&*self, &prev[..]);
                // Contiguous parts of whole chunks, one per thread: the chunks (and so each
                // chunk's RNG) do not depend on the number of threads.
                let chunks_total = n.div_ceil(VIVALDI_CHUNK);
                let per_job = chunks_total.div_ceil(jobs);
                std::thread::scope(|scope| {
                    for (part, slice) in clients.chunks_mut(per_job * VIVALDI_CHUNK).enumerate() {
                        let first_chunk = part * per_job;
                        scope.spawn(move || {
                            for (c, chunk) in slice.chunks_mut(VIVALDI_CHUNK).enumerate() {
                                let chunk_no = first_chunk + c;
                                let mut rng = chunk_rng(seed, round, chunk_no);
                                for (k, client) in chunk.iter_mut().enumerate() {
                                    let i = chunk_no * VIVALDI_CHUNK + k;
                                    world.vivaldi_node(client, i, phase.fresh, base, snapshot, &mut rng);
                                }
                            }
                        });
                    }
                });
                for (p, c) in prev.iter_mut().zip(&clients) {
                    *p = *c.coordinate();
                }
            }
            progress();
        }
        drop(prev);
        self.points = clients.iter().map(|c| Point::from(c.coordinate())).collect();
        drop(clients);
        // The clients were allocated by the phase's worker threads, whose jemalloc arenas
        // would otherwise keep the freed pages resident through the protocol runs.
        super::memory::purge();
        // Accuracy on random pairs.
        let mut errs: Vec<f64> = (0..20_000.min(n * 4))
            .filter_map(|_| {
                let a = rng.gen_range(0..n);
                let b = rng.gen_range(0..n);
                (a != b).then(|| {
                    let t = self.model.rtt_ms(a, b);
                    let p = self.points[a].rtt(&self.points[b]) * 1000.0;
                    (p - t).abs() / t.max(1e-3)
                })
            })
            .collect();
        errs.sort_by(|a, b| a.total_cmp(b));
        if !errs.is_empty() {
            self.coord_error_p50 = errs[errs.len() / 2];
            self.coord_error_p90 = errs[errs.len() * 9 / 10];
        }
        Ok(())
    }
}

// Cost (`perf annotate` at N = 300,000): without the prefetch of the next
// node's neighbours, 72 % of `VivaldiClient::update_secs` waited on the first read of the
// peer's coordinate and 89 % of `LatencyFilter::push` on the peer's id; with it the phase
// runs 1.7-1.8x faster, with the same coordinates.

/// Nodes per Vivaldi work unit (each with its own RNG stream).
const VIVALDI_CHUNK: usize = 4096;

/// Settings of the coordinate phase.
///
/// Every round, every node measures (a jittered model RTT) each of its fixed neighbours
/// (`World::neighbours`: near ones in its own and nearby cities, random ones) and `fresh`
/// uniformly random peers, and updates its [`VivaldiClient`] with each sample. This is the
/// sample set of the `overlay/examples/vivaldi_error.rs` experiment (fixed neighbours incl.
/// same-city ones, plus fresh random peers every round), whose error at 18 samples per node
/// per round is 0.11 after 10 rounds and 0.08 after 100. ONE sample from a
/// random neighbour per round (100 rounds give each node about 6 samples per neighbour and no
/// fresh peers) stops at 0.25-0.33.
///
/// **Rounds are synchronous (Jacobi)**, a documented choice of the simulator: within a
/// round every node reads the coordinates its peers had at the END of the previous round
/// (a real node reads the coordinate a peer sent with its last ping reply, which is also a
/// little stale). This lets the nodes of a round be updated in parallel on `jobs` threads;
/// nodes are cut into fixed chunks of [`VIVALDI_CHUNK`], each with its own RNG seeded from
/// (run seed, round, chunk), so the result is the same for any number of threads.
///
/// **No adjustment term** (`adjustment_window = 0`): the coordinates are frozen into
/// [`Point`]s, which predict `euclid + heights` and carry no adjustment. With Serf's
/// adjustment on, the heights shrink to their minimum (10 µs) and the adjustment (mean
/// |adjustment| 16 ms at N = 10^4) carries the access delays, so the points alone erred by a
/// median 0.32 while the full coordinates erred by 0.12. Without it the heights carry the access delays and the points are the
/// full prediction: the `vivaldi_error` example measures 0.088 at N = 10^4 after 20 rounds
/// without the adjustment, 0.100 with it.
///
/// Fresh peers are sampled first in each round, so that the latency filter (which keeps
/// `neighbours + fresh` peers, least recently updated evicted) drops last round's fresh
/// peers and keeps the fixed neighbours' filters.
#[derive(Clone, Debug)]
pub struct VivaldiPhase {
    pub rounds: usize,
    pub fresh: usize,
    pub jobs: usize,
    /// Sequential rounds instead (one thread; each sample reads the peer's current
    /// coordinate), for comparison.
    pub in_place: bool,
}

fn chunk_rng(seed: u64, round: usize, chunk_no: usize) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(
        seed ^ (round as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ (chunk_no as u64).wrapping_mul(0xc2b2_ae3d_27d4_eb4f),
    )
}

impl World {
    /// The TRUE RTT from every node to each of its fixed neighbours, laid out like
    /// `neighbours` (NaN for none), computed once on `jobs` threads: every Vivaldi round
    /// samples the same pairs, and the model's RTT (a great-circle distance and four hashes)
    /// was a quarter of the phase's cost. 8 bytes per neighbour, for the phase only.
    fn neighbour_base_rtts(&self, jobs: usize) -> Vec<f64> {
        let n = self.len();
        let mut base = vec![f64::NAN; self.neighbours.len()];
        let per = self.per.max(1);
        let per_job = n.div_ceil(jobs.max(1)).max(1) * per;
        std::thread::scope(|scope| {
            for (part, slice) in base.chunks_mut(per_job).enumerate() {
                scope.spawn(move || {
                    let first = part * per_job;
                    for (k, b) in slice.iter_mut().enumerate() {
                        let (i, j) = ((first + k) / per, self.neighbours[first + k] as usize);
                        if j != i && j < n {
                            *b = self.model.rtt_ms(i, j);
                        }
                    }
                });
            }
        });
        base
    }

    /// Node `i`'s samples of one round: `fresh` random peers first (all drawn before any
    /// sample), then its fixed neighbours (base RTTs from `base`), each a jittered RTT and
    /// one update of `client` against the peer's coordinate in `coords`.
    fn vivaldi_node(
        &self,
        client: &mut VivaldiClient,
        i: usize,
        fresh: usize,
        base: &[f64],
        coords: &[Coordinate],
        rng: &mut dyn RngCore,
    ) {
        let n = self.len();
        let fresh_peers: [u32; MAX_FRESH] = std::array::from_fn(|f| {
            if f < fresh {
                self.model.random_peer(i, rng).map_or(u32::MAX, |j| j as u32)
            } else {
                u32::MAX
            }
        });
        for j in fresh_peers.into_iter().map(|j| j as usize).filter(|&j| j != i && j < n) {
            let rtt = self.model.sample_rtt_ms(i, j, rng) / 1000.0;
            self.vivaldi_update(client, j, &coords[j], rtt, rng);
        }
        let range = i * self.per..(i + 1) * self.per;
        // The next node's neighbours are read at random places: while this node takes its
        // k-th sample, start loading the next node's k-th peer (its coordinate and id), a
        // steady stream of a few loads ([`super::prefetch`]; changes no result).
        let next = self.neighbours.get((i + 1) * self.per..(i + 2) * self.per).unwrap_or(&[]);
        for (k, (&j, &b)) in self.neighbours[range.clone()].iter().zip(&base[range]).enumerate() {
            if let Some(&p) = next.get(k) {
                if let (Some(c), Some(id)) = (coords.get(p as usize), self.ids.get(p as usize)) {
                    prefetch(c);
                    prefetch(id);
                }
            }
            let j = j as usize;
            if j != i && j < n {
                let rtt = self.model.jittered_ms(b, rng) / 1000.0;
                self.vivaldi_update(client, j, &coords[j], rtt, rng);
            }
        }
    }

    /// One RTT sample (seconds) from a node to `j`, whose coordinate is `theirs`.
    fn vivaldi_update(
        &self,
        client: &mut VivaldiClient,
        j: usize,
        theirs: &Coordinate,
        rtt_secs: f64,
        rng: &mut dyn RngCore,
    ) {
        // A refused sample (zero RTT) is simply skipped, as a real node would.
        let _ = client.update_secs(&self.ids[j], theirs, rtt_secs, rng);
    }
}

/// Largest number of fresh random peers per node and round.
pub const MAX_FRESH: usize = 16;

/// Node id -> node index, for the ids of one [`World`]: open addressing with linear probing
/// on the id's first 64 bits, 16 bytes a slot at a load of at most 1/2, so a lookup costs one
/// cache miss (the per-message hot path of the protocol simulation; a `HashMap<NodeId, u32>`
/// costs two and hashes 32 bytes).
///
/// Ids are random 256-bit values; [`World::generate`] draws a fresh id when its first 64 bits
/// are already taken (about 3 in 10^8 worlds of a million nodes ever see that), so the first
/// 64 bits identify a node of the world. An id from outside the world that shares them with a
/// world id would map to that node: every id the simulation looks up comes from the world.
pub struct IdIndex {
    /// `(first 64 bits, index)`; `index == u32::MAX` marks an empty slot.
    slots: Vec<(u64, u32)>,
    mask: usize,
}

impl IdIndex {
    pub fn with_capacity(n: usize) -> IdIndex {
        let size = (2 * n.max(1)).next_power_of_two();
        IdIndex { slots: vec![(0, u32::MAX); size], mask: size - 1 }
    }

    /// Starts loading the slot where a look-up of `id` begins ([`super::prefetch`]).
    pub fn prefetch(&self, id: &NodeId) {
        if let Some(slot) = self.slots.get(self.home(id.high_u64())) {
            prefetch(slot);
        }
    }

    fn home(&self, key: u64) -> usize {
        // Fibonacci hashing: the high bits of the product mix every bit of the key.
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & self.mask
    }

    /// Adds `id -> idx`; false (and nothing changes) if an id with the same first 64 bits is
    /// already there, or the index is full.
    pub fn insert(&mut self, id: &NodeId, idx: u32) -> bool {
        if idx == u32::MAX {
            return false;
        }
        let key = id.high_u64();
        let mut s = self.home(key);
        for _ in 0..self.slots.len() {
            let (k, v) = self.slots[s];
            if v == u32::MAX {
                self.slots[s] = (key, idx);
                return true;
            }
            if k == key {
                return false;
            }
            s = (s + 1) & self.mask;
        }
        false
    }

    /// The index of `id`, if it is a node of the world.
    pub fn get(&self, id: &NodeId) -> Option<u32> {
        let key = id.high_u64();
        let mut s = self.home(key);
        loop {
            let (k, v) = self.slots[s];
            if v == u32::MAX {
                return None;
            }
            if k == key {
                return Some(v);
            }
            s = (s + 1) & self.mask;
        }
    }
}

/// The DHT oracle: closest-peer queries over live ids and provider records.
pub struct Dht {
    /// (top 128 bits of id, node index), sorted, live nodes only.
    sorted: Vec<(u128, u32)>,
    /// `starts[b]`: the first position in `sorted` whose id's top `bits` bits are >= `b`
    /// (`2^bits + 1` entries, about 8 ids a bucket): a query's position is searched among
    /// the few ids of its bucket instead of by a binary search over the whole index, whose
    /// last ten steps are cache misses at N = 10^6 (same position, same answer).
    starts: Vec<u32>,
    bits: u32,
    providers: FxHashMap<NodeId, Vec<u32>>,
    pub k: usize,
}

fn top128(id: &NodeId) -> u128 {
    let mut b = [0u8; 16];
    b.copy_from_slice(&id.0[..16]);
    u128::from_be_bytes(b)
}

impl Dht {
    pub fn new(ids: &[NodeId], k: usize) -> Dht {
        Dht::from_ids(ids.iter().copied(), k)
    }

    /// A DHT whose node `i` is the `i`-th id of `ids` (the protocol simulation numbers nodes
    /// by their slot, see `protocol`). Ids differ in their first 64 bits (see [`IdIndex`]),
    /// so the order, and every answer, does not depend on the numbering.
    pub fn from_ids(ids: impl Iterator<Item = NodeId>, k: usize) -> Dht {
        let mut sorted: Vec<(u128, u32)> = ids.enumerate().map(|(i, id)| (top128(&id), i as u32)).collect();
        sorted.sort_unstable();
        // About 8 ids a bucket; at most 2^24 buckets (64 MiB of starts at N = 10^8).
        let bits = (sorted.len() / 8).max(1).ilog2().min(24);
        let mut starts = Vec::with_capacity((1 << bits) + 1);
        let mut at = 0usize;
        for b in 0..(1u128 << bits) {
            while at < sorted.len() && Dht::bucket_of(sorted[at].0, bits) < b {
                at += 1;
            }
            starts.push(at as u32);
        }
        starts.push(sorted.len() as u32);
        Dht { sorted, starts, bits, providers: FxHashMap::default(), k }
    }

    fn bucket_of(v: u128, bits: u32) -> u128 {
        if bits == 0 {
            0
        } else {
            v >> (128 - bits)
        }
    }

    /// The first position in `sorted` whose value is >= `x`.
    fn position(&self, x: u128) -> usize {
        let b = Dht::bucket_of(x, self.bits) as usize;
        let (lo, hi) = (self.starts[b] as usize, self.starts[b + 1] as usize);
        lo + self.sorted[lo..hi].partition_point(|(v, _)| *v < x)
    }

    /// Removes a crashed node from the index and from every provider record.
    pub fn remove(&mut self, id: &NodeId, idx: u32) {
        let key = (top128(id), idx);
        if let Ok(p) = self.sorted.binary_search(&key) {
            self.sorted.remove(p);
            // Every bucket after the removed id starts one place earlier.
            let b = Dht::bucket_of(key.0, self.bits) as usize;
            for s in &mut self.starts[b + 1..] {
                *s -= 1;
            }
        }
        for v in self.providers.values_mut() {
            v.retain(|x| *x != idx);
        }
    }

    /// The Kademlia routing table of `me` (buckets of `bucket`), as a node whose table heard of
    /// every live node holds it, in the part a table read looks at: from the bucket nearest
    /// `me` out to the first full one, every bucket as it is (all its nodes, or `bucket` of
    /// them drawn at random), then `far` random live nodes, which lie in the full buckets
    /// beyond (a real table's far buckets, where a node pushes its size sample).
    pub fn table(&self, me: &NodeId, bucket: usize, far: usize, rng: &mut dyn RngCore) -> Vec<u32> {
        let x = top128(me);
        let sorted = &self.sorted[..];
        let mut out = Vec::new();
        // No id shares more leading bits with `me` than one of its neighbours in id order:
        // the buckets nearer than that are empty, and the walk starts there.
        let p = self.position(x);
        let shared = [p.checked_sub(1), Some(p), Some(p + 1)]
            .into_iter()
            .flatten()
            .filter_map(|j| sorted.get(j))
            .filter(|(v, _)| *v != x)
            .map(|(v, _)| (v ^ x).leading_zeros())
            .max();
        for c in shared.map_or(0..0, |most| 0..most + 1).rev() {
            // The ids that share exactly `c` leading bits with `me`.
            let bit = 1u128 << (127 - c);
            let lo = ((x >> (127 - c)) ^ 1) << (127 - c);
            let hi = lo | (bit - 1);
            let a = sorted.partition_point(|(v, _)| *v < lo);
            let b = sorted.partition_point(|(v, _)| *v <= hi);
            if b - a < bucket {
                out.extend(sorted[a..b].iter().map(|(_, i)| *i));
                continue;
            }
            let mut picked: Vec<usize> = Vec::with_capacity(bucket);
            while picked.len() < bucket {
                let j = rng.gen_range(a..b);
                if !picked.contains(&j) {
                    picked.push(j);
                }
            }
            out.extend(picked.into_iter().map(|j| sorted[j].1));
            break;
        }
        for _ in 0..far.min(sorted.len()) {
            let (v, i) = sorted[rng.gen_range(0..sorted.len())];
            if v != x && !out.contains(&i) {
                out.push(i);
            }
        }
        out
    }

    /// The `k` live nodes XOR-closest to `key` (on the top 128 bits).
    pub fn closest(&self, key: &NodeId) -> Vec<u32> {
        self.closest_n(key, self.k)
    }

    /// The `n` live nodes XOR-closest to `key`, nearest first.
    pub fn closest_n(&self, key: &NodeId, n: usize) -> Vec<u32> {
        let k = n.min(self.sorted.len());
        if k == 0 {
            return Vec::new();
        }
        let x = top128(key);
        let sorted = &self.sorted[..];
        // The smallest aligned block around the key holding at least k nodes contains the k
        // XOR-closest ones. A node `e` lies in the block of `bits` low bits iff
        // `bits >= 128 - lz(e ^ x)`, and every block is a run of `sorted` around the key's
        // position `p`, so the smallest sufficient `bits` is the k-th smallest of that need
        // over the 2k nodes around `p` (any sufficient block holds k of them:
        // one scan of 2k neighbouring entries instead of a binary search over block sizes).
        // Its ends are found by galloping out from `p` (a few cache lines near `p`).
        let p = self.position(x);
        let block_of = |bits: u32| -> (usize, usize) {
            let mask: u128 = if bits == 128 { 0 } else { u128::MAX << bits };
            let start = x & mask;
            let end = start | !mask;
            // First index with v >= start; everything from `hi` on is >= start.
            let a = {
                let (mut hi, mut step) = (p, 1usize);
                loop {
                    if hi == 0 {
                        break 0;
                    }
                    let lo = hi.saturating_sub(step);
                    if sorted[lo].0 < start {
                        break lo + 1 + sorted[lo + 1..hi].partition_point(|(v, _)| *v < start);
                    }
                    hi = lo;
                    step *= 2;
                }
            };
            // First index with v > end; everything before `lo` is <= end.
            let b = {
                let (mut lo, mut step) = (p, 1usize);
                loop {
                    let hi = (lo + step).min(sorted.len());
                    if hi == sorted.len() || sorted[hi].0 > end {
                        break lo + sorted[lo..hi].partition_point(|(v, _)| *v <= end);
                    }
                    lo = hi + 1;
                    step *= 2;
                }
            };
            (a, b)
        };
        let window = &sorted[p.saturating_sub(k)..(p + k).min(sorted.len())];
        let mut need = [0u32; 129];
        for (v, _) in window {
            need[128 - (v ^ x).leading_zeros() as usize] += 1;
        }
        let mut bits = 128u32;
        let mut seen = 0u32;
        for (b, c) in need.iter().enumerate() {
            seen += c;
            if seen as usize >= k {
                bits = b as u32;
                break;
            }
        }
        let (lo, hi) = block_of(bits);
        let mut block: Vec<(u128, u32)> = self.sorted[lo..hi].iter().map(|(v, i)| (v ^ x, *i)).collect();
        block.sort_unstable();
        block.truncate(k);
        block.into_iter().map(|(_, i)| i).collect()
    }

    pub fn provide(&mut self, key: NodeId, who: u32) {
        let v = self.providers.entry(key).or_default();
        if !v.contains(&who) {
            v.push(who);
        }
    }
    pub fn unprovide(&mut self, key: &NodeId, who: u32) {
        if let Some(v) = self.providers.get_mut(key) {
            v.retain(|x| *x != who);
        }
    }
    /// Up to `k` providers of `key`, a random sample if there are more.
    pub fn providers(&self, key: &NodeId, rng: &mut dyn RngCore) -> Vec<u32> {
        let Some(v) = self.providers.get(key) else { return Vec::new() };
        if v.len() <= self.k {
            return v.clone();
        }
        (0..self.k).map(|_| v[rng.gen_range(0..v.len())]).collect()
    }
}

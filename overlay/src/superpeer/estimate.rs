//! Each node's own estimate of the network size N, from the density of DHT ids.
//!
//! Seed 000 asks for "a predefined portion of super peers relative to the total number of
//! nodes", and no node knows the total. Ids are SHA-256 outputs, hence uniform on
//! `[0, 2^256)`. Take any key `x` and the `K` live nodes closest to it by XOR distance (what
//! a Kademlia closest-peers query returns, K = 20 in kad). The XOR distances `d_i / 2^256` of
//! the `N` nodes from `x` are themselves `N` independent uniforms on `[0, 1)` (XOR with a
//! fixed key is a bijection), so `u_K = d_K / 2^256`, the K-th smallest, is the K-th order
//! statistic of N uniforms and `E[1 / u_K] = N / (K - 1)`. Hence
//!
//! ```text
//!     N̂ = (K - 1) / u_K        (unbiased; relative standard deviation ≈ 1 / sqrt(K - 2))
//! ```
//!
//! With K = 20 one lookup is within about ±24% (one sigma); a node averages `L` lookups of
//! random keys (`estimate.samples`, default 16; see "Pooled samples" for whose), giving about ±6% (`1/sqrt(L (K-2))`). The
//! experiment reports the measured error. Distances are evaluated on the top 128 bits, which
//! is exact enough for any N below 2^100.
//!
//! **Thinning** (*ours*): a real Kademlia lookup returns the K closest
//! peers *that answered it*; a peer that timed out or refused the connection is left out and
//! the next one moves up. If each peer answers with probability `p`, independently of its
//! distance to the (uniform) key, the peers that answer are a uniform sample of `p x N` ids,
//! and the estimate above estimates `p x N`. The lookup's own statistics give `p̂`, the share
//! of the peers it asked that answered, so one lookup estimates `N̂ = (K - 1) / (u_K x p̂)`.
//! Measured in a 100-node swarm with emulated latency on a loaded machine (`peerage swarm
//! --nodes 100 --latency internet --superpeers tokens`, 797 lookups): the lookups missed 3.5
//! of the 20 closest peers on average, 18 % of the asked peers failed, and the mean estimate
//! was 80 without the correction and 98.5 with it (the true closest sets give 101). Peers that
//! crashed but still sit in routing tables count as non-answering, so after crashes the
//! corrected estimate is high by up to the share of dead entries. The simulator's DHT answers
//! every lookup (`p̂ = 1`).
//!
//! **Pooled samples** (*ours*): each lookup's `N̂_i` is an independent
//! estimate of the same N whoever made it, so nodes share them instead of each making all
//! `L` lookups. A node keeps up to [`PARALLEL_LOOKUPS`] (2) lookups running, topped
//! up once a round (so that what peers push meanwhile can make the next one unneeded), and
//! after each sends its pooled samples (its own first, at most [`MAX_SAMPLES_PER_MESSAGE`])
//! to [`PUSH_PEERS`] (4) random peers of that lookup's answer: peers it just
//! reached. Samples are told apart by their key's top 64 bits, so none counts twice.
//! **One sample of one's own neighbourhood**: the receivers of a push are among the peers
//! closest to the new sample's key, so a node receives many samples of keys near its own
//! id, and those measure the density of the same few ids (counting them all made the
//! estimates of 300 nodes spread 1.66 times as wide as eight independent lookups'). The
//! first sample of a message is the sender's new one; a node counts one such sample, and
//! leaves the others out (the samples the sender passes on behind it came from elsewhere).
//! A node decides on the mean of its first `L` or more distinct samples, its own or
//! shared, and starts no further lookup once it has them; a node nobody shares with (one
//! joining a network that decided long ago) makes all `L` itself, two at a time. Measured
//! (`overlay/tests/superpeer_estimate_pool.rs`, 300 nodes started together, lookups answered
//! and messages delivered in order): 3.1 lookups per node instead of 8, and the estimates
//! spread as independent ones do (coefficient of variation 0.083 against 0.077).
//! Why (200-node swarm): the 8-9 lookups per node of the estimate phase, each
//! dialling most of the ~20 peers nearest a random key, kept both cores busy with noise
//! handshakes for 140-340 s before any node decided. A sample received from a peer is
//! trusted as its other messages are; the range check ([`SizeSample::is_valid`]) bounds
//! what one bad sample can do to a mean of at least `L`.

//!
//! **Vicinity first** (*ours*): a node's first sample comes from its own routing table
//! ([`super::vicinity`]), with no lookup, tagged with its id; it pushes its pool to
//! [`PUSH_PEERS`] peers outside its vicinity, and again next round ([`VICINITY_PUSHES`]). A
//! receiver counts a first sample tagged with its sender's id as any other: the sender's
//! region is disjoint from the receiver's. Lookups make only the samples still missing
//! [`VICINITY_WAIT_ROUNDS`] later, or all of them when the table gives no sample. Why: made
//! of lookups, the estimate costs a 1,000-node swarm in one process 20 lookups per node, 19.5
//! of them failing on full connection gates and each retried, and keeps both cores busy.

use crate::id::NodeId;
use serde::{Deserialize, Serialize};

/// Top 128 bits of `a XOR b` as a fraction of the id space.
pub fn xor_fraction(a: &NodeId, b: &NodeId) -> f64 {
    let mut x = [0u8; 16];
    for (i, v) in x.iter_mut().enumerate() {
        *v = a.0[i] ^ b.0[i];
    }
    u128::from_be_bytes(x) as f64 / 2f64.powi(128)
}

/// One estimate of N from the `closest` peers returned for `key` (any order). `None` when
/// fewer than two peers came back or the farthest one sits on the key.
pub fn estimate_from_closest(key: &NodeId, closest: &[NodeId]) -> Option<f64> {
    if closest.len() < 2 {
        return None;
    }
    let far = closest.iter().map(|id| xor_fraction(key, id)).fold(0f64, f64::max);
    if far <= 0.0 {
        return None;
    }
    Some((closest.len() as f64 - 1.0) / far)
}

/// The smallest answered share a thinned estimate is made from: below it a lookup says too
/// little (the driver reports it failed and the node asks again).
pub const MIN_ANSWERED: f64 = 0.4;

/// The fewest peers a thinned estimate is made from when the lookup came back with fewer
/// than K because some of the asked peers failed (*ours*). Kad's lookup
/// asks the peers it discovers nearest the key until K of them answered; when too many of
/// those nearest peers refuse (full connection gates on a loaded swarm), it runs out of
/// candidates and returns the K' < K closest that answered. If a peer fails independently
/// of its distance to the (uniform) key, those are still the K' closest of a thinned uniform
/// sample, so `(K' - 1) / (u_K' x p̂)` stays unbiased, with a relative spread of about
/// `1 / sqrt(K' - 2)` (0.35 at 10) instead of 0.24 at 20. In a 200-node prefix swarm such
/// answers were 45 % of the estimate lookups; failing them (retried after a back-off) made the
/// last nodes decide their estimate 360 s into the run.
pub const MIN_SAMPLE_PEERS: usize = 10;

/// One estimate of N from the `closest` peers that answered a lookup of `key` in which the
/// share `answered` of the peers asked answered (see "Thinning"). `None` as for
/// [`estimate_from_closest`], or when `answered` is not in `[MIN_ANSWERED, 1]`.
pub fn estimate_from_thinned(key: &NodeId, closest: &[NodeId], answered: f64) -> Option<f64> {
    if !(MIN_ANSWERED..=1.0).contains(&answered) {
        return None;
    }
    estimate_from_closest(key, closest).map(|n| n / answered)
}

/// Largest N a shared sample may claim: far above any network (2^40 is about 10^12) and
/// finite, so one bad sample cannot overflow the mean.
pub const MAX_SAMPLE_N: f32 = 1.1e12;

/// Samples one [`SizeSamples`](super::SpMessage::SizeSamples) message carries at most.
pub const MAX_SAMPLES_PER_MESSAGE: usize = 8;

/// Sample lookups a node keeps running at once while undecided ("Pooled samples"): two, so
/// that what peers push between its lookups can make the next one unneeded.
pub const PARALLEL_LOOKUPS: u32 = 2;

/// Peers of each sample lookup's answer a node pushes its pooled samples to ("Pooled
/// samples"): four cut the lookups per node from 8 to about 3 with 300 nodes starting
/// together; peers just reached cost no new connection.
pub const PUSH_PEERS: usize = 4;

/// Times a node pushes its pool to peers outside its vicinity ("Vicinity first"): two
/// rounds of pushes to [`PUSH_PEERS`] peers give every node about `4 + 4 x 5` samples.
pub const VICINITY_PUSHES: u8 = 2;

/// Rounds a node waits for pushed samples after its vicinity sample before it looks up the
/// ones still missing ("Vicinity first"): nodes that start together push within a few
/// rounds, and a node that joins long after the others decided gets no pushes at all.
pub const VICINITY_WAIT_ROUNDS: u32 = 10;

/// Distinct samples a node pools before it decides (more are not stored).
pub const MAX_POOLED: usize = 32;

/// One single-lookup estimate of N, as nodes share it (see "Pooled samples").
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SizeSample {
    /// The top 64 bits of the lookup's random key: tells samples apart (two lookups draw the
    /// same 64 bits with probability 2^-64).
    pub tag: u64,
    /// That lookup's estimate of N, thinning corrected.
    pub n: f32,
}

impl SizeSample {
    /// Finite and within `[1, MAX_SAMPLE_N]`: what a well-formed lookup can give.
    pub fn is_valid(&self) -> bool {
        self.n.is_finite() && (1.0..=MAX_SAMPLE_N).contains(&self.n)
    }
}

/// The mean of distinct single-lookup estimates: the node's own and, until it freezes the
/// pool at its decision, the ones its peers shared (see "Pooled samples").
#[derive(Clone, Debug, Default)]
pub struct SizeEstimator {
    sum: f64,
    count: u32,
    /// The samples averaged so far, oldest first, until [`SizeEstimator::freeze`].
    pooled: Vec<SizeSample>,
    /// Tags of shared samples of our own id neighbourhood left out (see "Pooled samples").
    excluded: Vec<u64>,
    /// Whether one sample of our own id neighbourhood is counted.
    vicinity: bool,
    frozen: bool,
}

impl SizeEstimator {
    /// Adds one lookup's answer; ignores answers that give no estimate.
    pub fn add(&mut self, key: &NodeId, closest: &[NodeId]) -> Option<SizeSample> {
        self.add_thinned(key, closest, 1.0)
    }
    /// Adds one lookup's answer in which the share `answered` of the peers asked answered
    /// (see "Thinning"); ignores answers that give no estimate. Returns the sample it made,
    /// to be shared (also when it was not added: a frozen or full pool, a repeated key).
    pub fn add_thinned(&mut self, key: &NodeId, closest: &[NodeId], answered: f64) -> Option<SizeSample> {
        let n = estimate_from_thinned(key, closest, answered)?;
        let s = SizeSample { tag: key.high_u64(), n: n.min(f64::from(MAX_SAMPLE_N)).max(1.0) as f32 };
        if !self.frozen && !self.known(s.tag) {
            // Our own lookups always count; the pool keeps them while it has room.
            if self.pooled.len() < MAX_POOLED {
                self.pooled.push(s);
            }
            self.sum += f64::from(s.n);
            self.count += 1;
        }
        Some(s)
    }
    /// Adds our own vicinity sample of N (`super::vicinity`), tagged with our id's top 64
    /// bits, and returns it to be shared (also when it was not added: a frozen or full pool, a
    /// second view of the same table).
    pub fn add_vicinity(&mut self, me: &NodeId, n: f64) -> SizeSample {
        let s = SizeSample { tag: me.high_u64(), n: n.min(f64::from(MAX_SAMPLE_N)).max(1.0) as f32 };
        self.add_sample(s);
        s
    }
    /// Adds the samples `from` sent in one [`SizeSamples`](super::SpMessage::SizeSamples)
    /// message. Its first is the sender's new sample: of its own vicinity when tagged with
    /// the sender's id (pushed to peers outside that vicinity, it counts as any other), else
    /// of a key whose closest peers include us, which counts only if no such sample of our own
    /// neighbourhood counts yet. Returns how many counted.
    pub fn add_shared(&mut self, from: &NodeId, samples: &[SizeSample]) -> usize {
        let mut added = 0;
        for (i, s) in samples.iter().enumerate() {
            if i == 0 && s.tag != from.high_u64() && !self.frozen && s.is_valid() && !self.known(s.tag) {
                if self.vicinity {
                    if self.excluded.len() < MAX_POOLED {
                        self.excluded.push(s.tag);
                    }
                    continue;
                }
                self.vicinity = self.add_sample(*s);
                added += usize::from(self.vicinity);
                continue;
            }
            added += usize::from(self.add_sample(*s));
        }
        added
    }
    /// Adds one sample a peer shared. False when it is invalid, already counted or left
    /// out, or the pool is frozen or full.
    pub fn add_sample(&mut self, s: SizeSample) -> bool {
        if self.frozen || !s.is_valid() || self.pooled.len() >= MAX_POOLED || self.known(s.tag) {
            return false;
        }
        self.pooled.push(s);
        self.sum += f64::from(s.n);
        self.count += 1;
        true
    }
    fn known(&self, tag: u64) -> bool {
        self.pooled.iter().any(|p| p.tag == tag) || self.excluded.contains(&tag)
    }
    /// Number of estimates averaged so far.
    pub fn samples(&self) -> u32 {
        self.count
    }
    /// The current estimate of N (at least 1), if any sample came in.
    pub fn estimate(&self) -> Option<f64> {
        (self.count > 0).then(|| (self.sum / self.count as f64).max(1.0))
    }
    /// The newest `max` pooled samples, newest first (empty once frozen).
    pub fn newest(&self, max: usize) -> Vec<SizeSample> {
        self.pooled.iter().rev().take(max).copied().collect()
    }
    /// Keeps the estimate and stops pooling: the node decided, later samples change nothing.
    pub fn freeze(&mut self) {
        self.frozen = true;
        self.pooled = Vec::new();
        self.excluded = Vec::new();
    }
    /// Whether [`SizeEstimator::freeze`] was called.
    pub fn is_frozen(&self) -> bool {
        self.frozen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn estimator_is_close_on_uniform_ids() {
        let seed: u64 = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(7);
        println!("PEERAGE_SEED={seed}");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let n = 20_000usize;
        let ids: Vec<NodeId> = (0..n).map(|_| NodeId(rng.gen())).collect();
        let mut est = SizeEstimator::default();
        for _ in 0..32 {
            let key = NodeId(rng.gen());
            let mut by: Vec<&NodeId> = ids.iter().collect();
            by.sort_by(|a, b| xor_fraction(&key, a).total_cmp(&xor_fraction(&key, b)));
            let closest: Vec<NodeId> = by[..20].iter().map(|x| **x).collect();
            est.add(&key, &closest);
        }
        let e = est.estimate().unwrap();
        // 32 lookups of K=20: one sigma is about 4%; allow 5 sigma.
        assert!((e / n as f64 - 1.0).abs() < 0.2, "estimate {e} for n {n}");
    }

    /// Lookups that lose a share of the peers (they did not answer) underestimate N by that
    /// share unless corrected; the corrected estimate is close.
    #[test]
    fn thinned_lookups_are_corrected() {
        let seed: u64 = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(11);
        println!("PEERAGE_SEED={seed}");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let n = 20_000usize;
        let p = 0.7;
        let ids: Vec<NodeId> = (0..n).map(|_| NodeId(rng.gen())).collect();
        let (mut raw, mut fixed) = (SizeEstimator::default(), SizeEstimator::default());
        for _ in 0..64 {
            let key = NodeId(rng.gen());
            // Each peer answers this lookup with probability p.
            let mut up: Vec<&NodeId> = ids.iter().filter(|_| rng.gen_bool(p)).collect();
            up.sort_by(|a, b| xor_fraction(&key, a).total_cmp(&xor_fraction(&key, b)));
            let closest: Vec<NodeId> = up[..20].iter().map(|x| **x).collect();
            raw.add(&key, &closest);
            fixed.add_thinned(&key, &closest, p);
        }
        let (r, f) = (raw.estimate().unwrap() / n as f64, fixed.estimate().unwrap() / n as f64);
        // 64 lookups of K=20: one sigma is about 3%.
        assert!((f - 1.0).abs() < 0.15, "corrected estimate {f} x n");
        assert!((r - p).abs() < 0.15, "uncorrected estimate {r} x n (expected about {p})");
    }

    /// A lookup asks the peers nearest the key in order until K = 20 answered or the
    /// discovered ones (the nearest 30) ran out; each answers with probability p. Answers
    /// with K' < 20 peers (but at least [`MIN_SAMPLE_PEERS`]) corrected by the answered share
    /// among the asked estimate N without bias; uncorrected, they estimate about p x N.
    #[test]
    fn short_thinned_lookups_are_unbiased() {
        let seed: u64 = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(13);
        println!("PEERAGE_SEED={seed}");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let (n, p, discovered) = (2_000usize, 0.55, 30usize);
        let ids: Vec<NodeId> = (0..n).map(|_| NodeId(rng.gen())).collect();
        let (mut raw, mut fixed) = (SizeEstimator::default(), SizeEstimator::default());
        let (mut short, mut used) = (0, 0);
        for _ in 0..600 {
            let key = NodeId(rng.gen());
            let mut by: Vec<&NodeId> = ids.iter().collect();
            by.sort_by(|a, b| xor_fraction(&key, a).total_cmp(&xor_fraction(&key, b)));
            let (mut answered, mut asked) = (Vec::new(), 0usize);
            for id in by.iter().take(discovered) {
                asked += 1;
                if rng.gen_bool(p) {
                    answered.push(**id);
                    if answered.len() == 20 {
                        break;
                    }
                }
            }
            let share = answered.len() as f64 / asked as f64;
            if answered.len() < MIN_SAMPLE_PEERS || share < MIN_ANSWERED {
                continue;
            }
            used += 1;
            short += usize::from(answered.len() < 20);
            raw.add(&key, &answered);
            fixed.add_thinned(&key, &answered, share);
        }
        assert!(short * 3 >= used, "the test must exercise short answers: {short} of {used}");
        let (r, f) = (raw.estimate().unwrap() / n as f64, fixed.estimate().unwrap() / n as f64);
        // ~500 lookups of K' in 10..=20: one sigma is about 1.5 %.
        assert!((f - 1.0).abs() < 0.08, "corrected estimate {f} x n from {used} lookups ({short} short)");
        assert!(r < 0.8, "uncorrected estimate {r} x n (expected about {p})");
    }

    #[test]
    fn vicinity_samples_of_their_senders_all_count() {
        let (a, b, c, d) = (NodeId::from_u64(1), NodeId::from_u64(2), NodeId::from_u64(3), NodeId::from_u64(4));
        let mut e = SizeEstimator::default();
        let own = e.add_vicinity(&a, 1_000.0);
        assert_eq!(own.tag, a.high_u64());
        assert_eq!(e.add_vicinity(&a, 900.0), SizeSample { tag: a.high_u64(), n: 900.0 }, "returned again");
        assert_eq!(e.samples(), 1, "one table, one sample");
        // Each sender's own vicinity sample counts.
        let of = |id: &NodeId, n: f32| SizeSample { tag: id.high_u64(), n };
        assert_eq!(e.add_shared(&b, &[of(&b, 1_100.0)]), 1);
        assert_eq!(e.add_shared(&c, &[of(&c, 1_200.0)]), 1);
        // A first sample of another key: one sample of our own neighbourhood, then no more.
        let k1 = SizeSample { tag: 77, n: 950.0 };
        let k2 = SizeSample { tag: 78, n: 960.0 };
        assert_eq!(e.add_shared(&d, &[k1]), 1);
        assert_eq!(e.add_shared(&d, &[k2]), 0);
        assert_eq!(e.samples(), 4);
        assert_eq!(e.estimate(), Some((1_000.0 + 1_100.0 + 1_200.0 + 950.0) / 4.0));
    }

    #[test]
    fn implausible_answered_shares_give_nothing() {
        let key = NodeId::from_u64(1);
        let peers = [NodeId::from_u64(2), NodeId::from_u64(3)];
        assert!(estimate_from_thinned(&key, &peers, 1.0).is_some());
        for bad in [0.0, MIN_ANSWERED / 2.0, 1.5, f64::NAN, -1.0] {
            assert_eq!(estimate_from_thinned(&key, &peers, bad), None, "answered {bad}");
        }
    }

    #[test]
    fn degenerate_answers_give_nothing() {
        let k = NodeId::from_u64(5);
        assert_eq!(estimate_from_closest(&k, &[]), None);
        assert_eq!(estimate_from_closest(&k, &[k, k]), None);
        let mut e = SizeEstimator::default();
        e.add(&k, &[k]);
        assert_eq!(e.estimate(), None);
    }
}

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
//! random keys (`estimate_lookups`, default 8), giving about ±8.4% (`1/sqrt(L (K-2))`). The
//! experiment reports the measured error. Distances are evaluated on the top 128 bits, which
//! is exact enough for any N below 2^100.

use crate::id::NodeId;

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

/// The running mean of the single-lookup estimates a node has made.
#[derive(Clone, Debug, Default)]
pub struct SizeEstimator {
    sum: f64,
    count: u32,
}

impl SizeEstimator {
    /// Adds one lookup's answer; ignores answers that give no estimate.
    pub fn add(&mut self, key: &NodeId, closest: &[NodeId]) {
        if let Some(n) = estimate_from_closest(key, closest) {
            self.sum += n;
            self.count += 1;
        }
    }
    /// Number of estimates averaged so far.
    pub fn samples(&self) -> u32 {
        self.count
    }
    /// The current estimate of N (at least 1), if any sample came in.
    pub fn estimate(&self) -> Option<f64> {
        (self.count > 0).then(|| (self.sum / self.count as f64).max(1.0))
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

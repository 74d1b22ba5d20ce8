//! Random draws and hashes used by the latency model.
//!
//! Two continuous distributions (standard normal by the Box–Muller transform, exponential by
//! inversion) are written here rather than pulled from `rand_distr`: they are two lines each
//! and keep the crate's dependency set unchanged. Pair-specific effects of the model come from
//! [`pair_unit`], a stateless hash of `(min(a, b), max(a, b), seed, salt)` through the
//! SplitMix64 finaliser (Steele, Lea, Flood, "Fast splittable pseudorandom number
//! generators", OOPSLA 2014), so no per-pair state is ever stored and the value is symmetric.

use rand::{Rng, RngCore};

/// One standard normal draw (Box–Muller; uses two uniforms, returns one normal).
pub fn standard_normal(rng: &mut dyn RngCore) -> f64 {
    // u1 in (0, 1]: ln(u1) is finite.
    let u1 = 1.0 - rng.gen::<f64>();
    let u2 = rng.gen::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// One exponential draw with mean 1.
pub fn exponential(rng: &mut dyn RngCore) -> f64 {
    -(1.0 - rng.gen::<f64>()).ln()
}

/// The SplitMix64 finaliser: a bijective 64-bit mixer.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A symmetric hash of an unordered pair, a seed and a salt, mapped to `[0, 1)`.
pub fn pair_unit(a: u64, b: u64, seed: u64, salt: u64) -> f64 {
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let h = mix64(mix64(mix64(seed ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15)) ^ lo) ^ hi.rotate_left(17));
    // Top 53 bits -> [0, 1).
    (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn normal_and_exponential_moments() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| standard_normal(&mut rng)).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.01 && (var - 1.0).abs() < 0.02, "mean {mean} var {var}");
        let es: Vec<f64> = (0..n).map(|_| exponential(&mut rng)).collect();
        let emean = es.iter().sum::<f64>() / n as f64;
        assert!((emean - 1.0).abs() < 0.01 && es.iter().all(|&e| e >= 0.0 && e.is_finite()), "{emean}");
    }

    #[test]
    fn pair_hash_is_symmetric_uniform_and_seeded() {
        assert_eq!(pair_unit(3, 9, 1, 2), pair_unit(9, 3, 1, 2));
        assert_ne!(pair_unit(3, 9, 1, 2), pair_unit(3, 9, 2, 2));
        assert_ne!(pair_unit(3, 9, 1, 2), pair_unit(3, 9, 1, 3));
        let n = 100_000u64;
        let below = (0..n).filter(|&i| pair_unit(i, i + 1, 5, 0) < 0.1).count();
        let frac = below as f64 / n as f64;
        assert!((frac - 0.1).abs() < 0.005, "{frac}");
    }
}

//! A seeded model of Internet round-trip times, used by the simulator (message delays) and by
//! the local swarm's emulated transport (DEVELOPERS.md: `tc netem` is not available, latency
//! is emulated in our own transport layer), so both see the same network.
//!
//! # The model
//!
//! **Placement.** A handful of continent-scale [`Region`]s, each with a centre, a spread and
//! a weight (its share of Internet users). Each region gets `cities_per_region` cities drawn
//! around its centre (normal offsets of `spread_km` per axis); city sizes follow Zipf's law
//! within the region. Each node picks a city with probability proportional to its size and
//! sits at a normal offset of `metro_radius_km` from the city centre. Positions are points
//! on a sphere of the Earth's radius.
//!
//! **Base RTT** between nodes `a` and `b` (milliseconds):
//!
//! ```text
//! rtt(a, b) = 2 · gc(a, b) / v · I(city_a, city_b) · (1 ± noise(a, b))   propagation, both ways
//!           + access(a) + access(b)                                      last mile, each end
//!           then × D(a, b) for a `detour_fraction` of pairs               triangle violations
//! ```
//!
//! - `gc` is the great-circle distance, `v` the speed of light in fibre (200 km/ms, 2/3 c);
//! - `I` is a route-inflation factor in `[inflation_min, inflation_max]`, fixed per **city
//!   pair** (routes between two metros are shared by their hosts): a share
//!   `1 − inflation_pair_share` comes from the two cities' own connectivity (mean of a
//!   per-city draw), the rest from a per-city-pair draw;
//! - `noise` is a small per-node-pair perturbation (different ISPs, different routes);
//! - `access` is a per-node log-normal last-mile delay (the part Vivaldi's height models);
//! - `D` is a detour factor in `[detour_min, detour_max]` for a hashed `detour_fraction` of
//!   node pairs; these pairs violate the triangle inequality as badly routed pairs do.
//!
//! `rtt(a, a) = 0`; the model is symmetric (`one_way` is half the RTT).
//!
//! **Samples.** [`LatencyModel::sample_rtt`] adds exponential queueing delay with mean
//! `jitter_fraction · rtt + jitter_floor_ms` drawn from the **caller's** RNG, so a simulator's
//! run is replayable from its own seed.
//!
//! # Scale
//!
//! No N × N matrix: a node holds its position (3 × f64), its access delay (f32) and its city
//! (u16), [`LatencyModel::BYTES_PER_NODE`] = 30 bytes, so a million nodes take ~30 MB.
//! Pair-specific effects (`I`, `noise`, `D`) are recomputed from a stateless hash of
//! `(min(a, b), max(a, b), seed, salt)` ([`sample::pair_unit`]). Generation is one pass over
//! the nodes (a weighted city draw and three normal draws each).
//!
//! Parameter defaults and their sources are tabled in [`config`]. Simplifications we chose,
//! knowingly: no asymmetric routes; no time-varying congestion beyond per-sample jitter; the
//! detour hits the whole RTT of a pair, not one direction; cities are placed by a normal
//! draw around the region centre (some fall in the sea; only distances matter here).

pub mod config;
pub mod model;
pub mod sample;

pub use config::{LatencyError, ModelConfig, Region};
pub use model::LatencyModel;

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn seed() -> u64 {
        let s = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(7u64);
        eprintln!("seed {s} (replay with PEERAGE_SEED={s})");
        s
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    }

    #[test]
    fn same_seed_same_model_other_seed_other_model() {
        let s = seed();
        let a = LatencyModel::generate(2000, &ModelConfig::default(), s).unwrap();
        let b = LatencyModel::generate(2000, &ModelConfig::default(), s).unwrap();
        let c = LatencyModel::generate(2000, &ModelConfig::default(), s.wrapping_add(1)).unwrap();
        let mut differ = 0;
        for i in 0..500 {
            let j = (i * 7 + 3) % 2000;
            assert_eq!(a.rtt(i, j), b.rtt(i, j));
            assert_eq!(a.position(i), b.position(i));
            if a.rtt(i, j) != c.rtt(i, j) {
                differ += 1;
            }
        }
        assert!(differ > 450, "another seed should give another model ({differ} of 500 differ)");
        // Jitter is drawn from the caller's RNG: same RNG seed, same samples.
        let mut r1 = ChaCha8Rng::seed_from_u64(s);
        let mut r2 = ChaCha8Rng::seed_from_u64(s);
        for i in 0..100 {
            assert_eq!(a.sample_rtt(i, i + 1, &mut r1), a.sample_rtt(i, i + 1, &mut r2));
        }
    }

    #[test]
    fn symmetric_positive_and_jitter_only_adds() {
        let s = seed();
        let m = LatencyModel::generate(3000, &ModelConfig::default(), s).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(s);
        for _ in 0..5000 {
            let (a, b) = (rng.gen_range(0..3000), rng.gen_range(0..3000));
            assert_eq!(m.rtt(a, b), m.rtt(b, a));
            assert_eq!(m.one_way(a, b), m.one_way(b, a));
            if a == b {
                assert_eq!(m.rtt(a, b).as_nanos(), 0);
                continue;
            }
            assert!(m.rtt_ms(a, b) > 0.0 && m.rtt_ms(a, b) < 2000.0, "{}", m.rtt_ms(a, b));
            let sample = m.sample_rtt(a, b, &mut rng);
            assert!(sample >= m.rtt(a, b));
        }
        // Mean jitter matches the configured mean.
        let (a, b) = (0, 1);
        let base = m.rtt_ms(a, b);
        let n = 20_000;
        let mean_extra = (0..n).map(|_| m.sample_rtt_ms(a, b, &mut rng) - base).sum::<f64>() / n as f64;
        let want = 0.03 * base + 0.1;
        assert!((mean_extra - want).abs() < 0.05 * want, "jitter mean {mean_extra}, want {want}");
    }

    #[test]
    fn out_of_range_is_an_error() {
        let m = LatencyModel::generate(10, &ModelConfig::default(), 1).unwrap();
        assert!(matches!(m.try_rtt(0, 10), Err(LatencyError::NodeOutOfRange { index: 10, nodes: 10 })));
        assert!(m.try_rtt(9, 0).is_ok());
        let bad = ModelConfig { fibre_km_per_ms: -1.0, ..ModelConfig::default() };
        assert!(LatencyModel::generate(10, &bad, 1).is_err());
        let empty = LatencyModel::generate(0, &ModelConfig::default(), 1).unwrap();
        assert!(empty.is_empty());
        assert_eq!(empty.random_peer(0, &mut ChaCha8Rng::seed_from_u64(1)), None);
    }

    #[test]
    fn clustered_structure() {
        let s = seed();
        let n = 5000;
        let m = LatencyModel::generate(n, &ModelConfig::default(), s).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(s);
        let (mut same_city, mut same_region, mut other_region) = (vec![], vec![], vec![]);
        let mut tries = 0;
        while (same_city.len() < 300 || other_region.len() < 300 || same_region.len() < 300) && tries < 2_000_000 {
            tries += 1;
            let (a, b) = (rng.gen_range(0..n), rng.gen_range(0..n));
            if a == b {
                continue;
            }
            let r = m.rtt_ms(a, b);
            if m.city_of(a) == m.city_of(b) {
                same_city.push(r);
            } else if m.region_of(a) == m.region_of(b) {
                same_region.push(r);
            } else {
                other_region.push(r);
            }
        }
        let (c, rg, o) = (median(same_city), median(same_region), median(other_region));
        eprintln!("median RTT ms: same city {c:.1}, same region {rg:.1}, other region {o:.1}");
        assert!(c < 0.2 * o, "intra-city {c} should be far below inter-continent {o}");
        assert!(c < rg && rg < o, "{c} < {rg} < {o}");
        assert!(o > 80.0 && o < 400.0, "inter-continent median {o} ms out of the measured range");
        assert!(c > 2.0 && c < 30.0, "intra-city median {c} ms out of the measured range");
        // Positions are on the map, and nodes of the same city are close together.
        for a in 0..n {
            let (lon, lat) = m.position(a);
            assert!((-180.0..=180.0).contains(&lon) && (-90.0..=90.0).contains(&lat));
        }
    }

    #[test]
    fn detour_fraction_and_triangle_violations_within_bounds() {
        let s = seed();
        let n = 4000;
        let cfg = ModelConfig::default();
        let m = LatencyModel::generate(n, &cfg, s).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(s);
        let pairs = 100_000;
        let detours = (0..pairs)
            .filter(|_| {
                let a = rng.gen_range(0..n);
                let b = m.random_peer(a, &mut rng).unwrap();
                m.is_detour(a, b)
            })
            .count();
        let frac = detours as f64 / pairs as f64;
        // Binomial sd at p = 0.05, 1e5 pairs is 0.0007; allow 5 sd.
        assert!((frac - cfg.detour_fraction).abs() < 0.0035, "detour fraction {frac}");

        let violation_rate = |m: &LatencyModel, rng: &mut ChaCha8Rng| {
            let trials = 100_000;
            let mut v = 0;
            for _ in 0..trials {
                let (a, b, c) = (rng.gen_range(0..n), rng.gen_range(0..n), rng.gen_range(0..n));
                if a == b || b == c || a == c {
                    continue;
                }
                if m.rtt_ms(a, b) > m.rtt_ms(a, c) + m.rtt_ms(c, b) + 1e-9 {
                    v += 1;
                }
            }
            v as f64 / trials as f64
        };
        let with = violation_rate(&m, &mut rng);
        eprintln!("triangle violations (edge a-b longer than via c): {with:.4}");
        assert!(with > 0.001 && with < 0.10, "violation rate {with}");
        // The metric configuration (no detours, constant inflation, no noise) has none.
        let metric = LatencyModel::generate(n, &ModelConfig::metric(), s).unwrap();
        assert_eq!(violation_rate(&metric, &mut rng), 0.0);
        // More detours, more violations.
        let more = LatencyModel::generate(n, &ModelConfig { detour_fraction: 0.3, ..cfg }, s).unwrap();
        let with_more = violation_rate(&more, &mut rng);
        assert!(with_more > 2.0 * with, "{with_more} vs {with}");
    }

    #[test]
    fn generation_scales_with_small_memory() {
        let m = LatencyModel::generate(200_000, &ModelConfig::default(), 3).unwrap();
        assert_eq!(m.len(), 200_000);
        // Cities are populated roughly by weight: East Asia (0.25) outnumbers Oceania (0.01).
        let count = |r: usize| (0..m.len()).filter(|&a| m.region_of(a) == r).count() as f64 / m.len() as f64;
        let (east_asia, oceania) = (count(6), count(8));
        assert!((east_asia - 0.25).abs() < 0.01 && (oceania - 0.01).abs() < 0.003, "{east_asia} {oceania}");
    }
}

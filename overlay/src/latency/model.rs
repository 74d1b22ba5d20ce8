//! [`LatencyModel`]: node placement and the RTT formula (see the [module](super) docs).

use super::config::{LatencyError, ModelConfig, MAX_CITIES};
use super::sample::{exponential, pair_unit, standard_normal};
use rand::distributions::{Distribution, WeightedIndex};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

/// Mean Earth radius, km.
pub const EARTH_RADIUS_KM: f64 = 6371.0;
/// Kilometres per degree of latitude.
const KM_PER_DEGREE: f64 = std::f64::consts::PI * EARTH_RADIUS_KM / 180.0;
/// The most nodes a model holds (node indices are hashed as `u64`, memory is ~32 B a node).
pub const MAX_NODES: usize = 1 << 28;

// Salts separating the independent pair-specific effects.
const SALT_INFLATION: u64 = 1;
const SALT_NOISE: u64 = 2;
const SALT_DETOUR: u64 = 3;
const SALT_DETOUR_SIZE: u64 = 4;
const SALT_CITY_INFLATION: u64 = 5;

// The per-node budget promised in the module docs (a million nodes in ~30 MB).
const _: () = assert!(LatencyModel::BYTES_PER_NODE <= 32);

/// A city: where it is and which region it belongs to.
#[derive(Clone, Copy, Debug)]
struct City {
    xyz: [f64; 3],
    region: u8,
}

/// A seeded, deterministic model of Internet round-trip times between `n` nodes.
#[derive(Clone, Debug)]
pub struct LatencyModel {
    config: ModelConfig,
    seed: u64,
    cities: Vec<City>,
    /// Unit vectors on the sphere, one per node.
    xyz: Vec<[f64; 3]>,
    /// Access-link share of the RTT, ms, one per node.
    access_ms: Vec<f32>,
    /// City index, one per node.
    city: Vec<u16>,
}

fn to_xyz(lat_deg: f64, lon_deg: f64) -> [f64; 3] {
    let (lat, lon) = (lat_deg.to_radians(), lon_deg.to_radians());
    [lat.cos() * lon.cos(), lat.cos() * lon.sin(), lat.sin()]
}

fn to_lat_lon(p: &[f64; 3]) -> (f64, f64) {
    (p[2].clamp(-1.0, 1.0).asin().to_degrees(), p[1].atan2(p[0]).to_degrees())
}

/// A point `north_km`, `east_km` away from `(lat, lon)` (local flat approximation, adequate
/// for offsets of a few thousand km; latitude clamped short of the poles).
fn offset(lat: f64, lon: f64, north_km: f64, east_km: f64) -> (f64, f64) {
    let lat2 = (lat + north_km / KM_PER_DEGREE).clamp(-85.0, 85.0);
    let coslat = lat.to_radians().cos().max(0.05);
    let mut lon2 = lon + east_km / (KM_PER_DEGREE * coslat);
    lon2 = (lon2 + 180.0).rem_euclid(360.0) - 180.0;
    (lat2, lon2)
}

/// Great-circle distance between two unit vectors, km.
fn great_circle_km(p: &[f64; 3], q: &[f64; 3]) -> f64 {
    let chord = ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2) + (p[2] - q[2]).powi(2)).sqrt();
    2.0 * EARTH_RADIUS_KM * (chord / 2.0).min(1.0).asin()
}

impl LatencyModel {
    /// Places `n` nodes. Same `(n, config, seed)`, same model, on every machine.
    pub fn generate(n: usize, config: &ModelConfig, seed: u64) -> Result<LatencyModel, LatencyError> {
        config.validate()?;
        if n > MAX_NODES {
            return Err(LatencyError::TooManyNodes { nodes: n, max: MAX_NODES });
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let per = config.cities_per_region as usize;
        let mut cities = Vec::with_capacity(config.regions.len() * per);
        let mut city_weights = Vec::with_capacity(cities.capacity());
        for (r, region) in config.regions.iter().enumerate() {
            for rank in 0..per {
                let (lat, lon) = offset(
                    region.lat,
                    region.lon,
                    region.spread_km * standard_normal(&mut rng),
                    region.spread_km * standard_normal(&mut rng),
                );
                cities.push(City { xyz: to_xyz(lat, lon), region: r as u8 });
                // Zipf within the region; the region's weight split over its cities.
                let zipf = 1.0 / ((rank + 1) as f64).powf(config.city_zipf_exponent);
                city_weights.push(region.weight * zipf);
            }
        }
        let zipf_norm: f64 = (0..per).map(|k| 1.0 / ((k + 1) as f64).powf(config.city_zipf_exponent)).sum();
        city_weights.iter_mut().for_each(|w| *w /= zipf_norm);
        debug_assert!(cities.len() <= MAX_CITIES);
        let pick = WeightedIndex::new(&city_weights).map_err(|e| LatencyError::Config {
            field: "regions.weight",
            problem: format!("cannot sample cities: {e}"),
        })?;

        let mut xyz = Vec::with_capacity(n);
        let mut access_ms = Vec::with_capacity(n);
        let mut city = Vec::with_capacity(n);
        for _ in 0..n {
            let c = pick.sample(&mut rng);
            let (clat, clon) = to_lat_lon(&cities[c].xyz);
            let (lat, lon) = offset(
                clat,
                clon,
                config.metro_radius_km * standard_normal(&mut rng),
                config.metro_radius_km * standard_normal(&mut rng),
            );
            xyz.push(to_xyz(lat, lon));
            let access = config.access_median_ms * (config.access_sigma * standard_normal(&mut rng)).exp();
            access_ms.push(access.min(config.access_max_ms) as f32);
            city.push(c as u16);
        }
        Ok(LatencyModel { config: config.clone(), seed, cities, xyz, access_ms, city })
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.xyz.len()
    }

    /// True when the model has no nodes.
    pub fn is_empty(&self) -> bool {
        self.xyz.is_empty()
    }

    /// The configuration the model was generated from.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Bytes held per node (all per-node vectors), for the memory budget.
    pub const BYTES_PER_NODE: usize =
        std::mem::size_of::<[f64; 3]>() + std::mem::size_of::<f32>() + std::mem::size_of::<u16>();

    /// `(longitude, latitude)` in degrees, for plots. Panics if `a` is out of range.
    pub fn position(&self, a: usize) -> (f64, f64) {
        let (lat, lon) = to_lat_lon(&self.xyz[a]);
        (lon, lat)
    }

    /// The node's city index. Panics if `a` is out of range.
    pub fn city_of(&self, a: usize) -> usize {
        self.city[a] as usize
    }

    /// The node's region index (into `config().regions`). Panics if `a` is out of range.
    pub fn region_of(&self, a: usize) -> usize {
        self.cities[self.city[a] as usize].region as usize
    }

    /// The node's access-link share of every RTT it takes part in, ms.
    pub fn access_ms(&self, a: usize) -> f64 {
        self.access_ms[a] as f64
    }

    /// True when the pair `(a, b)` is one of the detoured (triangle-violating) pairs.
    pub fn is_detour(&self, a: usize, b: usize) -> bool {
        a != b && pair_unit(a as u64, b as u64, self.seed, SALT_DETOUR) < self.config.detour_fraction
    }

    /// Deterministic base RTT in milliseconds. Panics if an index is out of range.
    pub fn rtt_ms(&self, a: usize, b: usize) -> f64 {
        if a == b {
            // Bounds check only.
            let _ = (&self.xyz[a], &self.xyz[b]);
            return 0.0;
        }
        let cfg = &self.config;
        let (ca, cb) = (self.city[a] as u64, self.city[b] as u64);
        let km = great_circle_km(&self.xyz[a], &self.xyz[b]);
        // Mostly a property of each city's connectivity (mean of the two ends), partly of
        // the city pair's route.
        let ends = (pair_unit(ca, ca, self.seed, SALT_CITY_INFLATION)
            + pair_unit(cb, cb, self.seed, SALT_CITY_INFLATION))
            / 2.0;
        let route = pair_unit(ca, cb, self.seed, SALT_INFLATION);
        let share = cfg.inflation_pair_share;
        let city_inflation =
            cfg.inflation_min + (cfg.inflation_max - cfg.inflation_min) * ((1.0 - share) * ends + share * route);
        let noise = 1.0 + cfg.pair_noise * (2.0 * pair_unit(a as u64, b as u64, self.seed, SALT_NOISE) - 1.0);
        let propagation = 2.0 * km / cfg.fibre_km_per_ms * city_inflation * noise;
        let mut rtt = propagation + self.access_ms[a] as f64 + self.access_ms[b] as f64;
        if self.is_detour(a, b) {
            let u = pair_unit(a as u64, b as u64, self.seed, SALT_DETOUR_SIZE);
            rtt *= cfg.detour_min + (cfg.detour_max - cfg.detour_min) * u;
        }
        rtt
    }

    /// Deterministic base RTT. Panics if an index is out of range (see [`try_rtt`](Self::try_rtt)).
    pub fn rtt(&self, a: usize, b: usize) -> Duration {
        Duration::from_secs_f64(self.rtt_ms(a, b) / 1000.0)
    }

    /// [`rtt`](Self::rtt) with a range check instead of a panic.
    pub fn try_rtt(&self, a: usize, b: usize) -> Result<Duration, LatencyError> {
        self.check(a)?;
        self.check(b)?;
        Ok(self.rtt(a, b))
    }

    /// The largest base RTT between two nodes, ms (every pair: O(n²), about 0.1 s at
    /// n = 1,000). A bound for one message's one-way delay with queueing up to as much again.
    pub fn largest_rtt_ms(&self) -> f64 {
        let n = self.len();
        (0..n).flat_map(|a| (a + 1..n).map(move |b| (a, b))).map(|(a, b)| self.rtt_ms(a, b)).fold(0.0, f64::max)
    }

    /// One-way delay: half the base RTT (the model is symmetric).
    pub fn one_way(&self, a: usize, b: usize) -> Duration {
        Duration::from_secs_f64(self.rtt_ms(a, b) / 2000.0)
    }

    /// One RTT measurement: the base RTT plus exponential queueing delay with mean
    /// `jitter_fraction · rtt + jitter_floor_ms`, drawn from the caller's RNG.
    pub fn sample_rtt_ms(&self, a: usize, b: usize, rng: &mut dyn RngCore) -> f64 {
        let base = self.rtt_ms(a, b);
        if a == b {
            return 0.0;
        }
        self.jittered_ms(base, rng)
    }

    /// [`sample_rtt_ms`](Self::sample_rtt_ms) of two distinct nodes whose base RTT `base`
    /// (`rtt_ms(a, b)`) the caller already has, e.g. a simulator that samples the same pairs
    /// round after round: the same number from the same RNG draws.
    pub fn jittered_ms(&self, base: f64, rng: &mut dyn RngCore) -> f64 {
        let mean = self.config.jitter_fraction * base + self.config.jitter_floor_ms;
        base + mean * exponential(rng)
    }

    /// [`sample_rtt_ms`](Self::sample_rtt_ms) as a [`Duration`].
    pub fn sample_rtt(&self, a: usize, b: usize, rng: &mut dyn RngCore) -> Duration {
        Duration::from_secs_f64(self.sample_rtt_ms(a, b, rng) / 1000.0)
    }

    /// One message's one-way delay: half a sampled RTT (queueing assumed evenly split).
    pub fn sample_one_way(&self, a: usize, b: usize, rng: &mut dyn RngCore) -> Duration {
        Duration::from_secs_f64(self.sample_rtt_ms(a, b, rng) / 2000.0)
    }

    /// A uniformly random node other than `a` (for experiments); `None` if there is none.
    pub fn random_peer(&self, a: usize, rng: &mut dyn RngCore) -> Option<usize> {
        let n = self.len();
        if n < 2 {
            return None;
        }
        let j = rng.gen_range(0..n - 1);
        Some(if j >= a { j + 1 } else { j })
    }

    fn check(&self, a: usize) -> Result<(), LatencyError> {
        if a < self.len() {
            Ok(())
        } else {
            Err(LatencyError::NodeOutOfRange { index: a, nodes: self.len() })
        }
    }
}

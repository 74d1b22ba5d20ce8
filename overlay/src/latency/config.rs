//! Parameters of the Internet latency model, their default values and where they come from.
//!
//! | parameter | default | source / reasoning |
//! |---|---|---|
//! | regions (centre, spread, weight) | 9 regions, weights ≈ share of Internet users | ITU *Facts and Figures 2023* (users by region: Asia-Pacific ≈ half, Europe ≈ 14 %, Americas ≈ 20 %, Africa ≈ 11 %, Arab States ≈ 5 %); centres are rough population centroids |
//! | `cities_per_region` | 24 | enough distinct metros per region that same-city pairs are a small minority |
//! | `city_zipf_exponent` | 1.0 | Zipf's law for city sizes (Gabaix, QJE 1999) |
//! | `metro_radius_km` | 25 | standard deviation of a node's distance from its city centre: a metropolitan area |
//! | `fibre_km_per_ms` | 200 | light in fibre travels at about 2/3 c ≈ 200 km per ms (refractive index ≈ 1.47) |
//! | `inflation_min..max` | 1.3 .. 2.2 | fibre routes are longer than great circles and not all pairs are directly connected: Singla et al., "The Internet at the speed of light" (HotNets 2014) measure median RTTs ≈ 3× the c-latency, i.e. ≈ 2× the 2/3 c fibre latency, with wide spread |
//! | `inflation_pair_share` | 0.25 | how the inflation is drawn inside that range: 75 % from the two cities' own connectivity (the mean of a per-city draw for each end: a well-peered metro is well connected to everyone), 25 % from a per-city-pair draw (that route's own detours). Our reading of Lee et al. (ToN 2010) and Ledlie et al. (NSDI 2007), who find that most non-Euclidean error sits at the edges (access and peering) rather than in arbitrary pairs |
//! | `pair_noise` | 0.05 | ± 5 % per node pair: different access ISPs of two hosts in the same cities take different routes |
//! | `access_median_ms`, `access_sigma` | 3 ms, 0.7 (log-normal) | last-mile share of a host's RTT, capped at `access_max_ms` = 80 ms. Our choice, on the low side: FCC *Measuring Broadband America* reports idle RTTs to the nearest test server of roughly 10 ms on fibre and 15–30 ms on cable/DSL, but those include the server side and metro distance; the log-normal tail (p90 ≈ 7.4 ms, p99 ≈ 15 ms) stands for DSL/mobile hosts. A higher median (8 ms) was measured too: docs/RESULTS.md |
//! | `detour_fraction`, `detour_min..max` | 5 %, ×1.3 .. ×2.5 | triangle-inequality violations: Zheng et al. (PAM 2005) and Lumezanu et al. (IMC 2009) find a few to tens of per cent of triangles violated in measured RTT sets, caused by a minority of badly routed pairs |
//! | `jitter_fraction`, `jitter_floor_ms` | 3 %, 0.1 ms | per-sample queueing delay, exponential: mean `3 % · RTT + 0.1 ms` |

use serde::{Deserialize, Serialize};

/// A continent-scale region in which cities are drawn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Region {
    pub name: String,
    /// Centre latitude, degrees (-90..90).
    pub lat: f64,
    /// Centre longitude, degrees (-180..180).
    pub lon: f64,
    /// Standard deviation of city positions around the centre, km.
    pub spread_km: f64,
    /// Share of nodes (relative; weights need not sum to 1).
    pub weight: f64,
}

impl Region {
    fn new(name: &str, lat: f64, lon: f64, spread_km: f64, weight: f64) -> Region {
        Region { name: name.to_string(), lat, lon, spread_km, weight }
    }
}

/// All parameters of [`LatencyModel`](super::LatencyModel); see the module table for sources.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    pub regions: Vec<Region>,
    pub cities_per_region: u32,
    pub city_zipf_exponent: f64,
    pub metro_radius_km: f64,
    pub fibre_km_per_ms: f64,
    pub inflation_min: f64,
    pub inflation_max: f64,
    pub inflation_pair_share: f64,
    pub pair_noise: f64,
    pub access_median_ms: f64,
    pub access_sigma: f64,
    pub access_max_ms: f64,
    pub detour_fraction: f64,
    pub detour_min: f64,
    pub detour_max: f64,
    pub jitter_fraction: f64,
    pub jitter_floor_ms: f64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            regions: vec![
                Region::new("North America", 39.0, -95.0, 1500.0, 0.10),
                Region::new("South America", -15.0, -55.0, 1500.0, 0.09),
                Region::new("Europe", 50.0, 10.0, 900.0, 0.15),
                Region::new("Africa", 3.0, 20.0, 2000.0, 0.11),
                Region::new("Middle East", 28.0, 45.0, 900.0, 0.05),
                Region::new("South Asia", 22.0, 79.0, 900.0, 0.17),
                Region::new("East Asia", 33.0, 115.0, 1200.0, 0.25),
                Region::new("Southeast Asia", 5.0, 108.0, 1200.0, 0.07),
                Region::new("Oceania", -30.0, 145.0, 1000.0, 0.01),
            ],
            cities_per_region: 24,
            city_zipf_exponent: 1.0,
            metro_radius_km: 25.0,
            fibre_km_per_ms: 200.0,
            inflation_min: 1.3,
            inflation_max: 2.2,
            inflation_pair_share: 0.25,
            pair_noise: 0.05,
            access_median_ms: 3.0,
            access_sigma: 0.7,
            access_max_ms: 80.0,
            detour_fraction: 0.05,
            detour_min: 1.3,
            detour_max: 2.5,
            jitter_fraction: 0.03,
            jitter_floor_ms: 0.1,
        }
    }
}

/// Why a [`ModelConfig`] (or a request to the model) was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LatencyError {
    #[error("latency model: {field} {problem}")]
    Config { field: &'static str, problem: String },
    #[error("latency model: node {index} out of range (model has {nodes} nodes)")]
    NodeOutOfRange { index: usize, nodes: usize },
    #[error("latency model: {nodes} nodes requested, at most {max} supported")]
    TooManyNodes { nodes: usize, max: usize },
}

/// The most cities the model supports (city indices are `u16`).
pub const MAX_CITIES: usize = u16::MAX as usize;

impl ModelConfig {
    /// A model with no randomness in the pair effects: constant inflation, no per-pair noise,
    /// no detours, no jitter. Its RTTs are a metric (useful to test embeddings).
    pub fn metric() -> ModelConfig {
        ModelConfig {
            inflation_min: 1.5,
            inflation_max: 1.5,
            pair_noise: 0.0,
            detour_fraction: 0.0,
            jitter_fraction: 0.0,
            jitter_floor_ms: 0.0,
            ..ModelConfig::default()
        }
    }

    /// Checks every field; returns the first problem found.
    pub fn validate(&self) -> Result<(), LatencyError> {
        let err = |field: &'static str, problem: String| Err(LatencyError::Config { field, problem });
        if self.regions.is_empty() {
            return err("regions", "must not be empty".into());
        }
        if self.regions.len() > u8::MAX as usize {
            return err("regions", format!("at most {} regions, got {}", u8::MAX, self.regions.len()));
        }
        for r in &self.regions {
            if !(r.lat.is_finite() && (-90.0..=90.0).contains(&r.lat)) {
                return err("regions.lat", format!("of {:?} must be in [-90, 90], got {}", r.name, r.lat));
            }
            if !(r.lon.is_finite() && (-180.0..=180.0).contains(&r.lon)) {
                return err("regions.lon", format!("of {:?} must be in [-180, 180], got {}", r.name, r.lon));
            }
            if !(r.spread_km.is_finite() && (0.0..=20_000.0).contains(&r.spread_km)) {
                return err("regions.spread_km", format!("of {:?} must be in [0, 20000], got {}", r.name, r.spread_km));
            }
            if !(r.weight.is_finite() && r.weight >= 0.0) {
                return err("regions.weight", format!("of {:?} must be finite and >= 0, got {}", r.name, r.weight));
            }
        }
        if !self.regions.iter().any(|r| r.weight > 0.0) {
            return err("regions.weight", "at least one region needs a positive weight".into());
        }
        let cities = self.regions.len() * self.cities_per_region as usize;
        if self.cities_per_region == 0 || cities > MAX_CITIES {
            return err(
                "cities_per_region",
                format!("must be >= 1 with at most {MAX_CITIES} cities in all, got {cities}"),
            );
        }
        let range = |field: &'static str, v: f64, lo: f64, hi: f64| {
            if v.is_finite() && v >= lo && v <= hi {
                Ok(())
            } else {
                err(field, format!("must be in [{lo}, {hi}], got {v}"))
            }
        };
        range("city_zipf_exponent", self.city_zipf_exponent, 0.0, 5.0)?;
        range("metro_radius_km", self.metro_radius_km, 0.0, 1000.0)?;
        range("fibre_km_per_ms", self.fibre_km_per_ms, 1.0, 300.0)?;
        range("inflation_min", self.inflation_min, 1.0, 10.0)?;
        range("inflation_max", self.inflation_max, self.inflation_min, 10.0)?;
        range("inflation_pair_share", self.inflation_pair_share, 0.0, 1.0)?;
        range("pair_noise", self.pair_noise, 0.0, 0.5)?;
        range("access_median_ms", self.access_median_ms, 0.0, 1000.0)?;
        range("access_sigma", self.access_sigma, 0.0, 3.0)?;
        range("access_max_ms", self.access_max_ms, 0.0, 2000.0)?;
        range("detour_fraction", self.detour_fraction, 0.0, 1.0)?;
        range("detour_min", self.detour_min, 1.0, 10.0)?;
        range("detour_max", self.detour_max, self.detour_min, 10.0)?;
        range("jitter_fraction", self.jitter_fraction, 0.0, 1.0)?;
        range("jitter_floor_ms", self.jitter_floor_ms, 0.0, 100.0)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_valid_and_bad_values_refused() {
        assert_eq!(ModelConfig::default().validate(), Ok(()));
        assert_eq!(ModelConfig::metric().validate(), Ok(()));
        let bad = |f: fn(&mut ModelConfig)| {
            let mut c = ModelConfig::default();
            f(&mut c);
            c.validate()
        };
        assert!(matches!(bad(|c| c.regions.clear()), Err(LatencyError::Config { field: "regions", .. })));
        assert!(matches!(bad(|c| c.regions[0].lat = 91.0), Err(LatencyError::Config { field: "regions.lat", .. })));
        assert!(matches!(
            bad(|c| c.regions.iter_mut().for_each(|r| r.weight = 0.0)),
            Err(LatencyError::Config { field: "regions.weight", .. })
        ));
        assert!(matches!(
            bad(|c| c.cities_per_region = 0),
            Err(LatencyError::Config { field: "cities_per_region", .. })
        ));
        assert!(matches!(
            bad(|c| c.cities_per_region = 100_000),
            Err(LatencyError::Config { field: "cities_per_region", .. })
        ));
        assert!(matches!(bad(|c| c.inflation_max = 1.0), Err(LatencyError::Config { field: "inflation_max", .. })));
        assert!(matches!(
            bad(|c| c.detour_fraction = f64::NAN),
            Err(LatencyError::Config { field: "detour_fraction", .. })
        ));
        assert!(matches!(bad(|c| c.fibre_km_per_ms = 0.0), Err(LatencyError::Config { field: "fibre_km_per_ms", .. })));
    }

    #[test]
    fn serde_round_trip() {
        let c = ModelConfig::default();
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<ModelConfig>(&json).unwrap(), c);
        let partial: ModelConfig = serde_json::from_str(r#"{"detour_fraction": 0.1}"#).unwrap();
        assert_eq!(partial.detour_fraction, 0.1);
        assert_eq!(partial.regions.len(), 9);
        assert!(serde_json::from_str::<ModelConfig>(r#"{"detours": 0.1}"#).is_err());
    }
}

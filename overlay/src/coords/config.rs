//! Tuning parameters of the Vivaldi coordinate client, with validation.
//!
//! The defaults are those of hashicorp/serf's `coordinate` package (the production system we
//! measure ourselves against), which in turn takes them from the papers:
//!
//! - `vivaldi_ce = vivaldi_cc = 0.25`: Dabek et al., "Vivaldi: a decentralized network
//!   coordinate system", SIGCOMM 2004, section 3 (adaptive timestep `δ = cc · w`, error
//!   estimate with `ce`).
//! - `dimensionality = 8` plus a height: Ledlie, Gardner, Seltzer, "Network coordinates in the
//!   wild", NSDI 2007 (few dimensions plus a height; no gain past about 7 dimensions).
//! - `latency_filter_size = 3` (moving median) and `gravity_rho = 150 ms`: Ledlie et al. 2007.
//! - `adjustment_window = 20`: Lee et al., "On suitability of Euclidean embedding for host-based
//!   network coordinate systems", IEEE/ACM ToN 18(1), 2010.
//! - `height_min = 10 µs`, `vivaldi_error_max = 1.5`: Serf's choices.
//!
//! - `outlier_factor = 1.5`, `outlier_floor = 0.2`: ours, not Serf's (see
//!   [`client`](super::client) step 3); [`VivaldiConfig::serf`] turns it off. Chosen by the
//!   `vivaldi_error` experiment: factors 1.25 to 1.5 and floors 0.15 to 0.3
//!   all beat Serf; a factor must exceed 1 or the gate can lock itself shut (the error
//!   estimate converges to the samples' error, never above it), so validation refuses
//!   factors in (0, 1.1).
//!
//! Choices of our own (Serf has no such limits): the dimensionality is capped at
//! [`MAX_DIMENSIONS`] so that a [`Coordinate`](super::Coordinate) is a fixed-size `Copy` value;
//! the latency filter tracks at most `latency_filter_peers` peers (least recently updated one
//! evicted), so a node's memory does not grow with the number of peers it ever pinged.

use serde::{Deserialize, Serialize};

/// The largest supported dimensionality (Serf's default; Ledlie et al. saw no gain beyond ~7).
pub const MAX_DIMENSIONS: usize = 8;

/// The largest adjustment window we accept (keeps per-node memory bounded).
pub const MAX_ADJUSTMENT_WINDOW: u16 = 256;

/// The largest latency filter (samples per peer) we accept.
pub const MAX_LATENCY_FILTER_SIZE: u8 = 16;

/// The largest number of peers whose latency filters a client keeps.
pub const MAX_LATENCY_FILTER_PEERS: u16 = 1024;

/// Parameters of a [`VivaldiClient`](super::VivaldiClient). Times are in seconds, as in Serf.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VivaldiConfig {
    /// Number of Euclidean dimensions (1..=[`MAX_DIMENSIONS`]); a height is always added.
    pub dimensionality: usize,
    /// Error estimate of a fresh coordinate, and the cap on the error estimate.
    pub vivaldi_error_max: f64,
    /// Largest weight one observation has on the error estimate (Vivaldi's `ce`).
    pub vivaldi_ce: f64,
    /// Largest weight one observation has on the coordinate (Vivaldi's `cc`).
    pub vivaldi_cc: f64,
    /// Observations averaged into the adjustment term; 0 turns the adjustment off.
    pub adjustment_window: u16,
    /// Smallest height, seconds (must be > 0: a height is an access-link delay).
    pub height_min: f64,
    /// RTT samples per peer in the moving-median latency filter; 1 turns the filter off.
    pub latency_filter_size: u8,
    /// Peers whose filters are kept at once (least recently updated one evicted).
    pub latency_filter_peers: u16,
    /// Gravity toward the origin, seconds; the pull is `(distance / rho)²`. 0 turns gravity off.
    pub gravity_rho: f64,
    /// Outlier gate (ours): a sample that is longer than predicted by a relative error
    /// `(rtt − predicted) / rtt` above both `outlier_floor` and `outlier_factor` times the
    /// node's error estimate does not move the coordinate. 0 turns the gate off (Serf's
    /// behaviour); otherwise it must be at least 1.1 (below 1 the gate can lock itself shut).
    pub outlier_factor: f64,
    /// Relative errors at or below this are never gated.
    pub outlier_floor: f64,
}

impl Default for VivaldiConfig {
    fn default() -> Self {
        VivaldiConfig {
            dimensionality: 8,
            vivaldi_error_max: 1.5,
            vivaldi_ce: 0.25,
            vivaldi_cc: 0.25,
            adjustment_window: 20,
            height_min: 10.0e-6,
            latency_filter_size: 3,
            latency_filter_peers: 32,
            gravity_rho: 150.0,
            outlier_factor: 1.5,
            outlier_floor: 0.2,
        }
    }
}

impl VivaldiConfig {
    /// Exactly Serf's algorithm and defaults: [`default`](Self::default) without our outlier
    /// gate (the filter's peer bound is the only difference left, and it does not change
    /// results while a node has at most `latency_filter_peers` peers).
    pub fn serf(dimensionality: usize) -> Self {
        VivaldiConfig { dimensionality, outlier_factor: 0.0, ..VivaldiConfig::default() }
    }

    /// Plain Vivaldi as in Dabek et al. 2004 (with height, adaptive timestep and error
    /// estimates) but without Serf's later additions: no adjustment term, no latency filter, no
    /// gravity. Used by the experiment as the baseline.
    pub fn vanilla(dimensionality: usize) -> Self {
        VivaldiConfig {
            dimensionality,
            adjustment_window: 0,
            latency_filter_size: 1,
            gravity_rho: 0.0,
            outlier_factor: 0.0,
            ..VivaldiConfig::default()
        }
    }

    /// Checks every field; returns the first problem found.
    pub fn validate(&self) -> Result<(), VivaldiConfigError> {
        use VivaldiConfigError as E;
        if self.dimensionality == 0 || self.dimensionality > MAX_DIMENSIONS {
            return Err(E::Dimensionality { got: self.dimensionality });
        }
        let in_range = |field: &'static str, v: f64, lo: f64, hi: f64, lo_incl: bool| {
            let ok = v.is_finite() && (if lo_incl { v >= lo } else { v > lo }) && v <= hi;
            if ok {
                Ok(())
            } else {
                Err(E::OutOfRange { field, got: v, lo, hi })
            }
        };
        in_range("vivaldi_error_max", self.vivaldi_error_max, 0.0, 1.0e3, false)?;
        in_range("vivaldi_ce", self.vivaldi_ce, 0.0, 1.0, false)?;
        in_range("vivaldi_cc", self.vivaldi_cc, 0.0, 1.0, false)?;
        in_range("height_min", self.height_min, 0.0, 1.0, false)?;
        in_range("gravity_rho", self.gravity_rho, 0.0, 1.0e6, true)?;
        if self.gravity_rho > 0.0 && self.gravity_rho < 1.0e-3 {
            return Err(E::OutOfRange { field: "gravity_rho", got: self.gravity_rho, lo: 1.0e-3, hi: 1.0e6 });
        }
        if self.outlier_factor != 0.0 {
            in_range("outlier_factor", self.outlier_factor, 1.1, 1.0e3, true)?;
        }
        in_range("outlier_floor", self.outlier_floor, 0.0, 1.0e3, true)?;
        if self.adjustment_window > MAX_ADJUSTMENT_WINDOW {
            return Err(E::TooLarge {
                field: "adjustment_window",
                got: self.adjustment_window as u64,
                max: MAX_ADJUSTMENT_WINDOW as u64,
            });
        }
        if self.latency_filter_size == 0 || self.latency_filter_size > MAX_LATENCY_FILTER_SIZE {
            return Err(E::OutOfRange {
                field: "latency_filter_size",
                got: self.latency_filter_size as f64,
                lo: 1.0,
                hi: MAX_LATENCY_FILTER_SIZE as f64,
            });
        }
        if self.latency_filter_size > 1
            && (self.latency_filter_peers == 0 || self.latency_filter_peers > MAX_LATENCY_FILTER_PEERS)
        {
            return Err(E::OutOfRange {
                field: "latency_filter_peers",
                got: self.latency_filter_peers as f64,
                lo: 1.0,
                hi: MAX_LATENCY_FILTER_PEERS as f64,
            });
        }
        Ok(())
    }
}

/// Why a [`VivaldiConfig`] was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VivaldiConfigError {
    #[error("dimensionality must be between 1 and {max}, got {got}", max = MAX_DIMENSIONS)]
    Dimensionality { got: usize },
    #[error("{field} must be a finite number in ({lo}, {hi}], got {got}")]
    OutOfRange { field: &'static str, got: f64, lo: f64, hi: f64 },
    #[error("{field} must be at most {max}, got {got}")]
    TooLarge { field: &'static str, got: u64, max: u64 },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_match_serf() {
        let c = VivaldiConfig::default();
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.dimensionality, 8);
        assert_eq!(c.adjustment_window, 20);
        assert_eq!(c.latency_filter_size, 3);
        assert_eq!(VivaldiConfig::vanilla(2).validate(), Ok(()));
        assert_eq!(VivaldiConfig::serf(4).validate(), Ok(()));
        assert_eq!(VivaldiConfig::serf(4).outlier_factor, 0.0);
    }

    #[test]
    fn bad_fields_are_refused() {
        let bad = |f: fn(&mut VivaldiConfig)| {
            let mut c = VivaldiConfig::default();
            f(&mut c);
            c.validate()
        };
        assert!(matches!(bad(|c| c.dimensionality = 0), Err(VivaldiConfigError::Dimensionality { got: 0 })));
        assert!(matches!(bad(|c| c.dimensionality = 9), Err(VivaldiConfigError::Dimensionality { got: 9 })));
        assert!(matches!(
            bad(|c| c.vivaldi_cc = f64::NAN),
            Err(VivaldiConfigError::OutOfRange { field: "vivaldi_cc", .. })
        ));
        assert!(matches!(bad(|c| c.vivaldi_ce = 0.0), Err(VivaldiConfigError::OutOfRange { field: "vivaldi_ce", .. })));
        assert!(matches!(bad(|c| c.height_min = 0.0), Err(VivaldiConfigError::OutOfRange { field: "height_min", .. })));
        assert!(matches!(
            bad(|c| c.gravity_rho = -1.0),
            Err(VivaldiConfigError::OutOfRange { field: "gravity_rho", .. })
        ));
        assert!(matches!(
            bad(|c| c.latency_filter_size = 0),
            Err(VivaldiConfigError::OutOfRange { field: "latency_filter_size", .. })
        ));
        assert!(matches!(
            bad(|c| c.latency_filter_peers = 0),
            Err(VivaldiConfigError::OutOfRange { field: "latency_filter_peers", .. })
        ));
        assert!(matches!(
            bad(|c| c.outlier_factor = -1.0),
            Err(VivaldiConfigError::OutOfRange { field: "outlier_factor", .. })
        ));
        assert!(matches!(
            bad(|c| c.outlier_factor = 0.5),
            Err(VivaldiConfigError::OutOfRange { field: "outlier_factor", .. })
        ));
        assert_eq!(bad(|c| c.outlier_factor = 0.0), Ok(()));
        assert!(matches!(bad(|c| c.adjustment_window = 1000), Err(VivaldiConfigError::TooLarge { .. })));
    }

    #[test]
    fn serde_round_trip_and_unknown_fields() {
        let c = VivaldiConfig { dimensionality: 3, ..VivaldiConfig::default() };
        let s = serde_json::to_string(&c).unwrap();
        let back: VivaldiConfig = serde_json::from_str(&s).unwrap();
        assert_eq!(back, c);
        let partial: VivaldiConfig = serde_json::from_str(r#"{"dimensionality": 2}"#).unwrap();
        assert_eq!(partial.dimensionality, 2);
        assert_eq!(partial.vivaldi_cc, 0.25);
        assert!(serde_json::from_str::<VivaldiConfig>(r#"{"dimensions": 2}"#).is_err());
    }
}

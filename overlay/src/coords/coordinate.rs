//! A network coordinate: a point in `d` Euclidean dimensions plus a height, with an error
//! estimate and an adjustment term.
//!
//! Semantics follow Dabek et al. 2004 (height vectors, section 5.4) as refined by
//! hashicorp/serf's `coordinate` package:
//!
//! - All values are in **seconds** (as in Serf), so a coordinate is meaningful on its own.
//! - The predicted RTT between `a` and `b` is `‖a.vec − b.vec‖ + a.height + b.height`
//!   (the height models the access link, which every path crosses twice), plus both nodes'
//!   adjustment terms (Lee et al. 2010) **unless** that would make the prediction non-positive,
//!   in which case the raw distance is used (Serf's rule).
//! - Moving a coordinate by a force along the unit vector from the other node (Vivaldi's
//!   spring) also scales the height by `force · (h_a + h_b) / ‖a.vec − b.vec‖`, floored at
//!   `height_min` (Serf's rule). When the two points coincide, the direction is a random unit
//!   vector drawn from the caller's RNG, and the height is left alone.
//!
//! Representation (our choice): the vector is a fixed `[f64; MAX_DIMENSIONS]` array plus a
//! dimension count, so a coordinate is a 96-byte `Copy` value with no heap allocation; cloning
//! it for gossip or for a simulator holding a million of them costs a memcpy. On the wire it is
//! a versionless serde struct whose `vec` is a sequence of exactly `dimensionality` numbers
//! (the enclosing wire envelope carries the version); decoding refuses more than
//! [`MAX_DIMENSIONS`] or zero components.

use super::config::{VivaldiConfig, MAX_DIMENSIONS};
use super::CoordError;
use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Below this (seconds) two points are considered to be on top of each other (Serf's value).
pub const ZERO_THRESHOLD: f64 = 1.0e-6;

/// The largest magnitude (seconds, or dimensionless for the error) a remote coordinate's
/// components may have. RTTs above 10 s are refused and gravity keeps honest coordinates near
/// the origin, so an honest coordinate stays far below this; a larger one is garbage or an
/// attack (finite but huge values would overflow our coordinate and force a reset on every
/// sample). Our choice; Serf accepts any finite value.
pub const MAX_COMPONENT: f64 = 1000.0;

/// A Vivaldi coordinate with height, error estimate and adjustment term.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "CoordinateWire", into = "CoordinateWire")]
pub struct Coordinate {
    vec: [f64; MAX_DIMENSIONS],
    dims: u8,
    /// Height above the Euclidean space, seconds (the access-link share of every RTT).
    pub height: f64,
    /// Confidence: the node's estimate of its relative prediction error (dimensionless).
    pub error: f64,
    /// Adjustment term added to every distance, seconds (Lee et al. 2010; may be negative).
    pub adjustment: f64,
}

impl Coordinate {
    /// A fresh coordinate at the origin: error at its maximum, height at its minimum.
    /// `config` is assumed valid (see [`VivaldiConfig::validate`]); the dimensionality is
    /// clamped to `1..=MAX_DIMENSIONS` in any case.
    pub fn initial(config: &VivaldiConfig) -> Coordinate {
        Coordinate {
            vec: [0.0; MAX_DIMENSIONS],
            dims: config.dimensionality.clamp(1, MAX_DIMENSIONS) as u8,
            height: config.height_min,
            error: config.vivaldi_error_max,
            adjustment: 0.0,
        }
    }

    /// A coordinate with the given Euclidean components; refuses 0 or more than
    /// [`MAX_DIMENSIONS`] components.
    pub fn new(vec: &[f64], height: f64, error: f64, adjustment: f64) -> Result<Coordinate, CoordError> {
        if vec.is_empty() || vec.len() > MAX_DIMENSIONS {
            return Err(CoordError::Dimensionality { expected: MAX_DIMENSIONS, got: vec.len() });
        }
        let mut v = [0.0; MAX_DIMENSIONS];
        v[..vec.len()].copy_from_slice(vec);
        Ok(Coordinate { vec: v, dims: vec.len() as u8, height, error, adjustment })
    }

    /// Number of Euclidean dimensions.
    pub fn dimensionality(&self) -> usize {
        self.dims as usize
    }

    /// The Euclidean components, seconds.
    pub fn vec(&self) -> &[f64] {
        &self.vec[..self.dims as usize]
    }

    /// Replace the Euclidean components (same dimensionality required).
    pub fn set_vec(&mut self, vec: &[f64]) -> Result<(), CoordError> {
        if vec.len() != self.dimensionality() {
            return Err(CoordError::Dimensionality { expected: self.dimensionality(), got: vec.len() });
        }
        self.vec[..vec.len()].copy_from_slice(vec);
        Ok(())
    }

    /// True when every component is a finite number (Serf's validity test).
    pub fn is_finite(&self) -> bool {
        self.vec().iter().all(|x| x.is_finite())
            && self.height.is_finite()
            && self.error.is_finite()
            && self.adjustment.is_finite()
    }

    /// Checks a coordinate received from someone else: same dimensionality as ours, every
    /// component finite and at most [`MAX_COMPONENT`] in magnitude, height and error not
    /// negative.
    pub fn check_remote(&self, other: &Coordinate) -> Result<(), CoordError> {
        if other.dims != self.dims {
            return Err(CoordError::Dimensionality { expected: self.dimensionality(), got: other.dimensionality() });
        }
        if !other.is_finite() {
            return Err(CoordError::InvalidCoordinate("a component is NaN or infinite"));
        }
        if other.height < 0.0 {
            return Err(CoordError::InvalidCoordinate("negative height"));
        }
        let too_big = |x: f64| x.abs() > MAX_COMPONENT;
        if other.vec().iter().any(|&x| too_big(x))
            || too_big(other.height)
            || too_big(other.adjustment)
            || too_big(other.error)
        {
            return Err(CoordError::InvalidCoordinate("component larger than 1000"));
        }
        if other.error < 0.0 {
            return Err(CoordError::InvalidCoordinate("negative error estimate"));
        }
        Ok(())
    }

    /// Euclidean distance between the two vectors (no height, no adjustment), seconds.
    /// Assumes equal dimensionality (checked by the public callers).
    fn euclidean(&self, other: &Coordinate) -> f64 {
        self.vec().iter().zip(other.vec()).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt()
    }

    /// Vivaldi distance with heights but without adjustment terms, seconds.
    pub(crate) fn raw_distance(&self, other: &Coordinate) -> f64 {
        self.euclidean(other) + self.height + other.height
    }

    /// Predicted RTT in seconds, adjustment terms included unless they would make it
    /// non-positive. Errors on a dimensionality mismatch.
    pub fn distance_secs(&self, other: &Coordinate) -> Result<f64, CoordError> {
        if other.dims != self.dims {
            return Err(CoordError::Dimensionality { expected: self.dimensionality(), got: other.dimensionality() });
        }
        Ok(self.distance_unchecked(other))
    }

    /// [`distance_secs`](Self::distance_secs) for coordinates known to have equal
    /// dimensionality (an internal invariant of the client).
    pub(crate) fn distance_unchecked(&self, other: &Coordinate) -> f64 {
        let raw = self.raw_distance(other);
        let adjusted = raw + self.adjustment + other.adjustment;
        if adjusted > 0.0 {
            adjusted
        } else {
            raw
        }
    }

    /// Predicted RTT as a [`Duration`]. Errors on a dimensionality mismatch or when the
    /// prediction is not a representable duration (NaN, negative, astronomically large).
    pub fn distance_to(&self, other: &Coordinate) -> Result<Duration, CoordError> {
        let secs = self.distance_secs(other)?;
        Duration::try_from_secs_f64(secs).map_err(|_| CoordError::InvalidCoordinate("distance is not a valid duration"))
    }

    /// Moves `self` by `force` seconds along the unit vector pointing from `other` to `self`
    /// (a positive force pushes away, a negative one pulls closer) and rescales the height.
    pub(crate) fn apply_force(&mut self, force: f64, other: &Coordinate, height_min: f64, rng: &mut dyn RngCore) {
        let d = self.dimensionality();
        let mut unit = [0.0f64; MAX_DIMENSIONS];
        let mut mag = 0.0;
        for ((u, a), b) in unit.iter_mut().zip(&self.vec).zip(&other.vec).take(d) {
            *u = a - b;
            mag += *u * *u;
        }
        mag = mag.sqrt();
        if mag > ZERO_THRESHOLD {
            for u in unit.iter_mut().take(d) {
                *u /= mag;
            }
        } else {
            random_unit(&mut unit[..d], rng);
        }
        for (x, u) in self.vec.iter_mut().zip(unit.iter()).take(d) {
            *x += u * force;
        }
        if mag > ZERO_THRESHOLD {
            self.height += (self.height + other.height) * force / mag;
            self.height = self.height.max(height_min);
        }
    }
}

/// Fills `out` with a random unit vector (uniform components, normalised); falls back to the
/// first axis in the vanishingly rare case of a near-zero draw, as Serf does.
fn random_unit(out: &mut [f64], rng: &mut dyn RngCore) {
    let mut mag = 0.0;
    for x in out.iter_mut() {
        *x = rng.gen::<f64>() - 0.5;
        mag += *x * *x;
    }
    let mag = mag.sqrt();
    if mag > ZERO_THRESHOLD {
        out.iter_mut().for_each(|x| *x /= mag);
    } else {
        out.iter_mut().for_each(|x| *x = 0.0);
        out[0] = 1.0;
    }
}

/// Serialised form of a [`Coordinate`].
#[derive(Serialize, Deserialize)]
struct CoordinateWire {
    vec: Vec<f64>,
    height: f64,
    error: f64,
    adjustment: f64,
}

impl From<Coordinate> for CoordinateWire {
    fn from(c: Coordinate) -> Self {
        CoordinateWire { vec: c.vec().to_vec(), height: c.height, error: c.error, adjustment: c.adjustment }
    }
}

impl TryFrom<CoordinateWire> for Coordinate {
    type Error = CoordError;
    fn try_from(w: CoordinateWire) -> Result<Self, Self::Error> {
        Coordinate::new(&w.vec, w.height, w.error, w.adjustment)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn c(v: &[f64], h: f64) -> Coordinate {
        Coordinate::new(v, h, 0.5, 0.0).unwrap()
    }

    #[test]
    fn distance_adds_heights_and_adjustments() {
        let a = c(&[0.0, 0.0], 0.01);
        let b = c(&[0.3, 0.4], 0.02);
        assert!((a.distance_secs(&b).unwrap() - 0.53).abs() < 1e-12);
        let mut a2 = a;
        a2.adjustment = 0.1;
        assert!((a2.distance_secs(&b).unwrap() - 0.63).abs() < 1e-12);
        // A negative adjustment that would make the distance non-positive is ignored.
        a2.adjustment = -10.0;
        assert!((a2.distance_secs(&b).unwrap() - 0.53).abs() < 1e-12);
        assert_eq!(a.distance_to(&b).unwrap(), Duration::from_secs_f64(0.53));
    }

    #[test]
    fn mismatched_or_invalid_coordinates_error() {
        let a = c(&[0.0, 0.0], 0.01);
        let b = c(&[0.0, 0.0, 0.0], 0.01);
        assert!(matches!(a.distance_secs(&b), Err(CoordError::Dimensionality { expected: 2, got: 3 })));
        let mut nan = a;
        nan.height = f64::NAN;
        assert!(a.check_remote(&nan).is_err());
        assert!(a.distance_to(&nan).is_err(), "NaN must not become a Duration (or panic)");
        let mut inf = a;
        inf.set_vec(&[f64::INFINITY, 0.0]).unwrap();
        assert!(a.check_remote(&inf).is_err());
        let mut neg = a;
        neg.height = -1.0;
        assert!(a.check_remote(&neg).is_err());
        let mut huge = a;
        huge.adjustment = -1.0e6;
        assert!(a.check_remote(&huge).is_err());
        let mut far = a;
        far.set_vec(&[1.0e4, 0.0]).unwrap();
        assert!(a.check_remote(&far).is_err());
        far.set_vec(&[999.0, -999.0]).unwrap();
        assert_eq!(a.check_remote(&far), Ok(()));
        assert!(Coordinate::new(&[], 0.0, 0.0, 0.0).is_err());
        assert!(Coordinate::new(&[0.0; 9], 0.0, 0.0, 0.0).is_err());
        assert!(a.clone().set_vec(&[1.0]).is_err());
    }

    #[test]
    fn force_moves_along_the_line_and_scales_height() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut a = c(&[1.0, 0.0], 0.1);
        let b = c(&[0.0, 0.0], 0.1);
        a.apply_force(0.5, &b, 1e-5, &mut rng);
        assert!((a.vec()[0] - 1.5).abs() < 1e-12 && a.vec()[1].abs() < 1e-12);
        // height += (0.1 + 0.1) * 0.5 / 1.0
        assert!((a.height - 0.2).abs() < 1e-12);
        a.apply_force(-10.0, &b, 1e-5, &mut rng);
        assert_eq!(a.height, 1e-5, "height is floored at height_min");
    }

    #[test]
    fn coincident_points_get_a_random_unit_direction() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut a = c(&[0.0, 0.0, 0.0], 0.1);
        let b = a;
        a.apply_force(0.25, &b, 1e-5, &mut rng);
        let norm = a.vec().iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 0.25).abs() < 1e-9, "moved by exactly the force: {norm}");
        assert_eq!(a.height, 0.1, "height untouched when the points coincide");
    }

    #[test]
    fn serde_round_trip_and_wire_checks() {
        let a = Coordinate::new(&[0.1, -0.2, 0.3], 0.01, 0.4, -0.002).unwrap();
        let bytes = postcard::to_stdvec(&a).unwrap();
        let back: Coordinate = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, a);
        let json = serde_json::to_string(&a).unwrap();
        assert!(json.contains("\"vec\":[0.1,-0.2,0.3]"), "{json}");
        let too_long = r#"{"vec":[0,0,0,0,0,0,0,0,0],"height":0,"error":0,"adjustment":0}"#;
        assert!(serde_json::from_str::<Coordinate>(too_long).is_err());
        let empty = r#"{"vec":[],"height":0,"error":0,"adjustment":0}"#;
        assert!(serde_json::from_str::<Coordinate>(empty).is_err());
        assert_eq!(std::mem::size_of::<Coordinate>(), 8 * MAX_DIMENSIONS + 32);
    }
}

//! A compact position in the latency coordinate space, for super-peer selection.
//!
//! Super-peer selection (seed 000, "Elections in large-scale systems") needs, for every peer it
//! knows, a position from which a round-trip time can be predicted and along which repulsion
//! forces act. The Vivaldi [`Coordinate`](crate::coords::Coordinate) carries more (error
//! estimate, adjustment term, `f64` components); a node's caches hold several positions per
//! known peer and a simulator holds millions, so this module keeps a 36-byte copy: up to
//! [`DIMS`] Euclidean components plus the height, as `f32` **seconds**.
//!
//! Predicted RTT = Euclidean distance + both heights (Dabek et al. 2004, height vectors). The
//! Vivaldi adjustment term is dropped (choice: it is a per-node constant that does not change
//! which of several peers is nearest to a given node, only the absolute value).
//! Unused components are zero, so points of lower dimensionality compare correctly.

use serde::{Deserialize, Serialize};

/// A coordinate whose error estimate is at most this is fit to place super peers by (Vivaldi
/// starts at 1.5 and a settled node sits at 0.1-0.4).
pub const FIT_ERROR: f64 = 0.5;
/// ... or one that applied at least this many samples (on loopback the RTTs are microseconds
/// of noise and the relative error estimate may never fall, but a node that learned from this
/// many samples is past its start).
pub const FIT_SAMPLES: u64 = 30;

/// Whether a node's own coordinate, with Vivaldi's error estimate `error` after `applied`
/// samples, is fit to place tokens by (`SpInput::CoordinateFit`): its relative error is below
/// [`FIT_ERROR`], or it learned from [`FIT_SAMPLES`] samples. Before that its position is
/// noise near the origin, and forces between such points move tokens for nothing.
pub fn coordinate_fit(error: f64, applied: u64) -> bool {
    error <= FIT_ERROR || applied >= FIT_SAMPLES
}

/// Largest number of Euclidean components (the Vivaldi client's maximum).
pub const DIMS: usize = 8;

/// A point: Euclidean components and a height, seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub x: [f32; DIMS],
    pub h: f32,
}

impl Point {
    /// A point from Euclidean components (at most [`DIMS`]; extra ones are ignored) and a height.
    pub fn new(components: &[f64], height: f64) -> Point {
        let mut x = [0f32; DIMS];
        for (d, c) in x.iter_mut().zip(components) {
            *d = *c as f32;
        }
        Point { x, h: height as f32 }
    }

    /// Euclidean distance between the two points (heights ignored), seconds.
    pub fn euclid(&self, o: &Point) -> f64 {
        let mut s = 0f32;
        for i in 0..DIMS {
            let d = self.x[i] - o.x[i];
            s += d * d;
        }
        (s as f64).sqrt()
    }

    /// How far a point moved to `o`, seconds: the Euclidean distance plus the change of
    /// height (a node's own drift, a stale copy's shift).
    pub fn shift(&self, o: &Point) -> f64 {
        self.euclid(o) + (self.h - o.h).abs() as f64
    }

    /// Predicted round-trip time, seconds: Euclidean distance plus both heights.
    pub fn rtt(&self, o: &Point) -> f64 {
        self.euclid(o) + self.h as f64 + o.h as f64
    }

    /// True when every component is a finite number and the height is not negative: what a
    /// point received from the network must satisfy.
    pub fn is_valid(&self) -> bool {
        self.x.iter().all(|v| v.is_finite()) && self.h.is_finite() && self.h >= 0.0
    }
}

impl From<&crate::coords::Coordinate> for Point {
    fn from(c: &crate::coords::Coordinate) -> Point {
        Point::new(c.vec(), c.height)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn rtt_adds_heights() {
        let a = Point::new(&[0.0, 0.0], 0.001);
        let b = Point::new(&[0.003, 0.004], 0.002);
        assert!((a.rtt(&b) - 0.008).abs() < 1e-6);
        assert!((a.euclid(&b) - 0.005).abs() < 1e-6);
        assert!(a.is_valid());
        let mut bad = a;
        bad.x[3] = f32::NAN;
        assert!(!bad.is_valid());
        bad = a;
        bad.h = -1.0;
        assert!(!bad.is_valid());
    }
}

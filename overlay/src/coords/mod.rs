//! Latency coordinates: Vivaldi with height, adaptive timestep, error estimates, a latency
//! filter, an adjustment term and gravity.
//!
//! Every node keeps a point in an `m`-dimensional space (DEVELOPERS.md: "a latency coordinate
//! space, Vivaldi-style: m dimensions plus height") such that the distance between two nodes'
//! points predicts the round-trip time between them without measuring it. Super-peer
//! selection (seed 000, "Elections in large-scale systems": low-latency access to super
//! peers; repulsion tokens in an m-dimensional geometric space) places and picks super peers
//! in this space.
//!
//! Sources: Dabek et al., "Vivaldi: a decentralized network coordinate system", SIGCOMM 2004
//! (the spring model, height vectors, adaptive timestep, error estimates); Ledlie et al.,
//! "Network coordinates in the wild", NSDI 2007 (latency filter, gravity); Lee et al., "On
//! suitability of Euclidean embedding...", ToN 2010 (adjustment term); and hashicorp/serf's
//! `coordinate` package, the production implementation whose semantics, defaults and test
//! thresholds we follow (our code is written from those descriptions, not copied).
//!
//! Layout:
//! - [`config`]: [`VivaldiConfig`] (serde, validated).
//! - [`coordinate`]: [`Coordinate`], a compact `Copy` value with distance and force rules.
//! - [`filter`]: [`LatencyFilter`], the bounded per-peer moving median.
//! - [`client`]: [`VivaldiClient`], one node's update rule.
//! - [`update_filter`]: [`UpdateFilter`], the application-level coordinate (Ledlie et al.'s
//!   ENERGY update filter), what super-peer selection sees of a node's position.
//! - [`scenario`]: small known geometries (line, grid, split, circle, random) and a
//!   round-based driver, used by the tests (Serf's performance set) and by experiments.
//!
//! Where we differ from Serf, on purpose: a zero RTT is refused instead of clamped; remote
//! coordinates with a negative height or error, or a component above
//! [`coordinate::MAX_COMPONENT`], are refused; an outlier gate (off in
//! [`VivaldiConfig::serf`]) keeps persistently detoured pairs from dragging coordinates; the
//! filter's memory is bounded;
//! the coordinate is a fixed-size array (dimensionality at most 8); nothing panics on a
//! dimensionality mismatch (Serf panics), it is an error.

pub mod client;
pub mod config;
pub mod coordinate;
pub mod filter;
pub mod scenario;
pub mod update_filter;

pub use client::{ClientStats, VivaldiClient, MAX_RTT};
pub use config::{VivaldiConfig, VivaldiConfigError, MAX_DIMENSIONS};
pub use coordinate::Coordinate;
pub use filter::LatencyFilter;
pub use update_filter::{UpdateFilter, UpdateFilterConfig, UpdateFilterConfigError};

/// Why a coordinate operation was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CoordError {
    #[error("round-trip time {secs} s is not in (0, {max_secs}] s")]
    InvalidRtt { secs: f64, max_secs: f64 },
    #[error("coordinate has {got} dimensions, expected {expected}")]
    Dimensionality { expected: usize, got: usize },
    #[error("invalid coordinate: {0}")]
    InvalidCoordinate(&'static str),
}

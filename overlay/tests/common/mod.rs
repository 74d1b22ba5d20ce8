//! Helpers shared by the super-peer integration tests of `overlay`: the printed, replayable
//! seed, a 2-d point, one input into a node, and its DHT lookups. (Each test file uses some.)
#![allow(dead_code)]

use overlay::superpeer::{Point, Query, SpContext, SpEffect, SpInput, SuperPeerNode};
use overlay::Time;
use rand_chacha::ChaCha8Rng;

/// The run's seed: `PEERAGE_SEED` if set, else `default`; printed so a failure replays.
pub fn seed(default: u64) -> u64 {
    let seed = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    println!("seed {seed} (replay with PEERAGE_SEED={seed})");
    seed
}

/// A point in the plane with a small height.
pub fn at(x: f64, y: f64) -> Point {
    Point::new(&[x, y], 0.001)
}

/// Feeds `node` one input at time `now` (µs) and returns its effects.
pub fn step(node: &mut SuperPeerNode, rng: &mut ChaCha8Rng, now: u64, input: SpInput) -> Vec<SpEffect> {
    let mut fx = Vec::new();
    let mut ctx = SpContext::new(Time(now), rng, &mut fx);
    node.handle(&mut ctx, input);
    fx
}

/// The DHT lookups among a node's effects: (query number, what it asks).
pub fn lookups(fx: &[SpEffect]) -> Vec<(u32, Query)> {
    fx.iter()
        .filter_map(|e| match e {
            SpEffect::Lookup { query, what } => Some((*query, *what)),
            _ => None,
        })
        .collect()
}

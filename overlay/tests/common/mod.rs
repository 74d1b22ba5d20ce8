//! Helpers shared by the super-peer integration tests of `overlay`.

use overlay::superpeer::{Query, SpEffect};

/// The DHT lookups among a node's effects: (query number, what it asks).
pub fn lookups(fx: &[SpEffect]) -> Vec<(u32, Query)> {
    fx.iter()
        .filter_map(|e| match e {
            SpEffect::Lookup { query, what } => Some((*query, *what)),
            _ => None,
        })
        .collect()
}

//! Swarm node keys derived from the swarm's seed: node `i` of the swarm with seed `s` has the
//! same ed25519 key in every process that asks, so a swarm run as one process or as M shards
//! (`node/src/swarm/shard.rs`), and a `peerage run --swarm-seed s --node-index i`, are the same
//! nodes with the same peer ids, node ids and ranks.
//!
//! SHA-256 over a fixed tag, the seed and the index (little-endian) seeds a generator, and the
//! key is the first one drawn from it that solves the id puzzle at the swarm's difficulty
//! (`crate::identity::generate_from`): about `2^difficulty` draws per node, so a swarm of a
//! million nodes is run at difficulty 0. These keys are for experiments only: anyone who knows
//! the seed knows every secret key.

use libp2p::identity::Keypair;
use libp2p::PeerId;
use rand::rngs::StdRng;
use rand::SeedableRng;
use sha2::{Digest, Sha256};

/// The tag hashed in front of every derived secret (a new derivation gets a new tag).
const TAG: &[u8] = b"peerage/swarm-key/v1";

/// Node `index`'s key in the swarm with `seed`, solving the id puzzle at `difficulty`.
pub fn node_key(seed: u64, index: usize, difficulty: u32) -> Keypair {
    let mut h = Sha256::new();
    h.update(TAG);
    h.update(seed.to_le_bytes());
    h.update((index as u64).to_le_bytes());
    let mut rng = StdRng::from_seed(h.finalize().into());
    crate::identity::generate_from(difficulty, &mut rng)
}

/// The peer ids of nodes `0..nodes` of the swarm with `seed`, by index.
pub fn peer_ids(seed: u64, nodes: usize, difficulty: u32) -> Vec<PeerId> {
    (0..nodes).map(|i| node_key(seed, i, difficulty).public().to_peer_id()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_and_index_same_key_other_seed_or_index_other_key() {
        let a = node_key(7, 3, 4).public().to_peer_id();
        assert_eq!(a, node_key(7, 3, 4).public().to_peer_id());
        assert_ne!(a, node_key(8, 3, 4).public().to_peer_id());
        assert_ne!(a, node_key(7, 4, 4).public().to_peer_id());
        assert!(crate::identity::puzzle_bits(&node_key(7, 3, 4)) >= 4);
        let ids = peer_ids(7, 5, 4);
        assert_eq!(ids[3], a);
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), 5);
    }
}

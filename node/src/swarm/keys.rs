//! Swarm node keys derived from the swarm's seed: node `i` of the swarm with seed `s` has the
//! same ed25519 key in every process that asks, so a swarm run as one process or as M shards
//! (`node/src/swarm/shard.rs`), and a `peerage run --swarm-seed s --node-index i`, are the same
//! nodes with the same peer ids, node ids and ranks.
//!
//! The secret is SHA-256 over a fixed tag, the seed and the index (little-endian). These keys
//! are for experiments only: anyone who knows the seed knows every secret key.

use libp2p::identity::Keypair;
use libp2p::PeerId;
use sha2::{Digest, Sha256};

/// The tag hashed in front of every derived secret (a new derivation gets a new tag).
const TAG: &[u8] = b"peerage/swarm-key/v1";

/// Node `index`'s key in the swarm with `seed`.
pub fn node_key(seed: u64, index: usize) -> Keypair {
    let mut h = Sha256::new();
    h.update(TAG);
    h.update(seed.to_le_bytes());
    h.update((index as u64).to_le_bytes());
    let secret: [u8; 32] = h.finalize().into();
    // 32 bytes are always a valid ed25519 secret key.
    Keypair::ed25519_from_bytes(secret).unwrap_or_else(|_| unreachable!("any 32 bytes are an ed25519 secret"))
}

/// The peer ids of nodes `0..nodes` of the swarm with `seed`, by index.
pub fn peer_ids(seed: u64, nodes: usize) -> Vec<PeerId> {
    (0..nodes).map(|i| node_key(seed, i).public().to_peer_id()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_and_index_same_key_other_seed_or_index_other_key() {
        let a = node_key(7, 3).public().to_peer_id();
        assert_eq!(a, node_key(7, 3).public().to_peer_id());
        assert_ne!(a, node_key(8, 3).public().to_peer_id());
        assert_ne!(a, node_key(7, 4).public().to_peer_id());
        let ids = peer_ids(7, 5);
        assert_eq!(ids[3], a);
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), 5);
    }
}

//! `[emulation]` of `peerage run`: emulated Internet latency across processes, and the
//! seed-derived identity that puts a node at a known place of a swarm.
//!
//! A node emulates latency (`node/src/net/latency_transport.rs`) with the seeded Internet
//! model of `model_nodes` places. Its own place, and every peer's:
//! - with `swarm_seed` and `node_index` the node *is* node `node_index` of the swarm with that
//!   seed (its key is `swarm::keys::node_key(swarm_seed, node_index, difficulty)`), at place
//!   `node_index`; every node of that swarm is registered at its index, so processes on other
//!   hosts (`peerage run` or `peerage swarm --shard`) see the RTTs a one-process swarm of the
//!   same seeds sees;
//! - otherwise its place is derived from the model seed and its peer id
//!   (`latency_transport::derived_place`), which every other process derives alike.
//!
//! The model seed defaults to the swarm seed, as in `peerage swarm`.

use crate::net::latency_transport::{EmulatedLink, LatencyNet};
use crate::swarm::keys;
use libp2p::identity::Keypair;
use serde::{Deserialize, Serialize};

/// The `[emulation]` table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmulationFileConfig {
    /// `none` (default) or `internet`.
    pub latency: Option<String>,
    /// Places in the latency model (for a swarm: its node count).
    pub model_nodes: Option<usize>,
    /// Seed of the latency model (default: `swarm_seed`).
    pub model_seed: Option<u64>,
    /// With `node_index`: this node is that node of the swarm with this seed.
    pub swarm_seed: Option<u64>,
    pub node_index: Option<usize>,
}

/// Why `[emulation]` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum EmulationError {
    #[error("[emulation] latency must be none or internet, got {0:?}")]
    Latency(String),
    #[error("--swarm-seed and --node-index go together")]
    HalfIdentity,
    #[error("--node-index {index} is outside the swarm of {nodes} nodes (--model-nodes)")]
    IndexOutOfRange { index: usize, nodes: usize },
    #[error("latency emulation needs --model-nodes (the places in the model)")]
    NoModelNodes,
    #[error("latency emulation needs --model-seed or --swarm-seed")]
    NoModelSeed,
    #[error("--model-nodes must be at least 1")]
    ZeroNodes,
    #[error("--swarm-seed/--node-index and --identity both name the node's key: give one")]
    TwoIdentities,
    #[error("latency model: {0}")]
    Model(#[from] crate::net::latency_transport::NetemError),
}

impl EmulationFileConfig {
    /// Whether latency is emulated (checked value).
    pub fn latency_on(&self) -> Result<bool, EmulationError> {
        match self.latency.as_deref() {
            None | Some("none") => Ok(false),
            Some("internet") => Ok(true),
            Some(other) => Err(EmulationError::Latency(other.to_string())),
        }
    }

    /// The seed-derived key solving the id puzzle at `difficulty`, when `swarm_seed` and
    /// `node_index` are set.
    pub fn swarm_key(&self, difficulty: u32) -> Result<Option<Keypair>, EmulationError> {
        match (self.swarm_seed, self.node_index) {
            (None, None) => Ok(None),
            (Some(seed), Some(i)) => {
                if let Some(n) = self.model_nodes {
                    if i >= n {
                        return Err(EmulationError::IndexOutOfRange { index: i, nodes: n });
                    }
                }
                Ok(Some(keys::node_key(seed, i, difficulty)))
            }
            _ => Err(EmulationError::HalfIdentity),
        }
    }

    /// The emulated link of the node with `key`, if latency is on: an open net (every peer
    /// has a place) with the swarm's nodes (keys at `difficulty`) registered at their indices.
    pub fn link(&self, key: &Keypair, difficulty: u32) -> Result<Option<EmulatedLink>, EmulationError> {
        if !self.latency_on()? {
            return Ok(None);
        }
        let nodes = self.model_nodes.ok_or(EmulationError::NoModelNodes)?;
        if nodes == 0 {
            return Err(EmulationError::ZeroNodes);
        }
        let seed = self.model_seed.or(self.swarm_seed).ok_or(EmulationError::NoModelSeed)?;
        let net = LatencyNet::open(nodes, seed)?;
        if let (Some(swarm_seed), Some(index)) = (self.swarm_seed, self.node_index) {
            if index >= nodes {
                return Err(EmulationError::IndexOutOfRange { index, nodes });
            }
            for (i, peer) in keys::peer_ids(swarm_seed, nodes, difficulty).into_iter().enumerate() {
                net.register(peer, i)?;
            }
        }
        let me = key.public().to_peer_id();
        let place = net.index_of(&me).ok_or(EmulationError::NoModelNodes)?;
        Ok(Some(EmulatedLink::new(net, place)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swarm_nodes_sit_at_their_index_others_at_their_derived_place() {
        let cfg = EmulationFileConfig {
            latency: Some("internet".into()),
            model_nodes: Some(50),
            swarm_seed: Some(9),
            node_index: Some(17),
            ..Default::default()
        };
        let key = cfg.swarm_key(0).unwrap().unwrap();
        let link = cfg.link(&key, 0).unwrap().unwrap();
        assert_eq!(link.local, 17);
        assert_eq!(link.net.index_of(&keys::node_key(9, 33, 0).public().to_peer_id()), Some(33));
        let stranger = Keypair::generate_ed25519().public().to_peer_id();
        assert_eq!(link.net.index_of(&stranger), Some(crate::net::latency_transport::derived_place(9, 50, &stranger)));
        // A node with its own key and the same model sits at its derived place.
        let own = EmulationFileConfig { swarm_seed: None, node_index: None, model_seed: Some(9), ..cfg.clone() };
        let k = Keypair::generate_ed25519();
        let l = own.link(&k, 0).unwrap().unwrap();
        assert_eq!(l.local, crate::net::latency_transport::derived_place(9, 50, &k.public().to_peer_id()));
    }

    #[test]
    fn bad_settings_are_errors() {
        let base = EmulationFileConfig { latency: Some("internet".into()), ..Default::default() };
        let k = Keypair::generate_ed25519();
        assert!(matches!(base.link(&k, 0), Err(EmulationError::NoModelNodes)));
        let no_seed = EmulationFileConfig { model_nodes: Some(5), ..base.clone() };
        assert!(matches!(no_seed.link(&k, 0), Err(EmulationError::NoModelSeed)));
        let bad = EmulationFileConfig { latency: Some("lan".into()), ..Default::default() };
        assert!(matches!(bad.latency_on(), Err(EmulationError::Latency(_))));
        let half = EmulationFileConfig { swarm_seed: Some(1), ..Default::default() };
        assert!(matches!(half.swarm_key(0), Err(EmulationError::HalfIdentity)));
        let out = EmulationFileConfig { swarm_seed: Some(1), node_index: Some(5), model_nodes: Some(5), ..base };
        assert!(matches!(out.swarm_key(0), Err(EmulationError::IndexOutOfRange { index: 5, nodes: 5 })));
        assert!(EmulationFileConfig::default().link(&k, 0).unwrap().is_none());
    }
}

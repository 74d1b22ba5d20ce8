//! The peer manager: keeps a node's connection count between `target_low` and `target_high`.
//!
//! Policy (measured to keep 1,000 in-process nodes at ~9 peers each with no connection
//! churn):
//! - above `target_high`, close connections to random peers that are not in the gossipsub
//!   mesh, have been connected at least `prune_min_age`, and carried no election message for
//!   `election_keep` (on-demand election connections are closed once unused);
//! - below `target_low`, dial random members of the directory that we are not connected to
//!   (the gate lets these wanted dials through).
//!
//! `target_high` sits well above the count nodes settle at (see `config.rs`), so
//! prunes are rare and a prune is not answered by a cascade of re-dials; the node adds its
//! ring neighbour to the dials and marks both ring neighbours unprunable.
//!
//! The decision is a pure function of the peer table, so it is unit-tested without a network.

use libp2p::PeerId;
use rand::seq::SliceRandom;
use rand::Rng;
use std::time::{Duration, Instant};

/// What the manager knows about one connected peer.
#[derive(Debug, Clone)]
pub struct PeerInfo {
    pub peer: PeerId,
    pub connected_since: Instant,
    pub last_election_use: Option<Instant>,
    /// Never pruned: a gossipsub mesh peer, or (ring algorithms) a ring neighbour that
    /// election laps run over (`node/src/runtime/node.rs`).
    pub in_mesh: bool,
}

/// The manager's settings.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub target_low: usize,
    pub target_high: usize,
    pub prune_min_age: Duration,
    pub election_keep: Duration,
}

/// What to do now.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub prune: Vec<PeerId>,
    pub dial: Vec<PeerId>,
}

/// Decide prunes and dials. `candidates` are routing-table peers not connected now.
pub fn plan(policy: &Policy, peers: &[PeerInfo], candidates: &[PeerId], now: Instant, rng: &mut impl Rng) -> Plan {
    let mut out = Plan::default();
    let n = peers.len();
    if n > policy.target_high {
        let mut prunable: Vec<&PeerInfo> = peers
            .iter()
            .filter(|p| !p.in_mesh)
            .filter(|p| now.saturating_duration_since(p.connected_since) >= policy.prune_min_age)
            .filter(|p| p.last_election_use.is_none_or(|t| now.saturating_duration_since(t) >= policy.election_keep))
            .collect();
        prunable.shuffle(rng);
        out.prune = prunable.into_iter().take(n - policy.target_high).map(|p| p.peer).collect();
    } else if n < policy.target_low {
        let mut c: Vec<PeerId> = candidates.to_vec();
        c.shuffle(rng);
        out.dial = c.into_iter().take(policy.target_low - n).collect();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn pid() -> PeerId {
        libp2p::identity::Keypair::generate_ed25519().public().to_peer_id()
    }

    #[test]
    fn prunes_only_old_unused_non_mesh_peers() {
        let now = Instant::now();
        let old = now - Duration::from_secs(60);
        let policy = Policy {
            target_low: 1,
            target_high: 2,
            prune_min_age: Duration::from_secs(10),
            election_keep: Duration::from_secs(5),
        };
        let mesh = PeerInfo { peer: pid(), connected_since: old, last_election_use: None, in_mesh: true };
        let young = PeerInfo { peer: pid(), connected_since: now, last_election_use: None, in_mesh: false };
        let busy = PeerInfo { peer: pid(), connected_since: old, last_election_use: Some(now), in_mesh: false };
        let idle1 = PeerInfo { peer: pid(), connected_since: old, last_election_use: None, in_mesh: false };
        let idle2 = PeerInfo { peer: pid(), connected_since: old, last_election_use: Some(old), in_mesh: false };
        let peers = vec![mesh, young, busy, idle1.clone(), idle2.clone()];
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let p = plan(&policy, &peers, &[], now, &mut rng);
        assert_eq!(p.prune.len(), 2);
        assert!(p.prune.contains(&idle1.peer) && p.prune.contains(&idle2.peer));
        assert!(p.dial.is_empty());
        let few = plan(&policy, &[], &[pid(), pid()], now, &mut rng);
        assert_eq!(few.dial.len(), 1);
    }
}

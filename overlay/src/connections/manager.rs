//! Which established connections a node keeps, closes and opens: the count kept between
//! `target_low` and `target_high`.
//!
//! The rules (measured to keep 1,000 in-process nodes at about 9 peers each without
//! connection churn):
//! - A connection is **kept** whatever the count if it carries structure: a gossipsub mesh
//!   link, a ring neighbour that election laps run over (the list-based ring and
//!   Chang-Roberts), or a link the super-peer overlay holds (head, members, overlay
//!   neighbours).
//! - Above `target_high`, random other connections are **closed** if they are at least
//!   `prune_min_age` old and carried no election message for `election_keep` (connections
//!   opened for one election are closed once it is over).
//! - Below `target_low`, random members that are not connected are **dialled**.
//! - The ring successor is dialled whenever it is not connected: a lap needs it.
//!
//! `target_high` sits well above the count nodes settle at, so closes are rare and a close
//! is not answered by a cascade of dials.
//!
//! There is no paper for this; it is the connection manager every libp2p deployment has
//! (go-libp2p's `connmgr` trims to a low-water mark above a high-water mark, protecting
//! tagged peers, with a grace period for new connections). Ours trims to the high-water mark
//! itself, not below it, so that trimming never drops the count under what the node dials
//! towards.
//!
//! Sans-IO: the caller passes the peer table, the candidates, the time and the RNG, and gets
//! a [`Plan`].

use crate::time::Time;
use rand::seq::SliceRandom;
use rand::Rng;
use std::time::Duration;

/// Why a connection must not be closed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Keep {
    /// A gossipsub mesh link.
    pub mesh: bool,
    /// A ring neighbour (predecessor or successor) of the ring algorithms.
    pub ring: bool,
    /// A link the super-peer overlay holds.
    pub superpeer: bool,
}

impl Keep {
    pub fn any(self) -> bool {
        self.mesh || self.ring || self.superpeer
    }
}

/// What the manager knows about one connected peer.
#[derive(Debug, Clone)]
pub struct PeerInfo<P> {
    pub peer: P,
    pub connected_since: Time,
    /// The last election or super-peer message over this connection.
    pub last_use: Option<Time>,
    pub keep: Keep,
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
#[derive(Debug, PartialEq, Eq)]
pub struct Plan<P> {
    pub close: Vec<P>,
    pub dial: Vec<P>,
}

/// Decide closes and dials. `candidates` are members that are not connected now; they are
/// read only when the node is below `target_low`. `ring_successor`, when the ring algorithms
/// run, is dialled if it is not connected.
pub fn plan<P: Copy + PartialEq>(
    policy: &Policy,
    peers: &[PeerInfo<P>],
    candidates: &[P],
    ring_successor: Option<P>,
    now: Time,
    rng: &mut impl Rng,
) -> Plan<P> {
    let mut out = Plan { close: Vec::new(), dial: Vec::new() };
    let n = peers.len();
    if n > policy.target_high {
        let mut closable: Vec<&PeerInfo<P>> = peers
            .iter()
            .filter(|p| !p.keep.any())
            .filter(|p| now.since(p.connected_since) >= policy.prune_min_age)
            .filter(|p| p.last_use.is_none_or(|t| now.since(t) >= policy.election_keep))
            .collect();
        closable.shuffle(rng);
        out.close = closable.into_iter().take(n - policy.target_high).map(|p| p.peer).collect();
    } else if n < policy.target_low {
        let mut c: Vec<P> = candidates.iter().copied().filter(|c| !peers.iter().any(|p| p.peer == *c)).collect();
        c.shuffle(rng);
        c.truncate(policy.target_low - n);
        out.dial = c;
    }
    if let Some(s) = ring_successor {
        if !peers.iter().any(|p| p.peer == s) && !out.dial.contains(&s) {
            out.dial.push(s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn policy() -> Policy {
        Policy {
            target_low: 1,
            target_high: 2,
            prune_min_age: Duration::from_secs(10),
            election_keep: Duration::from_secs(5),
        }
    }

    fn peer(peer: u32, since: Time, last_use: Option<Time>, keep: Keep) -> PeerInfo<u32> {
        PeerInfo { peer, connected_since: since, last_use, keep }
    }

    #[test]
    fn closes_only_old_unused_unkept_connections() {
        let now = Time::from_millis(60_000);
        let old = Time::ZERO;
        let free = Keep::default();
        let peers = vec![
            peer(1, old, None, Keep { mesh: true, ..free }),
            peer(2, old, None, Keep { ring: true, ..free }),
            peer(3, old, None, Keep { superpeer: true, ..free }),
            peer(4, now, None, free),
            peer(5, old, Some(now), free),
            peer(6, old, None, free),
            peer(7, old, Some(old), free),
        ];
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let p = plan(&policy(), &peers, &[], None, now, &mut rng);
        let mut closed = p.close.clone();
        closed.sort();
        assert_eq!(closed, vec![6, 7], "only the idle, old, unkept ones, even if fewer than the excess");
        assert!(p.dial.is_empty());
    }

    #[test]
    fn closes_down_to_the_high_mark_not_below() {
        let now = Time::from_millis(60_000);
        let peers: Vec<_> = (0..10).map(|i| peer(i, Time::ZERO, None, Keep::default())).collect();
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let p = plan(&policy(), &peers, &[], None, now, &mut rng);
        assert_eq!(p.close.len(), 8);
    }

    #[test]
    fn dials_members_below_the_low_mark_and_the_ring_successor() {
        let now = Time::from_millis(1);
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let p = plan(
            &Policy { target_low: 3, ..policy() },
            &[peer(9, now, None, Keep::default())],
            &[9, 10, 11, 12],
            None,
            now,
            &mut rng,
        );
        assert_eq!(p.dial.len(), 2);
        assert!(!p.dial.contains(&9), "a connected peer is not dialled");
        let s = plan(&policy(), &[peer(9, now, None, Keep::default())], &[], Some(4), now, &mut rng);
        assert_eq!(s.dial, vec![4], "the ring successor is dialled even at the low mark");
        let connected = plan(&policy(), &[peer(4, now, None, Keep::default())], &[], Some(4), now, &mut rng);
        assert!(connected.dial.is_empty());
    }
}

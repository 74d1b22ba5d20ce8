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
//! - Between the marks, once per `rotate_every` (each period drawn from 0.5-1.5 of it, so that
//!   nodes started together do not dial together), the **oldest** connection that could be
//!   pruned and is at least `rotate_every` old is closed and a random member that is not
//!   connected is dialled: a rotating sample.
//!
//! Why rotate: a node learns its Vivaldi coordinate from the RTTs of the peers it is connected
//! to, and with a fixed set of ~11 peers Vivaldi overfits them. On the Internet latency model
//! (`overlay/examples/vivaldi_error.rs`, N = 1,000, 11 neighbours) fixed neighbours end at a
//! median relative error of 0.147 after 100 rounds and 0.136 after 200; replacing one
//! neighbour every 1, 3 or 10 rounds gives 0.075, 0.095 and 0.114 after 100 rounds, with the
//! same number of connections. Serf and Consul get the same diversity by probing a random
//! member each period. Rotation needs the count above `target_low`, so that the close never
//! makes the node dial a second peer.
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
//! Sans-IO: the caller holds a [`PeerManager`] (the policy and when it next rotates), passes
//! the peer table, the candidates, the time and the RNG, and gets a [`Plan`].

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
    /// The mean period of rotation; `None`: never rotate.
    pub rotate_every: Option<Duration>,
}

/// What to do now.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan<P> {
    pub close: Vec<P>,
    pub dial: Vec<P>,
}

/// Whether the manager may close `p`: no structure on it, at least `min_age` old, and no
/// election or super-peer message over it for `election_keep`.
fn closable<P>(policy: &Policy, p: &PeerInfo<P>, min_age: Duration, now: Time) -> bool {
    !p.keep.any()
        && now.since(p.connected_since) >= min_age
        && p.last_use.is_none_or(|t| now.since(t) >= policy.election_keep)
}

/// The peer manager: the module's rules, and when it next rotates.
#[derive(Debug, Clone)]
pub struct PeerManager {
    policy: Policy,
    next_rotation: Option<Time>,
}

impl PeerManager {
    pub fn new(policy: Policy) -> PeerManager {
        PeerManager { policy, next_rotation: None }
    }

    /// Whether [`PeerManager::plan`] at `now` with `connected` peers reads its candidates
    /// (members that are not connected), so that a caller builds the list only then.
    pub fn wants_candidates(&self, connected: usize, now: Time) -> bool {
        connected < self.policy.target_low || self.rotation_due(connected, now)
    }

    fn rotation_due(&self, connected: usize, now: Time) -> bool {
        self.policy.rotate_every.is_some()
            && connected > self.policy.target_low
            && connected <= self.policy.target_high
            && self.next_rotation.is_some_and(|t| now >= t)
    }

    /// Decide closes and dials. `candidates` are members that are not connected now; they
    /// are read only below `target_low` or when a rotation is due ([`Self::wants_candidates`]).
    /// `ring_successor`, when the ring algorithms run, is dialled if it is not connected. A
    /// rotation closes the oldest rotatable connection and dials a random candidate (both or
    /// neither).
    pub fn plan<P: Copy + PartialEq>(
        &mut self,
        peers: &[PeerInfo<P>],
        candidates: &[P],
        ring_successor: Option<P>,
        now: Time,
        rng: &mut impl Rng,
    ) -> Plan<P> {
        let due = self.rotation_due(peers.len(), now);
        let policy = &self.policy;
        let mut out = Plan { close: Vec::new(), dial: Vec::new() };
        let n = peers.len();
        if n > policy.target_high {
            let mut closable: Vec<&PeerInfo<P>> =
                peers.iter().filter(|p| closable(policy, p, policy.prune_min_age, now)).collect();
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
        let Some(every) = self.policy.rotate_every else { return out };
        if self.next_rotation.is_none() || due {
            self.next_rotation = Some(now + every.mul_f64(rng.gen_range(0.5..1.5)));
        }
        if !due {
            return out;
        }
        let min_age = every.max(self.policy.prune_min_age);
        let oldest = peers.iter().filter(|p| closable(&self.policy, p, min_age, now)).min_by_key(|p| p.connected_since);
        let fresh: Vec<P> = candidates
            .iter()
            .copied()
            .filter(|c| !peers.iter().any(|p| p.peer == *c) && !out.dial.contains(c))
            .collect();
        if let (Some(old), Some(new)) = (oldest, fresh.choose(rng)) {
            out.close.push(old.peer);
            out.dial.push(*new);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use std::collections::HashSet;

    fn policy() -> Policy {
        Policy {
            target_low: 1,
            target_high: 2,
            prune_min_age: Duration::from_secs(10),
            election_keep: Duration::from_secs(5),
            rotate_every: None,
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
        let p = PeerManager::new(policy()).plan(&peers, &[], None, now, &mut rng);
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
        let p = PeerManager::new(policy()).plan(&peers, &[], None, now, &mut rng);
        assert_eq!(p.close.len(), 8);
    }

    #[test]
    fn dials_members_below_the_low_mark_and_the_ring_successor() {
        let now = Time::from_millis(1);
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let p = PeerManager::new(Policy { target_low: 3, ..policy() }).plan(
            &[peer(9, now, None, Keep::default())],
            &[9, 10, 11, 12],
            None,
            now,
            &mut rng,
        );
        assert_eq!(p.dial.len(), 2);
        assert!(!p.dial.contains(&9), "a connected peer is not dialled");
        let s = PeerManager::new(policy()).plan(&[peer(9, now, None, Keep::default())], &[], Some(4), now, &mut rng);
        assert_eq!(s.dial, vec![4], "the ring successor is dialled even at the low mark");
        let connected =
            PeerManager::new(policy()).plan(&[peer(4, now, None, Keep::default())], &[], Some(4), now, &mut rng);
        assert!(connected.dial.is_empty());
    }

    fn rotating(every_s: u64) -> Policy {
        Policy { target_low: 3, target_high: 20, rotate_every: Some(Duration::from_secs(every_s)), ..policy() }
    }

    /// A rotation: when, the peer closed, the peer dialled.
    type Rotation = (Time, u32, u32);

    /// Runs a manager every 2 s (the node's period) for `secs`, applying its plans at once:
    /// returns the closes and dials with their times, and the final peers.
    fn drive(
        m: &mut PeerManager,
        mut peers: Vec<PeerInfo<u32>>,
        members: u32,
        secs: u64,
        seed: u64,
    ) -> (Vec<Rotation>, Vec<PeerInfo<u32>>) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut rotations = Vec::new();
        for t in (100..100 + secs).step_by(2) {
            let now = Time::from_millis(t * 1000);
            let candidates: Vec<u32> =
                if m.wants_candidates(peers.len(), now) { (0..members).collect() } else { vec![] };
            let p = m.plan(&peers, &candidates, None, now, &mut rng);
            assert!(p.close.len() == p.dial.len() && p.close.len() <= 1, "one close for one dial: {p:?}");
            if let (Some(&c), Some(&d)) = (p.close.first(), p.dial.first()) {
                let oldest = peers
                    .iter()
                    .filter(|q| !q.keep.any() && q.last_use.is_none_or(|u| now.since(u) >= Duration::from_secs(5)))
                    .map(|q| q.connected_since)
                    .min();
                let closed = peers.iter().find(|q| q.peer == c).map(|q| q.connected_since);
                assert_eq!(closed, oldest, "the oldest prunable connection goes first");
                assert!(!peers.iter().any(|q| q.peer == d), "a connected peer is not dialled");
                peers.retain(|q| q.peer != c);
                peers.push(peer(d, now, None, Keep::default()));
                rotations.push((now, c, d));
            }
        }
        (rotations, peers)
    }

    #[test]
    fn rotates_one_old_connection_for_a_new_member_each_period() {
        let free = Keep::default();
        let mut peers = vec![peer(0, Time::ZERO, None, Keep { mesh: true, ..free })];
        peers.extend((1..10).map(|i| peer(i, Time::from_millis(i as u64 * 1000), None, free)));
        let mut m = PeerManager::new(rotating(15));
        let (rotations, end) = drive(&mut m, peers, 500, 600, 7);
        // 600 s at a mean period of 15 s (each drawn from 7.5-22.5 s, checked every 2 s).
        assert!((26..=60).contains(&rotations.len()), "{} rotations in 600 s", rotations.len());
        for w in rotations.windows(2) {
            let gap = w[1].0.since(w[0].0);
            assert!(gap >= Duration::from_secs(7) && gap <= Duration::from_secs(25), "gap {gap:?}");
        }
        assert_eq!(end.len(), 10, "the count stays where it was");
        assert!(end.iter().any(|q| q.peer == 0), "a mesh link is never rotated out");
        let first_closes: Vec<u32> = rotations.iter().take(9).map(|r| r.1).collect();
        assert_eq!(first_closes, (1..10).collect::<Vec<_>>(), "oldest first: a round robin over the peers");
        let distinct: HashSet<u32> = rotations.iter().map(|r| r.2).collect();
        assert!(distinct.len() + 3 >= rotations.len(), "fresh members, drawn at random");
    }

    #[test]
    fn does_not_rotate_at_the_low_mark_recent_or_used_connections_or_when_off() {
        let free = Keep::default();
        let at_low: Vec<_> = (0..3).map(|i| peer(i, Time::ZERO, None, free)).collect();
        let mut m = PeerManager::new(rotating(10));
        let (r, _) = drive(&mut m, at_low, 100, 300, 1);
        assert!(r.is_empty(), "a close at the low mark would make the node dial a second peer");
        let mut off = PeerManager::new(Policy { target_high: 20, ..policy() });
        let many: Vec<_> = (0..10).map(|i| peer(i, Time::ZERO, None, free)).collect();
        let (r, _) = drive(&mut off, many.clone(), 100, 300, 1);
        assert!(r.is_empty(), "rotation off");
        // Every connection in election use throughout: nothing to rotate.
        let mut busy = PeerManager::new(rotating(10));
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        for t in (100..400).step_by(2) {
            let now = Time::from_millis(t * 1000);
            let used: Vec<_> = many.iter().map(|q| PeerInfo { last_use: Some(now), ..q.clone() }).collect();
            let candidates: Vec<u32> = (0..100).collect();
            let p = busy.plan(&used, &candidates, None, now, &mut rng);
            assert!(p.close.is_empty() && p.dial.is_empty(), "{p:?}");
        }
        // Young connections wait until they are a period old.
        let mut young_m = PeerManager::new(rotating(60));
        let young: Vec<_> = (0..10).map(|i| peer(i, Time::from_millis(99_000), None, free)).collect();
        let (r, _) = drive(&mut young_m, young, 100, 300, 3);
        assert!(r.first().is_none_or(|f| f.0 >= Time::from_millis(159_000)), "{r:?}");
    }

    #[test]
    fn nodes_started_together_rotate_at_different_times() {
        let peers: Vec<_> = (0..10).map(|i| peer(i, Time::ZERO, None, Keep::default())).collect();
        let firsts: HashSet<Time> = (0..8)
            .filter_map(|seed| {
                let mut m = PeerManager::new(rotating(30));
                drive(&mut m, peers.clone(), 100, 60, seed).0.first().map(|r| r.0)
            })
            .collect();
        assert!(firsts.len() >= 4, "first rotations at {firsts:?}");
    }
}

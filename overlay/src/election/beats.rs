//! Who hears each of the leader's `Alive` beats, and how long a follower waits for one: the
//! rule shared by the bully family (`bully`, `fast_bully`) and the ring family
//! ([`super::watch`]).
//!
//! Seed 002 sends every beat to every member and has every member wait T1 (alive interval x
//! error factor). We depart from it: a beat goes to every member only once in
//! `alive_all_every` beats, counted from the leader's first beat, and on every beat to the
//! `alive_successors` highest-ranked members below the leader that are not reported down. A
//! member among the `alive_successors` ranked just below its leader waits T1; any other waits
//! T1 x `alive_all_every`.
//!
//! Why: one `Alive` a second to each of N members was most of a 1,000-node swarm's steady CPU,
//! as every member received it from each of its gossipsub mesh peers.
//! What it keeps: the members that would succeed a silent leader notice it after T1, as
//! before, and their election reaches everyone; in the bully family the highest of them is
//! the one the election chooses, so failover costs what it did. The others notice by
//! themselves only when those are gone or cut off too (a partition), after the longer wait.
//! A member that the leader counts among its successors because a higher one is down, but that
//! does not count itself, hears every beat and keeps the longer wait: harmless.
//!
//! `alive_all_every = 1` is seed 002's rule.

use crate::driver::Context;
use crate::election::down::Down;
use crate::election::{ElectionConfig, Message};
use crate::id::Rank;
use crate::membership::Membership;
use std::time::Duration;

/// The beat plan of one configuration (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BeatPlan {
    /// One beat in this many goes to every member; at least 1.
    all_every: u64,
    /// Members below the leader that hear every beat.
    successors: usize,
}

impl BeatPlan {
    pub fn new(cfg: &ElectionConfig) -> BeatPlan {
        BeatPlan {
            all_every: cfg.alive_all_every.max(1),
            successors: usize::try_from(cfg.alive_successors).unwrap_or(usize::MAX),
        }
    }

    /// Whether the leader's beat number `n` (0 = its first since it took the lead) goes to
    /// every member.
    pub fn to_everyone(&self, n: u64) -> bool {
        n % self.all_every == 0
    }

    /// The members below `leader` that hear every beat: its `successors` highest-ranked lower
    /// members not in `down`, highest first.
    pub fn successors<'a>(
        &self,
        group: &'a Membership,
        leader: &Rank,
        down: &'a Down,
    ) -> impl Iterator<Item = &'a Rank> {
        group.lower(leader).iter().rev().filter(move |r| !down.contains(&r.id)).take(self.successors)
    }

    /// Send the leader's beat number `n`: `Alive` to `everyone` (the caller's set of members
    /// to reach) on one beat in `alive_all_every`, else to `leader`'s successors not in
    /// `down`; to `everyone` also when the leader's rank is unknown.
    pub fn send_beat<'a>(
        &self,
        ctx: &mut Context<'_>,
        n: u64,
        group: &'a Membership,
        leader: Option<&Rank>,
        down: &'a Down,
        everyone: impl Iterator<Item = &'a Rank>,
    ) {
        match leader {
            Some(l) if !self.to_everyone(n) => {
                for r in self.successors(group, l, down) {
                    ctx.send(r.id, Message::Alive);
                }
            }
            _ => {
                for r in everyone {
                    ctx.send(r.id, Message::Alive);
                }
            }
        }
    }

    /// Whether follower `me` hears every beat of `leader` (it is ranked among the `successors`
    /// just below it, or above it, or every beat goes to everyone).
    pub fn hears_every_beat(&self, group: &Membership, me: &Rank, leader: &Rank) -> bool {
        if self.all_every <= 1 || me > leader {
            return true;
        }
        // Members ranked strictly between this process and its leader.
        let between = group.higher(me).len().saturating_sub(group.higher(leader).len() + 1);
        between < self.successors
    }

    /// How long follower `me` waits for a beat of `leader`: T1, or T1 x `alive_all_every` if
    /// it does not hear every beat.
    pub fn t1(&self, group: &Membership, me: &Rank, leader: &Rank, t1: Duration) -> Duration {
        if self.hears_every_beat(group, me, leader) {
            t1
        } else {
            crate::election::config::times(t1, self.all_every)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::NodeId;

    fn group(n: u64) -> Membership {
        Membership::new((0..n).map(|i| Rank { priority: i, id: NodeId::from_u64(i) }))
    }

    fn plan(all_every: u64, successors: u64) -> BeatPlan {
        BeatPlan::new(&ElectionConfig {
            alive_all_every: all_every,
            alive_successors: successors,
            ..Default::default()
        })
    }

    /// The successors are the highest below the leader, skipping those reported down.
    #[test]
    fn successors_skip_the_members_reported_down() {
        let g = group(6);
        let top = g.ranks()[5];
        let mut down = Down::default();
        let p = plan(5, 2);
        let ids = |down: &Down| p.successors(&g, &top, down).map(|r| r.priority).collect::<Vec<_>>();
        assert_eq!(ids(&down), vec![4, 3]);
        down.insert(&g, g.ranks()[4].id);
        assert_eq!(ids(&down), vec![3, 2]);
    }

    /// Beats 0, 5, 10 go to everyone; the waits are T1 for the two below the leader and
    /// T1 x 5 for the rest; with `alive_all_every = 1` everyone waits T1.
    #[test]
    fn the_two_below_the_leader_wait_t1_the_rest_five_times_longer() {
        let g = group(6);
        let r = g.ranks();
        let t1 = Duration::from_secs(3);
        let p = plan(5, 2);
        let everyone: Vec<u64> = (0..11).filter(|n| p.to_everyone(*n)).collect();
        assert_eq!(everyone, vec![0, 5, 10]);
        let waits: Vec<u64> = (0..5).map(|i| p.t1(&g, &r[i], &r[5], t1).as_secs()).collect();
        assert_eq!(waits, vec![15, 15, 15, 3, 3]);
        // A leader that is not the highest: the one above it hears every beat.
        assert_eq!(p.t1(&g, &r[5], &r[3], t1), t1);
        assert_eq!(p.t1(&g, &r[0], &r[3], t1), t1 * 5);
        let seed = plan(1, 2);
        assert!((0..5).all(|i| seed.t1(&g, &r[i], &r[5], t1) == t1));
    }
}

//! When a node starts a swarm-wide leader election, and when it takes its leader for down.
//!
//! The algorithms say what to do once an election runs; when to start one is left to the
//! application (Garcia-Molina: "when a process notices that the coordinator is no longer
//! responding"). Our rules, for a node whose member directory tells it the group:
//! - **Nothing before the directory has settled** (unchanged for `settle` and its last digests
//!   equal to random peers': the node's local evidence that every node sees the same group and
//!   so the same highest member). A node alone (no bootstrap peer, no connection, only itself
//!   known) waits only for `settle` of quiet.
//! - **Start-up**: the highest known member starts the election; the others wait, so start-up
//!   costs one election, not N concurrent ones.
//! - **Late joiner**: a node that names no leader, has started nothing, and whose directory has
//!   not changed since its first view of the group (nobody joined after it: the swarm settled
//!   and elected before it came) runs the algorithm's recovery rule (`Input::Recover`) at once.
//! - **Fallback**: a node that still names no leader `fallback` + 20 ms per member (an election
//!   over N members may take O(N) hops) + a random share of `fallback` after settling, and has
//!   heard no election message for `fallback`, starts one itself.
//! - **A higher member appears**: the highest member starts an election when the leader it
//!   names ranks lower.
//! - **Leader reported down**: the node still names it `grace` (T2 + T3) after the report and is
//!   in no election: it starts one.
//!
//! Node-initiated starts are at least `settle + fallback` apart.
//!
//! The leader is reported down (`Input::PeerDown`) when a send to it finds it unreachable, or
//! when its connection broke with an error (not a prune of ours) and a redial failed or did not
//! connect within `redial_timeout`. A node reported down that is heard from again is reported up.

use crate::id::{NodeId, Rank};
use crate::membership::Membership;
use crate::time::Time;
use rand::{Rng, RngCore};
use std::collections::HashSet;
use std::time::Duration;

/// The timing of the rules (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartConfig {
    pub settle: Duration,
    pub fallback: Duration,
    /// How long a leader reported down may still be named before an election starts.
    pub grace: Duration,
    /// How long a redial of a leader whose connection broke may take.
    pub redial_timeout: Duration,
    /// Whether the node starts elections at all (a node that only answers others' messages).
    pub enabled: bool,
}

/// The fallback's share per group member.
pub const FALLBACK_PER_MEMBER: Duration = Duration::from_millis(20);

/// What the node knows when it asks (module doc).
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The directory has settled swarm-wide, as far as this node can tell.
    pub settled: bool,
    /// The node has no bootstrap peer, no connection and knows only itself...
    pub isolated: bool,
    /// ... and its directory last changed at this time.
    pub directory_changed_at: Time,
    /// The directory has not changed since the node first knew another member.
    pub joined_settled: bool,
    pub in_election: bool,
    pub group: &'a Membership,
    pub me: Rank,
    pub leader: Option<NodeId>,
    /// When the node last received an election message.
    pub last_election_rx: Option<Time>,
}

/// What the node starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kickoff {
    /// `Input::Start`, for this reason.
    Start(&'static str),
    /// `Input::Recover` (a late joiner).
    Recover,
}

/// One node's start policy and leader failure reports.
#[derive(Debug, Clone)]
pub struct StartPolicy {
    cfg: StartConfig,
    last_start: Option<Time>,
    fallback_at: Option<Time>,
    leader: Option<NodeId>,
    leader_down_at: Option<Time>,
    reported_down: HashSet<NodeId>,
    /// A redial of the leader after its connection broke, and when it began.
    redial: Option<(NodeId, Time)>,
}

impl StartPolicy {
    pub fn new(cfg: StartConfig) -> StartPolicy {
        StartPolicy {
            cfg,
            last_start: None,
            fallback_at: None,
            leader: None,
            leader_down_at: None,
            reported_down: HashSet::new(),
            redial: None,
        }
    }

    /// Whether the node should start an election now, and how.
    pub fn poll(&mut self, now: Time, rng: &mut dyn RngCore, f: Facts<'_>) -> Option<Kickoff> {
        if f.in_election || !self.cfg.enabled {
            return None;
        }
        let alone = f.isolated && now.since(f.directory_changed_at) >= self.cfg.settle;
        if !alone && !f.settled {
            return None;
        }
        if self.last_start.is_some_and(|t| now.since(t) < self.cfg.settle + self.cfg.fallback) {
            return None;
        }
        let top = f.group.highest() == Some(f.me);
        let leader_rank = f.leader.and_then(|l| f.group.rank_of(&l));
        let kick = match f.leader {
            None if top => Some(Kickoff::Start("start-up: highest known member")),
            None if f.joined_settled && self.last_start.is_none() => Some(Kickoff::Recover),
            None => {
                let per_member = FALLBACK_PER_MEMBER * f.group.len().min(100_000) as u32;
                let fallback = self.cfg.fallback;
                let at = *self.fallback_at.get_or_insert_with(|| {
                    let jitter = rng.gen_range(0..=fallback.as_millis().min(u64::MAX as u128) as u64);
                    now + fallback + per_member + Duration::from_millis(jitter)
                });
                let quiet = f.last_election_rx.is_none_or(|t| now.since(t) >= fallback);
                (now >= at && quiet).then_some(Kickoff::Start("no leader after fallback delay"))
            }
            Some(_) if top && leader_rank.is_some_and(|r| r < f.me) => {
                Some(Kickoff::Start("a lower-ranked leader is named"))
            }
            Some(l) => match self.leader_down_at {
                Some(t) if now.since(t) >= self.cfg.grace && self.reported_down.contains(&l) => {
                    Some(Kickoff::Start("leader reported down"))
                }
                _ => None,
            },
        };
        if kick.is_some() {
            self.last_start = Some(now);
            self.fallback_at = None;
        }
        kick
    }

    /// The leader the node names changed (a new report-down clock, no redial).
    pub fn leader_changed(&mut self, leader: Option<NodeId>) {
        if leader != self.leader {
            self.leader = leader;
            self.leader_down_at = None;
            self.redial = None;
        }
    }

    /// `node` is taken for down. True when this is news (feed `Input::PeerDown`).
    pub fn report_down(&mut self, node: NodeId, now: Time) -> bool {
        if !self.reported_down.insert(node) {
            return false;
        }
        if Some(node) == self.leader {
            self.leader_down_at = Some(now);
        }
        true
    }

    /// `node` was heard from (a message, a new connection). True when it had been reported
    /// down (feed `Input::PeerUp`).
    pub fn heard_from(&mut self, node: NodeId) -> bool {
        self.reported_down.remove(&node)
    }

    /// The last connection to `node` closed; `error`: with an error (not an idle close), and
    /// not pruned by us. True when it is the leader and should be redialled to find out
    /// whether it is gone.
    pub fn connection_closed(&mut self, node: NodeId, error: bool, now: Time) -> bool {
        if error && Some(node) == self.leader {
            self.redial = Some((node, now));
            return true;
        }
        false
    }

    /// A redial still unconnected after `redial_timeout`: the leader it was for is down
    /// (returned, to report). `connected` says whether a connection to it is open now.
    pub fn redial_expired(&mut self, now: Time, connected: impl Fn(NodeId) -> bool) -> Option<NodeId> {
        let (node, at) = self.redial?;
        if now.since(at) <= self.cfg.redial_timeout {
            return None;
        }
        self.redial = None;
        (!connected(node)).then_some(node)
    }

    /// A dial to `node` failed and no connection to it is open: if it was the leader's redial,
    /// the leader is down (true: report it).
    pub fn dial_failed(&mut self, node: NodeId, connected: bool) -> bool {
        if !connected && self.redial.is_some_and(|(n, _)| n == node) {
            self.redial = None;
            return true;
        }
        false
    }

    /// Whether `node` is reported down now.
    pub fn is_down(&self, node: &NodeId) -> bool {
        self.reported_down.contains(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn cfg() -> StartConfig {
        StartConfig {
            settle: Duration::from_secs(2),
            fallback: Duration::from_secs(4),
            grace: Duration::from_millis(1500),
            redial_timeout: Duration::from_secs(5),
            enabled: true,
        }
    }

    fn r(i: u64) -> Rank {
        Rank::new(0, NodeId::from_u64(i))
    }

    fn facts<'a>(g: &'a Membership, me: u64, leader: Option<u64>) -> Facts<'a> {
        Facts {
            settled: true,
            isolated: false,
            directory_changed_at: Time::ZERO,
            joined_settled: false,
            in_election: false,
            group: g,
            me: r(me),
            leader: leader.map(|l| r(l).id),
            last_election_rx: None,
        }
    }

    #[test]
    fn only_the_highest_starts_at_start_up_and_the_others_fall_back() {
        let g = Membership::new((1..=5).map(r));
        let top = g.highest().expect("a group").id;
        let top_i = (1..=5).find(|&i| r(i).id == top).expect("in the group");
        let other = (1..=5).find(|&i| i != top_i).expect("another");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let now = Time::from_millis(10_000);
        let mut p = StartPolicy::new(cfg());
        assert_eq!(
            p.poll(now, &mut rng, facts(&g, top_i, None)),
            Some(Kickoff::Start("start-up: highest known member"))
        );
        assert_eq!(p.poll(now, &mut rng, facts(&g, top_i, None)), None, "starts are settle + fallback apart");
        let mut q = StartPolicy::new(cfg());
        let unsettled = Facts { settled: false, ..facts(&g, other, None) };
        assert_eq!(q.poll(now, &mut rng, unsettled), None, "nothing before the directory settled");
        assert_eq!(q.poll(now, &mut rng, facts(&g, other, None)), None, "waits for its fallback");
        let late = now + Duration::from_secs(4) + FALLBACK_PER_MEMBER * 5 + Duration::from_secs(4);
        assert_eq!(
            q.poll(late, &mut rng, facts(&g, other, None)),
            Some(Kickoff::Start("no leader after fallback delay"))
        );
        let mut j = StartPolicy::new(cfg());
        let joiner = Facts { joined_settled: true, ..facts(&g, other, None) };
        assert_eq!(j.poll(now, &mut rng, joiner), Some(Kickoff::Recover), "a late joiner recovers at once");
        let mut h = StartPolicy::new(cfg());
        assert_eq!(
            h.poll(now, &mut rng, facts(&g, top_i, Some(other))),
            Some(Kickoff::Start("a lower-ranked leader is named"))
        );
    }

    #[test]
    fn a_leader_reported_down_is_replaced_after_the_grace() {
        let g = Membership::new((1..=5).map(r));
        let top = g.highest().expect("a group").id;
        let top_i = (1..=5).find(|&i| r(i).id == top).expect("in the group");
        let me = (1..=5).find(|&i| i != top_i).expect("another");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let mut p = StartPolicy::new(cfg());
        p.leader_changed(Some(top));
        let t = Time::from_millis(20_000);
        assert!(p.connection_closed(top, true, t), "the leader's connection broke: redial");
        assert!(!p.connection_closed(r(me).id, true, t), "not the leader: nothing");
        assert_eq!(p.redial_expired(t + Duration::from_secs(5), |_| false), None, "still within the timeout");
        assert_eq!(p.redial_expired(t + Duration::from_secs(6), |_| false), Some(top));
        assert!(p.report_down(top, t + Duration::from_secs(6)));
        assert!(!p.report_down(top, t + Duration::from_secs(6)), "reported once");
        let f = facts(&g, me, Some(top_i));
        assert_eq!(p.poll(t + Duration::from_secs(7), &mut rng, f), None, "within the grace");
        assert_eq!(p.poll(t + Duration::from_secs(8), &mut rng, f), Some(Kickoff::Start("leader reported down")));
        assert!(p.heard_from(top), "heard again: reported up");
        assert!(!p.is_down(&top));
        // A failed redial reports at once; a redial that connected reports nothing.
        p.leader_changed(Some(r(me).id));
        assert!(p.connection_closed(r(me).id, true, t));
        assert!(!p.dial_failed(r(me).id, true), "connected meanwhile");
        assert!(p.dial_failed(r(me).id, false));
        assert!(!p.connection_closed(r(me).id, false, t), "an idle close is no sign of a crash");
    }
}

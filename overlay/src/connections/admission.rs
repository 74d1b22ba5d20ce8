//! The connection gate's rules: which connections a node lets in and which dials it lets
//! out, decided *before* they cost a handshake.
//!
//! Why a gate at all: with libp2p's defaults every node ends up connected to every other one
//! (Kademlia queries dial, gossipsub keeps the connections busy), and a limit checked only
//! after the security handshake lets early nodes fill their slots while late nodes get none.
//! The rules, over the count of established connections:
//! - an **inbound** connection is refused before its upgrade once `inbound_gate` connections
//!   are established;
//! - an **outbound** dial is refused before dialling once `outbound_gate` are established,
//!   unless the node itself *wants* that peer ([`Admission::want`]: bootstrap, the connection
//!   manager, an election or membership message); wanted dials pass up to `hard_cap`. In
//!   practice the refused dials are Kademlia's query dials. A dial by address alone (the
//!   node's own bootstrap) always passes.
//! - While the gate is **open** for the node's own DHT lookups
//!   ([`Admission::open_outbound_until`]), every dial passes up to `open_cap`,
//!   [`WANTED_HEADROOM`] below the hard cap (*ours*: in 200-node swarms lookups that filled a
//!   node to the hard cap left no room for wanted dials, and every refused election or
//!   super-peer message was taken for a dead peer). The open cap sits above the inbound gate,
//!   so a node keeps room for its own lookups whatever its peers' lookups do (below it, other
//!   nodes' lookups filled a node's slots and 50-77 % of its own lookups failed).
//! - A node that **serves** a super-peer cluster takes inbound connections up to the hard cap
//!   and keeps room for its members ([`Admission::set_serving`]); one that takes part in a
//!   cluster **re-election** keeps room for its group ([`Admission::set_election_group`]).
//!
//! It also remembers who refused the last failed dial to a peer ([`DialRefusal`]): this node
//! (a wanted dial refused at the hard cap, or denied by another of the node's behaviours), the
//! peer (it closed the connection before the handshake: alive, its gate full) or nobody
//! because nothing listened (gone). A failed send is classified with it
//! (`crate::detect::failure::dial_failure`), so that a refusal of our own is never reported as
//! a dead peer.
//!
//! There is no paper for this; it is ours, measured on the real swarm. It departs from
//! libp2p's `connection_limits` (which this sits in front of) in three ways: it decides
//! before the handshake, it tells wanted dials from query dials, and it keeps room for the
//! peers a role needs.
//!
//! Sans-IO: the caller reports connections established and closed and dials failed, passes
//! the time, and asks; `P` is the peer identifier.

use crate::time::Time;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::time::Duration;

/// How long a `want` mark lets dials to that peer through, and how long a refusal is
/// remembered.
pub const WANT_TTL: Duration = Duration::from_secs(30);
/// Slots between the open cap for lookup dials and the hard cap, kept for wanted dials.
pub const WANTED_HEADROOM: usize = 8;

/// The gate's three counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Inbound connections stop here (a serving node's go on to `hard_cap`).
    pub inbound_gate: usize,
    /// Dials the node does not want stop here.
    pub outbound_gate: usize,
    /// Nothing passes here.
    pub hard_cap: usize,
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("inbound refused before the handshake: {established} connections established (gate {gate})")]
    Inbound { established: usize, gate: usize },
    #[error("outbound dial refused before dialling: {established} connections established (gate {gate})")]
    Outbound { established: usize, gate: usize },
}

/// Who refused the last failed dial to a peer, or that nothing listened there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DialRefusal {
    /// No refusal seen: the dial failed for another reason (or did not fail).
    None,
    /// This node refused it: its gate at the hard cap, or another of its behaviours.
    Local,
    /// The peer took the connection and closed it before the handshake.
    ByPeer,
    /// Nothing listened at any address tried: not a refusal of the peer's, its absence.
    NoListener,
}

/// How a dial failed, as the transport tells it (the node maps its errors to these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DialFailed {
    /// One of this node's own behaviours denied the dial.
    Denied,
    /// The peer accepted the connection and closed it before the security handshake.
    ClosedBeforeHandshake,
    /// Nothing listened at any address tried.
    NoListener,
    /// Any other failure (aborted, wrong peer id, a timeout, ...).
    Other,
}

/// Counters the node reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub refused_inbound: u64,
    pub refused_outbound: u64,
    /// Every connection ever established (the "new connections" the swarm report rates).
    pub established_total: u64,
}

/// The gate's state (see the module doc).
#[derive(Debug)]
pub struct Admission<P> {
    limits: Limits,
    open_cap: usize,
    established: usize,
    per_peer: HashMap<P, usize>,
    wanted: HashMap<P, Time>,
    open_until: Option<Time>,
    /// Peers whose dial this node refused (at the hard cap, or another behaviour), and when.
    refused: HashMap<P, Time>,
    /// What the peer's end said to our last failed dial, and when.
    refused_by: HashMap<P, (DialRefusal, Time)>,
    serving: bool,
    members: HashSet<P>,
    election: HashSet<P>,
    counters: Counters,
}

fn fresh(t: Time, now: Time) -> bool {
    now.since(t) < WANT_TTL
}

impl<P: Copy + Eq + Hash> Admission<P> {
    pub fn new(limits: Limits) -> Self {
        Admission {
            open_cap: limits.outbound_gate.max(limits.hard_cap.saturating_sub(WANTED_HEADROOM)),
            limits,
            established: 0,
            per_peer: HashMap::new(),
            wanted: HashMap::new(),
            open_until: None,
            refused: HashMap::new(),
            refused_by: HashMap::new(),
            serving: false,
            members: HashSet::new(),
            election: HashSet::new(),
            counters: Counters::default(),
        }
    }

    /// While this node serves a super-peer cluster, inbound connections pass up to the hard
    /// cap, not only up to `inbound_gate` (*ours*: in a 200-node swarm a head whose slots
    /// other nodes' lookups had filled refused its own members' probes, the members took the
    /// refusal for a dead head, and 243 false reports set off re-elections). An inbound
    /// connection's peer is unknown before the handshake, so members cannot be told from
    /// others there.
    ///
    /// A serving node also keeps room for its `members`: a connection that is not to a
    /// member is refused (inbound: once the handshake names the peer; outbound: before
    /// dialling) when it would leave fewer free slots than there are members not connected
    /// (*ours*: otherwise lookups fill heads to the hard cap, members' probes are refused and
    /// alive heads are reported down, 102 times in one 200-node run).
    pub fn set_serving(&mut self, serving: bool, members: impl IntoIterator<Item = P>) {
        self.serving = serving;
        self.members.clear();
        if serving {
            self.members.extend(members);
        }
    }

    /// While this node takes part in a cluster re-election, inbound connections pass the gate
    /// by one slot more for each member of its group that is not connected (empty `peers`:
    /// none). Once the handshake names the peer, a connection above the inbound gate is
    /// refused unless the peer is in the group (*ours*: in a 200-node prefix swarm a member
    /// of a dead head's cluster sat at its inbound gate, a lower member's `Election`s to the
    /// higher ones were refused before the handshake, it heard no `Answer` and took the role
    /// beside the rightful winner). Members' dials to each other are wanted, so they pass up
    /// to the hard cap on the dialling side.
    pub fn set_election_group(&mut self, peers: impl IntoIterator<Item = P>) {
        self.election.clear();
        self.election.extend(peers);
    }

    /// Let dials to `peer` through (up to the hard cap) for the next [`WANT_TTL`]. The node
    /// marks a peer wanted *before* it dials it or sends it a request.
    pub fn want(&mut self, peer: P, now: Time) {
        self.wanted.insert(peer, now);
    }

    /// Let every dial through (up to the open cap) until `until`: the node's own Kademlia
    /// lookups run, and an iterative lookup must reach the peers it discovers.
    pub fn open_outbound_until(&mut self, until: Time) {
        if self.open_until.is_none_or(|t| t < until) {
            self.open_until = Some(until);
        }
    }

    /// Drop expired marks (the node's periodic tick).
    pub fn expire(&mut self, now: Time) {
        self.wanted.retain(|_, t| fresh(*t, now));
        self.refused.retain(|_, t| fresh(*t, now));
        self.refused_by.retain(|_, (_, t)| fresh(*t, now));
        if self.open_until.is_some_and(|t| t <= now) {
            self.open_until = None;
        }
    }

    /// An inbound connection, before its upgrade (its peer is not known yet).
    pub fn inbound(&mut self) -> Result<(), Refusal> {
        let gate = if self.serving {
            self.limits.hard_cap
        } else {
            self.limits.inbound_gate.saturating_add(self.election_room()).min(self.limits.hard_cap)
        };
        if self.established >= gate {
            self.counters.refused_inbound += 1;
            return Err(Refusal::Inbound { established: self.established, gate });
        }
        Ok(())
    }

    /// An inbound connection whose handshake named `peer` (not counted yet).
    pub fn inbound_from(&mut self, peer: &P) -> Result<(), Refusal> {
        let refusal = if self.takes_member_room(peer) {
            Some(self.limits.hard_cap.saturating_sub(self.member_room()))
        } else if self.takes_election_room(peer) {
            Some(self.limits.inbound_gate)
        } else {
            None
        };
        match refusal {
            Some(gate) => {
                self.counters.refused_inbound += 1;
                Err(Refusal::Inbound { established: self.established, gate })
            }
            None => Ok(()),
        }
    }

    /// A dial this node is about to make, to `peer` (`None`: by address only, the node's own
    /// bootstrap, which always passes).
    pub fn outbound(&mut self, peer: Option<P>, now: Time) -> Result<(), Refusal> {
        let Some(peer) = peer else { return Ok(()) };
        let gate = self.cap_for(&peer, now);
        if self.established >= gate || self.takes_member_room(&peer) {
            self.counters.refused_outbound += 1;
            if gate == self.limits.hard_cap {
                self.refused.insert(peer, now);
            }
            return Err(Refusal::Outbound { established: self.established, gate });
        }
        Ok(())
    }

    /// A connection to `peer` was established: it is reached, no refusal stands any more.
    pub fn on_established(&mut self, peer: P) {
        self.refused.remove(&peer);
        self.refused_by.remove(&peer);
        self.established += 1;
        *self.per_peer.entry(peer).or_default() += 1;
        self.counters.established_total += 1;
    }

    /// A connection to `peer` was closed.
    pub fn on_closed(&mut self, peer: &P) {
        if let Some(n) = self.per_peer.get_mut(peer) {
            self.established = self.established.saturating_sub(1);
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_peer.remove(peer);
            }
        }
    }

    /// A dial to `peer` failed.
    pub fn on_dial_failed(&mut self, peer: P, how: DialFailed, now: Time) {
        match how {
            DialFailed::Denied => {
                self.refused.insert(peer, now);
                self.refused_by.remove(&peer);
            }
            DialFailed::ClosedBeforeHandshake => {
                self.refused.remove(&peer);
                self.refused_by.insert(peer, (DialRefusal::ByPeer, now));
            }
            DialFailed::NoListener => {
                self.refused.remove(&peer);
                self.refused_by.insert(peer, (DialRefusal::NoListener, now));
            }
            DialFailed::Other => {
                self.refused.remove(&peer);
                self.refused_by.remove(&peer);
            }
        }
    }

    /// Whether the last failed dial to `peer`, within [`WANT_TTL`], was refused by this node:
    /// a send that failed for that reason says nothing about the peer.
    pub fn refused_locally(&self, peer: &P, now: Time) -> bool {
        self.refused.get(peer).is_some_and(|t| fresh(*t, now))
    }

    /// Who refused the last failed dial to `peer` within [`WANT_TTL`], if anyone.
    ///
    /// The marks are *not* consumed (*ours*): one failed dial fails every request queued for
    /// that peer, and each failure asks here. Consumed marks gave the first request "refused"
    /// and every later one "no refusal", i.e. unreachable; in the 200-node prefix swarm the
    /// members attaching to a new head at once had their `Attach`es reported undeliverable
    /// and the head taken for down. A mark lasts until the next dial to the peer fails
    /// otherwise, a connection to it is established, or [`WANT_TTL`] passes.
    pub fn dial_refusal(&self, peer: &P, now: Time) -> DialRefusal {
        if self.refused_locally(peer, now) {
            DialRefusal::Local
        } else if let Some((r, _)) = self.refused_by.get(peer).filter(|(_, t)| fresh(*t, now)) {
            *r
        } else {
            DialRefusal::None
        }
    }

    /// Established connections now.
    pub fn established(&self) -> usize {
        self.established
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// How many established connections a dial to `peer` may find and still pass.
    fn cap_for(&self, peer: &P, now: Time) -> usize {
        if self.wanted.get(peer).is_some_and(|t| fresh(*t, now)) {
            self.limits.hard_cap
        } else if self.open_until.is_some_and(|t| now < t) {
            self.open_cap
        } else {
            self.limits.outbound_gate
        }
    }

    fn not_connected(&self, peers: &HashSet<P>) -> usize {
        peers.iter().filter(|p| !self.per_peer.contains_key(*p)).count()
    }

    /// Slots above the inbound gate kept for the election group's members not connected now.
    fn election_room(&self) -> usize {
        self.not_connected(&self.election)
    }

    /// Whether an inbound connection from `peer` would take a slot above the inbound gate
    /// that is kept for the election group.
    fn takes_election_room(&self, peer: &P) -> bool {
        !self.serving
            && !self.election.is_empty()
            && !self.election.contains(peer)
            && self.established >= self.limits.inbound_gate
    }

    /// Slots kept free for members of the served cluster that are not connected now.
    fn member_room(&self) -> usize {
        if !self.serving {
            return 0;
        }
        self.not_connected(&self.members)
    }

    /// Whether a connection to `peer` would take a slot kept for members.
    fn takes_member_room(&self, peer: &P) -> bool {
        self.serving && !self.members.contains(peer) && self.established + self.member_room() >= self.limits.hard_cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { inbound_gate: 40, outbound_gate: 6, hard_cap: 72 };

    /// Peers 1_000_000 and up fill slots in the tests.
    fn fill(a: &mut Admission<u32>, to: usize) {
        while a.established() < to {
            let p = 1_000_000 + a.counters().established_total as u32;
            a.on_established(p);
        }
    }

    fn t(s: u64) -> Time {
        Time::from_millis(s * 1000)
    }

    #[test]
    fn lookup_dials_stop_below_the_hard_cap_and_wanted_refusals_are_remembered() {
        let mut a = Admission::new(Limits { inbound_gate: 64, ..LIMITS });
        let (p, q, now) = (1, 2, t(1));
        fill(&mut a, 6);
        assert!(a.outbound(Some(p), now).is_err(), "a closed gate refuses unwanted dials at outbound_gate");
        assert!(a.outbound(None, now).is_ok(), "a dial by address only passes");
        a.open_outbound_until(t(11));
        assert!(a.outbound(Some(p), now).is_ok(), "an open gate lets lookup dials through");
        fill(&mut a, 40);
        assert!(a.outbound(Some(q), now).is_ok(), "lookup dials pass above the inbound gate");
        fill(&mut a, 72 - WANTED_HEADROOM);
        assert!(a.outbound(Some(q), now).is_err(), "lookup dials stop at the open cap, below the hard cap");
        assert!(!a.refused_locally(&q, now), "a refused lookup dial is not a refused wanted dial");
        a.want(p, now);
        assert!(a.outbound(Some(p), now).is_ok(), "wanted dials pass above the open cap");
        fill(&mut a, 72);
        assert!(a.outbound(Some(p), now).is_err(), "the hard cap holds for wanted dials too");
        assert_eq!(a.dial_refusal(&p, now), DialRefusal::Local, "a wanted dial refused at the hard cap is remembered");
        assert_eq!(a.dial_refusal(&p, now), DialRefusal::Local, "for every request the failed dial failed");
        assert_eq!(a.dial_refusal(&p, t(40)), DialRefusal::None, "for WANT_TTL");
        assert_eq!(a.counters().refused_outbound, 3);
    }

    #[test]
    fn marks_expire_and_the_open_gate_closes() {
        let mut a = Admission::new(LIMITS);
        fill(&mut a, 6);
        a.want(1, t(0));
        a.open_outbound_until(t(10));
        a.open_outbound_until(t(5));
        assert!(a.outbound(Some(1), t(29)).is_ok(), "wanted within WANT_TTL");
        assert!(a.outbound(Some(2), t(9)).is_ok(), "a shorter opening does not shorten a longer one");
        a.expire(t(31));
        assert!(a.outbound(Some(1), t(31)).is_err(), "the want mark expired");
        assert!(a.outbound(Some(2), t(31)).is_err(), "the gate closed");
        assert!(a.wanted.is_empty() && a.open_until.is_none(), "expired marks are dropped");
    }

    #[test]
    fn failed_dials_tell_who_refused() {
        let mut a = Admission::new(LIMITS);
        let now = t(1);
        a.on_dial_failed(1, DialFailed::Denied, now);
        assert_eq!(a.dial_refusal(&1, now), DialRefusal::Local, "a denial by another behaviour is our own");
        a.on_dial_failed(1, DialFailed::ClosedBeforeHandshake, now);
        assert_eq!(a.dial_refusal(&1, now), DialRefusal::ByPeer, "a later failure replaces the mark");
        a.on_dial_failed(1, DialFailed::NoListener, now);
        assert_eq!(a.dial_refusal(&1, now), DialRefusal::NoListener);
        a.on_dial_failed(1, DialFailed::Other, now);
        assert_eq!(a.dial_refusal(&1, now), DialRefusal::None, "a failure of another kind clears it");
        a.on_dial_failed(2, DialFailed::ClosedBeforeHandshake, now);
        a.on_established(2);
        assert_eq!(a.dial_refusal(&2, now), DialRefusal::None, "a connection clears it");
    }

    #[test]
    fn a_serving_node_keeps_room_for_its_members() {
        let mut a = Admission::new(LIMITS);
        let members: Vec<u32> = (10..20).collect();
        let (other, member, now) = (1, members[0], t(1));
        a.set_serving(true, members.iter().copied());
        fill(&mut a, 61);
        assert!(a.inbound_from(&other).is_ok(), "61 + 10 members' room < 72: room for another peer");
        fill(&mut a, 62);
        assert!(a.inbound_from(&other).is_err(), "the last 10 slots are the members'");
        assert!(a.inbound_from(&member).is_ok(), "a member gets in");
        a.open_outbound_until(t(10));
        a.want(other, now);
        assert!(a.outbound(Some(other), now).is_err(), "the head's own dials leave the members' room too");
        a.want(member, now);
        assert!(a.outbound(Some(member), now).is_ok(), "a dial to a member passes");
        // Members that are connected need no room kept.
        let mut a = Admission::new(LIMITS);
        a.set_serving(true, members.iter().copied());
        for m in &members {
            a.on_established(*m);
        }
        fill(&mut a, 71);
        assert_eq!(a.member_room(), 0);
        assert!(a.inbound_from(&other).is_ok(), "no member waiting: others may take the free slots");
        a.on_closed(&members[0]);
        a.on_closed(&members[0]);
        assert_eq!(a.established(), 70, "a close of a peer not connected counts nothing");
        a.set_serving(false, members.iter().copied());
        assert_eq!(a.member_room(), 0, "not serving: nothing kept");
    }

    #[test]
    fn a_serving_node_takes_inbound_connections_up_to_the_hard_cap() {
        let mut a = Admission::<u32>::new(LIMITS);
        fill(&mut a, 40);
        assert!(a.inbound().is_err(), "inbound stops at the inbound gate");
        a.set_serving(true, []);
        assert!(a.inbound().is_ok(), "a super peer takes its members above the inbound gate");
        fill(&mut a, 72);
        assert_eq!(a.inbound(), Err(Refusal::Inbound { established: 72, gate: 72 }), "up to the hard cap");
        a.set_serving(false, []);
        assert!(a.inbound().is_err(), "no longer serving: the inbound gate again");
        assert_eq!(a.counters().refused_inbound, 3);
    }

    #[test]
    fn an_election_keeps_room_for_its_group() {
        let mut a = Admission::new(LIMITS);
        let group: Vec<u32> = (10..15).collect();
        let other = 1;
        fill(&mut a, 40);
        assert!(a.inbound().is_err(), "no election: the inbound gate");
        a.set_election_group(group.iter().copied());
        assert!(a.inbound().is_ok(), "five members not connected: five slots above the gate");
        assert!(a.inbound_from(&other).is_err(), "a peer outside the group is refused once it is known");
        assert!(a.inbound_from(&group[0]).is_ok(), "a member of the group gets in");
        fill(&mut a, 44);
        assert!(a.inbound().is_ok(), "44 < 40 + 5");
        fill(&mut a, 45);
        assert!(a.inbound().is_err(), "the room is the group's size, no more");
        // Members that are connected need no room kept.
        let mut a = Admission::new(LIMITS);
        a.set_election_group(group.iter().copied());
        for m in &group {
            a.on_established(*m);
        }
        assert_eq!(a.election_room(), 0);
        fill(&mut a, 40);
        assert!(a.inbound().is_err(), "every member connected: the inbound gate again");
        // Below the gate nobody is refused for the group's sake; after the election nobody at all.
        let mut a = Admission::new(LIMITS);
        a.set_election_group(group.iter().copied());
        fill(&mut a, 39);
        assert!(a.inbound_from(&other).is_ok(), "room below the gate is anyone's");
        fill(&mut a, 40);
        a.set_election_group([]);
        assert!(a.inbound().is_err(), "the election is over: the inbound gate again");
        assert!(a.inbound_from(&other).is_ok(), "no group: no refusal after the handshake");
    }
}

//! The connection gate: refuses connections *before* they cost a handshake.
//!
//! Why: with libp2p's defaults every node ends up
//! connected to every other one (kad queries dial, gossipsub keeps the connections busy), and
//! `connection_limits` alone refuses only after a full noise handshake, which lets early nodes
//! fill their slots while late nodes get none. This behaviour counts established connections
//! and
//! - refuses an inbound connection in `handle_pending_inbound_connection` (before the
//!   upgrade) once `inbound_gate` connections are established;
//! - refuses an outbound dial in `handle_pending_outbound_connection` (before dialling) once
//!   `outbound_gate` connections are established, unless the node itself *wants* that peer
//!   (bootstrap, peer manager, a pending election or membership message): those pass up to
//!   the hard cap. In practice the refused dials are kad's query dials.
//!
//! A node that serves a cluster, or takes part in a cluster's re-election, keeps room for
//! that cluster's members above the inbound gate (`set_serving`, `set_election_group`).
//!
//! It also serves the node's address book to the swarm: addresses learned from membership
//! sync are returned from `handle_pending_outbound_connection`, so a request to a peer we are
//! not connected to can dial it.
//!
//! Assumption: the node marks a peer as wanted (`want`) *before* it asks libp2p to dial it or
//! to send it a request. Wanted marks expire after `WANT_TTL`.
//!
//! While the gate is *open* for the super-peer driver's DHT lookups (`open_outbound_until`),
//! kad's dials pass up to `open_cap`, [`WANTED_HEADROOM`] below the hard cap, not up to the
//! hard cap itself (*ours*: in 200-node swarms, lookups that may fill a node to the hard cap
//! leave no room for wanted dials, and every refused election or super-peer message is taken
//! for a dead peer). The open cap sits above the inbound gate, so a node keeps room for its
//! own lookups whatever its peers' lookups do (with it below the inbound gate, other nodes'
//! lookups filled a node's slots and 50-77 % of its own lookups failed and were retried). A
//! wanted dial refused at the hard cap is remembered ([`Gate::refused_locally`]) so that the
//! node does not report the peer down for a refusal that was its own. So is a dial that
//! another of the node's behaviours denied (`DialError::Denied`: `connection_limits`'
//! pending-dial or established caps), which would otherwise count as an unreachable head.

use crate::net::send_failure::{closed_before_handshake, no_listener, DialRefusal};
use libp2p::core::{transport::PortUse, Endpoint, Multiaddr};
use libp2p::swarm::{
    behaviour::ConnectionEstablished, dummy, ConnectionClosed, ConnectionDenied, ConnectionId, DialError, DialFailure,
    FromSwarm, NetworkBehaviour, THandler, THandlerInEvent, THandlerOutEvent, ToSwarm,
};
use libp2p::PeerId;
use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How long a `want` mark lets dials to that peer through.
pub const WANT_TTL: Duration = Duration::from_secs(30);
/// Slots between the open cap for lookup dials and the hard cap, kept for wanted dials.
pub const WANTED_HEADROOM: usize = 8;
/// Addresses kept per peer in the address book.
pub const MAX_ADDRS_PER_PEER: usize = 4;

/// Why a connection was refused.
#[derive(Debug, thiserror::Error)]
pub enum GateRefusal {
    #[error("inbound refused before the handshake: {established} connections established (gate {gate})")]
    Inbound { established: usize, gate: usize },
    #[error("outbound dial refused before dialling: {established} connections established (gate {gate})")]
    Outbound { established: usize, gate: usize },
}

/// Counters the node reports.
#[derive(Debug, Clone, Copy, Default)]
pub struct GateCounters {
    pub refused_inbound: u64,
    pub refused_outbound: u64,
    /// Every connection ever established (the "new connections" the swarm report rates).
    pub established_total: u64,
}

pub struct Gate {
    inbound_gate: usize,
    outbound_gate: usize,
    hard_cap: usize,
    established: HashMap<ConnectionId, PeerId>,
    per_peer: HashMap<PeerId, usize>,
    wanted: HashMap<PeerId, Instant>,
    addresses: HashMap<PeerId, Vec<Multiaddr>>,
    counters: GateCounters,
    /// Every outbound dial counts as wanted (up to `open_cap`) until then (see
    /// `open_outbound_until`).
    open_until: Option<Instant>,
    open_cap: usize,
    /// Peers whose wanted dial this gate refused at the hard cap, and when.
    refused: HashMap<PeerId, Instant>,
    /// What the peer's end said to our last failed dial, and when: it closed the connection
    /// before the handshake (`DialRefusal::ByPeer`, `send_failure::closed_before_handshake`)
    /// or nothing listened at any address tried (`DialRefusal::NoListener`,
    /// `send_failure::no_listener`).
    refused_by: HashMap<PeerId, (DialRefusal, Instant)>,
    /// This node serves a super-peer cluster: inbound connections pass up to the hard cap.
    serving: bool,
    /// The members of the cluster this node serves: room is kept for them (`set_serving`).
    members: HashSet<PeerId>,
    /// The group of the cluster re-election this node takes part in: room is kept for them
    /// (`set_election_group`).
    election: HashSet<PeerId>,
}

impl Gate {
    pub fn new(inbound_gate: usize, outbound_gate: usize, hard_cap: usize) -> Self {
        Gate {
            inbound_gate,
            outbound_gate,
            hard_cap,
            established: HashMap::new(),
            per_peer: HashMap::new(),
            wanted: HashMap::new(),
            addresses: HashMap::new(),
            counters: GateCounters::default(),
            open_until: None,
            open_cap: outbound_gate.max(hard_cap.saturating_sub(WANTED_HEADROOM)),
            refused: HashMap::new(),
            refused_by: HashMap::new(),
            serving: false,
            members: HashSet::new(),
            election: HashSet::new(),
        }
    }

    /// While this node serves a super-peer cluster, inbound connections pass up to the hard
    /// cap, not only up to `inbound_gate` (*ours*: in a 200-node swarm a head whose
    /// slots other nodes' lookups had filled refused its own members' probes before the
    /// handshake, the members took the refused dial for a dead head, and 243 false reports
    /// set off re-elections). An inbound connection's peer is unknown before the handshake,
    /// so members cannot be told from others here.
    ///
    /// *Ours*: a serving node also keeps room for its `members`. Otherwise other nodes' lookups
    /// and the head's own lookup dials fill heads to the hard cap, members' probes are refused
    /// ("multistream select failed": the head closed the new connection) and alive heads are
    /// reported down (102 in one 200-node run). A connection that is not to a
    /// member is refused (inbound: after the handshake, when the peer is known; outbound:
    /// before dialling) once it would leave fewer free slots than the members not connected.
    pub fn set_serving(&mut self, serving: bool, members: impl IntoIterator<Item = PeerId>) {
        self.serving = serving;
        self.members.clear();
        if serving {
            self.members.extend(members);
        }
    }

    /// While this node takes part in a cluster re-election, inbound connections pass the
    /// gate by one slot more for each member of its group that is not connected (empty
    /// `peers`: none). Once the handshake names the peer, a connection above the inbound gate
    /// is refused unless the peer is in the group (*ours*: in a 200-node prefix swarm the
    /// members of a dead head's cluster can sit at the inbound gate, and a lower member's `Election`s to all three higher ones were refused before the
    /// handshake; it heard no `Answer` and no `Coordinator`, and took the role beside the
    /// rightful winner). Members' dials to each other are wanted and pass up to the hard cap
    /// on the dialling side.
    pub fn set_election_group(&mut self, peers: impl IntoIterator<Item = PeerId>) {
        self.election.clear();
        self.election.extend(peers);
    }

    /// Slots above the inbound gate kept for the election group's members not connected now.
    fn election_room(&self) -> usize {
        self.not_connected(&self.election)
    }

    /// How many of `peers` have no established connection.
    fn not_connected(&self, peers: &HashSet<PeerId>) -> usize {
        peers.iter().filter(|p| !self.per_peer.contains_key(*p)).count()
    }

    /// Whether an inbound connection from `peer` (not yet counted) would take a slot above
    /// the inbound gate that is kept for the election group.
    fn takes_election_room(&self, peer: &PeerId) -> bool {
        !self.serving
            && !self.election.is_empty()
            && !self.election.contains(peer)
            && self.established.len() >= self.inbound_gate
    }

    /// Slots kept free for members of the served cluster that are not connected now.
    fn member_room(&self) -> usize {
        if !self.serving {
            return 0;
        }
        self.not_connected(&self.members)
    }

    /// Whether a connection to `peer` (not yet counted) would take a slot kept for members.
    fn takes_member_room(&self, peer: &PeerId) -> bool {
        self.serving && !self.members.contains(peer) && self.established.len() + self.member_room() >= self.hard_cap
    }

    /// Whether the last failed dial to `peer`, within `WANT_TTL`, was refused by this node
    /// (this gate at its hard cap, or another behaviour's `DialError::Denied`): a send that
    /// failed for that reason says nothing about the peer.
    pub fn refused_locally(&self, peer: &PeerId) -> bool {
        self.refused.get(peer).is_some_and(|t| t.elapsed() < WANT_TTL)
    }

    /// Who refused the last failed dial to `peer` within `WANT_TTL`, if anyone: our own node
    /// ([`Self::refused_locally`]), the peer itself, which closed the connection before the
    /// handshake (it is alive; `node/src/net/send_failure.rs`), or nobody because nothing
    /// listened at any of its addresses (it is gone).
    ///
    /// The marks are *not* consumed (*ours*): one failed dial fails
    /// every request queued for that peer, and each failure asks here. Consumed marks gave
    /// the first request "refused" and every later one "no refusal", i.e. unreachable, and
    /// in the 200-node prefix swarm the members attaching to a new head at once had their
    /// `Attach`es (queued beside a `Hello`) reported undeliverable, the head taken for
    /// down. A mark lasts until the next dial to the peer fails otherwise, a connection to
    /// it is established, or `WANT_TTL` passes.
    pub fn dial_refusal(&self, peer: &PeerId) -> DialRefusal {
        if self.refused_locally(peer) {
            DialRefusal::Local
        } else if let Some((r, _)) = self.refused_by.get(peer).filter(|(_, t)| t.elapsed() < WANT_TTL) {
            *r
        } else {
            DialRefusal::None
        }
    }

    /// Let dials to `peer` through (up to the hard cap) for the next `WANT_TTL`.
    pub fn want(&mut self, peer: PeerId) {
        self.wanted.insert(peer, Instant::now());
    }

    /// Remember addresses of `peer` (newest first, bounded).
    pub fn add_addresses(&mut self, peer: PeerId, addrs: impl IntoIterator<Item = Multiaddr>) {
        let book = self.addresses.entry(peer).or_default();
        for a in addrs {
            if !book.contains(&a) {
                book.insert(0, a);
            }
        }
        book.truncate(MAX_ADDRS_PER_PEER);
    }

    pub fn addresses_of(&self, peer: &PeerId) -> &[Multiaddr] {
        self.addresses.get(peer).map(|v| v.as_slice()).unwrap_or(&[])
    }

    pub fn established(&self) -> usize {
        self.established.len()
    }

    pub fn counters(&self) -> GateCounters {
        self.counters
    }

    /// Drop expired `want` marks (called from the node's periodic tick).
    pub fn expire(&mut self, now: Instant) {
        self.wanted.retain(|_, t| now.duration_since(*t) < WANT_TTL);
        self.refused.retain(|_, t| now.duration_since(*t) < WANT_TTL);
        self.refused_by.retain(|_, (_, t)| now.duration_since(*t) < WANT_TTL);
    }

    /// Let every outbound dial through (up to the hard cap) until `until`. The super-peer
    /// driver (`node/src/superpeer/driver.rs`) opens the gate while its own Kademlia lookups run, so
    /// that an iterative lookup reaches the peers it discovers instead of being refused.
    pub fn open_outbound_until(&mut self, until: Instant) {
        if self.open_until.is_none_or(|t| t < until) {
            self.open_until = Some(until);
        }
    }

    /// How many established connections a dial to `peer` may find and still pass.
    fn cap_for(&self, peer: &PeerId) -> usize {
        if self.wanted.get(peer).is_some_and(|t| t.elapsed() < WANT_TTL) {
            self.hard_cap
        } else if self.open_until.is_some_and(|t| Instant::now() < t) {
            self.open_cap
        } else {
            self.outbound_gate
        }
    }
}

impl NetworkBehaviour for Gate {
    type ConnectionHandler = dummy::ConnectionHandler;
    type ToSwarm = Infallible;

    fn handle_pending_inbound_connection(
        &mut self,
        _: ConnectionId,
        _: &Multiaddr,
        _: &Multiaddr,
    ) -> Result<(), ConnectionDenied> {
        let established = self.established.len();
        let gate = if self.serving {
            self.hard_cap
        } else {
            self.inbound_gate.saturating_add(self.election_room()).min(self.hard_cap)
        };
        if established >= gate {
            self.counters.refused_inbound += 1;
            return Err(ConnectionDenied::new(GateRefusal::Inbound { established, gate }));
        }
        Ok(())
    }

    fn handle_established_inbound_connection(
        &mut self,
        _: ConnectionId,
        peer: PeerId,
        _: &Multiaddr,
        _: &Multiaddr,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        if self.takes_member_room(&peer) {
            self.counters.refused_inbound += 1;
            let (established, gate) = (self.established.len(), self.hard_cap.saturating_sub(self.member_room()));
            return Err(ConnectionDenied::new(GateRefusal::Inbound { established, gate }));
        }
        if self.takes_election_room(&peer) {
            self.counters.refused_inbound += 1;
            let (established, gate) = (self.established.len(), self.inbound_gate);
            return Err(ConnectionDenied::new(GateRefusal::Inbound { established, gate }));
        }
        Ok(dummy::ConnectionHandler)
    }

    fn handle_pending_outbound_connection(
        &mut self,
        _: ConnectionId,
        maybe_peer: Option<PeerId>,
        _: &[Multiaddr],
        _: Endpoint,
    ) -> Result<Vec<Multiaddr>, ConnectionDenied> {
        let established = self.established.len();
        let Some(peer) = maybe_peer else {
            // A dial by address only: the node's own bootstrap dials.
            return Ok(vec![]);
        };
        let gate = self.cap_for(&peer);
        if established >= gate || self.takes_member_room(&peer) {
            self.counters.refused_outbound += 1;
            if gate == self.hard_cap {
                self.refused.insert(peer, Instant::now());
            }
            return Err(ConnectionDenied::new(GateRefusal::Outbound { established, gate }));
        }
        Ok(self.addresses_of(&peer).to_vec())
    }

    fn handle_established_outbound_connection(
        &mut self,
        _: ConnectionId,
        _: PeerId,
        _: &Multiaddr,
        _: Endpoint,
        _: PortUse,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        Ok(dummy::ConnectionHandler)
    }

    fn on_swarm_event(&mut self, event: FromSwarm) {
        match event {
            FromSwarm::ConnectionEstablished(ConnectionEstablished { peer_id, connection_id, .. }) => {
                // The peer is reached: no refusal stands any more.
                self.refused.remove(&peer_id);
                self.refused_by.remove(&peer_id);
                self.established.insert(connection_id, peer_id);
                *self.per_peer.entry(peer_id).or_default() += 1;
                self.counters.established_total += 1;
            }
            FromSwarm::DialFailure(DialFailure { peer_id: Some(peer), error: DialError::Denied { .. }, .. }) => {
                // Denied by one of this node's own behaviours, never by the remote.
                self.refused.insert(peer, Instant::now());
                self.refused_by.remove(&peer);
            }
            FromSwarm::DialFailure(DialFailure {
                peer_id: Some(peer), error: DialError::Transport(errors), ..
            }) => {
                self.refused.remove(&peer);
                if errors.iter().any(|(_, e)| closed_before_handshake(e)) {
                    self.refused_by.insert(peer, (DialRefusal::ByPeer, Instant::now()));
                } else if !errors.is_empty() && errors.iter().all(|(_, e)| no_listener(e)) {
                    // Absent from every address tried (a live one at any address is not).
                    self.refused_by.insert(peer, (DialRefusal::NoListener, Instant::now()));
                } else {
                    self.refused_by.remove(&peer);
                }
            }
            FromSwarm::DialFailure(DialFailure { peer_id: Some(peer), .. }) => {
                // Any other failure (aborted, wrong peer id, ...): the last dial was not refused.
                self.refused.remove(&peer);
                self.refused_by.remove(&peer);
            }
            FromSwarm::ConnectionClosed(ConnectionClosed { peer_id, connection_id, .. }) => {
                self.established.remove(&connection_id);
                if let Some(n) = self.per_peer.get_mut(&peer_id) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        self.per_peer.remove(&peer_id);
                    }
                }
            }
            _ => {}
        }
    }

    fn on_connection_handler_event(&mut self, _: PeerId, _: ConnectionId, event: THandlerOutEvent<Self>) {
        match event {}
    }

    fn poll(&mut self, _: &mut Context<'_>) -> Poll<ToSwarm<Self::ToSwarm, THandlerInEvent<Self>>> {
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(g: &mut Gate, to: usize) {
        while g.established.len() < to {
            let id = ConnectionId::new_unchecked(g.established.len());
            g.established.insert(id, PeerId::random());
        }
    }

    fn dial(g: &mut Gate, p: PeerId) -> bool {
        g.handle_pending_outbound_connection(ConnectionId::new_unchecked(1_000_000), Some(p), &[], Endpoint::Dialer)
            .is_ok()
    }

    #[test]
    fn lookup_dials_stop_below_the_hard_cap_and_wanted_refusals_are_remembered() {
        let mut g = Gate::new(64, 6, 72);
        let (p, q) = (PeerId::random(), PeerId::random());
        fill(&mut g, 6);
        assert!(!dial(&mut g, p), "a closed gate refuses unwanted dials at outbound_gate");
        g.open_outbound_until(Instant::now() + Duration::from_secs(10));
        assert!(dial(&mut g, p), "an open gate lets lookup dials through");
        fill(&mut g, 40);
        assert!(dial(&mut g, q), "lookup dials pass above the inbound gate");
        fill(&mut g, 72 - WANTED_HEADROOM);
        assert!(!dial(&mut g, q), "lookup dials stop at the open cap, below the hard cap");
        assert!(!g.refused_locally(&q), "a refused lookup dial is not a refused wanted dial");
        g.want(p);
        assert!(dial(&mut g, p), "wanted dials pass above the open cap");
        fill(&mut g, 72);
        assert!(!dial(&mut g, p), "the hard cap holds for wanted dials too");
        assert!(g.refused_locally(&p), "a wanted dial refused at the hard cap is remembered");
        assert!(g.refused_locally(&p), "for every request the failed dial failed (not consumed)");
    }

    #[test]
    fn a_dial_another_behaviour_denied_counts_as_refused_locally() {
        let mut g = Gate::new(40, 6, 72);
        let p = PeerId::random();
        let cause = ConnectionDenied::new(std::io::Error::other("pending outgoing connections limit"));
        let error = DialError::Denied { cause };
        g.on_swarm_event(FromSwarm::DialFailure(DialFailure {
            peer_id: Some(p),
            error: &error,
            connection_id: ConnectionId::new_unchecked(7),
        }));
        assert!(g.refused_locally(&p), "a denial by connection_limits is our own refusal");
        assert_eq!(g.dial_refusal(&p), DialRefusal::Local, "asked again by the next failed request");
        assert_eq!(g.dial_refusal(&p), DialRefusal::Local);
        g.on_swarm_event(FromSwarm::DialFailure(DialFailure {
            peer_id: Some(p),
            error: &DialError::Aborted,
            connection_id: ConnectionId::new_unchecked(9),
        }));
        assert_eq!(g.dial_refusal(&p), DialRefusal::None, "a later dial failed otherwise: the mark is gone");
        let q = PeerId::random();
        let error = DialError::Aborted;
        g.on_swarm_event(FromSwarm::DialFailure(DialFailure {
            peer_id: Some(q),
            error: &error,
            connection_id: ConnectionId::new_unchecked(8),
        }));
        assert!(!g.refused_locally(&q), "other dial failures are not");
    }

    fn established_inbound(g: &mut Gate, p: PeerId) -> bool {
        let a: Multiaddr = "/memory/1".parse().expect("address");
        g.handle_established_inbound_connection(ConnectionId::new_unchecked(3_000_000), p, &a, &a).is_ok()
    }

    #[test]
    fn a_serving_node_keeps_room_for_its_members() {
        let mut g = Gate::new(40, 6, 72);
        let members: Vec<PeerId> = (0..10).map(|_| PeerId::random()).collect();
        let (other, member) = (PeerId::random(), members[0]);
        g.set_serving(true, members.iter().copied());
        fill(&mut g, 61);
        assert!(established_inbound(&mut g, other), "61 + 10 members' room < 72: room for another peer");
        fill(&mut g, 62);
        assert!(!established_inbound(&mut g, other), "the last 10 slots are the members'");
        assert!(established_inbound(&mut g, member), "a member gets in");
        g.open_outbound_until(Instant::now() + Duration::from_secs(10));
        g.want(other);
        assert!(!dial(&mut g, other), "the head's own dials leave the members' room too");
        g.want(member);
        assert!(dial(&mut g, member), "a dial to a member passes");
        // Members that are connected need no room kept.
        let mut g = Gate::new(40, 6, 72);
        g.set_serving(true, members.iter().copied());
        for (k, m) in members.iter().enumerate() {
            g.established.insert(ConnectionId::new_unchecked(5_000_000 + k), *m);
            *g.per_peer.entry(*m).or_default() += 1;
        }
        fill(&mut g, 71);
        assert_eq!(g.member_room(), 0);
        assert!(established_inbound(&mut g, other), "no member waiting: others may take the free slots");
        g.set_serving(false, members.iter().copied());
        assert_eq!(g.member_room(), 0, "not serving: nothing kept");
    }

    fn inbound(g: &mut Gate) -> bool {
        let a: Multiaddr = "/memory/1".parse().expect("address");
        g.handle_pending_inbound_connection(ConnectionId::new_unchecked(2_000_000), &a, &a).is_ok()
    }

    #[test]
    fn a_serving_node_takes_inbound_connections_up_to_the_hard_cap() {
        let mut g = Gate::new(40, 6, 72);
        fill(&mut g, 40);
        assert!(!inbound(&mut g), "inbound stops at the inbound gate");
        g.set_serving(true, []);
        assert!(inbound(&mut g), "a super peer takes its members above the inbound gate");
        fill(&mut g, 72);
        assert!(!inbound(&mut g), "up to the hard cap");
        g.set_serving(false, []);
        fill(&mut g, 41);
        assert!(!inbound(&mut g), "no longer serving: the inbound gate again");
    }

    #[test]
    fn an_election_keeps_room_for_its_group() {
        let mut g = Gate::new(40, 6, 72);
        let group: Vec<PeerId> = (0..5).map(|_| PeerId::random()).collect();
        let other = PeerId::random();
        fill(&mut g, 40);
        assert!(!inbound(&mut g), "no election: the inbound gate");
        g.set_election_group(group.iter().copied());
        assert!(inbound(&mut g), "five members not connected: five slots above the gate");
        assert!(!established_inbound(&mut g, other), "a peer outside the group is refused once it is known");
        assert!(established_inbound(&mut g, group[0]), "a member of the group gets in");
        fill(&mut g, 44);
        assert!(inbound(&mut g), "44 < 40 + 5");
        fill(&mut g, 45);
        assert!(!inbound(&mut g), "the room is the group's size, no more");
        // Members that are connected need no room kept.
        let mut g = Gate::new(40, 6, 72);
        g.set_election_group(group.iter().copied());
        for (k, m) in group.iter().enumerate() {
            g.established.insert(ConnectionId::new_unchecked(6_000_000 + k), *m);
            *g.per_peer.entry(*m).or_default() += 1;
        }
        assert_eq!(g.election_room(), 0);
        fill(&mut g, 40);
        assert!(!inbound(&mut g), "every member connected: the inbound gate again");
        // Below the gate nobody is refused for the group's sake; after the election nobody at all.
        let mut g = Gate::new(40, 6, 72);
        g.set_election_group(group.iter().copied());
        fill(&mut g, 39);
        assert!(established_inbound(&mut g, other), "room below the gate is anyone's");
        fill(&mut g, 40);
        g.set_election_group([]);
        assert!(!inbound(&mut g), "the election is over: the inbound gate again");
        assert!(established_inbound(&mut g, other), "no group: no refusal after the handshake");
    }

    /// A swarm of one [`Gate`] on the plain memory transport (noise + yamux, no delays).
    fn gate_swarm(inbound_gate: usize) -> libp2p::Swarm<Gate> {
        libp2p::SwarmBuilder::with_new_identity()
            .with_tokio()
            .with_other_transport(|key| -> Result<_, Box<dyn std::error::Error + Send + Sync>> {
                use libp2p::core::upgrade::Version;
                use libp2p::core::Transport;
                Ok(libp2p::core::transport::MemoryTransport::default()
                    .upgrade(Version::V1)
                    .authenticate(libp2p::noise::Config::new(key)?)
                    .multiplex(libp2p::yamux::Config::default())
                    .boxed())
            })
            .expect("a memory transport")
            .with_behaviour(|_| Gate::new(inbound_gate, 8, 16))
            .expect("the gate behaviour")
            .build()
    }

    /// Dials `peer` at `addr` from `a` and returns the gate's verdict on the failed dial.
    async fn refusal_of_failed_dial(a: &mut libp2p::Swarm<Gate>, peer: PeerId, addr: Multiaddr) -> DialRefusal {
        use futures::StreamExt;
        use libp2p::swarm::{dial_opts::DialOpts, SwarmEvent};
        a.behaviour_mut().want(peer);
        a.dial(DialOpts::peer_id(peer).addresses(vec![addr]).build()).expect("the dial starts");
        loop {
            let ev = tokio::time::timeout(Duration::from_secs(20), a.select_next_some()).await.expect("no dial result");
            match ev {
                SwarmEvent::OutgoingConnectionError { peer_id: Some(p), .. } if p == peer => {
                    return a.behaviour_mut().dial_refusal(&peer)
                }
                SwarmEvent::ConnectionEstablished { .. } => panic!("the dial was expected to fail"),
                _ => {}
            }
        }
    }

    /// On real libp2p swarms, a peer whose gate refuses us before the handshake is
    /// told from a crashed one. A dead peer must never look refusing: its members would then
    /// never report it down.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refusing_peer_is_told_from_a_crashed_one() {
        use futures::StreamExt;
        let port: u64 = 7_700_000 + u64::from(std::process::id() % 100_000);
        let mut a = gate_swarm(16);
        // `b` refuses every inbound connection before the handshake (inbound gate 0).
        let mut b = gate_swarm(0);
        let b_id = *b.local_peer_id();
        let b_addr: Multiaddr = format!("/memory/{port}").parse().expect("address");
        b.listen_on(b_addr.clone()).expect("b listens");
        let b_task = tokio::spawn(async move {
            loop {
                b.select_next_some().await;
            }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(refusal_of_failed_dial(&mut a, b_id, b_addr.clone()).await, DialRefusal::ByPeer);
        // One failed dial fails every request queued for the peer: each must see the refusal.
        assert_eq!(a.behaviour().dial_refusal(&b_id), DialRefusal::ByPeer, "the mark is not consumed");
        // Crashed as the swarm runner crashes a node: its task is aborted.
        b_task.abort();
        let _ = b_task.await;
        assert_eq!(refusal_of_failed_dial(&mut a, b_id, b_addr).await, DialRefusal::NoListener, "a crashed peer");
        // A dial that fails otherwise (here: an address the transport cannot dial) clears it.
        assert_eq!(
            refusal_of_failed_dial(&mut a, b_id, "/ip4/127.0.0.1/tcp/1".parse().expect("address")).await,
            DialRefusal::None,
            "not a memory address"
        );
    }

    /// Over TCP, a port nothing listens on (a crashed node's) is told apart too.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_closed_tcp_port_means_nothing_listens() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
        let port = free.local_addr().expect("its address").port();
        drop(free);
        let mut a = libp2p::SwarmBuilder::with_new_identity()
            .with_tokio()
            .with_tcp(libp2p::tcp::Config::default(), libp2p::noise::Config::new, libp2p::yamux::Config::default)
            .expect("a TCP transport")
            .with_behaviour(|_| Gate::new(16, 8, 16))
            .expect("the gate behaviour")
            .build();
        let peer = PeerId::random();
        let addr: Multiaddr = format!("/ip4/127.0.0.1/tcp/{port}").parse().expect("address");
        assert_eq!(refusal_of_failed_dial(&mut a, peer, addr).await, DialRefusal::NoListener);
    }
}

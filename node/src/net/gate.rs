//! The connection gate's libp2p wiring: a `NetworkBehaviour` that asks the gate's rules
//! (`overlay::connections::admission`: inbound and outbound gates, wanted dials, the open
//! gate for lookups, room for a served cluster and a re-election group, who refused a failed
//! dial) in the swarm's hooks before a connection costs a handshake, and tells them about
//! connections established and closed and dials failed.
//!
//! What is wiring here: which hook asks which rule, and which libp2p dial errors make which
//! [`DialFailed`] (`node/src/net/send_failure.rs` reads the errors).
//!
//! It also serves the node's address book to the swarm: addresses learned from identify,
//! Kademlia and bootstrap are returned from `handle_pending_outbound_connection`, so a request
//! to a peer we are not connected to can dial it. Members' addresses are not copied here: the
//! node dials members at their directory record's addresses. The book is a bounded cache
//! ([`MAX_BOOK`] peers; a full book forgets an arbitrary other peer): any peer that connects
//! adds an entry, so unbounded it would grow with every identity a peer can make.

use crate::net::send_failure::{closed_before_handshake, no_listener};
use crate::runtime::clock::Clock;
use libp2p::core::{transport::PortUse, Endpoint, Multiaddr};
use libp2p::swarm::{
    behaviour::ConnectionEstablished, dummy, ConnectionClosed, ConnectionDenied, ConnectionId, DialError, DialFailure,
    FromSwarm, NetworkBehaviour, THandler, THandlerInEvent, THandlerOutEvent, ToSwarm,
};
use libp2p::PeerId;
pub use overlay::connections::admission::Counters as GateCounters;
use overlay::connections::{Admission, DialFailed, DialRefusal, Limits};
use std::collections::HashMap;
use std::convert::Infallible;
use std::task::{Context, Poll};
use std::time::Instant;

/// Addresses kept per peer in the address book.
pub const MAX_ADDRS_PER_PEER: usize = 4;
/// Peers kept in the address book.
pub const MAX_BOOK: usize = 512;

pub struct Gate {
    rules: Admission<PeerId>,
    clock: Clock,
    addresses: HashMap<PeerId, Vec<Multiaddr>>,
}

impl Gate {
    pub fn new(inbound_gate: usize, outbound_gate: usize, hard_cap: usize) -> Self {
        Gate {
            rules: Admission::new(Limits { inbound_gate, outbound_gate, hard_cap }),
            clock: Clock::new(),
            addresses: HashMap::new(),
        }
    }

    /// See `Admission::set_serving`.
    pub fn set_serving(&mut self, serving: bool, members: impl IntoIterator<Item = PeerId>) {
        self.rules.set_serving(serving, members);
    }

    /// See `Admission::set_election_group`.
    pub fn set_election_group(&mut self, peers: impl IntoIterator<Item = PeerId>) {
        self.rules.set_election_group(peers);
    }

    /// Who refused the last failed dial to `peer`, if anyone (`Admission::dial_refusal`).
    pub fn dial_refusal(&self, peer: &PeerId) -> DialRefusal {
        self.rules.dial_refusal(peer, self.clock.now())
    }

    /// Let dials to `peer` through (up to the hard cap) for a while (`Admission::want`).
    pub fn want(&mut self, peer: PeerId) {
        self.rules.want(peer, self.clock.now());
    }

    /// Remember addresses of `peer` (newest first, bounded).
    pub fn add_addresses(&mut self, peer: PeerId, addrs: impl IntoIterator<Item = Multiaddr>) {
        if self.addresses.len() >= MAX_BOOK && !self.addresses.contains_key(&peer) {
            if let Some(other) = self.addresses.keys().next().copied() {
                self.addresses.remove(&other);
            }
        }
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
        self.rules.established()
    }

    pub fn counters(&self) -> GateCounters {
        self.rules.counters()
    }

    /// Drop expired marks (called from the node's periodic tick).
    pub fn expire(&mut self, now: Instant) {
        self.rules.expire(self.clock.at(now));
    }

    /// Let every outbound dial through (up to the open cap) until `until`: the super-peer
    /// driver (`node/src/superpeer/driver.rs`) opens the gate while its own Kademlia lookups
    /// run (`Admission::open_outbound_until`).
    pub fn open_outbound_until(&mut self, until: Instant) {
        self.rules.open_outbound_until(self.clock.at(until));
    }
}

/// Which kind of failed dial a libp2p dial error is.
fn dial_failed(error: &DialError) -> DialFailed {
    match error {
        // Denied by one of this node's own behaviours, never by the remote.
        DialError::Denied { .. } => DialFailed::Denied,
        DialError::Transport(errors) if errors.iter().any(|(_, e)| closed_before_handshake(e)) => {
            DialFailed::ClosedBeforeHandshake
        }
        // Absent from every address tried (a live one at any address is not).
        DialError::Transport(errors) if !errors.is_empty() && errors.iter().all(|(_, e)| no_listener(e)) => {
            DialFailed::NoListener
        }
        _ => DialFailed::Other,
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
        self.rules.inbound().map_err(ConnectionDenied::new)
    }

    fn handle_established_inbound_connection(
        &mut self,
        _: ConnectionId,
        peer: PeerId,
        _: &Multiaddr,
        _: &Multiaddr,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        self.rules.inbound_from(&peer).map_err(ConnectionDenied::new)?;
        Ok(dummy::ConnectionHandler)
    }

    fn handle_pending_outbound_connection(
        &mut self,
        _: ConnectionId,
        maybe_peer: Option<PeerId>,
        _: &[Multiaddr],
        _: Endpoint,
    ) -> Result<Vec<Multiaddr>, ConnectionDenied> {
        self.rules.outbound(maybe_peer, self.clock.now()).map_err(ConnectionDenied::new)?;
        Ok(maybe_peer.map(|p| self.addresses_of(&p).to_vec()).unwrap_or_default())
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
            FromSwarm::ConnectionEstablished(ConnectionEstablished { peer_id, .. }) => {
                self.rules.on_established(peer_id);
            }
            FromSwarm::DialFailure(DialFailure { peer_id: Some(peer), error, .. }) => {
                self.rules.on_dial_failed(peer, dial_failed(error), self.clock.now());
            }
            FromSwarm::ConnectionClosed(ConnectionClosed { peer_id, .. }) => {
                self.rules.on_closed(&peer_id);
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
    use std::time::Duration;

    fn fill(g: &mut Gate, to: usize) {
        while g.established() < to {
            g.rules.on_established(PeerId::random());
        }
    }

    fn dial(g: &mut Gate, p: PeerId) -> Option<Vec<Multiaddr>> {
        g.handle_pending_outbound_connection(ConnectionId::new_unchecked(1_000_000), Some(p), &[], Endpoint::Dialer)
            .ok()
    }

    fn inbound(g: &mut Gate) -> bool {
        let a: Multiaddr = "/memory/1".parse().expect("address");
        g.handle_pending_inbound_connection(ConnectionId::new_unchecked(2_000_000), &a, &a).is_ok()
    }

    fn established_inbound(g: &mut Gate, p: PeerId) -> bool {
        let a: Multiaddr = "/memory/1".parse().expect("address");
        g.handle_established_inbound_connection(ConnectionId::new_unchecked(3_000_000), p, &a, &a).is_ok()
    }

    /// The book is a bounded cache: past `MAX_BOOK` peers an arbitrary other peer goes, the
    /// peer just added stays, and a known peer's new address never evicts anyone.
    #[test]
    fn the_address_book_is_bounded() {
        let mut g = Gate::new(40, 6, 72);
        let addr = |i: usize| -> Multiaddr { format!("/memory/{i}").parse().expect("address") };
        let first = PeerId::random();
        g.add_addresses(first, [addr(0)]);
        for i in 1..MAX_BOOK + 100 {
            let p = PeerId::random();
            g.add_addresses(p, [addr(i)]);
            assert!(g.addresses.len() <= MAX_BOOK, "{} peers in the book", g.addresses.len());
            assert_eq!(g.addresses_of(&p), &[addr(i)][..], "the newest peer is kept");
        }
        assert_eq!(g.addresses.len(), MAX_BOOK);
        let kept = *g.addresses.keys().next().expect("a peer");
        g.add_addresses(kept, [addr(9_999)]);
        assert_eq!(g.addresses.len(), MAX_BOOK);
        assert_eq!(g.addresses_of(&kept)[0], addr(9_999), "newest address first");
    }

    /// Each hook asks its rule (the rules themselves are tested in `overlay::connections`).
    #[test]
    fn the_hooks_ask_the_rules_and_dials_get_the_address_book() {
        let mut g = Gate::new(40, 6, 72);
        let (p, member) = (PeerId::random(), PeerId::random());
        let addr: Multiaddr = "/memory/77".parse().expect("address");
        g.add_addresses(p, [addr.clone(), addr.clone()]);
        assert_eq!(dial(&mut g, p), Some(vec![addr]), "a passed dial gets the peer's addresses, once each");
        fill(&mut g, 6);
        assert_eq!(dial(&mut g, p), None, "unwanted dials stop at the outbound gate");
        g.want(p);
        assert!(dial(&mut g, p).is_some(), "a wanted dial passes");
        assert!(g
            .handle_pending_outbound_connection(ConnectionId::new_unchecked(4), None, &[], Endpoint::Dialer)
            .is_ok());
        fill(&mut g, 40);
        assert!(!inbound(&mut g), "inbound stops at the inbound gate");
        g.set_serving(true, [member]);
        assert!(inbound(&mut g), "a serving node takes more");
        fill(&mut g, 71);
        assert!(!established_inbound(&mut g, p), "the last slot is the member's");
        assert!(established_inbound(&mut g, member));
        assert_eq!(g.counters().refused_inbound, 2);
        assert_eq!(g.counters().refused_outbound, 1);
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
        assert_eq!(g.dial_refusal(&p), DialRefusal::Local, "a denial by connection_limits is our own refusal");
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
        assert_eq!(g.dial_refusal(&q), DialRefusal::None, "other dial failures are not");
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

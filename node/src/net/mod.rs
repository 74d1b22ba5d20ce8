//! The network layer: the composed libp2p behaviour and transports, wire framing and the
//! inbound memory budget (per process and per peer), the enforcement of peer reputation (bans), the pre-handshake
//! connection gate, Kademlia without automatic dials, the
//! emulated link latency of in-process swarms, and how a failed request is classified.

/// The `NetworkBehaviour` methods a wrapper around `self.inner` passes through unchanged:
/// the pending-connection checks and the events from the swarm and the handlers. The wrapper
/// writes the two `handle_established_*` methods and `poll`, where it differs.
macro_rules! forward_to_inner {
    () => {
        fn handle_pending_inbound_connection(
            &mut self,
            connection_id: libp2p::swarm::ConnectionId,
            local_addr: &libp2p::Multiaddr,
            remote_addr: &libp2p::Multiaddr,
        ) -> Result<(), libp2p::swarm::ConnectionDenied> {
            self.inner.handle_pending_inbound_connection(connection_id, local_addr, remote_addr)
        }

        fn handle_pending_outbound_connection(
            &mut self,
            connection_id: libp2p::swarm::ConnectionId,
            maybe_peer: Option<libp2p::PeerId>,
            addresses: &[libp2p::Multiaddr],
            effective_role: libp2p::core::Endpoint,
        ) -> Result<Vec<libp2p::Multiaddr>, libp2p::swarm::ConnectionDenied> {
            self.inner.handle_pending_outbound_connection(connection_id, maybe_peer, addresses, effective_role)
        }

        fn on_swarm_event(&mut self, event: libp2p::swarm::FromSwarm) {
            self.inner.on_swarm_event(event)
        }

        fn on_connection_handler_event(
            &mut self,
            peer_id: libp2p::PeerId,
            connection_id: libp2p::swarm::ConnectionId,
            event: libp2p::swarm::THandlerOutEvent<Self>,
        ) {
            self.inner.on_connection_handler_event(peer_id, connection_id, event)
        }
    };
}

pub mod accounted;
pub mod behaviour;
pub mod codec;
pub mod gate;
pub mod guard;
pub mod latency_transport;
pub mod quiet_kad;
pub mod send_failure;

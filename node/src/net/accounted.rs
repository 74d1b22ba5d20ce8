//! A request-response behaviour whose connections charge the frames they read to their peer.
//!
//! libp2p's request-response clones its codec once per connection inside
//! `handle_established_{inbound,outbound}_connection`, where the peer is known, and never
//! tells the codec whom it serves. [`Accounted`] wraps the behaviour and names the peer on
//! the shared [`InboundBudget`] around exactly those two calls, so that the connection's
//! codec, and every stream's clone of it, charge that peer's share
//! (`node/src/net/codec.rs`, "Per peer"). Everything else is the inner behaviour's, reached
//! through `Deref`.

use crate::net::codec::{FrameCodec, InboundBudget};
use libp2p::core::transport::PortUse;
use libp2p::core::Endpoint;
use libp2p::request_response;
use libp2p::swarm::{ConnectionDenied, ConnectionId, NetworkBehaviour, THandler, THandlerInEvent, ToSwarm};
use libp2p::{Multiaddr, PeerId, StreamProtocol};
use std::sync::Arc;
use std::task::{Context, Poll};

/// [`request_response::Behaviour`] over [`FrameCodec`], charging each connection's frames to
/// its peer.
pub struct Accounted {
    inner: request_response::Behaviour<FrameCodec>,
    budget: Arc<InboundBudget>,
}

impl Accounted {
    /// The behaviour of `protocol` (both directions), its requests read as frames of at most
    /// `max_frame` bytes under `budget`.
    pub fn new(
        protocol: &'static str,
        max_frame: usize,
        budget: &Arc<InboundBudget>,
        cfg: request_response::Config,
    ) -> Accounted {
        let inner = request_response::Behaviour::with_codec(
            FrameCodec::with_budget(max_frame, budget.clone()),
            [(StreamProtocol::new(protocol), request_response::ProtocolSupport::Full)],
            cfg,
        );
        Accounted { inner, budget: budget.clone() }
    }
}

impl std::ops::Deref for Accounted {
    type Target = request_response::Behaviour<FrameCodec>;
    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

impl std::ops::DerefMut for Accounted {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.inner
    }
}

type Inner = request_response::Behaviour<FrameCodec>;

impl NetworkBehaviour for Accounted {
    type ConnectionHandler = <Inner as NetworkBehaviour>::ConnectionHandler;
    type ToSwarm = <Inner as NetworkBehaviour>::ToSwarm;

    forward_to_inner!();

    fn handle_established_inbound_connection(
        &mut self,
        connection_id: ConnectionId,
        peer: PeerId,
        local_addr: &Multiaddr,
        remote_addr: &Multiaddr,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        let _charged = self.budget.connecting(peer);
        self.inner.handle_established_inbound_connection(connection_id, peer, local_addr, remote_addr)
    }

    fn handle_established_outbound_connection(
        &mut self,
        connection_id: ConnectionId,
        peer: PeerId,
        addr: &Multiaddr,
        role_override: Endpoint,
        port_use: PortUse,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        let _charged = self.budget.connecting(peer);
        self.inner.handle_established_outbound_connection(connection_id, peer, addr, role_override, port_use)
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<ToSwarm<Self::ToSwarm, THandlerInEvent<Self>>> {
        self.inner.poll(cx)
    }
}

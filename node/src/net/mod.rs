//! The network layer: the composed libp2p behaviour and transports, wire framing, the
//! pre-handshake connection gate, Kademlia without automatic dials, the peer manager, the
//! emulated link latency of in-process swarms, and how a failed request is classified.

pub mod behaviour;
pub mod codec;
pub mod gate;
pub mod latency_transport;
pub mod peer_manager;
pub mod quiet_kad;
pub mod send_failure;

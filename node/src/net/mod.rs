//! The network layer: the composed libp2p behaviour and transports, wire framing and the
//! inbound memory budget (per process and per peer), the enforcement of peer reputation (bans), the pre-handshake
//! connection gate, Kademlia without automatic dials, the
//! emulated link latency of in-process swarms, and how a failed request is classified.

pub mod accounted;
pub mod behaviour;
pub mod codec;
pub mod gate;
pub mod guard;
pub mod latency_transport;
pub mod quiet_kad;
pub mod send_failure;

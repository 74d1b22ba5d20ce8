//! # peerage-node: the Peerage libp2p node
//!
//! A real rust-libp2p 0.57 node (tokio; TCP + noise + yamux, QUIC, or the in-process memory
//! transport) that runs the `overlay` election state machines. Layers, one idea per file:
//! - [`cli`], [`config`], [`identity`]: command line, TOML config, the persistent key;
//! - [`codec`], [`behaviour`], [`gate`]: wire framing, the composed libp2p behaviour and
//!   transports, the pre-handshake connection gate;
//! - [`members`], [`peer_manager`]: who is in the group, and which connections to keep;
//!   [`members_report`]: how fast the member directory converged, node by node;
//! - [`quiet_kad`]: Kademlia whose automatic bootstrap walks do not dial;
//! - [`election_driver`], [`node`]: the election state machine's clock/timers/routing, and
//!   the node's event loop;
//! - [`status`], [`metrics`], [`sysstat`]: JSON status lines, Prometheus, /proc readings;
//! - [`latency_transport`], [`coords_driver`], [`coords_report`]: emulated link latency for
//!   in-process swarms, Vivaldi coordinates learned from ping, and their accuracy;
//! - [`superpeer_config`], [`superpeer_wire`], [`superpeer_driver`], [`superpeer_report`],
//!   [`superpeer_timeline`]:
//!   super-peer selection and clusters (issue 4) on the real node, and their swarm measures;
//! - [`swarm_runner`]: N nodes in one process (`peerage swarm`, integration tests).

pub mod behaviour;
pub mod cli;
pub mod codec;
pub mod config;
pub mod coords_driver;
pub mod coords_report;
pub mod election_driver;
pub mod gate;
pub mod head_watch;
pub mod identity;
pub mod latency_transport;
pub mod members;
pub mod members_report;
pub mod metrics;
pub mod node;
pub mod peer_manager;
pub mod quiet_kad;
pub mod send_failure;
pub mod stall;
pub mod status;
pub mod superpeer_config;
pub mod superpeer_driver;
pub mod superpeer_report;
pub mod superpeer_timeline;
pub mod superpeer_wire;
pub mod swarm_runner;
pub mod sysstat;

pub use behaviour::TransportKind;
pub use node::{spawn, NodeHandle, NodeOptions};
pub use swarm_runner::{LocalSwarm, LocalSwarmConfig};

//! # peerage-node: the Peerage libp2p node
//!
//! A real rust-libp2p 0.57 node (tokio; TCP + noise + yamux, QUIC, or the in-process memory
//! transport) that runs the `overlay` state machines. One folder per layer:
//! - [`cli`], [`config`], [`identity`]: command line, TOML config, the persistent key;
//! - [`net`]: behaviours, transports, framing, connection gate and peer manager;
//! - [`directory`]: the member directory and its convergence report;
//! - [`election`]: the election state machine's driver;
//! - [`coords`]: Vivaldi coordinates learned from ping;
//! - [`superpeer`]: super-peer selection and clusters, and their swarm measures;
//! - [`runtime`]: the event loop, status, metrics;
//! - [`swarm`]: N nodes as one swarm, in one process or as shards (`peerage swarm`, integration
//!   tests), per-node rows and merged reports;
//! - [`deploy`]: Kubernetes and compose manifests for a sharded swarm (`peerage deploy`);
//! - [`testbed`]: hosts in network namespaces for real-process experiments (`peerage testbed`).

pub mod cli;
pub mod config;
pub mod coords;
pub mod deploy;
pub mod directory;
pub mod election;
pub mod identity;
pub mod net;
pub mod runtime;
pub mod superpeer;
pub mod swarm;
pub mod testbed;

pub use net::behaviour::TransportKind;
pub use runtime::node::{spawn, NodeHandle, NodeOptions};
pub use swarm::runner::{LocalSwarm, LocalSwarmConfig};

//! # overlay: the Peerage protocol core
//!
//! Every protocol here is a **sans-IO state machine**: it does no I/O, reads no clock and owns
//! no randomness. The caller passes the current [`Time`] and a seeded RNG in a
//! [`Context`]; inputs are messages, timers and peer reports ([`Input`]); outputs are
//! [`Effect`]s (send this, arm that timer, the leader is X). The same code runs inside the real
//! libp2p node (`node` crate) and inside the deterministic simulator (`experiments` crate).
//!
//! Layers:
//! - [`id`]: 256-bit node identifiers, priorities and ranks (the total order elections use).
//! - [`time`]: the caller-supplied clock type.
//! - [`membership`]: the a-priori known process group (seed 001: "a process knows all process numbers").
//! - [`core`]: the contract every protocol shares with its driver: context, effects, one timer table.
//! - [`detect`]: failure detection and the rules a node applies to what its network tells it.
//! - [`directory`]: how a node learns that group: signed member records, their bounds, the
//!   anti-entropy sync, and the claim checks against it.
//! - [`connections`]: which connections a node admits before the handshake, and which it keeps, closes and opens.
//! - [`reputation`]: misbehaviour reported by every protocol, scores, bans.
//! - [`driver`]: the one driver interface shared by every election.
//! - [`election`]: the six election algorithms, one module each.
//! - [`wire`]: versioned wire envelope and a decoder that never panics.
//! - [`coords`]: Vivaldi latency coordinates (height, adjustment, gravity, latency filter).
//! - [`latency`]: a seeded model of Internet RTTs shared by the simulator and the local swarm.
//! - [`stats`]: summary statistics (mean, spread, nearest-rank percentiles) for every report.
//! - `testkit` (tests and the `testkit` feature): a lock-step deterministic pump for exact tests.

pub mod connections;
pub mod coords;
pub mod core;
pub mod detect;
pub mod directory;
pub mod driver;
pub mod election;
pub mod id;
pub mod latency;
pub mod membership;
pub mod reputation;
pub mod stats;
pub mod superpeer;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod time;
pub mod wire;

pub use driver::{Context, Effect, Election, Input, Timer};
pub use election::{Algorithm, AnyElection, ElectionConfig, Message};
pub use id::{NodeId, Rank};
pub use membership::Membership;
pub use time::Time;

//! Mobile ad hoc networks for the echo election: the setting Vasudevan, Kurose and Towsley
//! designed it for ("Design and analysis of a leader election algorithm for mobile ad hoc
//! networks", ICNP 2004), where links come and go as nodes move.
//!
//! Layers, one idea per file:
//! - [`waypoint`]: the random waypoint model, seeded per node;
//! - [`radio`]: range, the radio graph, and delay and loss of a frame as functions of the
//!   link's length;
//! - [`discovery`]: AODV-style hellos, which turn links into `PeerUp`/`PeerDown` reports;
//! - [`measure`]: per-node time with a leader, a reachable leader, the best leader;
//! - [`driver`]: the event loop that drives the unchanged `overlay` echo state machines;
//! - [`plot`]: the figures of `peerage-lab mobility`.

pub mod discovery;
pub mod driver;
pub mod measure;
pub mod plot;
pub mod radio;
pub mod waypoint;

pub use driver::{Manet, RunStats, Setup, SetupError};

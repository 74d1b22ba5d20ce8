//! The deterministic discrete-event simulator.
//!
//! Layers, one idea per file:
//! - [`queue`]: a generic event queue, by time then push order (reusable, knows nothing of elections);
//! - [`slab`]: index-addressed storage for in-flight payloads;
//! - [`latency`]: the pluggable [`latency::LatencyModel`] trait and the built-in models;
//! - [`faults`]: per-message fault rates and scheduled crashes, recoveries, partitions;
//! - [`topology`]: random connected graphs for the echo election;
//! - [`metrics`]: counters (messages by kind, faults, deliveries);
//! - [`engine`]: the event loop that drives the `overlay` election state machines;
//! - [`check`]: the safety/liveness oracle;
//! - [`units`]: duration parsing.

pub mod check;
pub mod engine;
pub mod faults;
pub mod latency;
pub mod metrics;
pub mod queue;
pub mod slab;
pub mod topology;
pub mod units;

pub use check::{check, Verdict};
pub use engine::{RunEnd, Sim, SimError, SimSetup};
pub use faults::{Fault, FaultPlan, NetworkFaults};
pub use latency::{LatencyModel, LatencySpec};
pub use queue::EventQueue;
pub use topology::{Topology, TopologySpec};

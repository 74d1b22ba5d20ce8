//! The node's runtime: the event loop, its clock, status lines, Prometheus metrics and /proc
//! readings.

pub mod clock;
pub mod metrics;
pub mod node;
pub mod status;
pub mod sysstat;

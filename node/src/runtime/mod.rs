//! The node's runtime: the event loop, status lines, Prometheus metrics, /proc readings and
//! the loop's stall meter.

pub mod metrics;
pub mod node;
pub mod stall;
pub mod status;
pub mod sysstat;

//! Latency coordinates in the node: Vivaldi learned from ping, and the accuracy report.

pub mod driver;
pub mod report;

//! The member directory: who is in the election group, and how fast the swarm's
//! directories converged.

pub mod members;
pub mod report;

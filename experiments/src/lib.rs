//! # peerage-experiments
//!
//! The deterministic discrete-event simulator ([`sim`]) that drives Peerage's sans-IO
//! election state machines (the `overlay` crate, unchanged) over a simulated, faulty network
//! of up to millions of processes, the mobile ad hoc network that drives the echo election
//! over moving nodes ([`mobility`]), and the `peerage-lab` experiments built on them ([`lab`]).

pub mod lab;
pub mod mobility;
pub mod sim;
pub mod superpeers;

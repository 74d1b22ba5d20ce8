//! # peerage-experiments
//!
//! The deterministic discrete-event simulator ([`sim`]) that drives Peerage's sans-IO
//! election state machines (the `overlay` crate, unchanged) over a simulated, faulty network
//! of up to millions of processes, and the `peerage-lab` experiments built on it ([`lab`]).

pub mod lab;
pub mod mobility;
pub mod sim;
pub mod superpeers;

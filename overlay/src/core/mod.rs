//! The contract every sans-IO protocol of this crate shares with its driver.
//!
//! A protocol is a state machine that reacts to one input at a time. Its driver (the libp2p
//! node, the simulator, a test pump) calls it with a [`Context`]: the current [`Time`], a
//! seeded RNG and a buffer of effects. The protocol reads no clock, owns no randomness and does
//! no I/O; it appends effects (send this, arm that timer, report that), and the driver carries
//! them out after the call returns. This is the shape of quinn-proto's `handle_*`/`poll_*` and
//! raft-rs's `step`/`ready`, with the effects handed back in one buffer per call.
//!
//! Timers are the one effect every protocol shares, so their contract is written once
//! ([`timer`]): a protocol arms and cancels timers by value through [`TimerEffect`], a driver
//! keeps them in one [`TimerTable`] and feeds each expiry back as an input. Semantics:
//! - arming a timer replaces the armed timer of the same value;
//! - cancelling an unarmed timer does nothing;
//! - a timer fires at most once per arming, earliest deadline first;
//! - when the state machine is dropped (a crash), none of its timers fire.
//!
//! [`Time`]: crate::time::Time

pub mod context;
pub mod timer;

pub use context::Context;
pub use timer::{TimerCmd, TimerEffect, TimerTable};

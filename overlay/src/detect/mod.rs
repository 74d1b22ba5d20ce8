//! Failure detection and the rules a node applies to what its network tells it: what a failed
//! send means, when to send again, when a member gives up on its head, when the node's own
//! loop is too late to judge anyone, when the node starts a leader election, and the
//! staggered detection of a silent coordinator.
//!
//! The protocols above assume crash-stop with a perfect failure detector: a `SendFailed` or a
//! `PeerDown` means the peer is gone. A real network does not say that for free. A request can
//! time out at a live but slow peer, a dial can be refused by a live peer whose connection gate
//! is full, and on a saturated machine every task waits in the run queue for seconds. These
//! modules turn raw observations (a failure's kind, a silence, a lateness) into the inputs the
//! protocols rely on, without I/O or a clock: the node's drivers and the simulator run the same
//! rules, so a fault the simulator injects is handled exactly as in a real swarm.
//!
//! - [`failure`]: the kinds of failed send, what each means for the protocol, and the resends.
//! - [`head_watch`]: a member's failure detector for its head (probes, scores, silences).
//! - [`resend`]: messages waiting to be sent again.
//! - [`stall`]: the node loop's lateness record, and the gates that drop what a stall spoilt.
//! - [`stagger`]: the bully family's staggered coordinator-silence detection.
//! - [`start`]: when a node starts a leader election, and when it takes its leader for down.

pub mod failure;
pub mod head_watch;
pub mod resend;
pub mod stagger;
pub mod stall;
pub mod start;

pub use failure::{dial_failure, Attempt, Next, SendFailure};
pub use head_watch::{HeadWatch, Verdict, WatchConfig};
pub use resend::Resends;
pub use stall::StallMeter;

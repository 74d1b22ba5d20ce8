//! Faults the simulator injects: per-message network faults and scheduled process and
//! partition faults.
//!
//! Network faults ([`NetworkFaults`]) are drawn per message from the run's one RNG, for
//! messages sent before `until` (none: for the whole run):
//! - `loss`: the message silently vanishes (no `SendFailed`: a real network does not report
//!   a dropped datagram).
//! - `duplicate`: a second copy is sent, with its own independently drawn latency.
//! - `reorder`: the message is held back by an extra uniform `[0, reorder_delay]`, so later
//!   messages on the same link may overtake it. (With a random latency model messages are
//!   reordered anyway; with `const:` latency and `reorder = 0` every link is FIFO.)
//!
//! Scheduled faults ([`Fault`]) are crashes, recoveries, freezes, thaws, partitions and heals
//! at given virtual times. Their semantics are the engine's (see `engine.rs`): a crash drops
//! the process's state and timers; a recovery creates a fresh state machine and gives it
//! `Input::Recover`; a frozen process handles nothing until it thaws (a stopped process whose
//! connections stay open: no failure detector notices it); a partition assigns every process
//! a side, and traffic between sides fails.

use overlay::Time;
use std::time::Duration;

/// Per-message fault rates, each a probability in `[0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NetworkFaults {
    pub loss: f64,
    pub duplicate: f64,
    pub reorder: f64,
    /// Largest extra delay of a reordered message.
    pub reorder_delay: Duration,
    /// Messages sent from this time on are not faulted (`None`: the whole run).
    pub until: Option<Time>,
}

impl Default for NetworkFaults {
    fn default() -> Self {
        NetworkFaults { loss: 0.0, duplicate: 0.0, reorder: 0.0, reorder_delay: Duration::from_millis(20), until: None }
    }
}

/// A fault rate outside `[0, 1]`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{name} rate must be a probability in [0, 1], got {value}")]
pub struct RateError {
    pub name: &'static str,
    pub value: f64,
}

impl NetworkFaults {
    pub fn validate(&self) -> Result<(), RateError> {
        for (name, value) in [("loss", self.loss), ("duplicate", self.duplicate), ("reorder", self.reorder)] {
            if !(0.0..=1.0).contains(&value) {
                return Err(RateError { name, value });
            }
        }
        Ok(())
    }

    /// True when no per-message fault is on (the engine then skips the RNG draws).
    pub fn is_clean(&self) -> bool {
        self.loss == 0.0 && self.duplicate == 0.0 && self.reorder == 0.0
    }

    /// True when a message sent at `now` is not faulted.
    #[inline]
    pub fn is_clean_at(&self, now: Time) -> bool {
        self.is_clean() || self.until.is_some_and(|u| now >= u)
    }
}

/// One scheduled fault.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// The process crashes: state and timers are lost.
    Crash(u32),
    /// The process comes back with fresh state and receives `Input::Recover`.
    Recover(u32),
    /// The process stops handling anything (messages, timers, reports wait for it); it keeps
    /// its state, and nothing reports it.
    Freeze(u32),
    /// A frozen process resumes and handles what waited for it, in arrival order.
    Thaw(u32),
    /// Every process `i` is put on side `sides[i]`; messages (and, for topologies, links)
    /// between different sides are cut.
    Partition(Vec<u16>),
    /// All sides are joined again.
    Heal,
}

/// Faults at virtual times, in any order (the engine queues them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultPlan {
    pub faults: Vec<(Time, Fault)>,
}

impl FaultPlan {
    pub fn push(&mut self, at: Time, fault: Fault) {
        self.faults.push((at, fault));
    }
    pub fn crashes(&self) -> usize {
        self.faults.iter().filter(|(_, f)| matches!(f, Fault::Crash(_))).count()
    }
    /// Time of the last scheduled fault (`Time::ZERO` if none).
    pub fn last(&self) -> Time {
        self.faults.iter().map(|(t, _)| *t).max().unwrap_or(Time::ZERO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_rates() {
        assert!(NetworkFaults::default().validate().is_ok());
        assert!(NetworkFaults::default().is_clean());
        let bad = NetworkFaults { loss: 1.5, ..Default::default() };
        assert_eq!(bad.validate().unwrap_err().name, "loss");
        let bad = NetworkFaults { reorder: -0.1, ..Default::default() };
        assert!(bad.validate().is_err());
        let mut p = FaultPlan::default();
        p.push(Time::ZERO, Fault::Crash(1));
        p.push(Time::ZERO, Fault::Heal);
        assert_eq!(p.crashes(), 1);
    }
}

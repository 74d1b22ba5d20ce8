//! The node's clock: `overlay::Time` (microseconds since the node started) from tokio's
//! `Instant`, and back. Every driver of one node shares it, so the times they pass to the
//! state machines and detectors compare.

use overlay::Time;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch: Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

impl Clock {
    pub fn new() -> Clock {
        Clock { epoch: Instant::now() }
    }

    /// The time now.
    pub fn now(&self) -> Time {
        self.at(Instant::now())
    }

    /// `i` as a time (zero before the epoch).
    pub fn at(&self, i: Instant) -> Time {
        Time::from_micros(i.saturating_duration_since(self.epoch).as_micros().min(u64::MAX as u128) as u64)
    }

    /// `t` as an instant.
    pub fn instant(&self, t: Time) -> Instant {
        self.epoch + Duration::from_micros(t.as_micros())
    }
}

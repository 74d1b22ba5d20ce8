//! The caller-supplied clock.
//!
//! State machines never read a clock: the driver (the libp2p node, or the simulator's virtual
//! clock) passes the current [`Time`], microseconds since an epoch of the driver's choosing.

use serde::{Deserialize, Serialize};
use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time: microseconds since the driver's epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Time(pub u64);

impl Time {
    pub const ZERO: Time = Time(0);

    pub fn from_micros(us: u64) -> Time {
        Time(us)
    }
    pub fn from_millis(ms: u64) -> Time {
        Time(ms.saturating_mul(1000))
    }
    pub fn as_micros(self) -> u64 {
        self.0
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }
    /// Time elapsed since `earlier`, zero if `earlier` is later.
    pub fn since(self, earlier: Time) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        Time(self.0.saturating_add(d.as_micros().min(u64::MAX as u128) as u64))
    }
}

impl Sub<Time> for Time {
    type Output = Duration;
    fn sub(self, rhs: Time) -> Duration {
        self.since(rhs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn arithmetic_saturates() {
        let t = Time::from_millis(5) + Duration::from_millis(3);
        assert_eq!(t, Time::from_micros(8000));
        assert_eq!(Time::from_millis(1) - Time::from_millis(2), Duration::ZERO);
        assert_eq!(Time(u64::MAX) + Duration::from_secs(1), Time(u64::MAX));
    }
}

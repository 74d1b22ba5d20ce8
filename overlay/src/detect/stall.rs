//! How late a node's own event loop runs, and the gates that drop what that lateness spoilt.
//!
//! A ping's round trip is timed by tasks on the same runtime as the node's event loop. When the
//! machine is saturated (a one-process swarm of hundreds of nodes; a real node under CPU
//! pressure) every task waits in the run queue before it is polled, and each of a ping's four
//! hops pays that wait: measured RTTs grow by seconds. The node loop knows when each periodic
//! tick was due, so how late it ran is the scheduling delay at that moment. [`StallMeter`] keeps
//! those marks for a bounded horizon and answers "the worst stall since t".
//!
//! Our choices (no paper covers it):
//! - A measurement is judged by the worst mark within its own span plus one tick period (so at
//!   least one mark is looked at): a stall anywhere inside a round trip inflates it.
//! - A sample may carry at most [`tolerated`] `= max(10 ms, 5 % of the RTT)` of such delay.
//!   Vivaldi on our latency model has a floor of about 0.075 median relative error, so a sample
//!   may be inflated only by a few per cent; 10 ms stays clear of the 1 ms timer granularity
//!   every hop pays. Samples beyond the bound are dropped, not corrected (subtracting an
//!   over-estimate would bias RTTs low): [`sample_gate`].
//! - The same bound spoils an RTT measurement of the super-peer protocol (it is reported as
//!   failed, so the protocol asks again later instead of keeping an inflated minimum).
//!
//! The meter sees only this node's loop: in a one-process swarm every node shares the runtime,
//! so it sees the remote's waits too; across machines it sees only local stalls.

use crate::time::Time;
use std::collections::VecDeque;
use std::time::Duration;

/// Most marks kept (one per tick; the horizon bounds it in practice).
pub const MAX_MARKS: usize = 1024;

/// See [`tolerated`].
pub const STALL_FLOOR: Duration = Duration::from_millis(10);
/// See [`tolerated`].
pub const STALL_SHARE: f64 = 0.05;

/// The delay a measurement of `rtt` tolerates: `max(10 ms, 5 % of rtt)` (module doc).
pub fn tolerated(rtt: Duration) -> Duration {
    STALL_FLOOR.max(rtt.mul_f64(STALL_SHARE))
}

/// What may have inflated one RTT sample beyond the path's delay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SampleDelays {
    /// The emulated link's recent lateness, both directions (emulated swarms only).
    pub emulation: Duration,
    /// The worst lateness of the node's event loop during the sample ([`StallMeter`]).
    pub scheduling: Duration,
}

/// Whether a sample is kept, and if not which delay spoilt it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    Keep,
    /// The emulated link was late by more than the bound.
    Late,
    /// The node's loop stalled by more than the bound.
    Stall,
}

/// The gate of one RTT sample of `rtt` whose peer's recent minimum is `recent_min`: the bound
/// is taken of the smaller of the two (an inflated sample must not widen its own bound).
pub fn sample_gate(rtt: Duration, recent_min: Option<Duration>, delays: SampleDelays) -> Gate {
    let base = recent_min.map_or(rtt, |m| m.min(rtt));
    let bound = tolerated(base);
    if delays.emulation > bound {
        Gate::Late
    } else if delays.scheduling > bound {
        Gate::Stall
    } else {
        Gate::Keep
    }
}

/// Lateness marks of the node's periodic tick.
#[derive(Debug, Clone)]
pub struct StallMeter {
    period: Duration,
    horizon: Duration,
    marks: VecDeque<(Time, Duration)>,
    worst: Duration,
}

impl StallMeter {
    /// A meter for a tick of `period` that remembers marks for `horizon`.
    pub fn new(period: Duration, horizon: Duration) -> StallMeter {
        StallMeter { period, horizon, marks: VecDeque::new(), worst: Duration::ZERO }
    }

    /// The worst stall that may have hit a measurement started at `start` and ending now: the
    /// marks since one tick period before `start`.
    pub fn worst_during(&self, start: Time) -> Duration {
        self.worst_since(Time(start.0.saturating_sub(self.period.as_micros() as u64)))
    }

    /// True when a measurement of `rtt` started at `start` may carry more inflation from a
    /// stall than [`tolerated`] allows.
    pub fn spoils(&self, start: Time, rtt: Duration) -> bool {
        self.worst_during(start) > tolerated(rtt)
    }

    /// A tick due at `due` ran at `at`.
    pub fn record(&mut self, due: Time, at: Time) {
        let late = at.since(due);
        self.worst = self.worst.max(late);
        while self.marks.front().is_some_and(|(t, _)| at.since(*t) > self.horizon) || self.marks.len() >= MAX_MARKS {
            self.marks.pop_front();
        }
        self.marks.push_back((at, late));
    }

    /// The largest lateness recorded at or after `since` (zero when none).
    pub fn worst_since(&self, since: Time) -> Duration {
        self.marks.iter().rev().take_while(|(t, _)| *t >= since).map(|(_, l)| *l).max().unwrap_or_default()
    }

    /// The largest lateness ever recorded.
    pub fn worst_ever(&self) -> Duration {
        self.worst
    }

    /// The most recent mark's lateness.
    pub fn last(&self) -> Duration {
        self.marks.back().map(|(_, l)| *l).unwrap_or_default()
    }
}

/// How a node tells its super-peer state machine its loop's lateness (`SpInput::Lateness`):
/// when the worst lateness of the last [`LATENESS_WINDOW`] moved by a tenth of a second or a
/// fifth of itself since it was last told.
pub fn lateness_changed(told: Duration, now: Duration) -> bool {
    let (told, now) = (told.as_secs_f64(), now.as_secs_f64());
    (now - told).abs() > (0.2 * told).max(0.1)
}

/// The span over which a node's loop lateness is told to its super-peer state machine.
pub const LATENESS_WINDOW: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(m: u64) -> Duration {
        Duration::from_millis(m)
    }

    #[test]
    fn worst_since_looks_only_at_recent_marks() {
        let t0 = Time::from_millis(10_000);
        let mut m = StallMeter::new(ms(500), Duration::from_secs(10));
        assert_eq!(m.worst_since(t0), Duration::ZERO, "no marks: no stall");
        m.record(t0 + ms(500), t0 + ms(501));
        m.record(t0 + ms(1000), t0 + ms(1800));
        m.record(t0 + ms(2300), t0 + ms(2302));
        assert_eq!(m.worst_since(t0), ms(800));
        assert_eq!(m.worst_since(t0 + ms(1800)), ms(800), "a mark at `since` counts");
        assert_eq!(m.worst_since(t0 + ms(1801)), ms(2));
        assert_eq!(m.worst_since(t0 + ms(5000)), Duration::ZERO);
        assert_eq!(m.last(), ms(2));
        assert_eq!(m.worst_ever(), ms(800));
        assert_eq!(m.worst_during(t0 + ms(1400)), ms(800));
        assert!(m.spoils(t0 + ms(1400), ms(900)));
        assert_eq!(m.worst_during(t0 + ms(2400)), ms(2));
        assert!(!m.spoils(t0 + ms(2400), ms(100)), "2 ms is within the 10 ms floor");
        assert_eq!(tolerated(ms(100)), ms(10));
        assert_eq!(tolerated(ms(1000)), ms(50));
        m.record(t0 + ms(3000), t0 + ms(2900));
        assert_eq!(m.last(), Duration::ZERO, "a tick that ran early counts as on time");
    }

    #[test]
    fn marks_older_than_the_horizon_are_forgotten() {
        let t0 = Time::from_millis(10_000);
        let mut m = StallMeter::new(Duration::from_secs(1), Duration::from_secs(2));
        m.record(t0, t0 + Duration::from_secs(1));
        for i in 2..=5u64 {
            let t = t0 + Duration::from_secs(i);
            m.record(t, t);
        }
        assert!(m.marks.len() <= 3, "{} marks kept", m.marks.len());
        assert_eq!(m.worst_since(t0), Duration::ZERO, "the old stall is gone");
        assert_eq!(m.worst_ever(), Duration::from_secs(1));
        let mut m = StallMeter::new(Duration::from_secs(1), Duration::from_secs(1 << 30));
        for i in 0..(MAX_MARKS as u64 + 10) {
            let t = t0 + ms(i);
            m.record(t, t);
        }
        assert_eq!(m.marks.len(), MAX_MARKS);
    }

    #[test]
    fn the_sample_gate_bounds_both_delays_by_the_smaller_rtt() {
        let d = |e, s| SampleDelays { emulation: ms(e), scheduling: ms(s) };
        assert_eq!(sample_gate(ms(200), None, d(11, 0)), Gate::Late, "5 % of 200 ms is 10 ms");
        assert_eq!(sample_gate(ms(200), None, d(10, 10)), Gate::Keep);
        assert_eq!(sample_gate(ms(400), None, d(0, 21)), Gate::Stall);
        assert_eq!(sample_gate(ms(10), None, d(0, 11)), Gate::Stall, "the 10 ms floor");
        assert_eq!(sample_gate(ms(1000), Some(ms(10)), d(11, 0)), Gate::Late, "the recent minimum bounds it");
        assert_eq!(sample_gate(ms(400), None, d(50, 50)), Gate::Late, "both: counted as the emulation's");
    }

    #[test]
    fn lateness_is_told_when_it_moved_enough() {
        assert!(!lateness_changed(Duration::ZERO, ms(100)));
        assert!(lateness_changed(Duration::ZERO, ms(101)));
        assert!(!lateness_changed(Duration::from_secs(2), ms(2_400)), "a fifth of 2 s");
        assert!(lateness_changed(Duration::from_secs(2), ms(2_401)));
        assert!(lateness_changed(Duration::from_secs(2), ms(0)));
    }
}

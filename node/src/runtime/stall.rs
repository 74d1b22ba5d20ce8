//! How late the node's own event loop runs: a record of scheduling stalls, used to drop RTT
//! samples that a stall may have inflated (`node/src/coords/driver.rs`, "Scheduling gate").
//!
//! A ping's round trip is time-stamped by connection tasks on the same runtime as the node's
//! event loop. When the machine is saturated (a one-process swarm of hundreds of nodes while
//! their DHT lookups run; a real node under CPU pressure) every task waits in the run queue
//! before it is polled, and each of the four hops of a ping (send, remote read, remote reply,
//! local read) pays that wait: measured RTTs grow by seconds (docs/RESULTS.md, session 11: a
//! median absolute Vivaldi error of 0.5-2 s while the lookups ran). The emulation's own
//! lateness (`node/src/net/latency_transport.rs`) sees only the part spent before its timers fire, not the
//! wait before a reading task is woken.
//!
//! The node loop knows when each of its periodic ticks was due; how late it ran is the
//! scheduling delay at that moment. [`StallMeter`] keeps those lateness marks for a bounded
//! horizon and answers "the worst stall since t". Our choice (the papers do not cover it):
//! a sample is judged by the worst mark within its own span plus one tick period (so that at
//! least one mark is looked at), because a stall anywhere inside the round trip inflates it.
//! The meter sees only this node's loop: in a one-process swarm every node shares the runtime,
//! so it sees the remote's waits too; across machines it sees only local stalls.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Most marks kept (a mark per tick; at the default 500 ms tick this is over 8 minutes, far
/// beyond [`StallMeter`]'s horizon, so the horizon is what bounds it in practice).
pub const MAX_MARKS: usize = 1024;

/// The stall a measurement of `rtt` tolerates: `max(10 ms, 5 % of rtt)`, the bound of the
/// emulation's lateness gate (`node/src/coords/driver.rs`, "Lateness gate": Vivaldi's floor on the
/// latency model is about 0.075 median relative error, so a sample may carry only a few per
/// cent of inflation, and 10 ms stays clear of tokio's 1 ms timer granularity).
pub fn tolerated(rtt: Duration) -> Duration {
    STALL_FLOOR.max(rtt.mul_f64(STALL_SHARE))
}

/// See [`tolerated`].
pub const STALL_FLOOR: Duration = Duration::from_millis(10);
/// See [`tolerated`].
pub const STALL_SHARE: f64 = 0.05;

/// Lateness marks of the node's periodic tick.
#[derive(Debug, Clone)]
pub struct StallMeter {
    period: Duration,
    horizon: Duration,
    marks: VecDeque<(Instant, Duration)>,
    worst: Duration,
}

impl StallMeter {
    /// A meter for a tick of `period` that remembers marks for `horizon`.
    pub fn new(period: Duration, horizon: Duration) -> StallMeter {
        StallMeter { period, horizon, marks: VecDeque::new(), worst: Duration::ZERO }
    }

    /// The worst stall that may have hit a measurement started at `start` and ending now:
    /// the marks since one tick period before `start` (at least one mark is looked at).
    pub fn worst_during(&self, start: Instant) -> Duration {
        self.worst_since(start.checked_sub(self.period).unwrap_or(start))
    }

    /// True when a measurement of `rtt` started at `start` may carry more inflation from a
    /// stall than [`tolerated`] allows.
    pub fn spoils(&self, start: Instant, rtt: Duration) -> bool {
        self.worst_during(start) > tolerated(rtt)
    }

    /// A tick due at `due` ran at `at`.
    pub fn record(&mut self, due: Instant, at: Instant) {
        let late = at.saturating_duration_since(due);
        self.worst = self.worst.max(late);
        while self.marks.front().is_some_and(|(t, _)| at.saturating_duration_since(*t) > self.horizon)
            || self.marks.len() >= MAX_MARKS
        {
            self.marks.pop_front();
        }
        self.marks.push_back((at, late));
    }

    /// The largest lateness recorded at or after `since` (zero when none).
    pub fn worst_since(&self, since: Instant) -> Duration {
        self.marks.iter().rev().take_while(|(t, _)| *t >= since).map(|(_, l)| *l).max().unwrap_or_default()
    }

    /// The largest lateness ever recorded (for the status line).
    pub fn worst_ever(&self) -> Duration {
        self.worst
    }

    /// The most recent mark's lateness.
    pub fn last(&self) -> Duration {
        self.marks.back().map(|(_, l)| *l).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_since_looks_only_at_recent_marks() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut m = StallMeter::new(ms(500), Duration::from_secs(10));
        assert_eq!(m.worst_since(t0), Duration::ZERO, "no marks: no stall");
        // Ticks every 500 ms; the one at 1 s ran 800 ms late.
        m.record(t0 + ms(500), t0 + ms(501));
        m.record(t0 + ms(1000), t0 + ms(1800));
        m.record(t0 + ms(2300), t0 + ms(2302));
        assert_eq!(m.worst_since(t0), ms(800));
        assert_eq!(m.worst_since(t0 + ms(1800)), ms(800), "a mark at `since` counts");
        assert_eq!(m.worst_since(t0 + ms(1801)), ms(2));
        assert_eq!(m.worst_since(t0 + ms(5000)), Duration::ZERO);
        assert_eq!(m.last(), ms(2));
        assert_eq!(m.worst_ever(), ms(800));
        // A measurement from 1.4 s to now looks back one period more (to 0.9 s): it sees the
        // 800 ms stall; one started at 2.4 s does not.
        assert_eq!(m.worst_during(t0 + ms(1400)), ms(800));
        assert!(m.spoils(t0 + ms(1400), ms(900)));
        assert_eq!(m.worst_during(t0 + ms(2400)), ms(2));
        assert!(!m.spoils(t0 + ms(2400), ms(100)), "2 ms is within the 10 ms floor");
        // The bound: 10 ms, or 5 % of long round trips.
        assert_eq!(tolerated(ms(100)), ms(10));
        assert_eq!(tolerated(ms(1000)), ms(50));
        // A tick that ran early (cannot happen, but the clock is not ours) counts as on time.
        m.record(t0 + ms(3000), t0 + ms(2900));
        assert_eq!(m.last(), Duration::ZERO);
    }

    #[test]
    fn marks_older_than_the_horizon_are_forgotten() {
        let t0 = Instant::now();
        let mut m = StallMeter::new(Duration::from_secs(1), Duration::from_secs(2));
        m.record(t0, t0 + Duration::from_secs(1));
        for i in 2..=5u64 {
            let t = t0 + Duration::from_secs(i);
            m.record(t, t);
        }
        assert!(m.marks.len() <= 3, "{} marks kept", m.marks.len());
        assert_eq!(m.worst_since(t0), Duration::ZERO, "the old stall is gone");
        assert_eq!(m.worst_ever(), Duration::from_secs(1));
        // The count bound holds even with a huge horizon.
        let mut m = StallMeter::new(Duration::from_secs(1), Duration::from_secs(1 << 30));
        for i in 0..(MAX_MARKS as u64 + 10) {
            let t = t0 + Duration::from_millis(i);
            m.record(t, t);
        }
        assert_eq!(m.marks.len(), MAX_MARKS);
    }
}

//! When a node sends its next directory digest.
//!
//! Anti-entropy (Demers et al. 1987) runs one exchange per period. A fixed period either
//! floods a settled swarm with equal digests or repairs a changed one slowly, so the period
//! adapts: it starts at `base`, doubles after every exchange that found the digests equal, up
//! to `max`, and falls back to `base` when the directory changes (the next digest then goes
//! out within one base period). It backs off only once the streak of equal exchanges counts
//! as settled ([`SETTLED_STREAK`]): while nodes join, neighbours are often equal to each
//! other but not yet to the rest of the swarm, and backing off then stretched the
//! convergence tail (measured at N = 200: members complete after 23 s). This is the back-off Serf's push-pull uses in spirit (its
//! interval scales with the cluster); ours scales with quiet instead, which needs no size
//! estimate.
//!
//! Sans-IO: the caller passes the time; the pacer only answers "is one due now".

use crate::directory::members::SETTLED_STREAK;
use crate::time::Time;
use std::time::Duration;

/// The smallest period the pacer accepts: a smaller `base` is raised to it.
pub const MIN_PERIOD: Duration = Duration::from_millis(10);

/// The digest schedule.
#[derive(Debug, Clone)]
pub struct SyncPacer {
    base: Duration,
    max: Duration,
    current: Duration,
    next_at: Time,
}

impl SyncPacer {
    /// A pacer whose first digest is due one `base` after `now`.
    pub fn new(base: Duration, max: Duration, now: Time) -> Self {
        let base = base.max(MIN_PERIOD);
        SyncPacer { base, max: max.max(base), current: base, next_at: now + base }
    }

    /// Is a digest due at `now`? If so, the next one is scheduled one period later.
    pub fn due(&mut self, now: Time) -> bool {
        if now < self.next_at {
            return false;
        }
        self.next_at = now + self.current;
        true
    }

    /// The last exchange found the digests equal, the `equal_streak`-th in a row: slow down
    /// once the streak counts as settled.
    pub fn on_equal(&mut self, equal_streak: u32) {
        if equal_streak >= SETTLED_STREAK {
            self.current = (self.current * 2).min(self.max);
        }
    }

    /// The directory changed: back to the base period, the next digest within one of it.
    pub fn on_change(&mut self, now: Time) {
        if self.current != self.base {
            self.current = self.base;
            self.next_at = self.next_at.min(now + self.base);
        }
    }

    /// The current period.
    pub fn period(&self) -> Duration {
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backs_off_on_equal_and_resets_on_change() {
        let t0 = Time::from_millis(1_000);
        let ms = Duration::from_millis;
        let mut p = SyncPacer::new(ms(100), ms(800), t0);
        assert!(!p.due(t0));
        assert!(p.due(t0 + ms(100)));
        assert!(!p.due(t0 + ms(150)), "the next one is a period later");
        p.on_equal(SETTLED_STREAK - 1);
        assert_eq!(p.period(), ms(100), "no back-off before the streak counts as settled");
        for _ in 0..10 {
            p.on_equal(SETTLED_STREAK);
        }
        assert_eq!(p.period(), ms(800));
        // Due at t0 + 200 under the old period; the next one is 800 ms after it.
        assert!(p.due(t0 + ms(250)));
        assert!(!p.due(t0 + ms(1_000)));
        // A change at t0 + 300 brings it to within one base period.
        p.on_change(t0 + ms(300));
        assert_eq!(p.period(), ms(100));
        assert!(!p.due(t0 + ms(350)));
        assert!(p.due(t0 + ms(400)));
        assert!(!p.due(t0 + ms(450)));
        assert!(p.due(t0 + ms(500)));
    }

    #[test]
    fn a_change_pulls_a_far_digest_in() {
        let ms = Duration::from_millis;
        let mut p = SyncPacer::new(ms(100), ms(6_400), Time::ZERO);
        assert!(p.due(Time::from_millis(100)));
        for _ in 0..6 {
            p.on_equal(SETTLED_STREAK);
        }
        assert!(p.due(Time::from_millis(200)));
        // The next digest would be 6.4 s on; a change brings it to within 100 ms.
        assert!(!p.due(Time::from_millis(5_000)));
        p.on_change(Time::from_millis(5_000));
        assert!(p.due(Time::from_millis(5_100)));
    }

    #[test]
    fn a_tiny_base_is_raised() {
        let p = SyncPacer::new(Duration::ZERO, Duration::ZERO, Time::ZERO);
        assert_eq!(p.period(), MIN_PERIOD);
    }
}

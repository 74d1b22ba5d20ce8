//! The one timer contract: commands a protocol emits ([`TimerCmd`], through its effect type's
//! [`TimerEffect`]) and the table a driver keeps them in ([`TimerTable`]). Semantics in the
//! module doc of [`crate::core`].

use crate::time::Time;
use std::time::Duration;

/// Arm or disarm a timer of value `T`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerCmd<T> {
    /// Fire `timer` `after` from now, replacing an armed timer of the same value.
    Set { timer: T, after: Duration },
    /// Disarm `timer`.
    Cancel { timer: T },
}

/// An effect type that carries timer commands: how a protocol's effects say "arm" and
/// "disarm", so that [`super::Context`] and [`TimerTable`] are written once for all of them.
pub trait TimerEffect: Sized {
    /// The timers this protocol arms (a small `Copy` enum).
    type Timer: Copy + Ord + std::fmt::Debug;
    /// The effect that carries `cmd`.
    fn from_cmd(cmd: TimerCmd<Self::Timer>) -> Self;
    /// The timer command this effect carries, if it is one.
    fn as_cmd(&self) -> Option<TimerCmd<Self::Timer>>;
}

/// The armed timers of one state machine, with their deadlines: what a driver keeps between
/// calls. A few timers per machine, so a small vector.
#[derive(Debug, Clone)]
pub struct TimerTable<T> {
    armed: Vec<(T, Time)>,
}

impl<T> Default for TimerTable<T> {
    fn default() -> Self {
        TimerTable { armed: Vec::new() }
    }
}

impl<T: Copy + Ord> TimerTable<T> {
    pub fn new() -> Self {
        TimerTable { armed: Vec::new() }
    }

    /// Carries out `cmd` issued at `now`.
    pub fn apply(&mut self, now: Time, cmd: TimerCmd<T>) {
        match cmd {
            TimerCmd::Set { timer, after } => self.arm(timer, now + after),
            TimerCmd::Cancel { timer } => self.cancel(timer),
        }
    }

    /// Carries out every timer command among `effects`, issued at `now`.
    pub fn apply_all<E: TimerEffect<Timer = T>>(&mut self, now: Time, effects: &[E]) {
        for cmd in effects.iter().filter_map(E::as_cmd) {
            self.apply(now, cmd);
        }
    }

    /// Arms `timer` for `at`, replacing its earlier deadline.
    pub fn arm(&mut self, timer: T, at: Time) {
        match self.armed.iter_mut().find(|(t, _)| *t == timer) {
            Some(slot) => slot.1 = at,
            None => self.armed.push((timer, at)),
        }
    }

    pub fn cancel(&mut self, timer: T) {
        self.armed.retain(|(t, _)| *t != timer);
    }

    pub fn is_armed(&self, timer: T) -> bool {
        self.armed.iter().any(|(t, _)| *t == timer)
    }

    /// The deadline of `timer`, if armed.
    pub fn deadline(&self, timer: T) -> Option<Time> {
        self.armed.iter().find(|(t, _)| *t == timer).map(|(_, at)| *at)
    }

    /// The earliest deadline.
    pub fn next_deadline(&self) -> Option<Time> {
        self.armed.iter().map(|(_, at)| *at).min()
    }

    /// Disarms and returns the timers due at `now`, earliest deadline first (ties by value).
    pub fn take_due(&mut self, now: Time) -> Vec<T> {
        let mut due: Vec<(Time, T)> = self.armed.iter().filter(|(_, at)| *at <= now).map(|(t, at)| (*at, *t)).collect();
        if due.is_empty() {
            return Vec::new();
        }
        due.sort();
        self.armed.retain(|(_, at)| *at > now);
        due.into_iter().map(|(_, t)| t).collect()
    }

    pub fn len(&self) -> usize {
        self.armed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.armed.is_empty()
    }

    /// Disarms everything.
    pub fn clear(&mut self) {
        self.armed.clear();
    }
}

/// The elections' effects ([`crate::driver::Effect`]) carry timers of [`crate::driver::Timer`].
impl TimerEffect for crate::driver::Effect {
    type Timer = crate::driver::Timer;
    fn from_cmd(cmd: TimerCmd<Self::Timer>) -> Self {
        match cmd {
            TimerCmd::Set { timer, after } => crate::driver::Effect::SetTimer { timer, after },
            TimerCmd::Cancel { timer } => crate::driver::Effect::CancelTimer { timer },
        }
    }
    fn as_cmd(&self) -> Option<TimerCmd<Self::Timer>> {
        match *self {
            crate::driver::Effect::SetTimer { timer, after } => Some(TimerCmd::Set { timer, after }),
            crate::driver::Effect::CancelTimer { timer } => Some(TimerCmd::Cancel { timer }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(m: u64) -> Duration {
        Duration::from_millis(m)
    }

    #[test]
    fn arming_replaces_cancelling_is_idempotent_and_timers_fire_once_in_order() {
        let mut t: TimerTable<u8> = TimerTable::new();
        let t0 = Time::from_millis(1_000);
        t.apply(t0, TimerCmd::Set { timer: 2, after: ms(300) });
        t.apply(t0, TimerCmd::Set { timer: 1, after: ms(500) });
        t.apply(t0, TimerCmd::Set { timer: 1, after: ms(100) });
        assert_eq!(t.len(), 2, "re-arming replaces");
        assert_eq!(t.next_deadline(), Some(t0 + ms(100)));
        t.apply(t0, TimerCmd::Cancel { timer: 7 });
        assert_eq!(t.len(), 2, "cancelling an unarmed timer does nothing");
        assert!(t.take_due(t0 + ms(99)).is_empty());
        assert_eq!(t.take_due(t0 + ms(400)), vec![1, 2], "earliest first");
        assert!(t.take_due(t0 + ms(10_000)).is_empty(), "each fires once");
        // Equal deadlines come out by value.
        t.arm(9, t0);
        t.arm(3, t0);
        assert_eq!(t.take_due(t0), vec![3, 9]);
        t.arm(4, t0 + ms(5));
        t.cancel(4);
        assert!(t.is_empty());
    }
}

//! [`Context`]: what a state machine may use while it handles one input.

use super::timer::{TimerCmd, TimerEffect};
use crate::time::Time;
use rand::RngCore;
use std::time::Duration;

/// The current time, a seeded RNG and the effect buffer of one call into a state machine.
/// `E` is the protocol's effect type; the driver owns the buffer and drains it after the call.
pub struct Context<'a, E> {
    pub now: Time,
    pub rng: &'a mut dyn RngCore,
    effects: &'a mut Vec<E>,
}

impl<'a, E> Context<'a, E> {
    pub fn new(now: Time, rng: &'a mut dyn RngCore, effects: &'a mut Vec<E>) -> Self {
        Context { now, rng, effects }
    }

    /// Appends one effect.
    pub fn push(&mut self, e: E) {
        self.effects.push(e);
    }

    /// Effects pushed so far during this call.
    pub fn effects(&self) -> &[E] {
        self.effects
    }

    /// A context for a nested state machine: same time and RNG, its own effect buffer (the
    /// caller translates or filters what the inner machine asks for).
    pub fn nested<'b, F>(&'b mut self, effects: &'b mut Vec<F>) -> Context<'b, F> {
        Context { now: self.now, rng: &mut *self.rng, effects }
    }
}

impl<E: TimerEffect> Context<'_, E> {
    /// Arms `timer` to fire `after` from now, replacing an armed timer of the same value.
    pub fn set_timer(&mut self, timer: E::Timer, after: Duration) {
        self.effects.push(E::from_cmd(TimerCmd::Set { timer, after }));
    }

    /// Disarms `timer` (nothing happens if it is not armed).
    pub fn cancel_timer(&mut self, timer: E::Timer) {
        self.effects.push(E::from_cmd(TimerCmd::Cancel { timer }));
    }
}

//! A generic, deterministic priority queue of timed events.
//!
//! Discrete-event simulation needs the earliest event first and, among events at the same
//! instant, the one scheduled first (FIFO), so that a run is a pure function of its seed. The
//! queue orders entries by `(time, seq)`, where `seq` is a counter the queue assigns at push
//! time; ties on time therefore never depend on the event's contents or on heap layout.
//!
//! It is a binary min-heap (`std::collections::BinaryHeap` on a reversed key), which is
//! `O(log n)` per operation and cache-friendly when the event type `E` is small: keep `E` a
//! few machine words (indices, not payloads; park large payloads in a [`crate::sim::slab::Slab`]).
//! Nothing here knows about elections: the super-peer experiments reuse it as is.
//!
//! Time is [`overlay::Time`] (microseconds); the queue never moves backwards because the
//! engine only schedules at `now + delay`.

use overlay::Time;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

struct Entry<E> {
    time: u64,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.time == other.time && self.seq == other.seq
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest `(time, seq)` first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

/// Events of type `E` ordered by `(time, insertion order)`.
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        EventQueue { heap: BinaryHeap::new(), seq: 0 }
    }

    /// A queue with room for `n` events before it reallocates.
    pub fn with_capacity(n: usize) -> Self {
        EventQueue { heap: BinaryHeap::with_capacity(n), seq: 0 }
    }

    /// Schedule `event` at `at`. Events at the same time come out in push order.
    #[inline]
    pub fn push(&mut self, at: Time, event: E) {
        self.seq += 1;
        self.heap.push(Entry { time: at.as_micros(), seq: self.seq, event });
    }

    /// The earliest event and its time.
    #[inline]
    pub fn pop(&mut self) -> Option<(Time, E)> {
        self.heap.pop().map(|e| (Time::from_micros(e.time), e.event))
    }

    /// The time of the earliest event, without removing it.
    pub fn peek_time(&self) -> Option<Time> {
        self.heap.peek().map(|e| Time::from_micros(e.time))
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// How many events were ever pushed.
    pub fn pushed(&self) -> u64 {
        self.seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_fifo() {
        let mut q = EventQueue::new();
        q.push(Time::from_micros(5), "c");
        q.push(Time::from_micros(1), "a");
        q.push(Time::from_micros(5), "d");
        q.push(Time::from_micros(1), "b");
        q.push(Time::from_micros(3), "x");
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, vec!["a", "b", "x", "c", "d"]);
        assert!(q.is_empty());
        assert_eq!(q.pushed(), 5);
    }

    #[test]
    fn peek_matches_pop() {
        let mut q = EventQueue::new();
        for t in [9u64, 2, 7, 2, 0] {
            q.push(Time::from_micros(t), t);
        }
        let mut last = 0;
        while let Some(t) = q.peek_time() {
            let (pt, e) = q.pop().unwrap();
            assert_eq!(t, pt);
            assert_eq!(pt.as_micros(), e);
            assert!(e >= last);
            last = e;
        }
    }
}

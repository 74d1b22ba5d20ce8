//! Messages waiting to be sent again: the queue behind [`super::failure::Next::ResendAfter`]
//! (a super-peer message refused by a live peer) and
//! [`super::failure::ElectionNext::SendAgainAfter`] (an election message whose connection
//! closed under it). Sans-IO: the caller passes the time, asks when the next one is due, and
//! takes the due ones out, in the order they were queued. At most one entry per failed
//! request, so the caller's requests in flight bound it.

use crate::time::Time;

/// A queue of `M`s, each due at its own time.
#[derive(Debug, Clone)]
pub struct Resends<M> {
    waiting: Vec<(Time, M)>,
}

impl<M> Default for Resends<M> {
    fn default() -> Self {
        Resends { waiting: Vec::new() }
    }
}

impl<M> Resends<M> {
    /// Send `m` again at `at`.
    pub fn push(&mut self, at: Time, m: M) {
        self.waiting.push((at, m));
    }

    /// When the earliest one is due.
    pub fn next_due(&self) -> Option<Time> {
        self.waiting.iter().map(|(t, _)| *t).min()
    }

    /// Take out the ones due at `now`, in the order they were queued.
    pub fn take_due(&mut self, now: Time) -> Vec<M> {
        if !self.waiting.iter().any(|(t, _)| *t <= now) {
            return Vec::new();
        }
        let (due, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting).into_iter().partition(|(t, _)| *t <= now);
        self.waiting = wait;
        due.into_iter().map(|(_, m)| m).collect()
    }

    /// The ones waiting, due or not.
    pub fn iter(&self) -> impl Iterator<Item = &M> {
        self.waiting.iter().map(|(_, m)| m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_ones_come_out_in_queue_order_and_the_rest_wait() {
        let t = Time::from_millis;
        let mut q = Resends::default();
        assert_eq!(q.next_due(), None);
        q.push(t(400), "c");
        q.push(t(200), "a");
        q.push(t(300), "b");
        assert_eq!(q.next_due(), Some(t(200)));
        assert!(q.take_due(t(100)).is_empty());
        assert_eq!(q.take_due(t(400)), vec!["c", "a", "b"]);
        assert_eq!(q.next_due(), None);
        q.push(t(500), "d");
        q.push(t(900), "e");
        assert_eq!(q.take_due(t(600)), vec!["d"]);
        assert_eq!(q.iter().copied().collect::<Vec<_>>(), vec!["e"]);
        assert_eq!(q.next_due(), Some(t(900)));
    }
}

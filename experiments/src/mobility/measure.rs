//! What the mobility experiment measures, per node, over a window of virtual time.
//!
//! A node's state is piecewise constant: it changes when the node handles an input, and the
//! ground truth (its connected component and that component's best-capacity node) changes
//! when the radio graph changes. The driver calls [`Measure::touch`] at each such change with
//! the node's new [`Status`]; the time since the previous touch is credited to the old one,
//! clipped to the window. So the times are exact integrals, not samples.
//!
//! Three nested notions of "has a leader", weakest first:
//! - `leader`: the node names a leader and is not in an election (its own view, the
//!   paper's "each node has a leader");
//! - `reachable`: and that leader is in the node's connected component of the radio graph
//!   now (a node still naming a leader it was cut off from does not count);
//! - `best`: and that leader is the best-capacity node of the component.

use serde::Serialize;

/// A node's status at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    pub leader: bool,
    pub reachable: bool,
    pub best: bool,
}

/// One node's totals over the window.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct NodeTotals {
    /// Microseconds with a leader, with a reachable one, with the best one.
    pub leader_us: u64,
    pub reachable_us: u64,
    pub best_us: u64,
    /// Times the named leader changed to another node.
    pub leader_changes: u64,
    /// Elections this node started.
    pub elections: u64,
    /// Election messages sent (every kind of the echo election).
    pub messages: u64,
    /// Neighbour-discovery hellos sent.
    pub hellos: u64,
    /// Integral of the node's degree and of its component's size over the window (per
    /// microsecond), for the mean degree and component size.
    pub degree_us: f64,
    pub component_us: f64,
}

/// The accumulators of every node.
pub struct Measure {
    from: u64,
    to: u64,
    since: Vec<u64>,
    status: Vec<Status>,
    pub totals: Vec<NodeTotals>,
}

impl Measure {
    /// Measure `n` nodes over `[from, to)` (microseconds).
    pub fn new(n: usize, from: u64, to: u64) -> Measure {
        Measure {
            from,
            to,
            since: vec![0; n],
            status: vec![Status::default(); n],
            totals: vec![NodeTotals::default(); n],
        }
    }

    /// Whether `now` lies in the window (counters count only then).
    #[inline]
    pub fn counting(&self, now: u64) -> bool {
        (self.from..self.to).contains(&now)
    }

    /// Length of `[a, b)` inside the window.
    #[inline]
    fn overlap(&self, a: u64, b: u64) -> u64 {
        b.min(self.to).saturating_sub(a.max(self.from))
    }

    /// Node `i` has status `s` from `now` on.
    #[inline]
    pub fn touch(&mut self, i: u32, now: u64, s: Status) {
        let i = i as usize;
        let old = self.status[i];
        let d = self.overlap(self.since[i], now);
        if d > 0 {
            let t = &mut self.totals[i];
            t.leader_us += d * old.leader as u64;
            t.reachable_us += d * old.reachable as u64;
            t.best_us += d * old.best as u64;
        }
        self.since[i] = now;
        self.status[i] = s;
    }

    /// Credit `[from, to)` of node `i` with its degree and component size.
    #[inline]
    pub fn topology(&mut self, i: u32, from: u64, to: u64, degree: usize, component: usize) {
        let d = self.overlap(from, to) as f64;
        let t = &mut self.totals[i as usize];
        t.degree_us += d * degree as f64;
        t.component_us += d * component as f64;
    }

    /// The window's length in microseconds.
    pub fn window_us(&self) -> u64 {
        self.to - self.from
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_is_credited_to_the_status_it_was_spent_in_and_clipped() {
        let mut m = Measure::new(1, 100, 1000);
        let yes = Status { leader: true, reachable: true, best: false };
        m.touch(0, 0, yes);
        // 0..50: before the window.
        m.touch(0, 50, Status::default());
        // 50..300: no leader.
        m.touch(0, 300, yes);
        // 300..1200: leader, clipped at 1000.
        m.touch(0, 1200, Status::default());
        let t = m.totals[0];
        assert_eq!((t.leader_us, t.reachable_us, t.best_us), (700, 700, 0));
        assert!(m.counting(100) && m.counting(999) && !m.counting(1000) && !m.counting(99));
        m.topology(0, 0, 200, 4, 10);
        assert_eq!(m.totals[0].degree_us, 400.0);
        assert_eq!(m.totals[0].component_us, 1000.0);
    }
}

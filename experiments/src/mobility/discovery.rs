//! Neighbour discovery by hellos: how a node of the mobile network learns that links came up
//! or went down, and so what it reports to its election as `PeerUp` and `PeerDown`.
//!
//! It follows AODV's hello mechanism (RFC 3561, section 6.9, with its defaults
//! `HELLO_INTERVAL` = 1 s and `ALLOWED_HELLO_LOSS` = 2): every node broadcasts a hello each
//! `interval`, at its own phase; a node that hears a hello from a node it does not know
//! reports `PeerUp`; a known neighbour from which nothing was heard for more than
//! `allowed_loss x interval` is reported `PeerDown`. A node checks its neighbours at its own
//! hello times, so a link that broke is reported 2 to 3 intervals later (one lost hello is
//! tolerated), and a new link within one interval (plus the hellos lost near the edge).
//!
//! Any frame heard counts as a hello from its sender, and a frame's MAC acknowledgement as one
//! from its receiver (RFC 3561, 6.9: a node may take any packet from a neighbour as a sign of
//! the link); the driver reports both through [`Discovery::heard`]. So a node that receives a
//! message from a node it did not know yet reports `PeerUp` before the message, as a real
//! node's transport would, and busy links do not flap when a hello is lost.
//!
//! Phases are multiples of the driver's tick, drawn per node at the start.

use rand::Rng;
use serde::Serialize;
use std::time::Duration;

/// The hello settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Hellos {
    pub interval: Duration,
    /// Hellos that may be missed in a row before the link is taken as down.
    pub allowed_loss: u32,
}

impl Default for Hellos {
    fn default() -> Self {
        Hellos { interval: Duration::from_secs(1), allowed_loss: 2 }
    }
}

/// A report for a node's election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// `node` now knows `peer` as a neighbour.
    Up { node: u32, peer: u32 },
    /// `node` lost `peer`.
    Down { node: u32, peer: u32 },
}

/// Every node's known neighbours and when each was last heard (microseconds).
pub struct Discovery {
    /// Ticks per hello interval.
    period: u64,
    /// Silence (microseconds) after which a neighbour is dropped.
    expiry: u64,
    /// Each node's hello tick modulo `period`.
    phase: Vec<u64>,
    /// Per node: (peer, last heard), sorted by peer.
    known: Vec<Vec<(u32, u64)>>,
}

impl Discovery {
    /// Discovery for `n` nodes with a driver tick of `tick`; phases drawn from `rng`.
    pub fn new(n: usize, hellos: Hellos, tick: Duration, rng: &mut impl Rng) -> Discovery {
        let period = (hellos.interval.as_micros() / tick.as_micros().max(1)).max(1) as u64;
        Discovery {
            period,
            expiry: hellos.interval.as_micros() as u64 * hellos.allowed_loss as u64,
            phase: (0..n).map(|_| rng.gen_range(0..period)).collect(),
            known: vec![Vec::new(); n],
        }
    }

    /// Whether `node` says hello at tick number `tick`.
    pub fn hello_due(&self, node: u32, tick: u64) -> bool {
        tick % self.period == self.phase[node as usize]
    }

    /// `node` heard a hello from `from` at `now_us`.
    pub fn heard(&mut self, node: u32, from: u32, now_us: u64, out: &mut Vec<Report>) {
        let list = &mut self.known[node as usize];
        match list.binary_search_by_key(&from, |&(p, _)| p) {
            Ok(k) => list[k].1 = now_us,
            Err(k) => {
                list.insert(k, (from, now_us));
                out.push(Report::Up { node, peer: from });
            }
        }
    }

    /// `node` drops the neighbours it has not heard from for too long.
    pub fn expire(&mut self, node: u32, now_us: u64, out: &mut Vec<Report>) {
        let expiry = self.expiry;
        self.known[node as usize].retain(|&(peer, last)| {
            let keep = now_us.saturating_sub(last) <= expiry;
            if !keep {
                out.push(Report::Down { node, peer });
            }
            keep
        });
    }

    /// The neighbours `node` knows.
    pub fn known(&self, node: u32) -> impl Iterator<Item = u32> + '_ {
        self.known[node as usize].iter().map(|&(p, _)| p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn up_on_the_first_hello_down_after_two_missed() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let mut d = Discovery::new(2, Hellos::default(), Duration::from_millis(100), &mut rng);
        assert_eq!(d.period, 10);
        let mut out = Vec::new();
        d.heard(0, 1, 1_000_000, &mut out);
        assert_eq!(out, vec![Report::Up { node: 0, peer: 1 }]);
        out.clear();
        d.heard(0, 1, 2_000_000, &mut out);
        assert!(out.is_empty(), "a known neighbour is not reported again");
        // One hello missed (at 3 s): still up at 4 s; two missed: down at 5 s.
        d.expire(0, 4_000_000, &mut out);
        assert!(out.is_empty());
        d.expire(0, 5_000_000, &mut out);
        assert_eq!(out, vec![Report::Down { node: 0, peer: 1 }]);
        assert_eq!(d.known(0).count(), 0);
        // Heard again: up again.
        out.clear();
        d.heard(0, 1, 6_000_000, &mut out);
        assert_eq!(out, vec![Report::Up { node: 0, peer: 1 }]);
        // Every node says hello once per period.
        for node in 0..2 {
            assert_eq!((0..100).filter(|&t| d.hello_due(node, t)).count(), 10);
        }
    }
}

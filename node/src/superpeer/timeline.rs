//! A timeline of the super-peer phase of `peerage swarm --superpeers`: every
//! [`SAMPLE_EVERY`] the swarm's load and what the nodes were doing, so a run that goes wrong
//! shows *when* and *under what load* (whether connections, lookups or super-peer traffic
//! grew first when a swarm falls behind).
//!
//! Each sample covers the interval since the previous one (rates and shares are over that
//! interval; counts are at the sample): process CPU, connections per node, new connections,
//! DHT lookups started and failed, `Hello`s and super-peer messages sent, the share of the
//! emulation's chunks released 100 ms / 500 ms or more late, how many nodes have decided
//! their size estimate, how many heads there are and how many nodes are attached, how many
//! nodes are in a cluster re-election (and for how many dead heads), and the super-peer
//! messages by kind (to see what a post-kill election storm is made of).

use crate::net::latency_transport::{LatencyNet, LATENESS_BOUNDS_MS};
use crate::runtime::status::Snapshot;
use crate::runtime::sysstat;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the timeline takes a sample.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// One sample (see the module doc).
#[derive(Debug, Clone, Serialize)]
pub struct SpSample {
    /// Seconds since the swarm started.
    pub t_s: f64,
    pub cpu_percent_of_one_core: Option<f64>,
    pub connections_mean: f64,
    pub connections_max: usize,
    pub new_connections_per_s: f64,
    pub lookups_per_s: f64,
    pub lookups_failed_per_s: f64,
    pub hellos_per_s: f64,
    pub sp_messages_per_s: f64,
    pub send_failures_per_s: f64,
    /// Share of the emulation's chunks in the interval released at least 100 / 500 ms late.
    pub late_100ms: Option<f64>,
    pub late_500ms: Option<f64>,
    /// Nodes that decided their size estimate (`wanted` > 0).
    pub decided: usize,
    pub heads: usize,
    /// Nodes attached to some head (not checked for liveness here).
    pub attached: usize,
    /// Nodes whose coordinate is fit to place tokens by (`SpInput::CoordinateFit`).
    pub coordinate_fit: usize,
    pub alive: usize,
    /// Nodes in a cluster re-election now, and the distinct dead heads they re-elect.
    pub in_election: usize,
    pub elections_for: usize,
    /// Super-peer messages a second by kind over the interval (kinds sent in it only); the
    /// cluster elections' messages by the election's own kind, as `election:<kind>`.
    pub sp_messages_by_kind_per_s: BTreeMap<String, f64>,
    /// Members switching heads, a second (`attach_changes`; a first attachment counts too).
    pub attach_changes_per_s: f64,
    /// Mean true (model) RTT from each attached node to its head, ms (emulated swarms only):
    /// how placement improves while the coordinates form .
    pub latency_to_head_ms_mean: Option<f64>,
}

#[derive(Default, Clone)]
struct Totals {
    opened: u64,
    lookups: u64,
    failed: u64,
    hellos: u64,
    sent: u64,
    send_failures: u64,
    attach_changes: u64,
    by_kind: BTreeMap<String, u64>,
}

/// Takes the samples; call [`Timeline::poll`] often (it samples when due).
pub struct Timeline {
    t0: Instant,
    net: Option<Arc<LatencyNet>>,
    next: Instant,
    last_at: Instant,
    last_cpu: Option<f64>,
    last: Totals,
    last_late: Vec<u64>,
    samples: Vec<SpSample>,
}

impl Timeline {
    /// `t0`: the swarm's start (what `t_s` counts from).
    pub fn new(t0: Instant, net: Option<Arc<LatencyNet>>, snaps: &[(usize, Snapshot)]) -> Timeline {
        let now = Instant::now();
        let last_late = net.as_ref().map(|n| n.lateness().counts).unwrap_or_default();
        Timeline {
            t0,
            net,
            next: now + SAMPLE_EVERY,
            last_at: now,
            last_cpu: sysstat::cpu_seconds(),
            last: totals(snaps),
            last_late,
            samples: Vec::new(),
        }
    }

    /// Takes a sample if one is due. `index_of` maps a node id to the node's index in the
    /// swarm (and the latency model).
    pub fn poll(&mut self, snaps: &[(usize, Snapshot)], index_of: impl Fn(&str) -> Option<usize>) {
        let now = Instant::now();
        if now < self.next {
            return;
        }
        self.next = now + SAMPLE_EVERY;
        let dt = now.duration_since(self.last_at).as_secs_f64().max(1e-3);
        self.last_at = now;
        let cpu = sysstat::cpu_seconds();
        let cpu_percent = match (cpu, self.last_cpu) {
            (Some(c), Some(l)) => Some(100.0 * (c - l).max(0.0) / dt),
            _ => None,
        };
        self.last_cpu = cpu;
        let t = totals(snaps);
        let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt;
        let (late_100ms, late_500ms) = match &self.net {
            Some(net) => {
                let counts = net.lateness().counts;
                let delta: Vec<u64> = counts
                    .iter()
                    .enumerate()
                    .map(|(i, c)| c.saturating_sub(self.last_late.get(i).copied().unwrap_or(0)))
                    .collect();
                self.last_late = counts;
                late_shares(&delta)
            }
            None => (None, None),
        };
        let conns: Vec<usize> = snaps.iter().map(|(_, s)| s.connections).collect();
        let sps = snaps.iter().filter_map(|(i, s)| s.superpeer.as_ref().map(|p| (*i, p)));
        let (mut decided, mut heads, mut attached, mut in_election, mut fit) = (0, 0, 0, 0, 0);
        let mut dead = BTreeSet::new();
        let mut to_head = Vec::new();
        for (i, p) in sps {
            decided += usize::from(p.wanted > 0);
            heads += usize::from(p.role == "super-peer" || p.role == "head");
            attached += usize::from(p.head.is_some());
            fit += usize::from(p.coordinate_fit);
            if let (Some(net), Some(j)) = (&self.net, p.head.as_deref().and_then(&index_of)) {
                to_head.push(net.model().rtt_ms(i, j));
            }
            if let Some(d) = &p.election_for {
                in_election += 1;
                dead.insert(d.as_str());
            }
        }
        let sp_messages_by_kind_per_s = t
            .by_kind
            .iter()
            .filter_map(|(k, n)| {
                let r = rate(*n, self.last.by_kind.get(k).copied().unwrap_or(0));
                (r > 0.0).then(|| (k.clone(), r))
            })
            .collect();
        self.samples.push(SpSample {
            t_s: now.duration_since(self.t0).as_secs_f64(),
            cpu_percent_of_one_core: cpu_percent,
            connections_mean: conns.iter().sum::<usize>() as f64 / conns.len().max(1) as f64,
            connections_max: conns.iter().copied().max().unwrap_or(0),
            new_connections_per_s: rate(t.opened, self.last.opened),
            lookups_per_s: rate(t.lookups, self.last.lookups),
            lookups_failed_per_s: rate(t.failed, self.last.failed),
            hellos_per_s: rate(t.hellos, self.last.hellos),
            sp_messages_per_s: rate(t.sent, self.last.sent),
            send_failures_per_s: rate(t.send_failures, self.last.send_failures),
            late_100ms,
            late_500ms,
            decided,
            heads,
            attached,
            coordinate_fit: fit,
            alive: snaps.len(),
            in_election,
            elections_for: dead.len(),
            sp_messages_by_kind_per_s,
            attach_changes_per_s: rate(t.attach_changes, self.last.attach_changes),
            latency_to_head_ms_mean: (!to_head.is_empty()).then(|| to_head.iter().sum::<f64>() / to_head.len() as f64),
        });
        self.last = t;
    }

    pub fn into_samples(self) -> Vec<SpSample> {
        self.samples
    }
}

fn totals(snaps: &[(usize, Snapshot)]) -> Totals {
    let mut t = Totals::default();
    for (_, s) in snaps {
        t.opened += s.connections_opened;
        if let Some(p) = &s.superpeer {
            t.lookups += p.lookups;
            t.failed += p.lookups_failed;
            t.hellos += p.hellos_sent;
            t.sent += p.messages_sent;
            t.send_failures += p.send_failures;
            t.attach_changes += p.attach_changes;
            for (k, n) in &p.messages_by_kind {
                if k != "election" {
                    *t.by_kind.entry(k.clone()).or_default() += n;
                }
            }
            for (k, n) in &p.election_by_kind {
                *t.by_kind.entry(format!("election:{k}")).or_default() += n;
            }
        }
    }
    t
}

/// Shares of chunks at least 100 ms and at least 500 ms late, from a lateness histogram
/// (bucket `i` holds chunks below `LATENESS_BOUNDS_MS[i]`, the last one the rest).
fn late_shares(counts: &[u64]) -> (Option<f64>, Option<f64>) {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return (None, None);
    }
    let from = |bound: f64| -> f64 {
        let i = LATENESS_BOUNDS_MS.iter().position(|b| *b == bound).map_or(counts.len(), |i| i + 1);
        counts.iter().skip(i).sum::<u64>() as f64 / total as f64
    };
    (Some(from(100.0)), Some(from(500.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_shares_count_the_buckets_at_and_above_the_bound() {
        // Buckets: <0.5, <1, <2, <5, <10, <20, <50, <100, <500, rest.
        let counts = [10, 0, 0, 0, 0, 0, 0, 0, 6, 4];
        let (a, b) = late_shares(&counts);
        assert_eq!(a, Some(0.5));
        assert_eq!(b, Some(0.2));
        assert_eq!(late_shares(&[0; 10]), (None, None));
    }
}

//! The member directory's convergence, seen from the whole swarm (`peerage swarm`'s `sync`
//! section): where the time to "every node knows every member" goes.
//!
//! Read from every node's status snapshot (`Snapshot::members`, `Snapshot::sync`, the
//! counters of `node/src/directory/members.rs`), polled by the swarm runner (every 100 ms while it waits for the
//! milestones):
//! - **progress**: every 2 s, how many nodes know all N members, the fewest members any node
//!   knows, the 10th percentile and the mean, and the swarm's sync traffic so far;
//! - **per node**: the first time it knew all N members (its *completion*), and when its
//!   directory last changed; quantiles of both;
//! - **laggards**: the last nodes to complete (or that never did), with their join order (node
//!   index: node i was started i-th and bootstrapped from earlier nodes), members known,
//!   connections, current sync period and counters: a laggard that exchanged as often as the
//!   others but learned late points at the spread of entries; one with few exchanges or many
//!   failures points at the node (starved, backed off, or cut off);
//! - **totals**: the counters summed over all nodes.
//!
//! It assumes nothing about the protocol beyond the counters; it is a measurement, never
//! part of the node.

use crate::directory::members::SyncStats;
use crate::runtime::status::Snapshot;
use overlay::stats::Sample;
use serde::Serialize;
use std::time::{Duration, Instant};

/// How many laggards the report lists.
pub const LAGGARDS: usize = 12;
/// Progress sample period.
const SAMPLE_EVERY: Duration = Duration::from_secs(2);

/// One progress sample.
#[derive(Debug, Clone, Serialize)]
pub struct MembersSample {
    pub t_s: f64,
    /// Nodes that know all N members.
    pub complete: usize,
    pub min_members: usize,
    pub p10_members: usize,
    pub mean_members: f64,
    /// Sums over the nodes so far.
    pub digests_sent: u64,
    pub entries_sent: u64,
    pub entries_new: u64,
    pub failures: u64,
}

/// A node that completed late (or never).
#[derive(Debug, Clone, Serialize)]
pub struct Laggard {
    /// Join order (node index).
    pub node: usize,
    pub complete_s: Option<f64>,
    /// Seconds from swarm start to the last change of its directory.
    pub last_change_s: Option<f64>,
    pub members: usize,
    pub peers: usize,
    pub sync_period_ms: u64,
    pub sync: SyncStats,
}

/// Quantiles of a per-node time (seconds from swarm start).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Quantiles {
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
    /// Nodes without a value (never completed).
    pub missing: usize,
}

/// The `sync` section of the swarm report.
#[derive(Debug, Clone, Serialize)]
pub struct MembersReport {
    pub progress: Vec<MembersSample>,
    pub complete_s: Quantiles,
    pub last_change_s: Quantiles,
    pub laggards: Vec<Laggard>,
    pub totals: SyncStats,
}

/// Tracks the directory's convergence over the runner's polls.
#[derive(Debug)]
pub struct MembersTracker {
    n: usize,
    t0: Instant,
    complete_at: Vec<Option<f64>>,
    next_sample: Instant,
    progress: Vec<MembersSample>,
}

/// Sum of two counter sets.
pub fn add(a: SyncStats, b: &SyncStats) -> SyncStats {
    SyncStats {
        digests_sent: a.digests_sent + b.digests_sent,
        digests_held: a.digests_held + b.digests_held,
        digests_received: a.digests_received + b.digests_received,
        equal: a.equal + b.equal,
        summaries_sent: a.summaries_sent + b.summaries_sent,
        summaries_received: a.summaries_received + b.summaries_received,
        versions_sent: a.versions_sent + b.versions_sent,
        pushes_sent: a.pushes_sent + b.pushes_sent,
        pushes_received: a.pushes_received + b.pushes_received,
        entries_sent: a.entries_sent + b.entries_sent,
        entries_received: a.entries_received + b.entries_received,
        entries_new: a.entries_new + b.entries_new,
        asked: a.asked + b.asked,
        failures: a.failures + b.failures,
        failures_by: {
            let mut f = a.failures_by;
            f.merge(&b.failures_by);
            f
        },
        malformed: a.malformed + b.malformed,
        rumours_sent: a.rumours_sent + b.rumours_sent,
        rumour_entries_sent: a.rumour_entries_sent + b.rumour_entries_sent,
        expired: a.expired + b.expired,
        refused: {
            let mut r = a.refused;
            r.merge(&b.refused);
            r
        },
    }
}

/// Times are durations since the swarm started, never NaN; a NaN (which would be a bug) is
/// logged and the quantiles reported empty.
fn quantiles(v: Vec<Option<f64>>) -> Quantiles {
    let missing = v.iter().filter(|x| x.is_none()).count();
    let sample = match Sample::collect(v.into_iter().flatten()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("members report: {e}");
            return Quantiles { missing, ..Quantiles::default() };
        }
    };
    Quantiles {
        p50: sample.quantile(0.5),
        p90: sample.quantile(0.9),
        p99: sample.quantile(0.99),
        max: sample.max(),
        missing,
    }
}

impl MembersTracker {
    pub fn new(n: usize, t0: Instant) -> Self {
        MembersTracker { n, t0, complete_at: vec![None; n], next_sample: t0, progress: Vec::new() }
    }

    /// One poll of the live nodes' snapshots (by node index).
    pub fn observe(&mut self, snaps: &[(usize, Snapshot)]) {
        let now = Instant::now();
        let el = now.duration_since(self.t0).as_secs_f64();
        for (i, s) in snaps {
            if let Some(slot) = self.complete_at.get_mut(*i) {
                if slot.is_none() && s.members >= self.n {
                    *slot = Some(el);
                }
            }
        }
        if now >= self.next_sample && !snaps.is_empty() {
            self.next_sample = now + SAMPLE_EVERY;
            let mut m: Vec<usize> = snaps.iter().map(|(_, s)| s.members).collect();
            m.sort_unstable();
            let totals = snaps.iter().fold(SyncStats::default(), |a, (_, s)| add(a, &s.sync));
            self.progress.push(MembersSample {
                t_s: el,
                complete: m.iter().filter(|&&x| x >= self.n).count(),
                min_members: m[0],
                p10_members: m[(m.len() - 1) / 10],
                mean_members: m.iter().sum::<usize>() as f64 / m.len() as f64,
                digests_sent: totals.digests_sent,
                entries_sent: totals.entries_sent,
                entries_new: totals.entries_new,
                failures: totals.failures,
            });
        }
    }

    /// The report, from the last poll's snapshots.
    pub fn finish(self, snaps: &[(usize, Snapshot)]) -> MembersReport {
        let since = |t: Option<Instant>| t.map(|t| t.saturating_duration_since(self.t0).as_secs_f64());
        let mut rows: Vec<Laggard> = snaps
            .iter()
            .map(|(i, s)| Laggard {
                node: *i,
                complete_s: self.complete_at.get(*i).copied().flatten(),
                last_change_s: since(s.members_changed_at),
                members: s.members,
                peers: s.peers,
                sync_period_ms: s.sync_period_ms,
                sync: s.sync,
            })
            .collect();
        let last_change = quantiles(rows.iter().map(|r| r.last_change_s).collect());
        // Latest first; never completed before everything else.
        rows.sort_by(|a, b| match (a.complete_s, b.complete_s) {
            (None, None) => a.members.cmp(&b.members),
            (None, Some(_)) => std::cmp::Ordering::Less,
            (Some(_), None) => std::cmp::Ordering::Greater,
            (Some(x), Some(y)) => y.total_cmp(&x),
        });
        let totals = snaps.iter().fold(SyncStats::default(), |a, (_, s)| add(a, &s.sync));
        rows.truncate(LAGGARDS);
        MembersReport {
            progress: self.progress,
            complete_s: quantiles(self.complete_at.clone()),
            last_change_s: last_change,
            laggards: rows,
            totals,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(members: usize, digests: u64) -> Snapshot {
        Snapshot { members, sync: SyncStats { digests_sent: digests, ..SyncStats::default() }, ..Snapshot::default() }
    }

    #[test]
    fn tracks_completion_and_lists_laggards_latest_first() {
        let t0 = Instant::now();
        let mut t = MembersTracker::new(3, t0);
        t.observe(&[(0, snap(3, 1)), (1, snap(2, 1)), (2, snap(1, 1))]);
        assert_eq!(t.progress.len(), 1);
        assert_eq!(t.progress[0].complete, 1);
        assert_eq!(t.progress[0].min_members, 1);
        assert_eq!(t.progress[0].digests_sent, 3);
        std::thread::sleep(Duration::from_millis(5));
        t.observe(&[(0, snap(3, 2)), (1, snap(3, 2)), (2, snap(2, 2))]);
        let r = t.finish(&[(0, snap(3, 2)), (1, snap(3, 2)), (2, snap(2, 2))]);
        assert_eq!(r.laggards[0].node, 2, "never completed comes first");
        assert_eq!(r.laggards[0].complete_s, None);
        assert_eq!(r.laggards[1].node, 1, "then the latest to complete");
        assert!(r.laggards[1].complete_s > r.laggards[2].complete_s);
        assert_eq!(r.complete_s.missing, 1);
        assert_eq!(r.totals.digests_sent, 6);
    }

    #[test]
    fn quantiles_of_nothing_are_empty() {
        let q = quantiles(vec![None, None]);
        assert_eq!(q.missing, 2);
        assert!(q.max.is_none());
        let q = quantiles((1..=100).map(|i| Some(i as f64)).collect());
        assert_eq!(q.max, Some(100.0));
        assert_eq!(q.p50, Some(51.0));
    }
}

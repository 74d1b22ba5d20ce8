//! What a partition did to the super peers, and how long the swarm took to heal after it,
//! judged from the per-node role logs (`node/src/swarm/rows.rs`) and the times the testbed
//! cut and healed its links (its event log, `node/src/testbed/`).
//!
//! The swarm counts as *healed* at the first logged moment after the heal from which on,
//! until the last change in the logs, every live node is a head or attached to a live head,
//! no role (token or slot) is held by two live nodes (one leader per cluster), and every role
//! held just before the cut is held again (none lost). `healed_after_s` is that moment's
//! distance from the heal; `None` if the logs never reach it.

use crate::net::latency_transport::LatencyNet;
use crate::swarm::rows::{state_at, summarize_states, NodeRow, RowsSummary};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// One line of the testbed's event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultEvent {
    pub t_unix_ms: u64,
    /// `cut`, `heal`, `kill`, ...
    pub event: String,
    /// What it struck (hosts, a process), for the reader.
    #[serde(default)]
    pub what: String,
}

/// One cut and its heal.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HealReport {
    /// Seconds from the swarm's start.
    pub cut_s: f64,
    pub heal_s: f64,
    pub what: String,
    /// Just before the cut, just before the heal, and at the last change in the logs.
    pub before: RowsSummary,
    pub at_heal: RowsSummary,
    pub end: RowsSummary,
    /// Roles held just before the cut.
    pub roles_before: usize,
    /// Of those, held by no live node at the end.
    pub roles_lost: usize,
    /// Seconds from the heal until healed (see the module doc).
    pub healed_after_s: Option<f64>,
    /// Role, head or key changes logged after the heal.
    pub changes_after_heal: usize,
}

fn roles_at(rows: &[NodeRow], t: f64) -> BTreeSet<String> {
    state_at(rows, t).into_iter().flatten().filter(|s| s.role != "crashed").filter_map(|s| s.role_key.clone()).collect()
}

/// Judge a cut at `cut_s` healed at `heal_s` (seconds from the start); `rows` by index.
pub fn judge(rows: &[NodeRow], cut_s: f64, heal_s: f64, what: &str, net: Option<&LatencyNet>) -> HealReport {
    const EPS: f64 = 1e-6;
    let before_roles = roles_at(rows, cut_s - EPS);
    let mut times: Vec<f64> =
        rows.iter().flat_map(|r| r.changes.iter().map(|c| c.t_s)).filter(|t| *t >= heal_s).collect();
    times.sort_by(|a, b| a.total_cmp(b));
    times.dedup();
    let last = times.last().copied().unwrap_or(heal_s);
    let ok_at = |t: f64| {
        let sum = summarize_states(&state_at(rows, t), None);
        let held = roles_at(rows, t);
        sum.heads > 0
            && sum.unattached == 0
            && sum.roles_held_twice == 0
            && before_roles.iter().all(|k| held.contains(k))
    };
    // Walk back from the end: the earliest time from which every later moment is healed.
    let mut healed = None;
    let mut candidates = vec![heal_s];
    candidates.extend(times.iter().copied());
    for &t in candidates.iter().rev() {
        if ok_at(t) {
            healed = Some(t);
        } else {
            break;
        }
    }
    let end_roles = roles_at(rows, last);
    HealReport {
        cut_s,
        heal_s,
        what: what.to_string(),
        before: summarize_states(&state_at(rows, cut_s - EPS), net),
        at_heal: summarize_states(&state_at(rows, heal_s - EPS), net),
        end: summarize_states(&state_at(rows, last), net),
        roles_before: before_roles.len(),
        roles_lost: before_roles.iter().filter(|k| !end_roles.contains(*k)).count(),
        healed_after_s: healed.map(|t| t - heal_s),
        changes_after_heal: rows.iter().map(|r| r.changes.iter().filter(|c| c.t_s >= heal_s).count()).sum(),
    }
}

/// Pair every `cut` with the next `heal` and judge each (times from the swarm's start,
/// `t0_unix_ms`).
pub fn judge_events(
    rows: &[NodeRow],
    events: &[FaultEvent],
    t0_unix_ms: u64,
    net: Option<&LatencyNet>,
) -> Vec<HealReport> {
    let secs = |e: &FaultEvent| (e.t_unix_ms as f64 - t0_unix_ms as f64) / 1000.0;
    let mut out = Vec::new();
    let mut open: Option<&FaultEvent> = None;
    for e in events {
        match e.event.as_str() {
            "cut" => open = open.or(Some(e)),
            "heal" => {
                if let Some(c) = open.take() {
                    out.push(judge(rows, secs(c), secs(e), &c.what, net));
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::swarm::rows::{RoleChange, RoleState};

    fn st(role: &str, head: Option<usize>, key: Option<&str>) -> RoleState {
        RoleState { role: role.into(), head, head_id: None, role_key: key.map(String::from), fit: true }
    }

    fn row(index: usize, changes: Vec<(f64, RoleState)>) -> NodeRow {
        NodeRow {
            index,
            shard: 0,
            peer_id: String::new(),
            node_id: String::new(),
            alive: true,
            connections: 0,
            peers: 0,
            members: 0,
            leader: None,
            messages_sent: 0,
            vivaldi_samples: 0,
            sp_messages_sent: 0,
            offences: 0,
            bans: 0,
            lookups: 0,
            last: changes.last().map(|c| c.1.clone()).unwrap_or_default(),
            cluster_size: 0,
            ping_to_head_ms: None,
            changes: changes.into_iter().map(|(t_s, state)| RoleChange { t_s, state }).collect(),
        }
    }

    /// Node 0 heads slot a; during the cut (10-20 s) node 2, on the other side, takes slot a
    /// too; after the heal node 2 gives it back at 23 s and joins node 0's cluster at 25 s.
    fn partitioned() -> Vec<NodeRow> {
        vec![
            row(0, vec![(1.0, st("super-peer", None, Some("slot:a")))]),
            row(1, vec![(1.0, st("member", Some(0), None))]),
            row(
                2,
                vec![
                    (1.0, st("member", Some(0), None)),
                    (12.0, st("super-peer", None, Some("slot:a"))),
                    (23.0, st("unattached", None, None)),
                    (25.0, st("member", Some(0), None)),
                ],
            ),
        ]
    }

    #[test]
    fn a_role_held_twice_after_the_heal_delays_the_healed_moment() {
        let rows = partitioned();
        let h = judge(&rows, 10.0, 20.0, "0 | 2", None);
        assert_eq!(h.at_heal.roles_held_twice, 1);
        assert_eq!(h.roles_before, 1);
        assert_eq!(h.roles_lost, 0);
        assert_eq!(h.healed_after_s, Some(5.0));
        assert_eq!(h.changes_after_heal, 2);
        assert_eq!(h.end.attached, 2);
    }

    #[test]
    fn a_lost_role_never_heals() {
        let mut rows = partitioned();
        // Node 0 gives its slot up for good during the cut and nobody holds slot a.
        rows[0] = row(0, vec![(1.0, st("super-peer", None, Some("slot:a"))), (15.0, st("member", Some(2), None))]);
        rows[2] = row(2, vec![(1.0, st("member", Some(0), None)), (12.0, st("super-peer", None, Some("slot:b")))]);
        rows[1] = row(1, vec![(1.0, st("member", Some(0), None)), (16.0, st("member", Some(2), None))]);
        let h = judge(&rows, 10.0, 20.0, "", None);
        assert_eq!(h.roles_lost, 1);
        assert_eq!(h.healed_after_s, None);
    }

    #[test]
    fn events_pair_cuts_with_heals() {
        let rows = partitioned();
        let ev = |t: u64, e: &str| FaultEvent { t_unix_ms: t, event: e.into(), what: String::new() };
        let events = [ev(1_010_000, "cut"), ev(1_015_000, "kill"), ev(1_020_000, "heal"), ev(1_030_000, "heal")];
        let out = judge_events(&rows, &events, 1_000_000, None);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].cut_s, out[0].heal_s), (10.0, 20.0));
    }
}

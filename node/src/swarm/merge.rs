//! Parts of a sharded swarm's report, and `peerage report merge`, which makes of them the one
//! report a single-process swarm writes: the same JSON (`SwarmReport`), with every node's row
//! and the summary recomputed from all rows.
//!
//! A shard writes a [`ReportPart`]: the run it belongs to, its nodes' rows, and, for shard 0
//! (the conductor, which measured the swarm on every node's snapshot), the swarm's report.
//! The merge refuses parts of different runs, a missing or doubled shard, a node missing, in
//! the wrong shard or given twice. With the testbed's event log it also judges each partition
//! and its heal (`node/src/swarm/heal.rs`).

use crate::net::latency_transport::LatencyNet;
use crate::swarm::control::RunKey;
use crate::swarm::heal::{judge_events, FaultEvent};
use crate::swarm::rows::{summarize, NodeRow};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The part file's format version.
pub const PART_VERSION: u16 = 1;

/// What one shard writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReportPart {
    pub part_version: u16,
    pub run: RunKey,
    pub shard: usize,
    /// The swarm's start (Unix ms); row times count from it.
    pub t0_unix_ms: u64,
    /// The swarm's report (shard 0 only; its `node_rows` are the merged rows' place).
    pub report: Option<Value>,
    pub nodes: Vec<NodeRow>,
}

/// Why parts cannot be merged.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MergeError {
    #[error("no parts to merge")]
    Empty,
    #[error("part of shard {shard} has format version {version}; this merge reads {PART_VERSION}")]
    Version { shard: usize, version: u16 },
    #[error("part of shard {shard} belongs to another run ({theirs:?}, not {ours:?})")]
    OtherRun { shard: usize, theirs: RunKey, ours: RunKey },
    #[error("shard {0} is given twice")]
    DoubleShard(usize),
    #[error("shard {0} of the run is missing")]
    MissingShard(usize),
    #[error("shard {0} is outside the run's shards")]
    ShardOutOfRange(usize),
    #[error("node {node} is in the part of shard {shard}, but runs in shard {owner}")]
    WrongShard { node: usize, shard: usize, owner: usize },
    #[error("node {0} is given twice")]
    DoubleNode(usize),
    #[error("node {0} has no row")]
    MissingNode(usize),
    #[error("no part carries the swarm's report (shard 0's part)")]
    NoReport,
    #[error("the report is not a JSON object")]
    BadReport,
    #[error("latency model: {0}")]
    Model(String),
}

/// Merge the parts (any order) into the swarm's report.
pub fn merge(parts: Vec<ReportPart>, events: &[FaultEvent]) -> Result<Value, MergeError> {
    let first = parts.first().ok_or(MergeError::Empty)?;
    let run = first.run;
    let t0 = parts.iter().find(|p| p.shard == 0).map_or(first.t0_unix_ms, |p| p.t0_unix_ms);
    let mut seen = vec![false; run.shards];
    let mut rows: Vec<Option<NodeRow>> = vec![None; run.nodes];
    let mut report = None;
    for p in parts {
        if p.part_version != PART_VERSION {
            return Err(MergeError::Version { shard: p.shard, version: p.part_version });
        }
        if p.run != run {
            return Err(MergeError::OtherRun { shard: p.shard, theirs: p.run, ours: run });
        }
        let s = seen.get_mut(p.shard).ok_or(MergeError::ShardOutOfRange(p.shard))?;
        if *s {
            return Err(MergeError::DoubleShard(p.shard));
        }
        *s = true;
        if p.report.is_some() {
            report = p.report;
        }
        for r in p.nodes {
            let owner = r.index % run.shards;
            if r.index >= run.nodes || owner != p.shard || r.shard != p.shard {
                return Err(MergeError::WrongShard { node: r.index, shard: p.shard, owner });
            }
            let slot = &mut rows[r.index];
            if slot.is_some() {
                return Err(MergeError::DoubleNode(r.index));
            }
            *slot = Some(r);
        }
    }
    if let Some(missing) = seen.iter().position(|s| !s) {
        return Err(MergeError::MissingShard(missing));
    }
    let rows: Vec<NodeRow> =
        rows.into_iter().enumerate().map(|(i, r)| r.ok_or(MergeError::MissingNode(i))).collect::<Result<_, _>>()?;
    let mut report = report.ok_or(MergeError::NoReport)?;
    let net = match run.latency_seed {
        Some(seed) => Some(LatencyNet::internet(run.nodes, seed).map_err(|e| MergeError::Model(e.to_string()))?),
        None => None,
    };
    let summary = summarize(&rows, net.as_deref());
    let faults = judge_events(&rows, events, t0, net.as_deref());
    let obj = report.as_object_mut().ok_or(MergeError::BadReport)?;
    obj.insert("shards".into(), Value::from(run.shards));
    obj.insert("rows_summary".into(), serde_json::to_value(summary).map_err(|_| MergeError::BadReport)?);
    obj.insert(
        "faults".into(),
        if events.is_empty() {
            Value::Null
        } else {
            serde_json::to_value(faults).map_err(|_| MergeError::BadReport)?
        },
    );
    obj.insert("node_rows".into(), serde_json::to_value(rows).map_err(|_| MergeError::BadReport)?);
    Ok(report)
}

/// The shape of a JSON value: every key path with its type; `null` matches any type, and an
/// array's shape is the union of its elements'. Two reports are schema-compatible when
/// [`schema_conflicts`] finds nothing.
pub fn schema_conflicts(a: &Value, b: &Value) -> Vec<String> {
    let mut out = Vec::new();
    compare(a, b, "$", &mut out);
    out
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn compare(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Null, _) | (_, Value::Null) => {}
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().filter(|k| !y.contains_key(*k)) {
                out.push(format!("{path}.{k}: only in the first"));
            }
            for k in y.keys().filter(|k| !x.contains_key(*k)) {
                out.push(format!("{path}.{k}: only in the second"));
            }
            for (k, v) in x {
                if let Some(w) = y.get(k) {
                    compare(v, w, &format!("{path}.{k}"), out);
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for v in x {
                for w in y {
                    compare(v, w, &format!("{path}[]"), out);
                }
            }
        }
        _ if kind(a) != kind(b) => out.push(format!("{path}: {} vs {}", kind(a), kind(b))),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::swarm::rows::RoleState;

    fn row(index: usize, shard: usize) -> NodeRow {
        NodeRow {
            index,
            shard,
            peer_id: format!("p{index}"),
            node_id: format!("n{index}"),
            alive: true,
            connections: 3,
            peers: 3,
            members: 4,
            leader: None,
            messages_sent: 0,
            vivaldi_samples: 0,
            sp_messages_sent: 0,
            offences: 0,
            bans: 0,
            lookups: 0,
            last: RoleState { role: "none".into(), ..Default::default() },
            cluster_size: 0,
            ping_to_head_ms: None,
            changes: vec![],
        }
    }

    fn parts() -> Vec<ReportPart> {
        let run = RunKey { nodes: 4, shards: 2, seed: 1, latency_seed: None };
        vec![
            ReportPart {
                part_version: PART_VERSION,
                run,
                shard: 1,
                t0_unix_ms: 5,
                report: None,
                nodes: vec![row(1, 1), row(3, 1)],
            },
            ReportPart {
                part_version: PART_VERSION,
                run,
                shard: 0,
                t0_unix_ms: 5,
                report: Some(serde_json::json!({ "node_rows": [], "shards": 2, "seed": 1 })),
                nodes: vec![row(0, 0), row(2, 0)],
            },
        ]
    }

    #[test]
    fn parts_merge_into_one_report_with_every_row() {
        let merged = merge(parts(), &[]).unwrap();
        let idx: Vec<u64> =
            merged["node_rows"].as_array().unwrap().iter().map(|r| r["index"].as_u64().unwrap()).collect();
        assert_eq!(idx, vec![0, 1, 2, 3]);
        assert_eq!(merged["rows_summary"]["alive"], 4);
        assert_eq!(merged["seed"], 1);
    }

    #[test]
    fn bad_parts_are_refused() {
        let mut p = parts();
        p.pop();
        assert_eq!(merge(p, &[]).unwrap_err(), MergeError::MissingShard(0));
        let mut p = parts();
        p[0].nodes.pop();
        assert_eq!(merge(p, &[]).unwrap_err(), MergeError::MissingNode(3));
        let mut p = parts();
        p[0].nodes.push(row(2, 1));
        assert!(matches!(merge(p, &[]).unwrap_err(), MergeError::WrongShard { node: 2, .. }));
        let mut p = parts();
        p[0].run.seed = 2;
        assert!(matches!(merge(p, &[]).unwrap_err(), MergeError::OtherRun { .. }));
        let mut p = parts();
        let dup = p[0].clone();
        p.push(dup);
        assert_eq!(merge(p, &[]).unwrap_err(), MergeError::DoubleShard(1));
        let mut p = parts();
        p[1].report = None;
        assert_eq!(merge(p, &[]).unwrap_err(), MergeError::NoReport);
        assert_eq!(merge(vec![], &[]).unwrap_err(), MergeError::Empty);
    }

    #[test]
    fn schema_comparison_finds_missing_keys_and_type_changes() {
        let a = serde_json::json!({ "x": 1, "y": { "z": [ { "k": "s" } ] }, "n": null });
        let b = serde_json::json!({ "x": 2, "y": { "z": [ { "k": 3 } ] }, "n": { "deep": 1 }, "extra": true });
        let c = schema_conflicts(&a, &b);
        assert_eq!(c, vec!["$.extra: only in the second".to_string(), "$.y.z[].k: string vs number".to_string()]);
        assert!(schema_conflicts(&a, &a).is_empty());
    }
}

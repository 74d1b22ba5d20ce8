//! A real swarm's node ids for the lab (`peerage-lab superpeers --node-ids REPORT`), so that
//! node `i` of a simulated run is node `i` of a `peerage swarm` run: the same place in the
//! latency model (with the same `--latency-seed`) and the same id, hence the same reserved
//! prefixes, the same Kademlia neighbourhoods and the same ranks.
//!
//! The ids are read from the swarm's JSON report (`peerage swarm --out`), whose `node_rows`
//! give every node's index and id; the rest of the report is ignored. The swarm derives its
//! keys from its seed (`node/src/swarm/keys.rs`), so one report stands for every run of that
//! seed and size.

use overlay::NodeId;
use serde::Deserialize;
use std::path::Path;

/// The part of a swarm report read here.
#[derive(Deserialize)]
struct Report {
    node_rows: Vec<Row>,
}

#[derive(Deserialize)]
struct Row {
    index: usize,
    node_id: String,
}

/// Why a report's ids cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum IdsError {
    #[error("reading {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path} is not a swarm report with node_rows: {source}")]
    Parse { path: String, source: serde_json::Error },
    #[error("{path}: node {index} has the id {id:?}, not 64 hex digits")]
    BadId { path: String, index: usize, id: String },
    #[error("{path} holds {found} nodes' ids, the run has {nodes} nodes")]
    Count { path: String, found: usize, nodes: usize },
    #[error("{path}: node {index} appears twice or lies outside 0..{nodes}")]
    Index { path: String, index: usize, nodes: usize },
}

/// The ids of nodes `0..nodes` from the swarm report at `path`, by index.
pub fn from_report(path: &Path, nodes: usize) -> Result<Vec<NodeId>, IdsError> {
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| IdsError::Read { path: p.clone(), source })?;
    parse(&text, nodes, &p)
}

fn parse(text: &str, nodes: usize, path: &str) -> Result<Vec<NodeId>, IdsError> {
    let report: Report = serde_json::from_str(text).map_err(|source| IdsError::Parse { path: path.into(), source })?;
    if report.node_rows.len() != nodes {
        return Err(IdsError::Count { path: path.into(), found: report.node_rows.len(), nodes });
    }
    let mut ids: Vec<Option<NodeId>> = vec![None; nodes];
    for row in report.node_rows {
        let id: NodeId = row.node_id.parse().map_err(|_| IdsError::BadId {
            path: path.into(),
            index: row.index,
            id: row.node_id.clone(),
        })?;
        match ids.get_mut(row.index) {
            Some(slot @ None) => *slot = Some(id),
            _ => return Err(IdsError::Index { path: path.into(), index: row.index, nodes }),
        }
    }
    // Every slot is filled: `nodes` rows, each at a distinct index below `nodes`.
    Ok(ids.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(rows: &[(usize, String)]) -> String {
        let rows: Vec<String> =
            rows.iter().map(|(i, id)| format!(r#"{{"index": {i}, "node_id": "{id}", "alive": true}}"#)).collect();
        format!(r#"{{"nodes": {}, "node_rows": [{}]}}"#, rows.len(), rows.join(","))
    }

    #[test]
    fn ids_come_back_by_index_and_bad_reports_are_errors() {
        let a = NodeId::from_u64(7);
        let b = NodeId::from_u64(9);
        let text = report(&[(1, a.to_string()), (0, b.to_string())]);
        assert_eq!(parse(&text, 2, "r").unwrap(), vec![b, a]);
        assert!(matches!(parse(&text, 3, "r"), Err(IdsError::Count { found: 2, nodes: 3, .. })));
        let twice = report(&[(0, a.to_string()), (0, b.to_string())]);
        assert!(matches!(parse(&twice, 2, "r"), Err(IdsError::Index { index: 0, .. })));
        let outside = report(&[(0, a.to_string()), (5, b.to_string())]);
        assert!(matches!(parse(&outside, 2, "r"), Err(IdsError::Index { index: 5, .. })));
        let bad = report(&[(0, "zz".into())]);
        assert!(matches!(parse(&bad, 1, "r"), Err(IdsError::BadId { index: 0, .. })));
        assert!(matches!(parse("{}", 1, "r"), Err(IdsError::Parse { .. })));
        assert!(matches!(from_report(Path::new("/nonexistent/report.json"), 1), Err(IdsError::Read { .. })));
    }
}

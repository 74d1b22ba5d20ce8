//! The rows of the per-node files that `peerage-lab superpeers` writes, and the gzipped-CSV
//! writer for them, in a crate of their own so that the node (`peerage swarm --superpeers`)
//! can write the same files with the same columns.
//!
//! A super-peer placement is written as one [`NodeRow`] per node: who the node is, its role,
//! its head, the TRUE and the predicted RTT to that head, its Vivaldi coordinate and the size
//! of its cluster. The pairs behind a Vivaldi error figure are written as [`PairRow`]s. Files
//! are CSV (one header line, then one line per row), gzipped, so that a data scientist opens
//! them directly (`pandas.read_csv("x.csv.gz")`, or `zcat x.csv.gz`). Floats are written in
//! their shortest round-trip form, so a reader gets the very numbers the writer summarised.

use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Euclidean components of a coordinate in a [`NodeRow`] (Peerage's Vivaldi space).
pub const COORD_DIMS: usize = 8;

/// A node's role in a placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A cluster head (super peer): its own head, with `cluster_size` members.
    Head,
    /// A normal node attached to a head.
    Member,
    /// A normal node attached to no live head.
    Unattached,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Head => "head",
            Role::Member => "member",
            Role::Unattached => "unattached",
        }
    }
}

/// One node of a placement. Times in milliseconds; empty cells where a value does not apply
/// (a head has no RTT to a head, an unattached node no cluster).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeRow {
    /// The node (the lab: its index in the simulated world; the node: its peer id).
    pub id: String,
    pub role: Role,
    /// Its head: itself for a head, empty when unattached.
    pub head: Option<String>,
    /// TRUE RTT to the head (the latency model's, or a measured one), members only.
    pub rtt_true_ms: Option<f64>,
    /// RTT to the head predicted by the two Vivaldi coordinates, members only.
    pub rtt_pred_ms: Option<f64>,
    /// Members of the node's cluster (a head's own count), empty when unattached.
    pub cluster_size: Option<u64>,
    /// TRUE RTT from a head to the nearest other head; only for the heads the summary
    /// sampled for its "nearest super peer" figure, empty elsewhere.
    pub nearest_head_ms: Option<f64>,
    /// The Vivaldi coordinate: Euclidean components and height, ms.
    pub x0: f64,
    pub x1: f64,
    pub x2: f64,
    pub x3: f64,
    pub x4: f64,
    pub x5: f64,
    pub x6: f64,
    pub x7: f64,
    pub height_ms: f64,
}

impl NodeRow {
    /// Sets the coordinate from its components (ms; missing ones are 0, extra ones ignored)
    /// and height (ms).
    pub fn set_coord(&mut self, x: &[f64], height_ms: f64) {
        let c = |i: usize| x.get(i).copied().unwrap_or(0.0);
        (self.x0, self.x1, self.x2, self.x3) = (c(0), c(1), c(2), c(3));
        (self.x4, self.x5, self.x6, self.x7) = (c(4), c(5), c(6), c(7));
        self.height_ms = height_ms;
    }

    /// The coordinate's Euclidean components, ms.
    pub fn coord(&self) -> [f64; COORD_DIMS] {
        [self.x0, self.x1, self.x2, self.x3, self.x4, self.x5, self.x6, self.x7]
    }
}

/// One sampled pair behind a Vivaldi error figure: the TRUE RTT and the RTT the two
/// coordinates predict, ms. The relative error is `|pred - true| / max(true, 0.001)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairRow {
    pub a: String,
    pub b: String,
    pub rtt_true_ms: f64,
    pub rtt_pred_ms: f64,
}

impl PairRow {
    pub fn relative_error(&self) -> f64 {
        (self.rtt_pred_ms - self.rtt_true_ms).abs() / self.rtt_true_ms.max(1e-3)
    }
}

/// Why a file could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Csv { path: PathBuf, source: csv::Error },
}

/// A gzipped CSV file of rows of one type, written as they come (nothing is buffered but
/// the compressor's window), closed by [`CsvGz::finish`].
pub struct CsvGz {
    path: PathBuf,
    csv: csv::Writer<flate2::write::GzEncoder<BufWriter<File>>>,
    rows: u64,
}

impl CsvGz {
    /// Creates (or truncates) `path`; the name should end in `.csv.gz`.
    pub fn create(path: &Path) -> Result<CsvGz, RecordsError> {
        let file = File::create(path).map_err(|source| RecordsError::Io { path: path.to_path_buf(), source })?;
        // Level 1: the files are mostly digits, which compress well at any level, and the
        // writer must keep up with a million rows a method.
        let gz = flate2::write::GzEncoder::new(BufWriter::new(file), flate2::Compression::fast());
        Ok(CsvGz { path: path.to_path_buf(), csv: csv::Writer::from_writer(gz), rows: 0 })
    }

    /// Writes one row (the header comes from the first row's field names).
    pub fn row<T: Serialize>(&mut self, row: &T) -> Result<(), RecordsError> {
        self.rows += 1;
        self.csv.serialize(row).map_err(|source| RecordsError::Csv { path: self.path.clone(), source })
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Flushes and closes the file.
    pub fn finish(self) -> Result<(), RecordsError> {
        let path = self.path;
        let io = |source| RecordsError::Io { path: path.clone(), source };
        let gz = self.csv.into_inner().map_err(|e| io(e.into_error()))?;
        let mut file = gz.finish().map_err(io)?;
        file.flush().map_err(io)
    }
}

/// Reads every row of a gzipped CSV file written by [`CsvGz`].
pub fn read_csv_gz<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>, RecordsError> {
    let file = File::open(path).map_err(|source| RecordsError::Io { path: path.to_path_buf(), source })?;
    let mut rd = csv::Reader::from_reader(flate2::read::GzDecoder::new(std::io::BufReader::new(file)));
    rd.deserialize()
        .collect::<Result<Vec<T>, _>>()
        .map_err(|source| RecordsError::Csv { path: path.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_rows_round_trip_with_empty_cells_and_exact_floats() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nodes.csv.gz");
        let mut head = NodeRow {
            id: "7".into(),
            role: Role::Head,
            head: Some("7".into()),
            rtt_true_ms: None,
            rtt_pred_ms: None,
            cluster_size: Some(2),
            nearest_head_ms: Some(12.345678901234567),
            x0: 0.0,
            x1: 0.0,
            x2: 0.0,
            x3: 0.0,
            x4: 0.0,
            x5: 0.0,
            x6: 0.0,
            x7: 0.0,
            height_ms: 0.0,
        };
        head.set_coord(&[1.0 / 3.0, -2.5], 0.1 + 0.2);
        let mut member = head.clone();
        member.id = "3".into();
        member.role = Role::Member;
        member.rtt_true_ms = Some(std::f64::consts::PI);
        member.rtt_pred_ms = Some(2.0 / 7.0);
        member.nearest_head_ms = None;
        let lone = NodeRow { id: "4".into(), role: Role::Unattached, head: None, cluster_size: None, ..member.clone() };
        let mut w = CsvGz::create(&path).unwrap();
        for r in [&head, &member, &lone] {
            w.row(r).unwrap();
        }
        assert_eq!(w.rows(), 3);
        w.finish().unwrap();
        let back: Vec<NodeRow> = read_csv_gz(&path).unwrap();
        assert_eq!(back, vec![head, member, lone]);
        assert_eq!(back[0].coord()[0], 1.0 / 3.0);
    }

    #[test]
    fn pair_error_and_unwritable_path() {
        let p = PairRow { a: "1".into(), b: "2".into(), rtt_true_ms: 10.0, rtt_pred_ms: 12.0 };
        assert!((p.relative_error() - 0.2).abs() < 1e-12);
        let dir = tempfile::tempdir().unwrap();
        assert!(CsvGz::create(&dir.path().join("missing/x.csv.gz")).is_err());
    }
}

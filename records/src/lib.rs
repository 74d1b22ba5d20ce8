//! Gzipped CSV files of the per-node rows (`overlay::superpeer::record`), written by
//! `peerage-lab superpeers` and by `peerage swarm --superpeers`: one header line, then one
//! line per row, so that a data scientist opens them directly
//! (`pandas.read_csv("x.csv.gz")`, or `zcat x.csv.gz`). Floats are written in their shortest
//! round-trip form, so a reader gets the very numbers the writer summarised.

use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

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
    use overlay::superpeer::record::{NodeRow, PairRow, Role};

    #[test]
    fn node_rows_round_trip_with_empty_cells_and_exact_floats() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nodes.csv.gz");
        let mut head = NodeRow {
            cluster_size: Some(2),
            nearest_head_ms: Some(12.345678901234567),
            ..NodeRow::new("7".into(), Role::Head, Some("7".into()))
        };
        head.set_coord(&[1.0 / 3.0, -2.5], 0.1 + 0.2);
        let mut member = head.clone();
        member.id = "3".into();
        member.role = Role::Member;
        member.rtt_true_ms = Some(std::f64::consts::PI);
        member.rtt_pred_ms = Some(2.0 / 7.0);
        member.rtt_measured_ms = Some(1.5);
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

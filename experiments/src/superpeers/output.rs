//! The files of `peerage-lab superpeers`: every name carries N and the seed, so runs of
//! several seeds (or several invocations) into one `--out` never overwrite each other.
//!
//! Per population size `N` and seed `S` (stem `superpeers_n{N}_s{S}`):
//! - `_nodes_{method}.csv.gz`: one [`NodeRow`] per node of each placement (protocols, the
//!   first random draw, k-means, k-median);
//! - `_pairs.csv.gz`: the sampled pairs behind the Vivaldi error ([`PairRow`]);
//! - `_world.csv.gz`: every node's city, region, access delay and TRUE RTT to its nearest
//!   other node (behind the nearest-node floor);
//! - `_random_draws.csv`: every random draw's measures;
//! - `_summary.csv`: the summary rows ([`SummaryRow`]); `_convergence.csv`: the protocols'
//!   rounds; `.json`: the whole report.
//!
//! Across seeds (stem `superpeers_n{N}_seeds{A}-{B}`): `.csv`, the summary over seeds.
//! `scripts/superpeers_check.py DIR` recomputes every summary row from these files.

use super::measure::Measured;
use super::world::World;
use anyhow::Context as _;
use overlay::superpeer::record::{NodeRow, PairRow, Role};
use peerage_records::CsvGz;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::path::{Path, PathBuf};

const _: () = assert!(overlay::superpeer::point::DIMS == overlay::superpeer::record::COORD_DIMS);

/// The stem of one run's files.
pub fn stem(n: usize, seed: u64) -> String {
    format!("superpeers_n{n}_s{seed}")
}

pub fn path(dir: &Path, n: usize, seed: u64, what: &str) -> PathBuf {
    dir.join(format!("{}_{what}", stem(n, seed)))
}

/// Writes one row per node of a placement (`head_of[i] == u32::MAX`: unattached).
pub fn write_nodes(path: &Path, w: &World, heads: &[u32], head_of: &[u32], measured: &Measured) -> anyhow::Result<()> {
    let mut nearest = vec![f64::NAN; w.len()];
    for (&h, &d) in heads.iter().zip(&measured.nearest) {
        nearest[h as usize] = d;
    }
    let mut out = CsvGz::create(path)?;
    for (i, &h) in head_of.iter().enumerate() {
        let p = &w.points[i];
        let (role, head) = match h {
            u32::MAX => (Role::Unattached, None),
            h if h as usize == i => (Role::Head, Some(h)),
            h => (Role::Member, Some(h)),
        };
        let member = role == Role::Member;
        let h = head.map(|h| h as usize);
        let mut row = NodeRow {
            rtt_true_ms: h.filter(|_| member).map(|h| w.rtt_ms(i as u32, h as u32)),
            rtt_pred_ms: h.filter(|_| member).map(|h| 1000.0 * p.rtt(&w.points[h])),
            cluster_size: h.map(|h| measured.size[h] as u64),
            nearest_head_ms: Some(nearest[i]).filter(|d| d.is_finite()),
            ..NodeRow::new(i.to_string(), role, h.map(|h| h.to_string()))
        };
        let x: Vec<f64> = p.x.iter().map(|&v| 1000.0 * v as f64).collect();
        row.set_coord(&x, 1000.0 * p.h as f64);
        out.row(&row)?;
    }
    out.finish()?;
    Ok(())
}

/// Samples `count` pairs of distinct nodes (own generator from `seed`), writes them, and
/// returns the median and 90th percentile of the relative error of the predicted RTT
/// (nearest rank, `overlay::stats::Sample`).
pub fn write_pairs(path: &Path, w: &World, count: usize, seed: u64) -> anyhow::Result<(f64, f64)> {
    let n = w.len();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7061_6972);
    let mut out = CsvGz::create(path)?;
    let mut errs = Vec::with_capacity(count);
    while n >= 2 && errs.len() < count {
        let (a, b) = (rng.gen_range(0..n), rng.gen_range(0..n));
        if a == b {
            continue;
        }
        let row = PairRow {
            a: a.to_string(),
            b: b.to_string(),
            rtt_true_ms: w.model.rtt_ms(a, b),
            rtt_pred_ms: 1000.0 * w.points[a].rtt(&w.points[b]),
        };
        errs.push(row.relative_error());
        out.row(&row)?;
    }
    out.finish()?;
    let s = overlay::stats::Sample::new(errs).context("Vivaldi errors")?;
    Ok((s.quantile(0.5).unwrap_or(f64::NAN), s.quantile(0.9).unwrap_or(f64::NAN)))
}

/// One node of the world file.
#[derive(Serialize)]
struct WorldRow {
    id: u32,
    city: usize,
    region: usize,
    access_ms: f64,
    nearest_other_ms: f64,
}

/// Writes the world file (module doc).
pub fn write_world(path: &Path, w: &World, nearest_other: &[f64]) -> anyhow::Result<()> {
    let mut out = CsvGz::create(path)?;
    for (i, &d) in nearest_other.iter().enumerate() {
        out.row(&WorldRow {
            id: i as u32,
            city: w.model.city_of(i),
            region: w.model.region_of(i),
            access_ms: w.model.access_ms(i),
            nearest_other_ms: d,
        })?;
    }
    out.finish()?;
    Ok(())
}

/// Writes records as CSV; nested (flattened) structs become columns, in key order.
pub fn write_csv<T: Serialize>(path: &Path, rows: impl Iterator<Item = T>) -> anyhow::Result<()> {
    let mut wtr = csv::Writer::from_path(path).with_context(|| format!("writing {}", path.display()))?;
    let mut header: Option<Vec<String>> = None;
    for r in rows {
        let serde_json::Value::Object(map) = serde_json::to_value(&r)? else {
            anyhow::bail!("a CSV row must be a struct");
        };
        if header.is_none() {
            let h: Vec<String> = map.keys().cloned().collect();
            wtr.write_record(&h)?;
            header = Some(h);
        }
        let cells: Vec<String> = header
            .iter()
            .flatten()
            .map(|k| match map.get(k) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Null) | None => String::new(),
                Some(v) => v.to_string(),
            })
            .collect();
        wtr.write_record(&cells)?;
    }
    wtr.flush()?;
    Ok(())
}

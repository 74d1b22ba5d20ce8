//! `peerage swarm --superpeers ... --out R.json` writes per-node rows and Vivaldi pairs beside
//! its report (`node/src/superpeer/rows.rs`), and `scripts/swarm_superpeers_check.py`
//! (standard-library Python) recomputes the report's figures from them: the TRUE RTT to the
//! super peer, cluster sizes, the nearest other super peer and the Vivaldi error, at
//! convergence and after a kill. A changed row, pair or report figure makes it disagree.
//!
//! A 30-node in-process swarm with the emulated Internet latency model; its seed is printed
//! (replay with `PEERAGE_SEED`).

use overlay::superpeer::record::{NodeRow, PairRow, Role};
use peerage_records::{read_csv_gz, CsvGz};
use std::path::{Path, PathBuf};
use std::process::Command;

const NODES: usize = 30;

fn check(script: &Path, report: &Path) -> (bool, String) {
    let o = Command::new("python3").arg(script).arg(report).output().expect("python3 runs");
    (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned())
}

fn rewrite<T: serde::Serialize>(path: &Path, rows: &[T]) {
    let mut w = CsvGz::create(path).expect("rewrite");
    for r in rows {
        w.row(r).expect("row");
    }
    w.finish().expect("close");
}

#[test]
fn swarm_report_is_recomputed_from_its_rows() {
    let seed: u64 = std::env::var("PEERAGE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::random::<u64>() % 1_000_000);
    eprintln!("seed {seed} (replay with PEERAGE_SEED={seed})");
    let dir = tempfile::Builder::new().prefix("peerage-swarm-rows-").tempdir().expect("temp dir");
    let report = dir.path().join("r.json");
    let n = NODES.to_string();
    let s = seed.to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_peerage"))
        .args(["swarm", "--nodes", &n, "--seed", &s, "--superpeers", "prefix", "--latency", "internet"])
        .args(["--sp-share", "0.1", "--sp-stable-s", "2", "--ping-s", "1", "--sp-start-delay-s", "0.5"])
        .args(["--kill-superpeers", "0.3", "--kill-superpeers-at", "0", "--timeout-s", "150", "--quiet"])
        .arg("--out")
        .arg(&report)
        .output()
        .expect("peerage runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The rows are the subject here, not convergence (tests/tests/swarm_superpeers.rs): a swarm
    // that did not converge still has its rows checked at the timeout, without a kill.
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("JSON");
    let killed = !json["superpeers"]["kill"].is_null();
    eprintln!("exit {:?}, kill phase: {killed}", out.status.code());
    let file = |what: &str| -> PathBuf { dir.path().join(format!("r_n{NODES}_s{seed}_{what}.csv.gz")) };
    let nodes: Vec<NodeRow> = read_csv_gz(&file("nodes")).expect("node rows");
    assert_eq!(nodes.len(), NODES, "{stderr}");
    assert!(nodes.iter().any(|r| r.role == Role::Head) && nodes.iter().any(|r| r.role == Role::Member));
    assert!(nodes.iter().filter(|r| r.role == Role::Member).all(|r| r.rtt_true_ms.is_some_and(|t| t > 0.0)));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/swarm_superpeers_check.py");
    let (ok, text) = check(&script, &report);
    assert!(ok, "{text}\n{stderr}");
    assert!(text.contains("checked at_convergence: 30 nodes, 435 pairs"), "{text}");
    assert_eq!(text.contains("checked after_kill"), killed, "{text}");
    assert!(text.contains(" 0 disagree"), "{text}");

    // One member's TRUE RTT a little longer: the mean latency to the super peer disagrees.
    let mut changed = nodes.clone();
    let m = changed.iter_mut().find(|r| r.role == Role::Member).expect("a member");
    m.rtt_true_ms = m.rtt_true_ms.map(|x| x + 0.5);
    rewrite(&file("nodes"), &changed);
    let (ok, text) = check(&script, &report);
    assert!(!ok && text.contains("at_convergence latency_to_head_ms.mean"), "{text}");
    rewrite(&file("nodes"), &nodes);

    // One pair's prediction off its coordinates, and the report's median Vivaldi error off.
    let pairs: Vec<PairRow> = read_csv_gz(&file("pairs")).expect("pairs");
    let mut changed = pairs.clone();
    changed[0].rtt_pred_ms += 1.0;
    rewrite(&file("pairs"), &changed);
    let (ok, text) = check(&script, &report);
    assert!(!ok && text.contains("coordinates give"), "{text}");
    rewrite(&file("pairs"), &pairs);
    let mut wrong = json.clone();
    let p50 = wrong["superpeers"]["at_convergence"]["vivaldi_err_p50"].as_f64().expect("a Vivaldi error");
    wrong["superpeers"]["at_convergence"]["vivaldi_err_p50"] = (p50 * 1.001).into();
    std::fs::write(&report, serde_json::to_vec(&wrong).expect("JSON")).expect("write");
    let (ok, text) = check(&script, &report);
    assert!(!ok && text.contains("at_convergence vivaldi_err_p50"), "{text}");
}

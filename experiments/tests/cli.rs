//! `peerage-lab` refuses bad flags and bad experiment configs with a clear message and a
//! non-zero exit, and writes its CSV and JSON outputs.

use std::process::Command;

fn lab(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_peerage-lab")).args(args).output().expect("run peerage-lab");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_flags_are_clap_errors() {
    for (args, needle) in [
        (vec!["elections", "--algorithm", "paxos"], "unknown election algorithm"),
        (vec!["elections", "--latency", "5ms"], "bad latency"),
        (vec!["elections", "--loss", "2"], "not a probability"),
        (vec!["elections", "--crash-before", "1.5"], "between 0 and 1"),
        (vec!["elections", "--seeds", "9..3"], "bad seed range"),
        (vec!["elections", "--initiators", "0"], "bad initiators"),
    ] {
        let (code, _, err) = lab(&args);
        assert_ne!(code, 0, "{args:?}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn bad_configs_exit_non_zero() {
    let (code, _, err) = lab(&["elections", "--nodes", "0"]);
    assert_eq!(code, 1);
    assert!(err.contains("nodes must be at least 1"), "{err}");
    let (code, _, err) = lab(&["elections", "--nodes", "4", "--crash-before", "4"]);
    assert_eq!(code, 1);
    assert!(err.contains("at least one"), "{err}");
    // Removed when dropped, also when an assertion below fails.
    let dir = tempfile::Builder::new().prefix("peerage-lab-cfg-").tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "nodes = 8\nwhatever = 1\n").unwrap();
    let (code, _, err) = lab(&["elections", "--config", bad.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("parsing TOML config"), "{err}");
}

#[test]
fn elections_writes_table_csv_and_json() {
    let dir = tempfile::Builder::new().prefix("peerage-lab-out-").tempdir().unwrap();
    let cfg = dir.path().join("exp.json");
    std::fs::write(&cfg, r#"{"algorithm": "villadangos", "nodes": 12, "crash_before": "0.25"}"#).unwrap();
    let out = dir.path().join("out");
    let (code, stdout, err) =
        lab(&["elections", "--config", cfg.to_str().unwrap(), "--seeds", "0..3", "--out", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("villadangos"), "{stdout}");
    let runs = std::fs::read_to_string(out.join("runs.csv")).unwrap();
    assert_eq!(runs.lines().count(), 4, "{runs}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let leaders = json["runs"][0]["leaders"].as_array().unwrap();
    assert_eq!(leaders.len(), 9, "12 processes, 3 down from the start");
    assert!(json["runs"][0]["verdict"]["safety"].as_bool().unwrap());
}

/// The sweep prints its table per algorithm and fault kind, exits 0 when only cases outside
/// the assumptions failed (counted as degraded), and writes one CSV row per case.
#[test]
fn sweep_reports_degradation_outside_without_failing() {
    let dir = tempfile::Builder::new().prefix("peerage-lab-sweep-").tempdir().unwrap();
    let csv = dir.path().join("cases.csv");
    let (code, stdout, err) = lab(&[
        "sweep",
        "--algorithm",
        "fast-bully",
        "--kind",
        "loss",
        "--seeds",
        "118..121",
        "--markdown",
        "--out",
        csv.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    // algorithm | kind | cases | inside | violations | outside | degraded | ...
    assert!(stdout.contains("| fast-bully | loss | 3 | 0 | 0 | 3 | 1 |"), "{stdout}");
    let rows = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(rows.lines().count(), 4, "{rows}");
    assert!(rows.lines().any(|l| l.starts_with("fast-bully,120,loss,false,false")), "{rows}");
    let (code, _, err) = lab(&["sweep", "--kind", "meteor"]);
    assert_ne!(code, 0);
    assert!(err.contains("unknown fault kind"), "{err}");
}

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

#[test]
fn mobility_writes_per_node_rows_that_recompute_its_summary() {
    let dir = tempfile::Builder::new().prefix("peerage-lab-mobility-").tempdir().unwrap();
    let out = dir.path().join("out");
    let args = [
        "mobility",
        "-n",
        "12,25",
        "--speeds",
        "2,15",
        "--pauses",
        "0s",
        "--ranges",
        "250",
        "--duration",
        "60s",
        "--warmup",
        "10s",
        "--seeds",
        "0..2",
        "--jobs",
        "2",
        "--out",
        out.to_str().unwrap(),
        "--plots",
    ];
    let (code, stdout, err) = lab(&args);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("leader %"), "{stdout}");
    let mut rdr = csv::Reader::from_path(out.join("nodes.csv")).unwrap();
    let header = rdr.headers().unwrap().clone();
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let rows: Vec<csv::StringRecord> = rdr.records().map(|r| r.unwrap()).collect();
    // (12 + 25) nodes x 2 speeds x 2 seeds.
    assert_eq!(rows.len(), 37 * 2 * 2);
    let f = |r: &csv::StringRecord, c: &str| r[col(c)].parse::<f64>().unwrap();
    let mut points = csv::Reader::from_path(out.join("points.csv")).unwrap();
    let ph = points.headers().unwrap().clone();
    let pc = |name: &str| ph.iter().position(|h| h == name).unwrap();
    let mut checked = 0;
    for p in points.records().map(|r| r.unwrap()) {
        let (n, v) = (p[pc("nodes")].to_string(), p[pc("speed_mps")].parse::<f64>().unwrap());
        let mine: Vec<&csv::StringRecord> =
            rows.iter().filter(|r| r[col("nodes")] == n && f(r, "speed_mps") == v).collect();
        let window: f64 = mine.iter().map(|r| f(r, "window_s")).sum();
        for (metric, field) in [("leader", "leader_s"), ("reachable", "reachable_s"), ("best", "best_s")] {
            let want = mine.iter().map(|r| f(r, field)).sum::<f64>() / window;
            let got: f64 = p[pc(metric)].parse().unwrap();
            assert!((want - got).abs() < 1e-9, "N={n} v={v} {metric}: {got} vs {want} from nodes.csv");
            assert!(got > 0.5 && got <= 1.0, "N={n} v={v} {metric} = {got}");
        }
        let msgs = mine.iter().map(|r| f(r, "messages")).sum::<f64>() / window;
        assert!((msgs - p[pc("messages_per_node_s")].parse::<f64>().unwrap()).abs() < 1e-9);
        checked += 1;
    }
    assert_eq!(checked, 4);
    for stem in ["mobility_leader", "mobility_best", "mobility_changes", "mobility_messages"] {
        assert!(std::fs::metadata(out.join(format!("{stem}.png"))).unwrap().len() > 1000, "{stem}");
    }
}

#[test]
fn mobility_refuses_bad_flags_and_reports_points_below_the_target() {
    for (args, needle) in [
        (vec!["mobility", "--area", "0x100"], "bad area"),
        (vec!["mobility", "--speeds", "1,-5"], "bad list"),
        (vec!["mobility", "--pauses", "30"], "missing unit"),
        (vec!["mobility", "--edge-loss", "1.5"], "not a probability"),
        (vec!["mobility", "--plots"], "--out"),
    ] {
        let (code, _, err) = lab(&args);
        assert_ne!(code, 0, "{args:?}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let (code, _, err) = lab(&["mobility", "-n", "0", "--seeds", "0"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("at least one node"), "{err}");
    let (code, _, err) = lab(&["mobility", "--tick", "5s", "--seeds", "0"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("tick"), "{err}");
    // Without heartbeats a fast, dense network spends much of its time in elections: the
    // target check names the point and exits 2.
    let (code, _, err) = lab(&[
        "mobility",
        "-n",
        "40",
        "--speeds",
        "20",
        "--pauses",
        "0s",
        "--ranges",
        "250",
        "--area",
        "800x800",
        "--duration",
        "60s",
        "--warmup",
        "10s",
        "--seeds",
        "0",
        "--heartbeat",
        "0s",
        "--min-leader",
        "0.97",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("below 0.97: N=40 speed 20"), "{err}");
}

/// The sweep prints its table per algorithm and fault kind, counts cases outside the
/// assumptions apart (their failures as degradation, which fails no run: see the sweep's unit
/// test), and writes one CSV row per case.
#[test]
fn sweep_counts_cases_outside_the_assumptions_apart() {
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
    assert!(stdout.contains("| fast-bully | loss | 3 | 0 | 0 | 3 | 0 |"), "{stdout}");
    let rows = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(rows.lines().count(), 4, "{rows}");
    assert!(rows.lines().any(|l| l.starts_with("fast-bully,120,loss,false,true")), "{rows}");
    let (code, _, err) = lab(&["sweep", "--kind", "meteor"]);
    assert_ne!(code, 0);
    assert!(err.contains("unknown fault kind"), "{err}");
}

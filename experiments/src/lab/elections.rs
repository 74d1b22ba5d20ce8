//! `peerage-lab elections`: run election experiments and report them.
//!
//! For every algorithm x N of the command line (or config file) and every seed, one
//! [`Scenario::run`]; then a table per (algorithm, N) on stdout (comfy-table): messages
//! best/worst/average, time to agreement, the average count of each message kind, and how
//! many seeds held safety and liveness. With `--out DIR` it writes `runs.csv` (one row per
//! seed, one column per message kind of `Message::KINDS`), `summary.csv` (one row per cell)
//! and `results.json` (the scenario, every outcome with the leader each live process names,
//! and the summaries).

use crate::lab::cli::{ElectionsArgs, ExperimentArgs};
use crate::lab::scenario::{FreezeSpec, Outcome, PartitionSpec, Scenario};
use crate::lab::spec::SeedRange;
use crate::lab::summary::Summary;
use anyhow::{bail, Context as _};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use overlay::election::Message;
use serde::Serialize;
use std::path::Path;
use std::process::ExitCode;

/// Resolve the config file and flags into the scenarios to run and the seeds.
pub fn scenarios(exp: &ExperimentArgs) -> anyhow::Result<(Vec<Scenario>, SeedRange)> {
    let mut base = match &exp.config {
        Some(path) => load_config(path)?,
        None => Scenario::default(),
    };
    if let Some(v) = exp.initiators {
        base.initiators = v;
    }
    if let Some(v) = exp.crash_before {
        base.crash_before = v;
    }
    if let Some(v) = exp.crash_during {
        base.crash_during = v;
    }
    if let Some(v) = exp.crash_window {
        base.crash_window_ms = Some(v);
    }
    if exp.recover {
        base.recover = true;
    }
    if let Some(v) = exp.loss {
        base.loss = v;
    }
    if let Some(v) = exp.dup {
        base.dup = v;
    }
    if let Some(v) = exp.reorder {
        base.reorder = v;
    }
    if let Some(v) = &exp.latency {
        base.latency = v.clone();
    }
    if let Some(v) = exp.detect_delay {
        base.detect_delay_ms = v;
    }
    if let Some(v) = exp.topology {
        base.topology = v;
    }
    if let Some(v) = exp.capacities {
        base.capacities = v;
    }
    if let (Some(at_ms), Some(fraction)) = (exp.partition_at, exp.partition_fraction) {
        base.partition = Some(PartitionSpec { at_ms, fraction, heal_at_ms: exp.heal_at });
    }
    if let (Some(at_ms), Some(for_ms)) = (exp.freeze_at, exp.freeze_for) {
        base.freeze = Some(FreezeSpec { at_ms, for_ms, leader: exp.freeze_leader });
    }
    if let Some(v) = exp.net_faults_until {
        base.net_faults_until_ms = Some(v);
    }
    if let Some(v) = exp.heartbeat {
        base.alive_interval_ms = v;
    }
    if let Some(v) = exp.connect_timeout {
        base.connect_timeout_ms = Some(v);
    }
    if let Some(v) = exp.request_timeout {
        base.request_timeout_ms = Some(v);
    }
    if let Some(v) = exp.time_limit {
        base.time_limit_ms = v;
    }
    if exp.count_bytes {
        base.count_bytes = true;
    }
    let algorithms = exp.algorithm.as_ref().map_or(vec![base.algorithm], |l| l.0.clone());
    let nodes = exp.nodes.as_ref().map_or(vec![base.nodes], |l| l.0.clone());
    let seeds = match (exp.seed, exp.seeds) {
        (Some(s), _) => SeedRange { start: s, end: s.saturating_add(1) },
        (None, Some(r)) => r,
        (None, None) => SeedRange { start: 0, end: 1 },
    };
    let mut out = Vec::new();
    for &a in &algorithms {
        for &n in &nodes {
            let s = Scenario { algorithm: a, nodes: n, ..base.clone() };
            s.validate().with_context(|| format!("experiment {a} with N = {n}"))?;
            out.push(s);
        }
    }
    Ok((out, seeds))
}

/// Read a scenario from JSON (`.json`) or TOML (anything else).
pub fn load_config(path: &Path) -> anyhow::Result<Scenario> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let s: Scenario = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).with_context(|| format!("parsing JSON config {}", path.display()))?
    } else {
        toml::from_str(&text).with_context(|| format!("parsing TOML config {}", path.display()))?
    };
    Ok(s)
}

#[derive(Serialize)]
struct Results<'a> {
    seeds: String,
    scenarios: &'a [Scenario],
    summaries: &'a [Summary],
    runs: &'a [Outcome],
}

pub fn run(args: ElectionsArgs) -> anyhow::Result<ExitCode> {
    let (scenarios, seeds) = scenarios(&args.exp)?;
    if seeds.len() > 10_000_000 {
        bail!("seed range {seeds} is too long for `elections` (use `sweep`)");
    }
    let keep_leaders = args.out.is_some() && !args.no_leaders;
    let mut all_runs = Vec::new();
    let mut summaries = Vec::new();
    for s in &scenarios {
        let mut runs = Vec::new();
        for seed in seeds.iter() {
            let o = s.run(seed, keep_leaders).with_context(|| format!("{} N={} seed {seed}", s.algorithm, s.nodes))?;
            if !o.ok() {
                eprintln!(
                    "seed {seed} {} N={}: safety {} agreement {} liveness {}: {}",
                    s.algorithm,
                    s.nodes,
                    o.verdict.safety,
                    o.verdict.agreement,
                    o.verdict.liveness,
                    o.verdict.problems.join("; ")
                );
            }
            runs.push(o);
        }
        if let Some(sum) = Summary::of(&runs) {
            summaries.push(sum);
        }
        all_runs.extend(runs);
    }
    if args.markdown {
        print_markdown(&summaries);
    } else {
        print_table(&summaries);
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        write_runs_csv(&dir.join("runs.csv"), &all_runs)?;
        write_summary_csv(&dir.join("summary.csv"), &summaries)?;
        let json = serde_json::to_string_pretty(&Results {
            seeds: seeds.to_string(),
            scenarios: &scenarios,
            summaries: &summaries,
            runs: &all_runs,
        })?;
        let p = dir.join("results.json");
        std::fs::write(&p, json).with_context(|| format!("writing {}", p.display()))?;
        eprintln!("wrote {}/{{runs.csv,summary.csv,results.json}}", dir.display());
    }
    let bad = all_runs.iter().filter(|r| !r.ok()).count();
    if bad > 0 {
        eprintln!("{bad} of {} runs violated safety or liveness", all_runs.len());
        if args.strict {
            return Ok(ExitCode::from(2));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// Print one row per (algorithm, N).
pub fn print_table(summaries: &[Summary]) {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec![
        "algorithm",
        "N",
        "seeds",
        "ok",
        "msgs best",
        "msgs worst",
        "msgs avg",
        "agree ms best",
        "agree ms worst",
        "agree ms avg",
        "avg by kind",
        "avg bytes",
    ]);
    for s in summaries {
        let kinds: Vec<String> = s.kinds_avg.iter().map(|(k, v)| format!("{k} {}", fmt_num(*v))).collect();
        t.add_row(vec![
            s.algorithm.to_string(),
            s.nodes.to_string(),
            s.seeds.to_string(),
            format!("{}/{}", s.ok, s.seeds),
            fmt_num(s.messages.best),
            fmt_num(s.messages.worst),
            fmt_num(s.messages.avg),
            format!("{:.1}", s.agreement_ms.best),
            format!("{:.1}", s.agreement_ms.worst),
            format!("{:.1}", s.agreement_ms.avg),
            kinds.join(", "),
            s.bytes_avg.map_or("-".into(), fmt_num),
        ]);
    }
    println!("{t}");
}

/// Print one Markdown row per (algorithm, N), header included.
pub fn print_markdown(summaries: &[Summary]) {
    println!("| algorithm | N | seeds | safe & live | messages best | worst | avg | avg bytes | agreement ms best | worst | avg | avg messages by kind |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for s in summaries {
        let kinds: Vec<String> = s.kinds_avg.iter().map(|(k, v)| format!("{k} {}", fmt_num(*v))).collect();
        println!(
            "| {} | {} | {} | {}/{} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {} |",
            s.algorithm,
            s.nodes,
            s.seeds,
            s.ok,
            s.seeds,
            fmt_num(s.messages.best),
            fmt_num(s.messages.worst),
            fmt_num(s.messages.avg),
            s.bytes_avg.map_or("-".into(), fmt_num),
            s.agreement_ms.best,
            s.agreement_ms.worst,
            s.agreement_ms.avg,
            kinds.join(", ")
        );
    }
}

fn write_runs_csv(path: &Path, runs: &[Outcome]) -> anyhow::Result<()> {
    let mut w = csv::Writer::from_path(path).with_context(|| format!("writing {}", path.display()))?;
    let mut header: Vec<String> = [
        "algorithm",
        "nodes",
        "seed",
        "end",
        "safety",
        "agreement",
        "liveness",
        "live",
        "components",
        "undecided",
        "wrong",
        "messages",
        "bytes",
        "agreement_ms",
        "end_ms",
        "crash_window_ms",
        "last_fault_ms",
        "settle_ms",
        "down_at_start",
        "crashed_during",
        "delivered",
        "lost",
        "duplicated",
        "failed",
        "rejected",
        "timers_fired",
        "events",
        "wall_s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    header.extend(Message::KINDS.iter().map(|k| k.to_string()));
    w.write_record(&header)?;
    for r in runs {
        let m = &r.metrics;
        let mut row = vec![
            r.algorithm.to_string(),
            r.nodes.to_string(),
            r.seed.to_string(),
            format!("{:?}", r.end),
            r.verdict.safety.to_string(),
            r.verdict.agreement.to_string(),
            r.verdict.liveness.to_string(),
            r.verdict.live.to_string(),
            r.verdict.components.to_string(),
            r.verdict.undecided.to_string(),
            r.verdict.wrong.to_string(),
            r.messages.to_string(),
            m.sent_bytes.map_or(String::new(), |b| b.to_string()),
            r.agreement_us.map_or(String::new(), |t| format!("{:.3}", t as f64 / 1e3)),
            format!("{:.3}", r.end_us as f64 / 1e3),
            format!("{:.3}", r.crash_window_us as f64 / 1e3),
            format!("{:.3}", r.last_fault_us as f64 / 1e3),
            r.settle_us.map_or(String::new(), |t| format!("{:.3}", t as f64 / 1e3)),
            r.down_at_start.to_string(),
            r.crashed_during.to_string(),
            m.delivered.to_string(),
            m.lost.to_string(),
            m.duplicated.to_string(),
            m.failed.to_string(),
            m.rejected.to_string(),
            m.timers_fired.to_string(),
            m.events.to_string(),
            format!("{:.6}", r.wall_secs),
        ];
        row.extend(Message::KINDS.iter().map(|k| m.sent.get(k).to_string()));
        w.write_record(&row)?;
    }
    w.flush()?;
    Ok(())
}

fn write_summary_csv(path: &Path, sums: &[Summary]) -> anyhow::Result<()> {
    let mut w = csv::Writer::from_path(path).with_context(|| format!("writing {}", path.display()))?;
    let mut header: Vec<String> = [
        "algorithm",
        "nodes",
        "seeds",
        "ok",
        "safety_violations",
        "liveness_violations",
        "msgs_best",
        "msgs_worst",
        "msgs_avg",
        "agree_ms_best",
        "agree_ms_worst",
        "agree_ms_avg",
        "bytes_avg",
        "delivered_per_sec",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    header.extend(Message::KINDS.iter().map(|k| format!("avg_{k}")));
    w.write_record(&header)?;
    for s in sums {
        let mut row = vec![
            s.algorithm.to_string(),
            s.nodes.to_string(),
            s.seeds.to_string(),
            s.ok.to_string(),
            s.safety_violations.to_string(),
            s.liveness_violations.to_string(),
            s.messages.best.to_string(),
            s.messages.worst.to_string(),
            format!("{:.2}", s.messages.avg),
            format!("{:.3}", s.agreement_ms.best),
            format!("{:.3}", s.agreement_ms.worst),
            format!("{:.3}", s.agreement_ms.avg),
            s.bytes_avg.map_or(String::new(), |b| format!("{b:.0}")),
            format!("{:.0}", s.delivered_per_sec),
        ];
        row.extend(Message::KINDS.iter().map(|k| format!("{:.2}", s.kinds_avg.get(*k).copied().unwrap_or(0.0))));
        w.write_record(&row)?;
    }
    w.flush()?;
    Ok(())
}

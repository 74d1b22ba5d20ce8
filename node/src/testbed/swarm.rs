//! `peerage testbed swarm`: an N-node swarm as one shard per testbed host, optionally cut in
//! two and healed, its parts collected and merged (`node/src/swarm/merge.rs`).
//!
//! Host h runs `peerage swarm --shard h/H`, listening on its own address; shard 0 conducts
//! over a Unix socket in the output directory (out of band: a partition cuts the hosts'
//! links, never the measurement). With a partition, the run holds after its measurements;
//! `after_s` later the hosts `0..H/2` are cut from `H/2..H`, `for_s` later healed, and the
//! swarm goes on for `settle_s` before the shards stop. Every cut and heal is written to
//! `events.jsonl`, from which the merge judges the heal (`node/src/swarm/heal.rs`).
//!
//! Output directory: `part-<h>.json` (each shard's part), `shard-<h>.log`, `events.jsonl`,
//! `report.json` (the merged report).

use super::{Testbed, TestbedError};
use crate::swarm::heal::FaultEvent;
use crate::swarm::merge::{merge, ReportPart};
use crate::swarm::shard::unix_ms;
use anyhow::Context as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A cut of the testbed in two halves during the hold.
#[derive(Debug, Clone, Copy)]
pub struct Partition {
    /// Seconds after the swarm's measurements end.
    pub after_s: f64,
    /// How long the halves stay apart.
    pub for_s: f64,
    /// How long the swarm runs after the heal.
    pub settle_s: f64,
}

/// One testbed swarm run.
#[derive(Debug, Clone)]
pub struct SwarmRun {
    pub binary: PathBuf,
    pub nodes: usize,
    pub seed: u64,
    /// More `peerage swarm` flags (latency, super peers, ...).
    pub swarm_args: Vec<String>,
    pub dir: PathBuf,
    pub partition: Option<Partition>,
    /// Give up after this long.
    pub timeout: Duration,
    pub port_base: u16,
}

fn event(path: &Path, e: &FaultEvent) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    writeln!(f, "{}", serde_json::to_string(e)?)?;
    Ok(())
}

/// Sleep `d` unless `stop` is raised meanwhile (then an error).
fn wait(d: Duration, stop: &AtomicBool) -> anyhow::Result<()> {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if stop.load(Ordering::Relaxed) {
            anyhow::bail!("interrupted");
        }
        std::thread::sleep(Duration::from_millis(100).min(until.saturating_duration_since(Instant::now())));
    }
    Ok(())
}

/// Start the shards, cut and heal if asked, wait for the end, merge. `stop` ends the run early
/// (Ctrl-C); the caller tears the testbed down.
pub fn run(tb: &mut Testbed, cfg: &SwarmRun, stop: &AtomicBool) -> anyhow::Result<PathBuf> {
    let hosts = tb.hosts();
    std::fs::create_dir_all(&cfg.dir).with_context(|| format!("cannot create {}", cfg.dir.display()))?;
    let dir = cfg.dir.canonicalize()?;
    let events = dir.join("events.jsonl");
    let _ = std::fs::remove_file(&events);
    let host_list: Vec<String> = (0..hosts).map(|h| tb.addr(h).to_string()).collect();
    let hold = cfg.partition.map_or(0.0, |p| p.after_s + p.for_s + p.settle_s);
    let control = dir.join("control.sock");
    for h in 0..hosts {
        let mut argv: Vec<String> = vec![
            cfg.binary.display().to_string(),
            "swarm".into(),
            "--nodes".into(),
            cfg.nodes.to_string(),
            "--seed".into(),
            cfg.seed.to_string(),
            "--shard".into(),
            format!("{h}/{hosts}"),
            "--shard-hosts".into(),
            host_list.join(","),
            "--port-base".into(),
            cfg.port_base.to_string(),
            "--control".into(),
            format!("unix:{}", control.display()),
            "--quiet".into(),
            "--out".into(),
            dir.join(format!("part-{h}.json")).display().to_string(),
        ];
        if hold > 0.0 {
            argv.push("--hold-s".into());
            argv.push(hold.to_string());
        }
        argv.extend(cfg.swarm_args.iter().cloned());
        let log = dir.join(format!("shard-{h}.log"));
        let _ = std::fs::remove_file(&log);
        tb.spawn(h, &argv, &[("RUST_LOG".into(), "warn".into())], &log)?;
        if h == 0 {
            // The conductor listens before the others try to join.
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    let started = Instant::now();
    let deadline = started + cfg.timeout;
    if let Some(p) = cfg.partition {
        // The conductor says when its measurements are done.
        let log0 = dir.join("shard-0.log");
        loop {
            if stop.load(Ordering::Relaxed) {
                anyhow::bail!("interrupted");
            }
            if Instant::now() > deadline {
                anyhow::bail!("the swarm did not finish its measurements within {:?}", cfg.timeout);
            }
            let text = std::fs::read_to_string(&log0).unwrap_or_default();
            if text.lines().any(|l| l.contains("\"event\":\"measured\"")) {
                break;
            }
            if tb.procs()[0].try_wait().is_some() {
                anyhow::bail!("shard 0 ended before its measurements were done (see {})", log0.display());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        wait(Duration::from_secs_f64(p.after_s), stop)?;
        let (a, b): (Vec<usize>, Vec<usize>) = (0..hosts).partition(|&h| h < hosts / 2);
        tb.partition(&a, &b)?;
        let what = format!("hosts {a:?} | {b:?}");
        event(&events, &FaultEvent { t_unix_ms: unix_ms(), event: "cut".into(), what: what.clone() })?;
        wait(Duration::from_secs_f64(p.for_s), stop)?;
        tb.heal_all()?;
        event(&events, &FaultEvent { t_unix_ms: unix_ms(), event: "heal".into(), what })?;
    }
    loop {
        if stop.load(Ordering::Relaxed) {
            anyhow::bail!("interrupted");
        }
        let running = tb.procs().iter_mut().map(|p| p.try_wait().is_none()).filter(|r| *r).count();
        if running == 0 {
            break;
        }
        if Instant::now() > deadline {
            anyhow::bail!("{running} shards still running after {:?}", cfg.timeout);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for (h, p) in tb.procs().iter_mut().enumerate() {
        if let Some(st) = p.try_wait().filter(|s| !s.success()) {
            eprintln!("testbed: shard {h} ended with {st} (see shard-{h}.log)");
        }
    }
    let mut parts = Vec::new();
    for h in 0..hosts {
        let f = dir.join(format!("part-{h}.json"));
        let text = std::fs::read_to_string(&f).with_context(|| format!("shard {h} wrote no part ({})", f.display()))?;
        let part: ReportPart = serde_json::from_str(&text).with_context(|| format!("{} is not a part", f.display()))?;
        parts.push(part);
    }
    let evs: Vec<FaultEvent> = std::fs::read_to_string(&events)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let merged = merge(parts, &evs)?;
    let out = dir.join("report.json");
    std::fs::write(&out, serde_json::to_string_pretty(&merged)?)?;
    Ok(out)
}

/// Map a testbed error for the command line.
pub fn explain(e: &TestbedError) -> String {
    match e {
        TestbedError::Spawn { cmd, .. } if cmd.starts_with("ip ") => {
            format!("{e} (the testbed needs `ip` from iproute2, and root)")
        }
        TestbedError::Command { .. } => format!("{e} (the testbed needs root: CAP_NET_ADMIN and CAP_SYS_ADMIN)"),
        _ => e.to_string(),
    }
}

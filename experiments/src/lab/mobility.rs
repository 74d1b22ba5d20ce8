//! `peerage-lab mobility`: the echo election on mobile nodes, over a grid of node counts,
//! speeds, pause times and radio ranges (every combination, every seed), as Vasudevan,
//! Kurose and Towsley evaluated it (ICNP 2004: "each node has a leader approximately 97-99%
//! of the time in a variety of operating conditions").
//!
//! One run per grid point and seed ([`crate::mobility::Manet`]); runs are independent, so
//! `--jobs` spreads them over threads without changing any result. Outputs, with `--out DIR`:
//! `nodes.csv` (one row per node and run: its times with a leader, a reachable leader and the
//! best leader, its leader changes, elections, messages and hellos), `runs.csv` (one row per
//! run: the run's counters) and `points.csv` (one row per grid point, every column
//! recomputable from the other two), and with `--plots` the figures ([`crate::mobility::plot`]).
//! The table printed is `points.csv`.
//!
//! The grid's defaults are ours: the paper's own simulation parameters could not be read (see
//! `docs/results/mobility.md`). The area and the 900 s runs follow Broch et al. (MobiCom 1998), the
//! usual random waypoint set-up of the paper's time.

use crate::lab::cli::MobilityArgs;
use crate::mobility::discovery::Hellos;
use crate::mobility::plot::{self, Curve, Panel};
use crate::mobility::radio::Radio;
use crate::mobility::waypoint::Waypoint;
use crate::mobility::{Manet, Setup};
use anyhow::{bail, Context as _};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use indicatif::{ProgressBar, ProgressStyle};
use overlay::election::{Algorithm, ElectionConfig};
use serde::Serialize;
use std::path::Path;
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Movement simulated before time 0, so that nodes start from random waypoint's steady
/// state (see [`crate::mobility::waypoint`]).
const BURN_IN: Duration = Duration::from_secs(3600);

/// A comma-separated list of non-negative numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct FloatList(pub Vec<f64>);

impl FromStr for FloatList {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let v: Vec<f64> = s
            .split(',')
            .map(|x| x.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0))
            .collect::<Option<_>>()
            .ok_or_else(|| format!("bad list {s:?}: expected non-negative numbers like 1,5,10"))?;
        Ok(FloatList(v))
    }
}

/// A comma-separated list of durations (`0s,30s,2m`).
#[derive(Debug, Clone, PartialEq)]
pub struct DurationList(pub Vec<Duration>);

impl FromStr for DurationList {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let v: Result<Vec<Duration>, _> = s.split(',').map(crate::sim::units::parse_duration).collect();
        v.map(DurationList).map_err(|e| e.to_string())
    }
}

/// The area, `WIDTHxHEIGHT` in metres.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Area {
    pub width: f64,
    pub height: f64,
}

impl FromStr for Area {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || format!("bad area {s:?}: expected WIDTHxHEIGHT in metres, like 1000x1000");
        let (w, h) = s.trim().split_once(['x', 'X']).ok_or_else(err)?;
        let p = |v: &str| v.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v > 0.0);
        Ok(Area { width: p(w).ok_or_else(err)?, height: p(h).ok_or_else(err)? })
    }
}

/// A duration flag (`250ms`, `1s`, `0s`).
pub fn duration(s: &str) -> Result<Duration, String> {
    crate::sim::units::parse_duration(s).map_err(|e| e.to_string())
}

/// One grid point.
#[derive(Debug, Clone, Copy, PartialEq)]
struct GridPoint {
    nodes: usize,
    speed: f64,
    pause: Duration,
    range: f64,
}

/// One node of one run.
#[derive(Debug, Clone, Serialize)]
struct NodeRow {
    nodes: usize,
    speed_mps: f64,
    pause_s: f64,
    range_m: f64,
    seed: u64,
    node: u32,
    capacity: u64,
    window_s: f64,
    leader_s: f64,
    reachable_s: f64,
    best_s: f64,
    leader_changes: u64,
    elections: u64,
    messages: u64,
    hellos: u64,
    mean_degree: f64,
    mean_component: f64,
}

/// One run's counters.
#[derive(Debug, Clone, Serialize)]
struct RunRow {
    nodes: usize,
    speed_mps: f64,
    pause_s: f64,
    range_m: f64,
    seed: u64,
    window_s: f64,
    events: u64,
    frames: u64,
    frames_lost: u64,
    rejected: u64,
    link_changes: u64,
    peer_up: u64,
    peer_down: u64,
    mean_components: f64,
    elections_on_timer: u64,
    elections_on_peer_down: u64,
    elections_on_send_failed: u64,
    elections_on_message: u64,
    elections_on_peer_up_or_start: u64,
    echo_election: u64,
    echo_ack: u64,
    echo_leader: u64,
    echo_reply: u64,
    echo_probe: u64,
    echo_heartbeat: u64,
    wall_s: f64,
}

/// One grid point over its seeds.
#[derive(Debug, Clone, Serialize)]
pub struct PointRow {
    pub nodes: usize,
    pub speed_mps: f64,
    pub pause_s: f64,
    pub range_m: f64,
    pub seeds: usize,
    /// Fraction of node-time with a leader (not in an election), with a reachable one, with
    /// the best one of the component.
    pub leader: f64,
    pub reachable: f64,
    pub best: f64,
    /// The lowest single node's fraction with a leader.
    pub leader_min_node: f64,
    pub changes_per_node_min: f64,
    pub elections_per_node_min: f64,
    pub messages_per_node_s: f64,
    pub hellos_per_node_s: f64,
    pub mean_degree: f64,
    pub mean_components: f64,
    pub link_changes_per_s: f64,
}

fn setup(args: &MobilityArgs, p: GridPoint, seed: u64) -> Setup {
    let election = ElectionConfig {
        echo_probe_interval_ms: args.probe.as_millis() as u64,
        echo_heartbeat_interval_ms: args.heartbeat.as_millis() as u64,
        echo_ack_timeout_ms: args.ack_timeout.as_millis() as u64,
        ..ElectionConfig::for_algorithm(Algorithm::Echo)
    };
    Setup {
        nodes: p.nodes,
        waypoint: Waypoint {
            width: args.area.width,
            height: args.area.height,
            speed: p.speed,
            pause: p.pause,
            burn_in: BURN_IN,
            stop_at: None,
        },
        radio: Radio { range: p.range, edge_loss: args.edge_loss },
        hellos: Hellos { interval: args.hello, ..Hellos::default() },
        tick: args.tick,
        election,
        capacities: args.capacities,
        warmup: args.warmup,
        duration: args.duration,
        seed,
    }
}

/// Run one grid point with one seed.
fn run_one(args: &MobilityArgs, p: GridPoint, seed: u64) -> anyhow::Result<(Vec<NodeRow>, RunRow)> {
    let started = Instant::now();
    let mut m = Manet::new(setup(args, p, seed)).context("mobility setup")?;
    m.run();
    let wall_s = started.elapsed().as_secs_f64();
    let window_us = m.window().as_micros() as f64;
    let window_s = window_us / 1e6;
    let (pause_s, range_m, speed_mps) = (p.pause.as_secs_f64(), p.range, p.speed);
    let rows = m
        .totals()
        .iter()
        .enumerate()
        .map(|(i, t)| NodeRow {
            nodes: p.nodes,
            speed_mps,
            pause_s,
            range_m,
            seed,
            node: i as u32,
            capacity: m.rank(i as u32).priority,
            window_s,
            leader_s: t.leader_us as f64 / 1e6,
            reachable_s: t.reachable_us as f64 / 1e6,
            best_s: t.best_us as f64 / 1e6,
            leader_changes: t.leader_changes,
            elections: t.elections,
            messages: t.messages,
            hellos: t.hellos,
            mean_degree: t.degree_us / window_us,
            mean_component: t.component_us / window_us,
        })
        .collect();
    let s = m.stats();
    let by = |k: &str| s.started_by.get(k);
    let on_message =
        s.started_by.total() - by("Timer") - by("PeerDown") - by("SendFailed") - by("PeerUp") - by("Start");
    let run = RunRow {
        nodes: p.nodes,
        speed_mps,
        pause_s,
        range_m,
        seed,
        window_s,
        events: s.events,
        frames: s.frames,
        frames_lost: s.frames_lost,
        rejected: s.rejected,
        link_changes: s.link_changes,
        peer_up: s.peer_up,
        peer_down: s.peer_down,
        mean_components: s.components_us / window_us,
        elections_on_timer: by("Timer"),
        elections_on_peer_down: by("PeerDown"),
        elections_on_send_failed: by("SendFailed"),
        elections_on_message: on_message,
        elections_on_peer_up_or_start: by("PeerUp") + by("Start"),
        echo_election: s.sent.get("EchoElection"),
        echo_ack: s.sent.get("EchoAck"),
        echo_leader: s.sent.get("EchoLeader"),
        echo_reply: s.sent.get("EchoReply"),
        echo_probe: s.sent.get("EchoProbe"),
        echo_heartbeat: s.sent.get("EchoHeartbeat"),
        wall_s,
    };
    Ok((rows, run))
}

/// The summary of one grid point from its node and run rows.
fn summarize(p: GridPoint, rows: &[NodeRow], runs: &[RunRow]) -> PointRow {
    let total_s: f64 = rows.iter().map(|r| r.window_s).sum::<f64>().max(f64::MIN_POSITIVE);
    let sum = |f: fn(&NodeRow) -> f64| rows.iter().map(f).sum::<f64>();
    let n = rows.len().max(1) as f64;
    let run_s: f64 = runs.iter().map(|r| r.window_s).sum::<f64>().max(f64::MIN_POSITIVE);
    PointRow {
        nodes: p.nodes,
        speed_mps: p.speed,
        pause_s: p.pause.as_secs_f64(),
        range_m: p.range,
        seeds: runs.len(),
        leader: sum(|r| r.leader_s) / total_s,
        reachable: sum(|r| r.reachable_s) / total_s,
        best: sum(|r| r.best_s) / total_s,
        leader_min_node: rows.iter().map(|r| r.leader_s / r.window_s).fold(f64::INFINITY, f64::min),
        changes_per_node_min: sum(|r| r.leader_changes as f64) / total_s * 60.0,
        elections_per_node_min: sum(|r| r.elections as f64) / total_s * 60.0,
        messages_per_node_s: sum(|r| r.messages as f64) / total_s,
        hellos_per_node_s: sum(|r| r.hellos as f64) / total_s,
        mean_degree: sum(|r| r.mean_degree) / n,
        mean_components: runs.iter().map(|r| r.mean_components).sum::<f64>() / runs.len().max(1) as f64,
        link_changes_per_s: runs.iter().map(|r| r.link_changes as f64).sum::<f64>() / run_s,
    }
}

fn grid(args: &MobilityArgs) -> Vec<GridPoint> {
    let mut out = Vec::new();
    for &nodes in &args.nodes.0 {
        for &range in &args.ranges.0 {
            for &pause in &args.pauses.0 {
                for &speed in &args.speeds.0 {
                    out.push(GridPoint { nodes, speed, pause, range });
                }
            }
        }
    }
    out
}

type RunResult = anyhow::Result<(Vec<NodeRow>, RunRow)>;

/// Run every (point, seed), `jobs` at a time; results in input order.
fn run_all(args: &MobilityArgs, runs: &[(GridPoint, u64)]) -> Vec<RunResult> {
    let bar = ProgressBar::new(runs.len() as u64);
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} runs, {elapsed} (eta {eta})") {
        bar.set_style(style);
    }
    let results: Mutex<Vec<Option<RunResult>>> = Mutex::new((0..runs.len()).map(|_| None).collect());
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..args.jobs.clamp(1, runs.len().max(1)) {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(p, seed)) = runs.get(k) else { break };
                let r = run_one(args, p, seed).with_context(|| {
                    format!("N={} speed {} pause {:?} range {} seed {seed}", p.nodes, p.speed, p.pause, p.range)
                });
                if let Ok(mut all) = results.lock() {
                    all[k] = Some(r);
                }
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    results
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("run did not finish"))))
        .collect()
}

pub fn run(args: MobilityArgs) -> anyhow::Result<ExitCode> {
    if args.nodes.0.is_empty() || args.speeds.0.is_empty() || args.pauses.0.is_empty() || args.ranges.0.is_empty() {
        bail!("every grid list needs at least one value");
    }
    if !(0.0..1.0).contains(&args.edge_loss) {
        bail!("--edge-loss must be below 1, got {}", args.edge_loss);
    }
    let points = grid(&args);
    // Validate every setup before running anything.
    for &p in &points {
        setup(&args, p, args.seeds.start).validate().with_context(|| format!("grid point {p:?}"))?;
    }
    let runs: Vec<(GridPoint, u64)> = points.iter().flat_map(|&p| args.seeds.iter().map(move |s| (p, s))).collect();
    let started = Instant::now();
    let results = run_all(&args, &runs);
    let wall = started.elapsed();
    let mut node_rows = Vec::new();
    let mut run_rows = Vec::new();
    let mut summaries = Vec::new();
    let per_point = args.seeds.len() as usize;
    let mut results = results.into_iter();
    for &p in &points {
        let mut rows = Vec::new();
        let mut point_runs = Vec::new();
        for r in results.by_ref().take(per_point) {
            let (r, run) = r?;
            rows.extend(r);
            point_runs.push(run);
        }
        summaries.push(summarize(p, &rows, &point_runs));
        node_rows.extend(rows);
        run_rows.extend(point_runs);
    }
    if args.markdown {
        print_markdown(&summaries);
    } else {
        print_table(&summaries);
    }
    let events: u64 = run_rows.iter().map(|r| r.events).sum();
    eprintln!("{} runs in {:.1} s wall ({events} events)", run_rows.len(), wall.as_secs_f64());
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        write_csv(&dir.join("nodes.csv"), &node_rows)?;
        write_csv(&dir.join("runs.csv"), &run_rows)?;
        write_csv(&dir.join("points.csv"), &summaries)?;
        eprintln!("wrote {}/{{nodes,runs,points}}.csv", dir.display());
        if args.plots {
            figures(dir, &summaries)?;
            eprintln!("wrote {}/mobility_*.{{png,svg}}", dir.display());
        }
    }
    if let Some(min) = args.min_leader {
        let low: Vec<&PointRow> = summaries.iter().filter(|s| s.leader < min).collect();
        if !low.is_empty() {
            for s in &low {
                eprintln!(
                    "below {min}: N={} speed {} pause {} s range {} m: {:.4}",
                    s.nodes, s.speed_mps, s.pause_s, s.range_m, s.leader
                );
            }
            return Ok(ExitCode::from(2));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn write_csv<T: Serialize>(path: &Path, rows: &[T]) -> anyhow::Result<()> {
    let mut w = csv::Writer::from_path(path).with_context(|| format!("creating {}", path.display()))?;
    for r in rows {
        w.serialize(r)?;
    }
    w.flush()?;
    Ok(())
}

fn pct(x: f64) -> String {
    format!("{:.2}", 100.0 * x)
}

const HEADER: [&str; 13] = [
    "N",
    "speed m/s",
    "pause s",
    "range m",
    "degree",
    "components",
    "leader %",
    "reachable %",
    "best %",
    "lowest node %",
    "changes /node/min",
    "elections /node/min",
    "msgs /node/s",
];

fn cells(s: &PointRow) -> Vec<String> {
    vec![
        s.nodes.to_string(),
        format!("{}", s.speed_mps),
        format!("{}", s.pause_s),
        format!("{}", s.range_m),
        format!("{:.1}", s.mean_degree),
        format!("{:.2}", s.mean_components),
        pct(s.leader),
        pct(s.reachable),
        pct(s.best),
        pct(s.leader_min_node),
        format!("{:.3}", s.changes_per_node_min),
        format!("{:.3}", s.elections_per_node_min),
        format!("{:.2}", s.messages_per_node_s),
    ]
}

fn print_table(summaries: &[PointRow]) {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(HEADER.to_vec());
    for s in summaries {
        t.add_row(cells(s));
    }
    println!("{t}");
}

fn print_markdown(summaries: &[PointRow]) {
    println!("| {} |", HEADER.join(" | "));
    println!("|{}", "---|".repeat(HEADER.len()));
    for s in summaries {
        println!("| {} |", cells(s).join(" | "));
    }
}

/// The figures: one panel per (N, range), one curve per pause, speed on the x axis.
fn figures(dir: &Path, summaries: &[PointRow]) -> anyhow::Result<()> {
    let mut keys: Vec<(usize, u64)> = summaries.iter().map(|s| (s.nodes, s.range_m.to_bits())).collect();
    keys.dedup();
    keys.sort_unstable();
    keys.dedup();
    let mut pauses: Vec<u64> = summaries.iter().map(|s| s.pause_s.to_bits()).collect();
    pauses.sort_unstable_by(|a, b| f64::from_bits(*a).total_cmp(&f64::from_bits(*b)));
    pauses.dedup();
    let panels = |value: fn(&PointRow) -> f64| -> Vec<Panel> {
        keys.iter()
            .map(|&(n, r)| Panel {
                title: format!("N = {n}, range {} m", f64::from_bits(r)),
                curves: pauses
                    .iter()
                    .map(|&pb| Curve {
                        label: format!("pause {} s", f64::from_bits(pb)),
                        points: summaries
                            .iter()
                            .filter(|s| s.nodes == n && s.range_m.to_bits() == r && s.pause_s.to_bits() == pb)
                            .map(|s| (s.speed_mps, value(s)))
                            .collect(),
                    })
                    .collect(),
            })
            .collect()
    };
    let band = [("paper: 97 %".to_string(), 0.97), ("paper: 99 %".to_string(), 0.99)];
    let fraction = |f: fn(&PointRow) -> f64| (summaries.iter().map(f).fold(0.95, f64::min) - 0.005, 1.001);
    let rate = |f: fn(&PointRow) -> f64| (0.0, summaries.iter().map(f).fold(0.0, f64::max) * 1.1 + 1e-9);
    type Figure<'a> = (&'a str, &'a str, fn(&PointRow) -> f64, (f64, f64), &'a [(String, f64)]);
    let figures: [Figure; 4] = [
        ("mobility_leader", "fraction of time each node has a leader", |s| s.leader, fraction(|s| s.leader), &band),
        (
            "mobility_best",
            "fraction of time the leader is the best of the node's component",
            |s| s.best,
            fraction(|s| s.best),
            &band,
        ),
        (
            "mobility_changes",
            "leader changes per node per minute",
            |s| s.changes_per_node_min,
            rate(|s| s.changes_per_node_min),
            &[],
        ),
        (
            "mobility_messages",
            "election messages per node per second",
            |s| s.messages_per_node_s,
            rate(|s| s.messages_per_node_s),
            &[],
        ),
    ];
    for (stem, title, value, y, refs) in figures {
        plot::figure(dir, stem, title, y, &panels(value), refs)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_areas_parse_with_clear_errors() {
        assert_eq!("1, 5,10.5".parse::<FloatList>(), Ok(FloatList(vec![1.0, 5.0, 10.5])));
        assert!("1,-2".parse::<FloatList>().is_err());
        assert!("1,,2".parse::<FloatList>().is_err());
        assert!("nan".parse::<FloatList>().is_err());
        assert_eq!("0s,30s".parse::<DurationList>(), Ok(DurationList(vec![Duration::ZERO, Duration::from_secs(30)])));
        assert!("30".parse::<DurationList>().unwrap_err().contains("unit"));
        assert_eq!("1500x300".parse::<Area>(), Ok(Area { width: 1500.0, height: 300.0 }));
        assert!("1500".parse::<Area>().is_err());
        assert!("0x300".parse::<Area>().is_err());
    }
}

//! `peerage-lab bench`: the simulator's speed and memory on an election workload.
//!
//! Builds the scenario of the flags (default: Chang-Roberts, all initiating, N = 100,000,
//! constant 5 ms latency), runs each seed once to quiescence and prints wall time, delivered
//! messages per second, events per second, the engine's bytes per process beyond the
//! algorithms' own state, the inline size of one `AnyElection`, and the process's peak
//! resident memory (`VmHWM`). Throughput is per CPU second of the running thread (see
//! [`thread_cpu_secs`]), and wall time is printed too. A benchmark, not a test: it asserts nothing.

use crate::lab::cli::BenchArgs;
use crate::lab::elections::scenarios;
use crate::sim::engine::Sim;
use crate::sim::check;
use anyhow::Context as _;
use overlay::election::Algorithm;
use overlay::Time;
use std::process::ExitCode;
use std::time::Duration;

/// CPU time (user + system) this thread has used, from `/proc/thread-self/stat` (Linux; clock
/// ticks of 10 ms, so meaningful for runs of a second or more). On a shared machine wall-clock
/// time includes time spent waiting for a core; CPU time does not, so throughput is reported
/// per CPU second.
pub fn thread_cpu_secs() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// Peak resident set size of this process in KiB (Linux), if readable.
pub fn peak_rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let mut exp = args.exp.clone();
    if exp.algorithm.is_none() && exp.config.is_none() {
        exp.algorithm = Some(crate::lab::cli::AlgorithmList(vec![Algorithm::ChangRoberts]));
    }
    if exp.nodes.is_none() && exp.config.is_none() {
        exp.nodes = Some(crate::lab::cli::NodesList(vec![100_000]));
    }
    let (scns, seeds) = scenarios(&exp)?;
    let rss0 = peak_rss_kib();
    println!(
        "{:<14} {:>9} {:>5} {:>12} {:>12} {:>9} {:>9} {:>14} {:>14} {:>13} {:>10} {:>5}",
        "algorithm", "N", "seed", "messages", "delivered", "wall s", "cpu s", "delivered/cpu-s", "events/cpu-s", "engine B/proc", "election B", "ok"
    );
    for s in &scns {
        for seed in seeds.iter() {
            let window = s.crash_window_ms.map(Duration::from_millis);
            let build_start = std::time::Instant::now();
            let (mut sim, _) = s.build(seed, window).with_context(|| format!("{} N={}", s.algorithm, s.nodes))?;
            let build = build_start.elapsed().as_secs_f64();
            let c0 = thread_cpu_secs();
            let t0 = std::time::Instant::now();
            let end = sim.run_until(Time::from_millis(s.time_limit_ms), s.max_events);
            let wall = t0.elapsed().as_secs_f64();
            let cpu = match (c0, thread_cpu_secs()) {
                (Some(a), Some(b)) if b > a => b - a,
                _ => wall,
            };
            let v = check(&sim, end);
            let m = sim.metrics();
            println!(
                "{:<14} {:>9} {:>5} {:>12} {:>12} {:>9.3} {:>9.3} {:>14.0} {:>14.0} {:>13.1} {:>10} {:>5}",
                s.algorithm.name(),
                s.nodes,
                seed,
                m.messages(),
                m.delivered,
                wall,
                cpu,
                m.delivered as f64 / cpu.max(1e-9),
                m.events as f64 / cpu.max(1e-9),
                sim.engine_bytes_per_process(),
                Sim::election_inline_bytes(),
                v.ok()
            );
            eprintln!(
                "  build {:.3} s, peak queue {}, peak in flight {}, virtual end {:.3} s, sizes: Message {} B, Effect {} B, Input {} B",
                build,
                m.peak_queue,
                m.peak_in_flight,
                sim.now().as_secs_f64(),
                std::mem::size_of::<overlay::Message>(),
                std::mem::size_of::<overlay::Effect>(),
                std::mem::size_of::<overlay::Input>()
            );
        }
    }
    if let (Some(a), Some(b)) = (rss0, peak_rss_kib()) {
        println!("peak RSS: {:.1} MiB (at start {:.1} MiB)", b as f64 / 1024.0, a as f64 / 1024.0);
    }
    Ok(ExitCode::SUCCESS)
}

//! `peerage-lab bench`: the simulator's speed and memory on an election workload.
//!
//! Builds the scenario of the flags (default: Chang-Roberts, all initiating, N = 100,000,
//! constant 5 ms latency), runs each seed once to quiescence and prints wall time, delivered
//! messages per second, events per second, the engine's bytes per process beyond the
//! algorithms' own state, the inline size of one process's election slot, and the process's peak
//! resident memory (`VmHWM`). Throughput is per CPU second of the running thread (see
//! [`thread_cpu_secs`]), and wall time is printed too. A benchmark, not a test: it asserts nothing.

use crate::lab::cli::BenchArgs;
use crate::lab::elections::scenarios;
use crate::sim::check;
use crate::sim::engine::Sim;
use anyhow::Context as _;
use overlay::election::Algorithm;
use std::process::ExitCode;
use std::time::Duration;

/// CPU time this thread has used, in seconds. Read from `/proc/thread-self/schedstat`, whose
/// first field is the scheduler's run time in nanoseconds (Linux), so that runs of a tenth of a
/// second are measured exactly; if that file is missing, from `/proc/thread-self/stat` (user +
/// system, clock ticks of 10 ms). On a shared machine wall-clock time includes time spent
/// waiting for a core; CPU time does not, so throughput is reported per CPU second.
pub fn thread_cpu_secs() -> Option<f64> {
    schedstat_cpu_secs().or_else(stat_cpu_secs)
}

fn schedstat_cpu_secs() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

fn stat_cpu_secs() -> Option<f64> {
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
        "algorithm",
        "N",
        "seed",
        "messages",
        "delivered",
        "wall s",
        "cpu s",
        "delivered/cpu-s",
        "events/cpu-s",
        "engine B/proc",
        "election B",
        "ok"
    );
    for s in &scns {
        for seed in seeds.iter() {
            let window = s.crash_window_ms.map(Duration::from_millis);
            let build_start = std::time::Instant::now();
            let (mut sim, _, last_fault) =
                s.build(seed, window).with_context(|| format!("{} N={}", s.algorithm, s.nodes))?;
            let build = build_start.elapsed().as_secs_f64();
            let c0 = thread_cpu_secs();
            let t0 = std::time::Instant::now();
            let end = s.run_to_end(&mut sim, last_fault);
            let wall = t0.elapsed().as_secs_f64();
            let cpu = match (c0, thread_cpu_secs()) {
                (Some(a), Some(b)) if b > a => b - a,
                _ => wall,
            };
            let v = check(&sim, end);
            let m = sim.metrics();
            println!(
                "{:<14} {:>9} {:>5} {:>12} {:>12} {:>9.3} {:>9.4} {:>14.0} {:>14.0} {:>13.1} {:>10} {:>5}",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_time_is_readable_and_never_goes_back() {
        let a = thread_cpu_secs().expect("Linux exposes /proc/thread-self");
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = thread_cpu_secs().expect("Linux exposes /proc/thread-self");
        assert!(b >= a, "thread CPU time went from {a} to {b}");
        assert!(schedstat_cpu_secs().or_else(stat_cpu_secs).is_some());
    }
}

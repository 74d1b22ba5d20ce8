//! `peerage-lab sweep`: the long randomised safety/liveness check.
//!
//! For every algorithm and seed it runs [`Scenario::random_small`] (N in 3..=24, crashes
//! before and during the election, sometimes recoveries; the same cases as the integration
//! tests, which run the first 1,000 seeds) and judges it with the oracle. Every failing seed is
//! printed with the exact command that replays it; the exit status is 1 if any failed.

use crate::lab::cli::SweepArgs;
use crate::lab::scenario::{replay_command, Scenario};
use overlay::election::Algorithm;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// One failing case.
#[derive(Debug, Clone)]
pub struct Failure {
    pub algorithm: Algorithm,
    pub seed: u64,
    pub summary: String,
}

/// Run one seed of the random small case and describe the failure, if any.
pub fn check_seed(algorithm: Algorithm, seed: u64) -> Result<(), Failure> {
    let scn = Scenario::random_small(algorithm, seed);
    match scn.run(seed, false) {
        Ok(o) if o.ok() => Ok(()),
        Ok(o) => Err(Failure {
            algorithm,
            seed,
            summary: format!(
                "N={} down-at-start={} crash-during={} recover={} latency={} detect={}ms initiators={}: safety {} agreement {} liveness {} ({} live, {} undecided, {} wrong, end {:?}); {}",
                scn.nodes,
                o.down_at_start,
                o.crashed_during,
                scn.recover,
                scn.latency,
                scn.detect_delay_ms,
                scn.initiators,
                o.verdict.safety,
                o.verdict.agreement,
                o.verdict.liveness,
                o.verdict.live,
                o.verdict.undecided,
                o.verdict.wrong,
                o.end,
                o.verdict.problems.join("; ")
            ),
        }),
        Err(e) => Err(Failure { algorithm, seed, summary: format!("could not run: {e}") }),
    }
}

pub fn run(args: SweepArgs) -> anyhow::Result<ExitCode> {
    let jobs = args.jobs.clamp(1, 64);
    let failures = Mutex::new(Vec::<Failure>::new());
    let done = AtomicU64::new(0);
    let total = args.seeds.len() * args.algorithm.0.len() as u64;
    let started = std::time::Instant::now();
    std::thread::scope(|sc| {
        for j in 0..jobs {
            let (failures, done, algs, seeds) = (&failures, &done, &args.algorithm.0, args.seeds);
            sc.spawn(move || {
                for seed in seeds.iter().skip(j).step_by(jobs) {
                    for &a in algs {
                        if let Err(f) = check_seed(a, seed) {
                            eprintln!("FAIL {} seed {}: {}\n  replay: {}", a, seed, f.summary, replay_command(a, seed));
                            if let Ok(mut v) = failures.lock() {
                                v.push(f);
                            }
                        }
                        let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                        if d % 50_000 == 0 {
                            eprintln!("{d}/{total} cases, {:.0} s", started.elapsed().as_secs_f64());
                        }
                    }
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap_or_default();
    failures.sort_by_key(|f| (f.algorithm, f.seed));
    for a in &args.algorithm.0 {
        let bad: Vec<u64> = failures.iter().filter(|f| f.algorithm == *a).map(|f| f.seed).collect();
        println!(
            "{:<14} seeds {}: {} passed, {} failed{}",
            a.name(),
            args.seeds,
            args.seeds.len() - bad.len() as u64,
            bad.len(),
            if bad.is_empty() { String::new() } else { format!(" (first: {:?})", &bad[..bad.len().min(10)]) }
        );
    }
    if args.details {
        for f in &failures {
            println!("{} seed {}: {}", f.algorithm, f.seed, f.summary);
        }
    }
    println!("{} cases in {:.1} s", total, started.elapsed().as_secs_f64());
    Ok(if failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

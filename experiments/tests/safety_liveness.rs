//! Safety and liveness of every election algorithm in the simulator, on random small cases
//! with crashes before and during the election (and sometimes recoveries).
//!
//! Each test runs seeds `0..1000` (or `PEERAGE_SEED_COUNT` seeds) of
//! `Scenario::random_small(algorithm, seed)`: N in 3..=24, random latencies, random
//! initiators, failure-detector delays and (for echo) topologies and capacities. At
//! quiescence every live process must name the best live process of its component and every
//! live process must have decided. A failing seed prints itself with the exact replay command;
//! `PEERAGE_SEED=<seed>` runs only that seed (with the failure's details).
//! The longer sweep is `peerage-lab sweep --seeds 0..100000` (not run in CI).

use overlay::election::Algorithm;
use peerage_experiments::lab::scenario::{replay_command, Scenario};
use peerage_experiments::lab::sweep::check_seed;

/// KNOWN ALGORITHM FAILURES found by this sweep, reported to the algorithm's engineer through
/// the simulator's report (the oracle is not weakened: these seeds are skipped in the main
/// test and asserted to still fail, with their replay commands, in `known_failures_replay`,
/// which is `#[ignore]`d so that CI stays green until the algorithm is fixed; run it with
/// `cargo nextest run -p peerage-experiments --test safety_liveness --run-ignored only`).
/// Remove a seed from here once its algorithm passes it.
const KNOWN_FAILURES: &[(Algorithm, u64)] = &[];

fn known(algorithm: Algorithm, seed: u64) -> bool {
    KNOWN_FAILURES.contains(&(algorithm, seed))
}

fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("PEERAGE_SEED") {
        let seed: u64 = s.trim().parse().expect("PEERAGE_SEED must be a number");
        return vec![seed];
    }
    let count: u64 = std::env::var("PEERAGE_SEED_COUNT").ok().and_then(|s| s.parse().ok()).unwrap_or(1000);
    (0..count).collect()
}

fn sweep(algorithm: Algorithm) {
    let seeds = seeds();
    eprintln!("{algorithm}: seeds {}..={} ({} cases)", seeds[0], seeds[seeds.len() - 1], seeds.len());
    let mut failures = Vec::new();
    let mut skipped = 0;
    for &seed in &seeds {
        if seeds.len() > 1 && known(algorithm, seed) {
            skipped += 1;
            continue;
        }
        if let Err(f) = check_seed(algorithm, seed) {
            eprintln!("FAIL {algorithm} seed {seed}: {}\n  replay: {}", f.summary, replay_command(algorithm, seed));
            if seeds.len() == 1 {
                eprintln!("scenario: {:#?}", Scenario::random_small(algorithm, seed));
            }
            failures.push(seed);
        }
    }
    if skipped > 0 {
        eprintln!("{algorithm}: skipped {skipped} KNOWN_FAILURES seeds (see known_failures_replay)");
    }
    assert!(
        failures.is_empty(),
        "{algorithm}: {} of {} seeds violated safety or liveness; first failing seeds {:?}",
        failures.len(),
        seeds.len(),
        &failures[..failures.len().min(20)]
    );
}

#[test]
fn bully() {
    sweep(Algorithm::Bully);
}

#[test]
fn fast_bully() {
    sweep(Algorithm::FastBully);
}

#[test]
fn ring() {
    sweep(Algorithm::Ring);
}

#[test]
fn chang_roberts() {
    sweep(Algorithm::ChangRoberts);
}

#[test]
fn villadangos() {
    sweep(Algorithm::Villadangos);
}

#[test]
fn echo() {
    sweep(Algorithm::Echo);
}

/// The known failures still fail (prints their replay commands). Ignored in CI.
/// Sweep seeds that failed before the fixes of 2026-11-21 for failure reports older than a
/// recovery (see `overlay/src/election/ring.rs` and `chang_roberts.rs`): ring 82223,
/// Chang-Roberts 82223 and 83038 (`peerage-lab sweep --seeds 0..100000`).
#[test]
fn ring_and_chang_roberts_sweep_regressions() {
    for (algorithm, seed) in
        [(Algorithm::Ring, 82223), (Algorithm::ChangRoberts, 82223), (Algorithm::ChangRoberts, 83038)]
    {
        if let Err(f) = check_seed(algorithm, seed) {
            panic!("{algorithm} seed {seed}: {}\n  replay: {}", f.summary, replay_command(algorithm, seed));
        }
    }
}

#[test]
#[ignore = "known algorithm failures, see KNOWN_FAILURES"]
fn known_failures_replay() {
    let mut fixed = Vec::new();
    for &(a, seed) in KNOWN_FAILURES {
        match check_seed(a, seed) {
            Err(f) => eprintln!("still failing: {a} seed {seed}: {}\n  replay: {}", f.summary, replay_command(a, seed)),
            Ok(()) => fixed.push((a, seed)),
        }
    }
    assert!(fixed.is_empty(), "now passing, remove from KNOWN_FAILURES: {fixed:?}");
}

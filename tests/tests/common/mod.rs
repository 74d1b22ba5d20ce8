//! Helpers shared by the swarm integration tests: the printed, replayable seed and the
//! fast start-up timing every in-process swarm test uses.
#![allow(dead_code)] // each test binary uses its own subset

pub mod attacker;
pub mod netnode;

use peerage_node::config::FileConfig;

/// The run's seed: `PEERAGE_SEED` if set, else a random one; printed so a failure replays.
pub fn seed() -> u64 {
    let seed = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("seed {seed} (replay with PEERAGE_SEED={seed})");
    seed
}

/// Node configuration for small test swarms: settle after 1 s of quiet membership, and a
/// node that names no leader starts its own election `fallback_ms` later.
pub fn template(fallback_ms: u64) -> FileConfig {
    let mut t = FileConfig::default();
    t.timing.settle_ms = 1_000;
    t.timing.fallback_ms = fallback_ms;
    t
}

/// Logs to the test output when `RUST_LOG` is set (e.g.
/// `RUST_LOG=peerage_node::superpeer::driver=debug`); silent otherwise.
pub fn init_log() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
}

/// Honest peers are never banned: no node of `swarm` banned anyone.
pub fn assert_no_bans(swarm: &peerage_node::LocalSwarm) {
    let bans: Vec<u64> = swarm.snapshots().iter().map(|(_, s)| s.guard.bans).collect();
    assert!(bans.iter().all(|b| *b == 0), "an honest swarm banned peers: {bans:?}");
}

//! The sweep's random cases: one fault kind per case, drawn with everything else from the
//! case's seed, and the case's place inside or outside its algorithm's assumptions
//! ([`overlay::election::assumptions`]).
//!
//! Every case is a small group (N in 3..=24) with random latencies (1 ms up to 1-30 ms),
//! initiators, detector delays (1-200 ms) and, for echo, a random topology and capacities.
//! Its *kind* adds the fault under test:
//! - `crash`: crashes before and during the election;
//! - `recovery`: crashes during the election, every crashed process recovering later;
//! - `detector-race`: crashes with a fast detector (1-5 ms) and slow links (up to 100 ms), so
//!   reports overtake the messages sent just before a crash;
//! - `reorder`: 10-60 % of messages held back up to 60 ms, with crashes;
//! - `duplication`: 5-30 % of messages sent twice for the first 0.1-3 s, with crashes;
//! - `loss`: 1-20 % of messages lost for the first 0.1-3 s, with crashes;
//! - `partition`: 10-50 % of the processes cut off at 0-500 ms for good, with crashes;
//! - `partition-heal`: the same, healed 50 ms-2 s later;
//! - `freeze`: the leader-to-be (70 %) or a random process stopped at 0-800 ms for
//!   0.1-3 s, with crashes; a message that waits 500 ms for it is reported failed to its
//!   sender, as a request-response timeout would be.
//!
//! Heartbeats (the leader's `Alive` every 100 ms, T1 = 300 ms; echo probes every 100 ms) are
//! on for the kinds that need them, loss, partitions and freezes, and off otherwise so that
//! those runs end at quiescence. A case is *inside* its algorithm's assumptions unless it
//! loses messages where the algorithm assumes reliable channels or duplicates them where it
//! assumes none are.

use crate::lab::scenario::{FreezeSpec, PartitionSpec, Scenario};
use crate::lab::spec::{Amount, Initiators};
use crate::sim::latency::LatencySpec;
use crate::sim::topology::TopologySpec;
use overlay::election::{Algorithm, Assumptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The heartbeat period of the cases that need heartbeats.
pub const HEARTBEAT_MS: u64 = 100;
/// How long a message to a frozen process waits before its sender is told it failed (the
/// node's request-response timeout, scaled like the heartbeat: 5 s against T1 = 3 s there).
pub const REQUEST_TIMEOUT_MS: u64 = 500;

/// The fault a sweep case tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    Crash,
    Recovery,
    DetectorRace,
    Reorder,
    Duplication,
    Loss,
    Partition,
    PartitionHeal,
    Freeze,
}

impl FaultKind {
    pub const ALL: [FaultKind; 9] = [
        FaultKind::Crash,
        FaultKind::Recovery,
        FaultKind::DetectorRace,
        FaultKind::Reorder,
        FaultKind::Duplication,
        FaultKind::Loss,
        FaultKind::Partition,
        FaultKind::PartitionHeal,
        FaultKind::Freeze,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Crash => "crash",
            FaultKind::Recovery => "recovery",
            FaultKind::DetectorRace => "detector-race",
            FaultKind::Reorder => "reorder",
            FaultKind::Duplication => "duplication",
            FaultKind::Loss => "loss",
            FaultKind::Partition => "partition",
            FaultKind::PartitionHeal => "partition-heal",
            FaultKind::Freeze => "freeze",
        }
    }

    /// Whether the case needs heartbeats: a lost announcement, a cut-off or frozen leader and
    /// a heal are noticed only through them.
    pub fn needs_heartbeats(self) -> bool {
        matches!(self, FaultKind::Loss | FaultKind::Partition | FaultKind::PartitionHeal | FaultKind::Freeze)
    }

    /// Whether a case of this kind lies inside `a`.
    pub fn inside(self, a: &Assumptions) -> bool {
        match self {
            FaultKind::Loss => !a.reliable_channels,
            FaultKind::Duplication => !a.no_duplicates,
            _ => true,
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown fault kind {0:?}: expected crash, recovery, detector-race, reorder, duplication, loss, partition, partition-heal or freeze")]
pub struct UnknownKind(pub String);

impl FromStr for FaultKind {
    type Err = UnknownKind;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase().replace('_', "-");
        FaultKind::ALL.into_iter().find(|k| k.name() == t).ok_or_else(|| UnknownKind(s.to_string()))
    }
}

/// One random sweep case.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    pub kind: FaultKind,
    pub scenario: Scenario,
    /// Inside the algorithm's assumptions.
    pub inside: bool,
}

/// The case of `seed` for `algorithm`, of the kind the seed draws, or of `kind` if given.
pub fn random_case(algorithm: Algorithm, seed: u64, kind: Option<FaultKind>) -> Case {
    let mut r = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_fa17_0c45_e000);
    let drawn = FaultKind::ALL[r.gen_range(0..FaultKind::ALL.len())];
    let kind = kind.unwrap_or(drawn);
    let n = r.gen_range(3..=24usize);
    let third = n / 3;
    let mut before = r.gen_range(0..=third);
    let mut during = r.gen_range(0..=third.min(n - 1 - before));
    let hi = r.gen_range(1..=30u64);
    let mut s = Scenario {
        algorithm,
        nodes: n,
        initiators: if r.gen_bool(0.5) { Initiators::All } else { Initiators::Count(r.gen_range(1..=n)) },
        latency: LatencySpec::Range(Duration::from_millis(1), Duration::from_millis(hi)),
        detect_delay_ms: r.gen_range(1..=200),
        topology: if r.gen_bool(0.5) {
            TopologySpec::RandomRegular { degree: r.gen_range(2..=4) }
        } else {
            TopologySpec::Geometric { avg_degree: r.gen_range(2.0..6.0) }
        },
        capacities: if r.gen_bool(0.3) { 0 } else { r.gen_range(1..=10) },
        time_limit_ms: 3_600_000,
        max_events: 5_000_000,
        ..Scenario::default()
    };
    // Every kind but the network faults has crashes during the election to test.
    let crashes = |during: &mut usize, before: usize| {
        if *during == 0 {
            *during = 1.min(n - 1 - before);
        }
    };
    match kind {
        FaultKind::Crash => crashes(&mut during, before),
        FaultKind::Recovery => {
            crashes(&mut during, before);
            s.recover = true;
        }
        FaultKind::DetectorRace => {
            crashes(&mut during, before);
            let lo = r.gen_range(5..=20u64);
            s.latency = LatencySpec::Range(Duration::from_millis(lo), Duration::from_millis(r.gen_range(lo..=100)));
            s.detect_delay_ms = r.gen_range(1..=5);
        }
        FaultKind::Reorder => {
            s.reorder = r.gen_range(0.1..0.6);
            s.reorder_delay_ms = r.gen_range(5..=60);
        }
        FaultKind::Duplication => {
            s.dup = r.gen_range(0.05..0.3);
            s.net_faults_until_ms = Some(r.gen_range(100..=3_000));
        }
        FaultKind::Loss => {
            s.loss = r.gen_range(0.01..0.2);
            s.net_faults_until_ms = Some(r.gen_range(100..=3_000));
        }
        FaultKind::Partition | FaultKind::PartitionHeal => {
            let at_ms = r.gen_range(0..=500);
            let heal_at_ms = (kind == FaultKind::PartitionHeal).then(|| at_ms + r.gen_range(50..=2_000));
            s.partition = Some(PartitionSpec { at_ms, fraction: r.gen_range(0.1..0.5), heal_at_ms });
        }
        FaultKind::Freeze => {
            s.freeze = Some(FreezeSpec {
                at_ms: r.gen_range(0..=800),
                for_ms: r.gen_range(100..=3_000),
                leader: r.gen_bool(0.7),
            });
            s.request_timeout_ms = Some(REQUEST_TIMEOUT_MS);
            before = before.min(third / 2);
        }
    }
    s.crash_before = Amount::Count(before);
    s.crash_during = during;
    if kind.needs_heartbeats() {
        s.alive_interval_ms = HEARTBEAT_MS;
    }
    let inside = kind.inside(&algorithm.assumptions());
    Case { kind, scenario: s, inside }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_drawn_and_classified() {
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..500 {
            let c = random_case(Algorithm::Bully, seed, None);
            seen.insert(c.kind);
            assert!(c.scenario.validate().is_ok(), "seed {seed}: {:?}", c.scenario);
            assert_eq!(c.scenario.alive_interval_ms > 0, c.kind.needs_heartbeats());
        }
        assert_eq!(seen.len(), FaultKind::ALL.len());
        // The bully family assumes reliable channels without duplicates; echo does not.
        for (a, kind, inside) in [
            (Algorithm::Bully, FaultKind::Loss, false),
            (Algorithm::Bully, FaultKind::Duplication, false),
            (Algorithm::Bully, FaultKind::PartitionHeal, true),
            (Algorithm::Echo, FaultKind::Loss, true),
            (Algorithm::Echo, FaultKind::Duplication, true),
            (Algorithm::Ring, FaultKind::Freeze, true),
        ] {
            assert_eq!(random_case(a, 1, Some(kind)).inside, inside, "{a} {kind}");
        }
        assert_eq!("partition_heal".parse(), Ok(FaultKind::PartitionHeal));
        assert!("meteor".parse::<FaultKind>().is_err());
    }
}

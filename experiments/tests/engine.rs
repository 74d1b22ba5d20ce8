//! The simulator's own guarantees: a seed replays exactly; per-message faults, partitions and
//! recoveries behave as documented in `sim/engine.rs`; bad scenarios are refused.

use overlay::election::Algorithm;
use peerage_experiments::lab::scenario::{PartitionSpec, Scenario, ScenarioError};
use peerage_experiments::lab::spec::{Amount, Initiators};
use peerage_experiments::sim::latency::LatencySpec;
use peerage_experiments::sim::topology::TopologySpec;
use std::time::Duration;

fn seed() -> u64 {
    std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(7)
}

fn base(algorithm: Algorithm, nodes: usize) -> Scenario {
    Scenario {
        algorithm,
        nodes,
        latency: LatencySpec::Range(Duration::from_millis(1), Duration::from_millis(20)),
        ..Scenario::default()
    }
}

#[test]
fn same_seed_same_run() {
    let s = seed();
    eprintln!("seed {s} (PEERAGE_SEED replays)");
    for a in Algorithm::ALL {
        let scn = Scenario {
            crash_before: Amount::Count(2),
            crash_during: 3,
            recover: true,
            loss: 0.0,
            reorder: 0.2,
            ..base(a, 20)
        };
        let x = scn.run(s, true).unwrap();
        let y = scn.run(s, true).unwrap();
        assert_eq!(x.messages, y.messages, "{a}");
        assert_eq!(x.agreement_us, y.agreement_us, "{a}");
        assert_eq!(x.end_us, y.end_us, "{a}");
        assert_eq!(x.metrics.events, y.metrics.events, "{a}");
        assert_eq!(x.leaders, y.leaders, "{a}");
        let z = scn.run(s + 1, true).unwrap();
        assert!(
            z.end_us != x.end_us || z.leaders != x.leaders || z.metrics.events != x.metrics.events,
            "{a}: a different seed should give a different run"
        );
    }
}

#[test]
fn loss_duplication_and_reordering_are_counted() {
    let scn = Scenario { loss: 0.2, dup: 0.2, reorder: 0.3, ..base(Algorithm::Bully, 30) };
    let o = scn.run(seed(), false).unwrap();
    let m = &o.metrics;
    assert!(m.lost > 0 && m.duplicated > 0 && m.reordered > 0, "{m:?}");
    // Every sent message is lost, or delivered/failed once per copy.
    assert_eq!(m.messages() + m.duplicated, m.lost + m.delivered + m.failed + m.unknown_destination);
}

#[test]
fn clean_network_delivers_everything_once() {
    for a in Algorithm::ALL {
        let o = base(a, 16).run(seed(), false).unwrap();
        let m = &o.metrics;
        assert_eq!(m.delivered, m.messages(), "{a}");
        assert_eq!(m.failed + m.lost + m.duplicated, 0, "{a}");
        assert!(o.ok(), "{a}: {:?}", o.verdict.problems);
    }
}

#[test]
fn crashed_processes_make_sends_fail_and_are_not_leaders() {
    let scn = Scenario { crash_before: Amount::Fraction(0.25), ..base(Algorithm::Ring, 16) };
    let o = scn.run(seed(), true).unwrap();
    assert_eq!(o.down_at_start, 4);
    assert_eq!(o.verdict.live, 12);
    assert!(o.metrics.failed > 0, "the ring must hit dead successors");
    assert!(o.ok(), "{:?}", o.verdict.problems);
}

#[test]
fn echo_partition_elects_one_leader_per_side() {
    // Partition half of the processes after the first election and never heal: each
    // connected component must end with its own best.
    let scn = Scenario {
        partition: Some(PartitionSpec { at_ms: 2_000, fraction: 0.5, heal_at_ms: None }),
        topology: TopologySpec::RandomRegular { degree: 4 },
        initiators: Initiators::Count(1),
        ..base(Algorithm::Echo, 40)
    };
    let o = scn.run(seed(), false).unwrap();
    assert!(o.verdict.components >= 2, "{:?}", o.verdict);
    assert!(o.metrics.peer_down_reports > 0);
    assert!(o.ok(), "{:?}", o.verdict.problems);
}

#[test]
fn heal_reports_links_up_again() {
    let scn = Scenario {
        partition: Some(PartitionSpec { at_ms: 2_000, fraction: 0.5, heal_at_ms: Some(5_000) }),
        initiators: Initiators::Count(1),
        ..base(Algorithm::Echo, 30)
    };
    let o = scn.run(seed(), false).unwrap();
    assert!(o.metrics.peer_up_reports > 0);
    assert_eq!(o.verdict.components, 1);
}

#[test]
fn bad_scenarios_are_refused() {
    let zero = Scenario { nodes: 0, ..Scenario::default() };
    assert!(matches!(zero.run(0, false), Err(ScenarioError::NoNodes(0))));
    let all_down = Scenario { nodes: 4, crash_before: Amount::Fraction(1.0), ..Scenario::default() };
    assert!(matches!(all_down.run(0, false), Err(ScenarioError::TooManyCrashes { .. })));
    let rate = Scenario { loss: 1.5, ..Scenario::default() };
    assert!(matches!(rate.run(0, false), Err(ScenarioError::Rate { .. })));
    let heal = Scenario {
        partition: Some(PartitionSpec { at_ms: 10, fraction: 0.5, heal_at_ms: Some(5) }),
        ..Scenario::default()
    };
    assert!(matches!(heal.run(0, false), Err(ScenarioError::HealBeforePartition { .. })));
}

#[test]
fn internet_latency_model_runs() {
    let scn = Scenario { latency: "internet".parse().unwrap(), ..base(Algorithm::ChangRoberts, 32) };
    let o = scn.run(seed(), false).unwrap();
    assert!(o.ok(), "{:?}", o.verdict.problems);
}

/// Process indices need not follow rank order (the engine then keeps a permutation beside the
/// group's index): the same group numbered in rank order and in reverse elects the same
/// leader with the same messages, and every index maps to its own id and back.
#[test]
fn any_process_numbering_runs_the_same_election() {
    use overlay::election::ElectionConfig;
    use overlay::{Election, NodeId, Rank, Time};
    use peerage_experiments::sim::latency::Constant;
    use peerage_experiments::sim::{check, NetworkFaults, Sim, SimError, SimSetup};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    let s = seed();
    eprintln!("seed {s} (PEERAGE_SEED replays)");
    let setup = |ranks: Vec<Rank>| {
        let mut election = ElectionConfig::for_algorithm(Algorithm::ChangRoberts);
        election.alive_interval_ms = 0;
        SimSetup {
            ranks,
            election,
            latency: Box::new(Constant(Duration::from_millis(5))),
            faults: NetworkFaults::default(),
            detect_delay: Duration::from_millis(100),
            connect_timeout: None,
            request_timeout: None,
            topology: None,
            count_bytes: false,
        }
    };
    let mut sorted: Vec<Rank> =
        (0..40u64).map(|i| Rank::new(0, NodeId::hash_of(&(s * 1000 + i).to_le_bytes()))).collect();
    sorted.sort_unstable();
    let reversed: Vec<Rank> = sorted.iter().rev().copied().collect();
    let best = *sorted.last().unwrap();
    let mut counts = Vec::new();
    for ranks in [sorted.clone(), reversed] {
        let mut sim = Sim::new(setup(ranks.clone()), ChaCha8Rng::seed_from_u64(s)).unwrap();
        for (i, r) in ranks.iter().enumerate() {
            assert_eq!(sim.rank(i as u32), *r);
            assert_eq!(sim.index_of(&r.id), Some(i as u32));
            sim.start_at(Time::ZERO, i as u32).unwrap();
        }
        assert_eq!(sim.index_of(&NodeId::MAX), None);
        let end = sim.run_until(Time::from_millis(3_600_000), 10_000_000);
        let v = check(&sim, end);
        assert!(v.ok(), "{:?}", v.problems);
        for i in 0..sim.len() as u32 {
            assert_eq!(sim.process(i).and_then(|e| e.leader()), Some(best.id));
        }
        counts.push(sim.metrics().messages());
    }
    assert_eq!(counts[0], counts[1], "numbering changed the message count");
    assert_eq!(counts[0], 3 * 40 - 1, "Chang-Roberts, everyone initiating on a clean ring");

    let mut dup = sorted.clone();
    dup.push(sorted[3]);
    assert!(matches!(Sim::new(setup(dup), ChaCha8Rng::seed_from_u64(s)), Err(SimError::DuplicateId(_))));
}

/// Loss, duplication and reordering apply only to messages sent before `net_faults_until`:
/// with every message lost for the first 500 ms, the election still ends once the window
/// has passed (heartbeats carry the leader to everyone), which it never would if the loss
/// went on.
#[test]
fn network_faults_stop_at_their_window() {
    let scn =
        Scenario { loss: 1.0, net_faults_until_ms: Some(500), alive_interval_ms: 100, ..base(Algorithm::Bully, 10) };
    let o = scn.run(seed(), false).unwrap();
    assert!(o.metrics.lost > 0);
    assert_eq!(o.last_fault_us, 500_000);
    assert!(o.ok(), "{:?}", o.verdict.problems);
    let forever = Scenario { net_faults_until_ms: None, time_limit_ms: 60_000, ..scn };
    let o = forever.run(seed(), false).unwrap();
    assert!(!o.ok(), "with all messages lost for good nobody can agree");
}

/// The failure detector tells every observer the truth once a change holds, whatever the
/// order of crashes, partitions and heals: a crash behind a partition that heals before the
/// partition's own reports are due is still reported, to every process.
#[test]
fn detector_reports_a_crash_across_a_partition_that_healed() {
    use overlay::{Election, Time};
    for a in [Algorithm::Bully, Algorithm::Ring, Algorithm::Echo] {
        let scn = Scenario {
            crash_during: 1,
            crash_window_ms: Some(50),
            detect_delay_ms: 200,
            partition: Some(PartitionSpec { at_ms: 100, fraction: 0.5, heal_at_ms: Some(250) }),
            topology: TopologySpec::Complete,
            ..base(a, 10)
        };
        let (mut sim, _, last) = scn.build(seed(), Some(Duration::from_millis(50))).unwrap();
        let end = scn.run_to_end(&mut sim, last);
        let v = peerage_experiments::sim::check(&sim, end);
        assert!(v.ok(), "{a}: {:?}", v.problems);
        let dead: Vec<u32> = (0..sim.len() as u32).filter(|&i| !sim.is_alive(i)).collect();
        assert_eq!(dead.len(), 1, "{a}");
        for i in (0..sim.len() as u32).filter(|&i| sim.is_alive(i)) {
            assert_ne!(sim.process(i).unwrap().leader(), Some(sim.rank(dead[0]).id), "{a}: process {i}");
        }
        assert!(sim.now() > Time::from_millis(250));
    }
}

/// A frozen process handles nothing while frozen, loses nothing, and nothing reports it.
#[test]
fn a_frozen_process_keeps_its_messages_for_the_thaw() {
    use peerage_experiments::lab::scenario::FreezeSpec;
    let scn = Scenario {
        freeze: Some(FreezeSpec { at_ms: 0, for_ms: 2_000, leader: true }),
        crash_window_ms: Some(1),
        ..base(Algorithm::ChangRoberts, 8)
    };
    let o = scn.run(seed(), false).unwrap();
    assert_eq!(o.metrics.freezes, 1);
    assert_eq!(o.metrics.failed + o.metrics.peer_down_reports, 0, "a frozen process is not dead");
    assert!(o.ok(), "{:?}", o.verdict.problems);
    // Its messages waited: the election could only end after the thaw.
    assert!(o.agreement_us.unwrap() >= 2_000_000);
}

//! Elections under faults in the simulator: counter-examples found by the sweep and by
//! targeted runs (each replayed exactly as it was found), members that are dead for good, frozen
//! leaders, and heals.

use overlay::election::{Algorithm, ElectionConfig};
use overlay::{Election, NodeId, Rank, Time};
use peerage_experiments::lab::scenario::{FreezeSpec, PartitionSpec, Scenario};
use peerage_experiments::lab::spec::Initiators;
use peerage_experiments::sim::latency::{Constant, LatencySpec};
use peerage_experiments::sim::topology::TopologySpec;
use peerage_experiments::sim::{check, Fault, FaultPlan, NetworkFaults, Sim, SimSetup};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

fn ms(x: u64) -> Duration {
    Duration::from_millis(x)
}

fn range(lo: u64, hi: u64) -> LatencySpec {
    LatencySpec::Range(ms(lo), ms(hi))
}

fn assert_ok(s: &Scenario, seed: u64, what: &str) {
    let o = s.run(seed, false).unwrap();
    assert!(o.ok(), "{what} (seed {seed}): {:?}", o.verdict.problems);
}

/// The bully family admits no `Coordinator` from a leader whose crash is already reported:
/// the leader crashes right after announcing and a fast detector's `PeerDown` lands before
/// the announcement; admitting it would leave every live process naming the dead leader for
/// good. Three cases: `peerage-lab elections -a bully -n 4 --initiators 1 --crash-during 1
/// --latency range:1ms..50ms --detect-delay 1ms --seed 113`, and the sweep's bully seed 212214
/// and fast bully seed 180521 (crash cases of the sweep, spelled out here).
#[test]
fn bully_family_admits_no_claim_from_a_process_reported_down() {
    let replay = Scenario {
        algorithm: Algorithm::Bully,
        nodes: 4,
        initiators: Initiators::Count(1),
        crash_during: 1,
        latency: range(1, 50),
        detect_delay_ms: 1,
        ..Scenario::default()
    };
    assert_ok(&replay, 113, "bully, targeted replay");
    let sweep_case = |algorithm, nodes, hi, detect_delay_ms, crash_during, topology| Scenario {
        algorithm,
        nodes,
        initiators: Initiators::Count(2),
        crash_during,
        latency: range(1, hi),
        detect_delay_ms,
        topology,
        time_limit_ms: 3_600_000,
        max_events: 5_000_000,
        ..Scenario::default()
    };
    let bully = sweep_case(Algorithm::Bully, 10, 26, 1, 3, TopologySpec::Geometric { avg_degree: 4.0 });
    assert_ok(&bully, 212_214, "bully, sweep case");
    let fast = sweep_case(Algorithm::FastBully, 4, 27, 7, 1, TopologySpec::Geometric { avg_degree: 2.0 });
    assert_ok(&fast, 180_521, "fast bully, sweep case");
}

/// The echo election keeps a crash report when the dead process is across a partition at
/// report time and the heal comes before the partition's link reports (a lost report leaves
/// live nodes naming the dead leader). `peerage-lab elections -a echo -n 12 --initiators all --crash-during 3
/// --crash-window 50ms --latency range:1ms..10ms --detect-delay 200ms --topology regular:3
/// --partition-at 100ms --partition-fraction 0.3 --heal-at 250ms --seed 1223`.
#[test]
fn echo_crash_report_survives_a_heal_before_the_link_reports() {
    let s = Scenario {
        algorithm: Algorithm::Echo,
        nodes: 12,
        crash_during: 3,
        crash_window_ms: Some(50),
        latency: range(1, 10),
        detect_delay_ms: 200,
        topology: TopologySpec::RandomRegular { degree: 3 },
        partition: Some(PartitionSpec { at_ms: 100, fraction: 0.3, heal_at_ms: Some(250) }),
        ..Scenario::default()
    };
    assert_ok(&s, 1223, "echo, targeted replay");
}

/// One echo election from one source costs exactly its formula in the simulator too, where
/// the start-up hellos (one `EchoReply` per link end) cross the election on links of random
/// latency: 2|E| hellos + 2|E| - (N-1) `EchoElection` + (N-1) `EchoAck` + (N-1) `EchoLeader`.
#[test]
fn echo_one_source_costs_its_formula_with_crossing_hellos() {
    for seed in 0..20 {
        let s = Scenario {
            algorithm: Algorithm::Echo,
            nodes: 24,
            initiators: Initiators::Count(1),
            latency: range(1, 30),
            topology: TopologySpec::RandomRegular { degree: 4 },
            ..Scenario::default()
        };
        let (mut sim, _, last) = s.build(seed, None).unwrap();
        let topo = sim.topology().unwrap();
        let e: u64 = (0..24u32).map(|i| topo.neighbours(i).len() as u64).sum::<u64>() / 2;
        let end = s.run_to_end(&mut sim, last);
        assert!(check(&sim, end).ok(), "seed {seed}");
        assert_eq!(sim.metrics().messages(), 4 * e + 23, "seed {seed}: 4|E| + N - 1 with |E| = {e}");
    }
}

/// 30 members dead for good (crashed at the start and reported by the failure detector)
/// among 10 live ones, and a connect timeout of 2 s for a send to a dead member: when the
/// ring's leader dies, the re-election skips all 30 and waits on none of them (before the
/// reports outlived the election's epoch, every re-election tried each dead successor again,
/// 30 connect timeouts). For Chang-Roberts and Villadangos too.
#[test]
fn thirty_dead_members_cost_a_ring_reelection_no_connect_timeout() {
    let connect_timeout = ms(2_000);
    let detect = ms(100);
    for algorithm in [Algorithm::Ring, Algorithm::ChangRoberts, Algorithm::Villadangos] {
        // Ranks 0..40; live: every fourth (0, 4, ..., 36), so each live process has three dead
        // successors on the ring.
        let ranks: Vec<Rank> = (0..40u64).map(|i| Rank::new(0, NodeId::from_u64(i + 1))).collect();
        let live: Vec<u32> = (0..40).filter(|i| i % 4 == 0).collect();
        let mut election = ElectionConfig::for_algorithm(algorithm);
        election.alive_interval_ms = 0;
        election.lap_timeout_ms = 60_000;
        let setup = SimSetup {
            ranks,
            election,
            latency: Box::new(Constant(ms(5))),
            faults: NetworkFaults::default(),
            detect_delay: detect,
            connect_timeout: Some(connect_timeout),
            request_timeout: None,
            topology: None,
            count_bytes: false,
        };
        let mut sim = Sim::new(setup, ChaCha8Rng::seed_from_u64(1)).unwrap();
        let mut plan = FaultPlan::default();
        for i in (0..40).filter(|i| i % 4 != 0) {
            plan.push(Time::ZERO, Fault::Crash(i));
        }
        let leader = *live.last().unwrap();
        let kill_at = Time::from_millis(60_000);
        plan.push(kill_at, Fault::Crash(leader));
        sim.schedule(plan).unwrap();
        for &i in &live {
            sim.start_at(Time::from_millis(500), i).unwrap();
        }
        sim.run_until(Time::from_millis(59_999), u64::MAX);
        let first = check(&sim, peerage_experiments::sim::RunEnd::Quiescent);
        let named: Vec<Option<u64>> =
            live.iter().map(|&i| sim.process(i).and_then(|p| p.leader()).map(|l| l.high_u64())).collect();
        assert!(first.ok(), "{algorithm}: first election: leaders {named:?}");
        let failed_before = sim.metrics().failed;
        let end = sim.run_until(Time::from_millis(3_600_000), 50_000_000);
        let v = check(&sim, end);
        assert!(v.ok(), "{algorithm}: re-election: {:?}", v.problems);
        let next = sim.rank(live[live.len() - 2]).id;
        for &i in &live[..live.len() - 1] {
            assert_eq!(sim.process(i).unwrap().leader(), Some(next), "{algorithm}: process {i}");
        }
        let took = sim.last_decision().since(kill_at);
        let failed = sim.metrics().failed - failed_before;
        eprintln!("{algorithm}: re-election {took:?} after the kill, {failed} failed sends");
        assert_eq!(failed, 0, "{algorithm}: the re-election tried dead members");
        assert!(took < detect + connect_timeout, "{algorithm}: re-election took {took:?}");
    }
}

/// A frozen leader (stopped: its connections stay open, no failure detector reports it) is
/// replaced through the heartbeat's T1 by every algorithm, and when it thaws, being the
/// highest, it leads again.
#[test]
fn frozen_leader_is_replaced_and_leads_again_after_thawing() {
    for algorithm in Algorithm::ALL {
        let s = Scenario {
            algorithm,
            nodes: 12,
            initiators: Initiators::All,
            latency: range(1, 10),
            alive_interval_ms: 100,
            request_timeout_ms: Some(500),
            freeze: Some(FreezeSpec { at_ms: 2_000, for_ms: 5_000, leader: true }),
            ..Scenario::default()
        };
        let (mut sim, _, last) = s.build(7, Some(ms(1))).unwrap();
        let top = sim.len() as u32 - 1;
        let top_id = sim.rank(top).id;
        // While it is frozen the others elect the next highest.
        sim.run_until(Time::from_millis(6_500), u64::MAX);
        assert!(sim.is_frozen(top), "{algorithm}");
        let next = sim.rank(top - 1).id;
        for i in 0..top {
            let l = sim.process(i).unwrap().leader();
            assert_eq!(l, Some(next), "{algorithm}: process {i} during the freeze");
        }
        // After the thaw everyone names it again.
        let end = s.run_to_end(&mut sim, last);
        let v = check(&sim, end);
        assert!(v.ok(), "{algorithm}: {:?}", v.problems);
        assert_eq!(sim.process(0).unwrap().leader(), Some(top_id), "{algorithm}");
    }
}

/// A partition that cuts the leader and a minority off: each side elects its own leader
/// (the stated choice: availability, no quorum), and after the heal the sides merge under the
/// best within T1 + T2 + 2 RTT plus the detector's delay (bully family) or one election more
/// (the ring algorithms, whose election is two laps).
#[test]
fn partition_each_side_elects_then_the_heal_merges() {
    for algorithm in Algorithm::ALL {
        for seed in 0..5 {
            let heal_at = 4_000;
            let s = Scenario {
                algorithm,
                nodes: 12,
                latency: range(1, 10),
                detect_delay_ms: 50,
                alive_interval_ms: 100,
                partition: Some(PartitionSpec { at_ms: 1_000, fraction: 0.4, heal_at_ms: Some(heal_at) }),
                topology: TopologySpec::RandomRegular { degree: 4 },
                ..Scenario::default()
            };
            let (mut sim, _, last) = s.build(seed, Some(ms(1))).unwrap();
            sim.run_until(Time::from_millis(heal_at - 1), u64::MAX);
            let during = check(&sim, peerage_experiments::sim::RunEnd::Quiescent);
            assert!(during.components >= 2, "{algorithm} seed {seed}");
            assert!(during.ok(), "{algorithm} seed {seed}: during the partition: {:?}", during.problems);
            let end = s.run_to_end(&mut sim, last);
            let v = check(&sim, end);
            assert!(v.ok(), "{algorithm} seed {seed}: after the heal: {:?}", v.problems);
            let settled = sim.last_change().since(Time::from_millis(heal_at));
            let c = s.election_config(None);
            // T1 + T2 + 2 RTT (RTT <= 20 ms) + the detector's delay; the ring family and echo
            // run one more election of up to 3N hops.
            let bound = c.t1().unwrap() + c.t2() + ms(40) + ms(50) + ms(3 * 12 * 10);
            eprintln!("{algorithm} seed {seed}: settled {settled:?} after the heal (bound {bound:?})");
            assert!(settled <= bound, "{algorithm} seed {seed}: {settled:?} > {bound:?}");
        }
    }
}

/// The highest of three processes is cut off 2 ms after the start, before any message
/// reaches it, and healed at 71 ms, before the detector (171 ms) looks: the two initiators'
/// `Election`s to it fail, they elect the second process, whose `Alive`s go only to the
/// lowest. The highest names nobody; without its group at boot it would handle no input at
/// all and stay leaderless for good. With it, its orphan T1 expires and it takes over. The
/// sweep's partition-heal seed 543734, for bully and fast bully:
/// `peerage-lab sweep --algorithm bully --seeds 543734 --details`.
#[test]
fn highest_cut_off_before_any_message_elects_itself_after_the_heal() {
    for algorithm in [Algorithm::Bully, Algorithm::FastBully] {
        let s = Scenario {
            algorithm,
            nodes: 3,
            initiators: Initiators::Count(2),
            latency: range(1, 21),
            detect_delay_ms: 171,
            alive_interval_ms: 100,
            partition: Some(PartitionSpec { at_ms: 2, fraction: 0.2565418485231146, heal_at_ms: Some(71) }),
            time_limit_ms: 3_600_000,
            max_events: 5_000_000,
            ..Scenario::default()
        };
        assert_ok(&s, 543_734, &format!("{algorithm}, sweep case"));
    }
}

/// Fast bully's answering followers and its coordinator's re-announcement: sweep crash seed
/// 16072 (N = 19, six crashes) ends its last election within T4 + T2 of the last crash.
/// With equal waits the re-announcement and the followers' T4 cross, each crossing starting
/// another round one T4 later (9.1 s for this seed).
#[test]
fn fast_bully_settles_within_t4_and_t2_after_the_last_crash() {
    use peerage_experiments::lab::cases::FaultKind;
    use peerage_experiments::lab::sweep::run_case;
    let r = run_case(Algorithm::FastBully, 16_072, Some(FaultKind::Crash));
    assert!(r.ok, "{}", r.summary);
    let settle = Duration::from_micros(r.outcome.and_then(|o| o.settle_us).unwrap_or(0));
    let c = ElectionConfig::for_algorithm(Algorithm::FastBully);
    assert!(settle <= c.t4() + c.t2(), "settled {settle:?} after the last crash");
}

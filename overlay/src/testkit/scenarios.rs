//! Test scenarios shared by the election algorithms' tests: for the ring elections (list
//! ring and Chang-Roberts) the checks of a settled group, the leader's crash and its cost,
//! the lap timer, and the crash/recovery schedules both must survive; for the bully family (bully and fast bully) the quiet configuration,
//! the start patterns, the settled check and the crash, heartbeat, bullying and membership
//! scenarios both must pass.
//!
//! Each helper drives the real state machines on a [`Net`] and panics with the scenario (and,
//! for the random schedules, the seed to replay with `PEERAGE_SEED`) when a check fails, so an
//! algorithm's test is one call.

use crate::driver::{Effect, Election, Input, Timer};
use crate::election::{Algorithm, ElectionConfig, Message};
use crate::id::{NodeId, Rank};
use crate::membership::Membership;
use crate::testkit::{feed, Net};
use crate::time::Time;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// The leader each process names, as a process index (`from_u64(i + 1)` is process i).
pub fn names(net: &Net) -> Vec<Option<u64>> {
    net.leaders().iter().map(|l| l.map(|id| id.high_u64() - 1)).collect()
}

/// True if every live process names the same process and it is dead: the leader crashed
/// after everyone adopted it, which no process can notice without a failure report (the
/// driver's `Start` or `PeerDown` is then needed).
pub fn undetected_leader_crash(net: &Net) -> bool {
    let live: Vec<usize> = (0..net.len()).filter(|&i| net.is_alive(i)).collect();
    let Some(l) = live.first().and_then(|&i| net.process(i).leader()) else { return false };
    let idx = (l.high_u64() - 1) as usize;
    !net.is_alive(idx) && live.iter().all(|&i| net.process(i).leader() == Some(l))
}

/// Settle, allowing an undetected leader crash, which a driver's `Start` then repairs.
pub fn assert_settled_after_doubt(net: &mut Net, what: &str) {
    if undetected_leader_crash(net) {
        if let Some(i) = (0..net.len()).find(|&i| net.is_alive(i)) {
            net.start_at(net.now, i);
            net.run();
        }
    }
    assert_settled(net, what);
}

/// Every live process names the highest live process and none is still in an election.
pub fn assert_settled(net: &Net, what: &str) {
    let best = net.highest_alive().expect("someone alive");
    let leaders = names(net);
    assert!(net.all_agree_on(net.id(best)), "{what}: leaders {leaders:?}, expected {best}");
    for i in 0..net.len() {
        if net.is_alive(i) {
            assert!(!net.process(i).in_election(), "{what}: process {i} still in an election");
        }
    }
}

/// Several processes crashed before the election (not reported), always including the
/// highest, so the old leader is gone; every other live process initiates in turn, for
/// N = 2..=12: dead successors are skipped and the highest live process wins.
pub fn crashes_before(cfg: &ElectionConfig) {
    for n in 2..=12usize {
        for mask in [0b1usize, 0b101, 0b1100, 0b1_0010_0110] {
            let dead: Vec<usize> = (0..n).filter(|&j| mask >> (j % 10) & 1 == 1).collect();
            for i in (0..n).filter(|i| !dead.contains(i) && *i != n - 1) {
                let mut net = Net::new(n, cfg.clone());
                for &d in &dead {
                    net.crash(d);
                }
                net.crash(n - 1);
                if net.highest_alive().is_none() {
                    continue;
                }
                net.start_at(Time::ZERO, i);
                net.run();
                assert_settled(&net, &format!("n={n} dead={dead:?}+top initiator={i}"));
            }
        }
    }
}

/// A process crashes at every instant of an election (1 ms per hop, crashes at t + 0.5 ms
/// for t up to `laps * n + 2`), with and without crash reports, for N = 3..=12: the highest,
/// the second highest, the lowest and a middle process, under three initiators. With
/// `no_lap_timer`, the decision must also come before the lap timeout (no message is lost
/// with one crash).
pub fn crash_during(cfg: &ElectionConfig, laps: u64, no_lap_timer: bool) {
    for n in 3..=12usize {
        for victim in [n - 1, n - 2, 0, n / 2] {
            for i in [0, n / 2, n - 1] {
                for t in 0..=(laps * n as u64 + 2) {
                    for report in [false, true] {
                        let mut net = Net::new(n, cfg.clone());
                        net.detector = report;
                        net.start_at(Time::ZERO, i);
                        net.crash_at(Time::from_micros(t * 1000 + 500), victim);
                        net.run();
                        let what = format!("n={n} victim={victim} initiator={i} t={t}.5ms report={report}");
                        if no_lap_timer {
                            assert!(net.last_decision < Time::from_millis(cfg.lap_timeout_ms), "{what}");
                        }
                        if report {
                            assert_settled(&net, &what);
                        } else {
                            assert_settled_after_doubt(&mut net, &what);
                        }
                    }
                }
            }
        }
    }
}

/// The old leader crashes (reported) after an election the lowest process started, the rest
/// re-elect, then the old leader recovers with fresh state, 1 ms later, and must win again
/// (even though the group's epoch is above its fresh one), for N = 3..=12.
pub fn recovered_highest_wins(cfg: &ElectionConfig) {
    for n in 3..=12usize {
        let mut net = Net::new(n, cfg.clone());
        net.detector = true;
        net.start_at(Time::ZERO, 0);
        net.run();
        net.crash(n - 1);
        net.run();
        assert_settled(&net, &format!("n={n} without the top"));
        let t = net.now + std::time::Duration::from_millis(1);
        net.recover_at(t, n - 1);
        net.run();
        assert_settled(&net, &format!("n={n} after recovery"));
        assert_eq!(net.process(0).leader(), Some(net.id(n - 1)), "n={n}");
    }
}

/// The leader crashes after the election and every survivor is told: the N' = n - 1
/// survivors all initiate again, which costs a ring election 3N' - 1 messages (the dead
/// leader's predecessor skips it without a failed send).
pub fn leader_crash_reelection(cfg: &ElectionConfig) {
    for n in 3..=12usize {
        let mut net = Net::new(n, cfg.clone());
        net.detector = true;
        net.start_at(Time::ZERO, 0);
        net.run();
        assert_settled(&net, &format!("n={n} first"));
        let before = net.total_sent();
        net.crash(n - 1);
        net.run();
        assert_settled(&net, &format!("n={n} after the leader's crash"));
        let m = n as u64 - 1;
        assert_eq!(net.total_sent() - before, 3 * m - 1, "n={n}");
    }
}

/// A message lost with a crashed forwarder (5 processes; 2 dead from the start, 1 dies at
/// 2.5 ms while its failed send to 2 comes back) is recovered by the initiator's lap timer.
/// Returns the net for the algorithm's own checks.
pub fn lap_timer_recovers_lost_election(cfg: &ElectionConfig) -> Net {
    let mut net = Net::new(5, cfg.clone());
    net.crash(2);
    net.start_at(Time::ZERO, 0);
    net.crash_at(Time::from_micros(2_500), 1);
    net.run();
    assert_settled(&net, "lost");
    assert!(net.last_decision >= Time::from_millis(cfg.lap_timeout_ms), "decided before the lap timer");
    net
}

/// Random crash and recovery schedules (seeds `1..=PEERAGE_RANDOM_RUNS`, default 2,000, or
/// just `PEERAGE_SEED`): at quiescence every live process names the highest live one.
pub fn random_faults(cfg: &ElectionConfig, name: &str) {
    let runs: u64 = std::env::var("PEERAGE_RANDOM_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let seeds: Vec<u64> = match std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()) {
        Some(s) => vec![s],
        None => (1..=runs).collect(),
    };
    let total = seeds.len();
    let mut failed = Vec::new();
    for seed in seeds {
        if let Err(e) = random_schedule(cfg, name, seed) {
            println!("{e}");
            failed.push(seed);
        }
    }
    println!("{name}: {} of {total} random fault schedules disagreed", failed.len());
    assert!(failed.is_empty(), "{name}: failing seeds {:?}", &failed[..failed.len().min(20)]);
}

/// One random schedule of [`random_faults`]: N in 1..=16, processes down from the start,
/// 1 to 3 starts and up to 6 crashes or recoveries at random times within the election, a
/// failure detector (crashes as `PeerDown`, recoveries as `PeerUp`) in half of the cases.
/// `Err` with the schedule and the leaders if the live processes disagree at quiescence.
pub fn random_schedule(cfg: &ElectionConfig, name: &str, seed: u64) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = rng.gen_range(1..=16usize);
    let mut net = Net::new(n, cfg.clone());
    net.detector = rng.gen_bool(0.5);
    // A failure detector reports recoveries too (the simulator's does).
    let span = 3 * n as u64 + 3;
    let mut plan = format!("report={} ", net.detector);
    for i in 0..n {
        if rng.gen_bool(0.3) {
            net.crash(i);
            plan += &format!("dead {i}; ");
        }
    }
    for _ in 0..rng.gen_range(1..=3) {
        let at = Time::from_micros(rng.gen_range(0..span * 1000));
        let who = rng.gen_range(0..n);
        net.start_at(at, who);
        plan += &format!("start {who} at {at:?}; ");
    }
    for _ in 0..rng.gen_range(0..=6) {
        let at = Time::from_micros(rng.gen_range(0..span * 1000));
        let who = rng.gen_range(0..n);
        if rng.gen_bool(0.5) {
            net.crash_at(at, who);
            plan += &format!("crash {who} at {at:?}; ");
        } else {
            net.recover_at(at, who);
            plan += &format!("recover {who} at {at:?}; ");
        }
    }
    net.run();
    // After the faults stop, one more start (as a driver would after any doubt) must not be
    // needed for agreement, except where nobody ever initiated among the live processes;
    // make sure someone live has started.
    let Some(best) = net.highest_alive() else { return Ok(()) };
    let anyone_started = (0..n).any(|i| net.is_alive(i) && net.process(i).leader().is_some());
    if !anyone_started {
        net.start_at(net.now, best);
        net.run();
    }
    let what = format!("{name}: seed {seed} (replay with PEERAGE_SEED={seed}): n={n} {plan}");
    if undetected_leader_crash(&net) {
        if let Some(i) = (0..n).find(|&i| net.is_alive(i)) {
            net.start_at(net.now, i);
            net.run();
        }
    }
    let ok = net.all_agree_on(net.id(best)) && (0..n).all(|i| !net.is_alive(i) || !net.process(i).in_election());
    if !ok {
        return Err(format!("{what}: leaders {:?}, expected {best}", names(&net)));
    }
    Ok(())
}

/// Bully family: heartbeats off, so runs reach quiescence and counts contain only election
/// messages.
pub fn quiet_cfg(algorithm: Algorithm) -> ElectionConfig {
    ElectionConfig { alive_interval_ms: 0, ..ElectionConfig::for_algorithm(algorithm) }
}

/// Bully family: starts the processes whose bit is set in `mask`, all at 0 ms (`pattern`
/// 0), or 7 ms apart in ascending (1) or descending (2) index order.
pub fn start_pattern(net: &mut Net, mask: u32, pattern: u32) {
    let n = net.len();
    for i in (0..n).filter(|i| mask & (1 << i) != 0) {
        let at = match pattern {
            0 => 0,
            1 => 7 * i as u64,
            _ => 7 * (n - 1 - i) as u64,
        };
        net.start_at(Time::from_millis(at), i);
    }
}

/// Bully family: the highest process is dead (not reported) before everyone starts: P_{N-2}
/// wins, for N = 2..=12.
pub fn highest_crashed_before_election(cfg: &ElectionConfig) {
    for n in 2..=12 {
        let mut net = Net::new(n, cfg.clone());
        net.crash(n - 1);
        net.start_all();
        net.run();
        assert_leader_settled(&net, n - 2, &format!("n={n}"));
    }
}

/// Bully family: every live process names process `expected`, none is in an election, the
/// leader's state is `Leader` and everyone else's `Passive`.
pub fn assert_leader_settled(net: &Net, expected: usize, what: &str) {
    let want = net.id(expected);
    assert!(net.all_agree_on(want), "{what}: leaders {:?}, expected {want:?}", net.leaders());
    for i in 0..net.len() {
        if net.is_alive(i) {
            let p = net.process(i);
            assert!(!p.in_election(), "{what}: process {i} still in an election ({})", p.state());
            let st = if i == expected { "Leader" } else { "Passive" };
            assert_eq!(p.state(), st, "{what}: process {i}");
        }
    }
}

/// Bully family: everyone starts, the coordinator dies just after its announcement (600 ms)
/// and the next one during the re-election (700 ms), crashes reported: P_{N-3} wins, for
/// N = 3..=10.
pub fn two_coordinator_crashes(cfg: &ElectionConfig) {
    for n in 3..=10 {
        let mut net = Net::new(n, cfg.clone());
        net.detector = true;
        net.start_all();
        net.crash_at(Time::from_millis(600), n - 1);
        net.crash_at(Time::from_millis(700), n - 2);
        net.run();
        assert_leader_settled(&net, n - 3, &format!("n={n}, two crashes"));
    }
}

/// Bully family, with heartbeats on (1 s, error factor 3) and no failure detector: the
/// coordinator's `Alive` keeps followers quiet (9 rounds to N-1 followers in 10 s, no second
/// election), and its silence after a crash (5.2 s) starts a new election.
pub fn heartbeats_keep_followers_and_detect_a_crash(algorithm: Algorithm) {
    let cfg =
        ElectionConfig { alive_interval_ms: 1_000, alive_error_factor: 3, ..ElectionConfig::for_algorithm(algorithm) };
    let n = 6;
    let mut net = Net::new(n, cfg.clone());
    net.start_all();
    net.run_until_quiet(Time::from_millis(10_000));
    assert_leader_settled(&net, n - 1, "heartbeats");
    // Leader at 500 ms; heartbeats at 1.5 s, 2.5 s, ..., 9.5 s: 9 beats, the first and the
    // sixth to the N-1 followers, the other seven to the two successors (`election::beats`).
    assert_eq!((cfg.alive_all_every, cfg.alive_successors), (5, 2), "the defaults this count assumes");
    assert_eq!(net.sent_of("Alive"), 2 * (n as u64 - 1) + 7 * 2);
    assert!(net.started.iter().all(|&s| s == 1), "no election after the first: {:?}", net.started);

    let mut net = Net::new(n, cfg);
    net.start_all();
    net.crash_at(Time::from_millis(5_200), n - 1);
    net.run_until_quiet(Time::from_millis(20_000));
    assert_leader_settled(&net, n - 2, "crash detected by T1");
}

/// Bully family, heartbeats on (100 ms, error factor 3, the default beat plan): a silent
/// coordinator crash is noticed by its two successors after T1, and the highest of them
/// becomes coordinator; the others, which wait five times longer, admit its announcement
/// without an election of their own (questioning it would cost every one of them an election:
/// N² messages). A stale announcement of a successor (delivered after the coordinator's) is
/// admitted by such a follower and corrected by the coordinator's next beat to everyone.
pub fn silent_crash_costs_the_successors_election_only(algorithm: Algorithm) {
    let cfg =
        ElectionConfig { alive_interval_ms: 100, alive_error_factor: 3, ..ElectionConfig::for_algorithm(algorithm) };
    let n = 10;
    let mut net = Net::new(n, cfg.clone());
    net.start_all();
    net.run_until_quiet(Time::from_millis(2_000));
    assert_leader_settled(&net, n - 1, &format!("{algorithm}: first election"));
    let before = net.started.clone();
    net.crash(n - 1);
    let until = net.now + std::time::Duration::from_millis(3_000);
    net.run_until_quiet(until);
    assert_leader_settled(&net, n - 2, &format!("{algorithm}: after the silent crash"));
    let again: Vec<usize> = (0..n - 1).filter(|&i| net.started[i] > before[i]).collect();
    assert!(again.iter().all(|&i| i >= n - 3), "{algorithm}: only the successors hold elections, not {again:?}");

    // A stale announcement of the successor n - 3 reaches process 0 after n - 2's.
    let stale = net.id(n - 3);
    let started = net.started[0];
    net.input(0, Input::Message { from: stale, msg: Message::Coordinator });
    assert_eq!(net.process(0).leader(), Some(stale), "{algorithm}: the successor's claim is admitted");
    let until = net.now + std::time::Duration::from_millis(700);
    net.run_until_quiet(until);
    assert_leader_settled(&net, n - 2, &format!("{algorithm}: after the stale claim"));
    assert_eq!(net.started[0], started, "{algorithm}: corrected by a beat, without an election");
}

/// Bully family, heartbeats on (100 ms, error factor 3): the highest of three processes gets
/// its group (`Input::Membership`, a node's first input from its directory) and nothing else,
/// no `Start` and no message. It arms T1 (orphan: it names no coordinator); when T1 expires
/// it holds an election, nobody answers, and after T2 it announces itself to both lower
/// processes. With no input at all it would do nothing for good.
pub fn group_alone_then_the_orphan_elects_itself(algorithm: Algorithm) {
    let cfg =
        ElectionConfig { alive_interval_ms: 100, alive_error_factor: 3, ..ElectionConfig::for_algorithm(algorithm) };
    let ranks: Vec<Rank> = (1..=3).map(|i| Rank::new(0, NodeId::from_u64(i))).collect();
    let group = Arc::new(Membership::new(ranks.iter().copied()));
    let Some(top) = group.highest() else { panic!("a group of three has a highest member") };
    let mut p = crate::election::AnyElection::new(top, group.clone(), &cfg);
    let fx = feed(&mut p, Input::Membership(group.clone()));
    let t1 = std::time::Duration::from_millis(300);
    assert_eq!(fx, vec![Effect::SetTimer { timer: Timer::T1, after: t1 }], "{algorithm}: the group arms T1");
    let fx = feed(&mut p, Input::Timer(Timer::T1));
    assert!(fx.contains(&Effect::ElectionStarted), "{algorithm}: T1 with no coordinator holds an election: {fx:?}");
    assert!(p.in_election(), "{algorithm}");
    let fx = feed(&mut p, Input::Timer(Timer::T2));
    let announced: Vec<NodeId> = fx
        .iter()
        .filter_map(|e| match e {
            Effect::Send { to, msg: Message::Coordinator } => Some(*to),
            _ => None,
        })
        .collect();
    assert_eq!(announced, vec![ranks[0].id, ranks[1].id], "{algorithm}: announces to both lower processes");
    assert!(fx.contains(&Effect::Leader(top.id)), "{algorithm}");
    assert_eq!(p.leader(), Some(top.id), "{algorithm}");
}

/// Bully family: after an election of 5, a `Coordinator` from process 1 reaches process 3,
/// which holds an election (bullies it); everyone ends naming 4, nothing rejected. Returns
/// the net for the algorithm's own counts.
pub fn coordinator_from_lower_is_bullied(cfg: &ElectionConfig) -> Net {
    let n = 5;
    let mut net = Net::new(n, cfg.clone());
    net.start_all();
    net.run();
    let from = net.id(1);
    net.input(3, Input::Message { from, msg: Message::Coordinator });
    assert!(net.process(3).in_election());
    net.run();
    assert_leader_settled(&net, n - 1, "after the bully");
    assert_eq!(net.rejected, 0);
    net
}

/// Bully family: the coordinator leaves the group (`Input::Membership` without it, after it
/// crashed): the others elect P_{N-2}.
pub fn membership_without_the_coordinator_starts_an_election(cfg: &ElectionConfig) {
    let n = 5;
    let mut net = Net::new(n, cfg.clone());
    net.start_all();
    net.run();
    net.crash(n - 1);
    let smaller = Arc::new(Membership::new((0..n - 1).map(|i| net.rank(i))));
    for i in 0..n - 1 {
        net.input(i, Input::Membership(smaller.clone()));
    }
    net.run();
    assert_leader_settled(&net, n - 2, "membership change");
}

/// Bully family, one lone process P_0 made by `new(rank, group)`: `Input::Membership`
/// replaces the group. A newcomer's `Coordinator` is refused before and taken after; ranks of
/// the old group stay valid.
pub fn membership_update_admits_a_newcomer<E: Election>(new: impl Fn(Rank, Arc<Membership>) -> E) {
    let ranks: Vec<Rank> = (1..=4).map(|i| Rank::new(0, NodeId::from_u64(i))).collect();
    let mut p = new(ranks[0], Arc::new(Membership::new(ranks[..3].iter().copied())));
    let coordinator = Input::Message { from: ranks[3].id, msg: Message::Coordinator };
    let effects = feed(&mut p, coordinator.clone());
    assert!(matches!(effects.as_slice(), [Effect::Rejected { .. }]), "{effects:?}");
    assert_eq!(p.leader(), None);
    assert!(feed(&mut p, Input::Membership(Arc::new(Membership::new(ranks.clone())))).is_empty());
    assert_eq!(feed(&mut p, coordinator), vec![Effect::Leader(ranks[3].id)]);
    assert_eq!((p.leader(), p.state()), (Some(ranks[3].id), "Passive"));
}

/// Bully family, one lone process P_0 made by `new(rank, group)`: timers of a phase already
/// left (or never entered) do nothing.
pub fn stale_timers_are_ignored<E: Election>(new: impl Fn(Rank, Arc<Membership>) -> E) {
    let ranks: Vec<Rank> = (1..=3).map(|i| Rank::new(0, NodeId::from_u64(i))).collect();
    let mut p = new(ranks[0], Arc::new(Membership::new(ranks.clone())));
    for t in [Timer::T1, Timer::T2, Timer::T3, Timer::T4, Timer::Heartbeat, Timer::Lap] {
        assert!(feed(&mut p, Input::Timer(t)).is_empty(), "{t:?}");
    }
    assert_eq!((p.leader(), p.state()), (None, "Passive"));
}

//! Super-peer selection end to end on the simulator: properties that must hold for
//! any seed. Each test prints its seed; replay with `PEERAGE_SEED=<seed>`.

use overlay::superpeer::{Method, SpInput, SuperPeerConfig};
use peerage_experiments::superpeers::faults::Faults;
use peerage_experiments::superpeers::protocol::{run, ProtoParams};
use peerage_experiments::superpeers::world::World;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn seed() -> u64 {
    let s = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("seed {s} (replay with PEERAGE_SEED={s})");
    s
}

fn world(n: usize, seed: u64) -> World {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut w = World::generate(n, 8, 8, seed, &mut rng).expect("model");
    let phase = peerage_experiments::superpeers::world::VivaldiPhase { rounds: 10, fresh: 2, jobs: 1, in_place: false };
    w.run_vivaldi(&phase, &mut rng, || {}).expect("vivaldi");
    w
}

fn params(method: Method, seed: u64) -> ProtoParams {
    let cfg = SuperPeerConfig { method, share: 0.02, cluster_cap: 75, ..Default::default() };
    ProtoParams {
        cfg,
        max_rounds: 80,
        stable_rounds: 5,
        crash_fraction: 0.2,
        recovery_rounds: 60,
        seed,
        faults: Faults::default(),
        diagnose: false,
    }
}

#[test]
fn prefix_share_caps_attachment_and_reelection() {
    check_prefix(seed());
}

/// Seeds that once failed: 32, 37, 38 and 49 left orphans whose caches held only
/// full heads; 77 lost the slot of a crashed head that had no member.
#[test]
fn prefix_regression_seeds() {
    for s in [32, 37, 38, 49, 77] {
        println!("seed {s}");
        check_prefix(s);
    }
}

fn check_prefix(s: u64) {
    let n = 1500;
    let w = world(n, s);
    let out = run(&w, &params(Method::ReservedPrefix, s), |_, _| {}).expect("run");
    // Share within bounds: the estimate is within about ±8% (one sigma) per node, so the
    // number of claimed slots stays within ±40% of the wanted 30.
    let heads = out.heads.len() as f64;
    assert!((18.0..=42.0).contains(&heads), "{heads} super peers for 30 wanted");
    // Caps never exceeded, at any round.
    assert!(out.max_members_seen <= 75, "a cluster reached {}", out.max_members_seen);
    let f = out.failure.expect("failure phase");
    // Every node attached again, no slot lost or doubled, the highest-ranked live member won.
    assert_eq!(f.unattached_after, 0, "{f:?}");
    assert_eq!(f.roles_lost, 0, "{f:?}");
    assert_eq!(f.roles_duplicated, 0, "{f:?}");
    assert!(f.reelected > 0 && f.reelected_highest_rank == f.reelected, "{f:?}");
}

#[test]
fn tokens_are_conserved_under_crashes_and_caps_hold() {
    let s = seed();
    let n = 1500;
    let w = world(n, s);
    let out = run(&w, &params(Method::RepulsionTokens, s), |_, _| {}).expect("run");
    assert!(out.max_members_seen <= 75, "a cluster reached {}", out.max_members_seen);
    let f = out.failure.expect("failure phase");
    // Conservation: every token that existed before the crash exists after it, once.
    assert_eq!(f.roles_lost, 0, "{f:?}");
    assert_eq!(f.roles_duplicated, 0, "{f:?}");
    assert_eq!(f.roles_after, f.roles_before, "{f:?}");
    // Every live node attached again after the crashed clusters re-elected.
    assert_eq!(f.unattached_after, 0, "{f:?}");
}

/// Split offers on (`overlay::superpeer::token` module doc, "Split offers"): the same
/// conservation and attachment as above. A seed that failed in a clean-clone CI (10 of
/// 1,500 nodes unattached after recovery: jumping holders' members found no head with room),
/// then a random one.
#[test]
fn tokens_with_split_offers_are_conserved_and_every_node_attached() {
    for s in [7984502690397827175, seed()] {
        println!("seed {s}");
        let w = world(1500, s);
        let mut p = params(Method::RepulsionTokens, s);
        p.cfg.split.ratio = 0.5;
        let out = run(&w, &p, |_, _| {}).expect("run");
        assert!(out.max_members_seen <= 75, "seed {s}: a cluster reached {}", out.max_members_seen);
        let f = out.failure.expect("failure phase");
        assert_eq!(f.roles_lost, 0, "seed {s}: {f:?}");
        assert_eq!(f.roles_duplicated, 0, "seed {s}: {f:?}");
        assert_eq!(f.roles_after, f.roles_before, "seed {s}: {f:?}");
        assert_eq!(f.unattached_after, 0, "seed {s}: {f:?}");
    }
}

/// A recreated token is a super peer at once, and so is the node its first move hands it
/// to (`overlay::superpeer` node module doc, step 5, "A recreated token's first move keeps
/// the promotion"). Otherwise the winner (a random member of the crashed cluster, rarely
/// where the dead head stood) moves the token at once and the hold time begins again: at
/// N = 5,000 with half the super peers crashed, every recreated token's head stayed
/// unpromoted for 10-25 rounds. Counted are only the holders of the crashed heads' tokens:
/// tokens the crash did not touch may be in their hold time then (0-6 of about 33 heads at
/// the crash, seeds 1-40). The receiver of a first move may move again and start its hold
/// time again, so the test allows one such holder unpromoted in the best of the first three
/// recovery rounds (measured: none over seeds 1-60).
#[test]
fn recreated_tokens_are_super_peers_at_once() {
    let s = seed();
    let w = world(1500, s);
    let out = run(&w, &params(Method::RepulsionTokens, s), |_, _| {}).expect("run");
    let f = out.failure.as_ref().expect("failure phase");
    assert!(f.crashed >= 4, "{f:?}");
    let recover: Vec<_> = out.rounds.iter().filter(|r| r.phase == "recover").collect();
    let unpromoted = recover.iter().take(3).map(|r| r.crashed_tokens_unpromoted).min();
    let firsts: Vec<(u64, u64, u64)> =
        recover.iter().take(6).map(|r| (r.crashed_tokens_unpromoted, r.super_peers, r.heads)).collect();
    assert!(
        unpromoted.is_some_and(|u| u <= 1),
        "{unpromoted:?} holders of crashed tokens not super peers in the best of the first 3 recovery rounds, {} crashed; (those unpromoted, super peers, heads) by round: {firsts:?}",
        f.crashed
    );
}

/// Every summary row of a run, and the summary over seeds, can be recomputed from the
/// per-node files by `scripts/superpeers_check.py` (standard-library Python); a single
/// changed per-node value makes it disagree.
#[test]
fn summary_rows_are_recomputed_from_the_per_node_files() {
    use clap::Parser;
    use overlay::superpeer::record::{NodeRow, Role};
    use peerage_records::{read_csv_gz, CsvGz};
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: peerage_experiments::superpeers::SuperpeersArgs,
    }
    let s = seed() % 1_000_000;
    let dir = tempfile::Builder::new().prefix("peerage-superpeers-files-").tempdir().expect("temp dir");
    let out = dir.path().to_str().expect("utf-8 path");
    let seeds = format!("{s}..{}", s + 2);
    let cli = Cli::parse_from([
        "superpeers",
        "--nodes",
        "300",
        "--seeds",
        &seeds,
        "--share",
        "0.03",
        "--random-draws",
        "12",
        "--vivaldi-rounds",
        "10",
        "--max-rounds",
        "40",
        "--recovery-rounds",
        "10",
        "--no-plots",
        "--out",
        out,
    ]);
    peerage_experiments::superpeers::run(cli.args).expect("run");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/superpeers_check.py");
    let check = || {
        let o = std::process::Command::new("python3").arg(&script).arg(out).output().expect("python3 runs");
        (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let (ok, text) = check();
    assert!(ok, "{text}");
    assert!(text.contains(&format!("superpeers_n300_seeds{s}-{}.csv", s + 1)), "{text}");
    assert!(text.contains(" 0 disagree"), "{text}");
    // One member's RTT a little longer: its placement's mean and ratios no longer agree.
    let path = dir.path().join(format!("superpeers_n300_s{s}_nodes_tokens.csv.gz"));
    let mut rows: Vec<NodeRow> = read_csv_gz(&path).expect("read");
    let m = rows.iter_mut().find(|r| r.role == Role::Member).expect("a member");
    m.rtt_true_ms = m.rtt_true_ms.map(|x| x + 0.5);
    let mut w = CsvGz::create(&path).expect("rewrite");
    for r in &rows {
        w.row(r).expect("row");
    }
    w.finish().expect("close");
    let (ok, text) = check();
    assert!(!ok, "a changed per-node file still agrees:\n{text}");
    assert!(text.contains("tokens rtt_mean_ms"), "{text}");
}

/// The simulator produces every input a node's driver can produce (`SpInput::KINDS` names
/// every variant; a new variant fails here until the simulator makes it), with the fault model
/// on: lookups short, thinned and timed out, connections refused by the nodes' gates, late
/// loops, unfit and drifting coordinates, and members that watch their heads. Both methods (a
/// token `Handover` is the only message reported `Refused`), a crash of a fifth of the heads.
/// Fixed seeds: the test checks coverage, not a random property.
#[test]
fn the_simulator_produces_every_input_the_node_does() {
    let mut seen = std::collections::BTreeMap::<String, u64>::new();
    for (method, s) in [(Method::RepulsionTokens, 5), (Method::RepulsionTokens, 7), (Method::ReservedPrefix, 6)] {
        let w = world(1000, s);
        let mut p = params(method, s);
        p.faults = Faults::swarm();
        let out = run(&w, &p, |_, _| {}).expect("run");
        // Every connection the gates opened is counted once by its cause, and the rounds'
        // new connections add up to no more than that.
        let c = out.connections.as_ref().expect("the gates count connections");
        assert_eq!(c.established_by.values().sum::<u64>(), c.established, "{:?}", c.established_by);
        let per_round: u64 = out.rounds.iter().map(|r| r.new_connections).sum();
        assert!(per_round > 0 && per_round <= c.established, "{per_round} of {}", c.established);
        for (k, c) in out.inputs_by_kind {
            *seen.entry(k).or_default() += c;
        }
    }
    println!("{seen:?}");
    let missing: Vec<&str> =
        SpInput::KINDS.iter().copied().filter(|k| seen.get(*k).copied().unwrap_or(0) == 0).collect();
    assert!(missing.is_empty(), "the simulator never produced {missing:?}");
}

/// `--diagnose`'s classes of members far from their nearest head cover every attached member
/// once, and cost nothing without it.
#[test]
fn the_far_member_classes_cover_every_member() {
    let s = seed();
    let n = 600;
    let w = world(n, s);
    let plain =
        run(&w, &ProtoParams { crash_fraction: 0.0, ..params(Method::RepulsionTokens, s) }, |_, _| {}).expect("run");
    assert!(plain.far.is_none());
    let p = ProtoParams { crash_fraction: 0.0, diagnose: true, ..params(Method::RepulsionTokens, s) };
    let out = run(&w, &p, |_, _| {}).expect("run");
    let far = out.far.expect("classes with diagnose");
    let members = out.head_of.iter().enumerate().filter(|(i, h)| **h != u32::MAX && **h as usize != *i).count();
    assert!(members > n / 2, "{members} members of {n}");
    assert_eq!(far.members, members);
    assert_eq!(far.classes.values().map(|c| c.0).sum::<usize>(), members, "{:?}", far.classes);
    assert!(far.classes.values().all(|c| c.1.is_finite() && c.1 >= 0.0), "{:?}", far.classes);
    // The same run with and without the diagnosis: the diagnosis only reads.
    assert_eq!(plain.head_of, out.head_of);
}

/// Lookups that take time (`Faults::lookup_ms`): each answer comes after its drawn time and
/// after the node's earlier lookups, so the mean wait is at least the draws' mean; the
/// protocol still converges and keeps every role through a crash. Without the delay no wait
/// is reported.
#[test]
fn slow_lookups_answer_late_and_the_protocol_still_converges() {
    let s = seed();
    let n = 600;
    let w = world(n, s);
    for method in [Method::ReservedPrefix, Method::RepulsionTokens] {
        let mut p = ProtoParams { max_rounds: 300, recovery_rounds: 120, ..params(method, s) };
        let fast = run(&w, &p, |_, _| {}).expect("run");
        assert!(fast.lookup_wait_ms.is_none(), "{method:?}: a wait without the fault model");
        p.faults = Faults { lookup_ms: 1500.0, ..Faults::default() };
        let out = run(&w, &p, |_, _| {}).expect("run");
        let wait = out.lookup_wait_ms.expect("waits under lookup_ms");
        println!(
            "{method:?}: waits {wait:?}, converged at {:?} (without the delay {:?})",
            out.convergence_s, fast.convergence_s
        );
        assert!(wait.count as u64 >= out.lookups / 2, "{method:?}: {} waits of {} lookups", wait.count, out.lookups);
        // Exponential draws of mean 1.5 s: over hundreds of lookups the mean lies well above
        // 1.2 s, and the waits behind earlier lookups only add.
        assert!(wait.mean >= 1200.0 && wait.mean < 20_000.0, "{method:?}: mean wait {} ms", wait.mean);
        assert!(wait.p95 > wait.p50, "{method:?}: {wait:?}");
        assert!(out.convergence_s.is_some(), "{method:?}: no convergence with slow lookups");
        let f = out.failure.expect("a crash phase");
        assert_eq!((f.roles_lost, f.roles_duplicated, f.unattached_after), (0, 0, 0), "{method:?}: {f:?}");
    }
}

/// `--node-ids`: the world takes given ids by index, and refuses a wrong count or two ids
/// that its index cannot tell apart, changing nothing.
#[test]
fn a_world_takes_given_ids_or_refuses_them_whole() {
    let s = seed();
    let mut w = world(50, s);
    let before = w.ids.clone();
    let ids: Vec<overlay::NodeId> = (0..50u64).map(|i| overlay::NodeId::hash_of(&i.to_le_bytes())).collect();
    assert!(w.set_ids(ids[..49].to_vec()).is_err(), "49 ids for 50 nodes");
    let mut twice = ids.clone();
    twice[7] = twice[3];
    assert!(w.set_ids(twice).is_err(), "a repeated id");
    assert_eq!(w.ids, before, "a refused set changed the world");
    w.set_ids(ids.clone()).expect("50 distinct ids");
    assert_eq!(w.ids, ids);
    assert!(ids.iter().enumerate().all(|(i, id)| w.index.get(id) == Some(i as u32)));
    assert!(before.iter().all(|id| w.index.get(id).is_none()), "an old id still maps");
}

/// Nodes that start late (`Faults::start_spread_s`) and coordinates still being learned
/// (`coord_noise_ms`, `coord_learn_s`): the run cannot converge before the last node started,
/// still converges, and keeps every role through a crash.
#[test]
fn late_starts_and_learning_coordinates_still_converge() {
    let s = seed();
    let n = 600;
    let w = world(n, s);
    for method in [Method::ReservedPrefix, Method::RepulsionTokens] {
        let mut p = ProtoParams { max_rounds: 300, recovery_rounds: 120, ..params(method, s) };
        p.faults = Faults { start_spread_s: 30.0, coord_noise_ms: 40.0, coord_learn_s: 40.0, ..Faults::default() };
        let out = run(&w, &p, |_, _| {}).expect("run");
        println!("{method:?}: converged at {:?}", out.convergence_s);
        let conv = out.convergence_s.expect("converges with late starts");
        // 600 starts drawn uniformly over 30 rounds: the last one after round 27 but with
        // probability 0.9^600.
        assert!(conv >= 27.0, "{method:?}: converged at {conv} s, before the last node started");
        let f = out.failure.expect("a crash phase");
        assert_eq!((f.roles_lost, f.roles_duplicated, f.unattached_after), (0, 0, 0), "{method:?}: {f:?}");
    }
}

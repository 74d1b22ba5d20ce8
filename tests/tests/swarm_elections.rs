//! Real libp2p swarms in one process (memory transport): every election algorithm makes
//! every node name the same leader, and the survivors agree on a new leader after the leader
//! crashes.
//!
//! Nodes get priority = index, so the expected leader is known: the last node (and, after it
//! crashes, the one before). The swarm's random choices (ports, bootstrap peers) come from a
//! seed that is printed; replay with `PEERAGE_SEED`.

mod common;

use common::seed;
use overlay::{Algorithm, ElectionConfig};
use peerage_node::{LocalSwarm, LocalSwarmConfig};
use std::time::Duration;

const NODES: usize = 12;
const CONVERGE: Duration = Duration::from_secs(60);

fn config(algorithm: Algorithm, seed: u64) -> LocalSwarmConfig {
    let mut c = LocalSwarmConfig::new(NODES, ElectionConfig::for_algorithm(algorithm), seed);
    c.priorities = Some((0..NODES as u64).collect());
    c.template = common::template(2_000);
    c
}

async fn elects_highest(algorithm: Algorithm) {
    let seed = seed();
    let swarm = LocalSwarm::start(&config(algorithm, seed)).await.expect("swarm starts");
    let leader = swarm.wait_agreement(CONVERGE, None).await;
    let snaps = swarm.snapshots();
    let named: Vec<Option<String>> = snaps.iter().map(|(_, s)| s.leader.clone()).collect();
    assert!(leader.is_some(), "{algorithm}: no agreement within {CONVERGE:?}; leaders named: {named:?}");
    assert_eq!(
        leader.as_deref(),
        Some(swarm.node_id(NODES - 1)),
        "{algorithm}: every node agreed, but not on the highest-priority node"
    );
    common::assert_no_bans(&swarm);
    swarm.shutdown().await;
}

async fn recovers_from_leader_crash(algorithm: Algorithm) {
    let seed = seed();
    let mut swarm = LocalSwarm::start(&config(algorithm, seed)).await.expect("swarm starts");
    let first = swarm.wait_agreement(CONVERGE, None).await.expect("first agreement");
    assert_eq!(first, swarm.node_id(NODES - 1));
    swarm.crash(NODES - 1);
    let second = swarm.wait_agreement(CONVERGE, None).await;
    let named: Vec<Option<String>> = swarm.snapshots().iter().map(|(_, s)| s.leader.clone()).collect();
    assert_eq!(
        second.as_deref(),
        Some(swarm.node_id(NODES - 2)),
        "{algorithm}: after the leader crashed the survivors must agree on the next highest; named: {named:?}"
    );
    common::assert_no_bans(&swarm);
    swarm.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bully_elects_one_leader_everywhere() {
    elects_highest(Algorithm::Bully).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_bully_elects_one_leader_everywhere() {
    elects_highest(Algorithm::FastBully).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_elects_one_leader_everywhere() {
    elects_highest(Algorithm::Ring).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chang_roberts_elects_one_leader_everywhere() {
    elects_highest(Algorithm::ChangRoberts).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn villadangos_elects_one_leader_everywhere() {
    elects_highest(Algorithm::Villadangos).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_elects_one_leader_everywhere() {
    elects_highest(Algorithm::Echo).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bully_survivors_agree_after_leader_crash() {
    recovers_from_leader_crash(Algorithm::Bully).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_bully_survivors_agree_after_leader_crash() {
    recovers_from_leader_crash(Algorithm::FastBully).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_survivors_agree_after_leader_crash() {
    recovers_from_leader_crash(Algorithm::Ring).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chang_roberts_survivors_agree_after_leader_crash() {
    recovers_from_leader_crash(Algorithm::ChangRoberts).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn villadangos_survivors_agree_after_leader_crash() {
    recovers_from_leader_crash(Algorithm::Villadangos).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_survivors_agree_after_leader_crash() {
    recovers_from_leader_crash(Algorithm::Echo).await;
}

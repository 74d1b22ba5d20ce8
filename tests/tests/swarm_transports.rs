//! A real libp2p swarm in one process over TCP + noise + yamux on 127.0.0.1 (`LocalSwarm`
//! with `TransportKind::TcpQuic`, what `peerage swarm --transport tcp` runs; the other swarm
//! tests use the in-process memory transport): every node names the same leader, the
//! highest-priority node; the leader is then crashed (its sockets close) and the survivors
//! agree on the next highest. QUIC is tested with real processes in
//! `node/tests/quic_processes.rs` (`peerage swarm` has no QUIC option).
//!
//! The swarm's random choices come from a seed that is printed; replay with `PEERAGE_SEED`.

mod common;

use common::seed;
use overlay::{Algorithm, ElectionConfig};
use peerage_node::{LocalSwarm, LocalSwarmConfig, TransportKind};
use std::time::Duration;

const NODES: usize = 6;
const CONVERGE: Duration = Duration::from_secs(45);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_swarm_elects_one_leader_and_re_elects_after_a_crash() {
    let seed = seed();
    let mut c = LocalSwarmConfig::new(NODES, ElectionConfig::for_algorithm(Algorithm::Bully), seed);
    c.transport = TransportKind::TcpQuic;
    c.priorities = Some((0..NODES as u64).collect());
    c.template = common::template(2_000);
    let mut swarm = LocalSwarm::start(&c).await.expect("TCP swarm starts");
    for i in 0..NODES {
        let a = swarm.addr(i).to_string();
        assert!(a.starts_with("/ip4/127.0.0.1/tcp/"), "node {i} is not on loopback TCP: {a}");
    }
    let leader = swarm.wait_agreement(CONVERGE, None).await;
    let named: Vec<Option<String>> = swarm.snapshots().into_iter().map(|(_, s)| s.leader).collect();
    assert_eq!(leader.as_deref(), Some(swarm.node_id(NODES - 1)), "TCP: no agreement on the highest; named {named:?}");
    swarm.crash(NODES - 1);
    let next = swarm.wait_agreement(CONVERGE, None).await;
    let named: Vec<Option<String>> = swarm.snapshots().into_iter().map(|(_, s)| s.leader).collect();
    assert_eq!(next.as_deref(), Some(swarm.node_id(NODES - 2)), "TCP: after the crash; named {named:?}");
    common::assert_no_bans(&swarm);
    swarm.shutdown().await;
}

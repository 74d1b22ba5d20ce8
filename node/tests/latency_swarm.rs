//! A small in-process swarm with emulated Internet latency (`node/src/net/latency_transport.rs`): every
//! node learns a Vivaldi coordinate from ping (`node/src/coords/driver.rs`), and the coordinates
//! predict the model's RTTs. Fails if pings do not feed Vivaldi, if coordinates are not
//! exchanged, or if the emulated delays are not what the model says (then the coordinates
//! would predict something else). Loopback only: the memory transport, and TCP on 127.0.0.1.

use peerage_node::coords::report::pair_errors;
use peerage_node::LocalSwarm;
use peerage_node::LocalSwarmConfig;
use peerage_node::TransportKind;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinates_from_emulated_pings_predict_the_model() {
    let seed = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(21u64);
    // 150 samples: after 60 this swarm's median error is 0.13-0.28 on a quiet machine and
    // reached 0.356 in CI, over the bound, with the tests running side by side.
    emulated_swarm_learns_coordinates(TransportKind::Memory, 10, 150, seed).await;
}

/// The same over TCP on loopback (`latency_transport::tcp_transport`): the delay sits between
/// noise and yamux there too, so pings over real sockets measure the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_swarm_with_emulated_latency_learns_coordinates() {
    let seed = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(22u64);
    // 150 samples: without Vivaldi's adjustment term (`coords_driver::node_vivaldi_config`)
    // this swarm's median error after 60 samples is 0.27-0.35, near the bound; after 150 it
    // was 0.13-0.27 in 4 runs.
    emulated_swarm_learns_coordinates(TransportKind::TcpQuic, 10, 150, seed).await;
}

async fn emulated_swarm_learns_coordinates(transport: TransportKind, n: usize, want_samples: u64, seed: u64) {
    eprintln!("{transport:?}, {n} nodes, seed {seed} (replay with PEERAGE_SEED={seed})");
    let algorithm: overlay::Algorithm = "bully".parse().unwrap();
    let mut cfg = LocalSwarmConfig::new(n, overlay::ElectionConfig::for_algorithm(algorithm), seed);
    cfg.transport = transport;
    cfg.latency_seed = Some(seed);
    cfg.template.timing.ping_s = 1;
    let swarm = LocalSwarm::start(&cfg).await.unwrap();
    let net = swarm.latency_net().expect("latency emulation is on").clone();
    // Generous: on a loaded machine the lateness gate drops many samples (CI runs tests
    // side by side on 2 cores).
    let until = Instant::now() + Duration::from_secs(300);
    loop {
        let snaps = swarm.snapshots();
        let least = snaps.iter().map(|(_, s)| s.vivaldi_samples).min().unwrap_or(0);
        if least >= want_samples {
            break;
        }
        assert!(
            Instant::now() < until,
            "after 300 s some node has only {least} Vivaldi samples (want {want_samples}); peers: {:?}",
            snaps.iter().map(|(_, s)| s.peers).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let coords: Vec<_> = swarm
        .snapshots()
        .into_iter()
        .map(|(i, s)| (i, s.coordinate.expect("every node reports a coordinate")))
        .collect();
    let (rel, abs, truth) = pair_errors(&net, &coords).unwrap();
    let median = rel[rel.len() / 2];
    eprintln!(
        "{} pairs: median relative error {median:.3}, median absolute error {:.1} ms, median true RTT {:.1} ms; lateness {:?}",
        rel.len(),
        abs[abs.len() / 2],
        truth[truth.len() / 2],
        net.lateness()
    );
    // A coordinate at the origin predicts ~0 (relative error ~1); a coordinate learned from
    // undelayed loopback pings would predict ~0 too.
    assert!(median < 0.35, "median relative error {median:.3} (want < 0.35)");
    assert!(net.delayed_connections() > 0, "no connection went through the emulation");
    swarm.shutdown().await;
}

//! A small in-process swarm with emulated Internet latency (`latency_transport.rs`): every
//! node learns a Vivaldi coordinate from ping (`coords_driver.rs`), and the coordinates
//! predict the model's RTTs. Fails if pings do not feed Vivaldi, if coordinates are not
//! exchanged, or if the emulated delays are not what the model says (then the coordinates
//! would predict something else). Loopback only (memory transport).

use peerage_node::coords_report::pair_errors;
use peerage_node::LocalSwarm;
use peerage_node::LocalSwarmConfig;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinates_from_emulated_pings_predict_the_model() {
    let seed = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(21u64);
    eprintln!("seed {seed} (replay with PEERAGE_SEED={seed})");
    let n = 10;
    let algorithm: overlay::Algorithm = "bully".parse().unwrap();
    let mut cfg = LocalSwarmConfig::new(n, overlay::ElectionConfig::for_algorithm(algorithm), seed);
    cfg.latency_seed = Some(seed);
    cfg.template.timing.ping_s = 1;
    let swarm = LocalSwarm::start(&cfg).await.unwrap();
    let net = swarm.latency_net().expect("latency emulation is on").clone();
    let want_samples = 60;
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let snaps = swarm.snapshots();
        let least = snaps.iter().map(|(_, s)| s.vivaldi_samples).min().unwrap_or(0);
        if least >= want_samples {
            break;
        }
        assert!(
            Instant::now() < until,
            "after 120 s some node has only {least} Vivaldi samples (want {want_samples}); peers: {:?}",
            snaps.iter().map(|(_, s)| s.peers).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let coords: Vec<_> =
        swarm.snapshots().into_iter().map(|(i, s)| (i, s.coordinate.expect("every node reports a coordinate"))).collect();
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
    swarm.shutdown().await;
}

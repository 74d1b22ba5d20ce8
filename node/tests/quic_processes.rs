//! A QUIC-only swarm of real `peerage run` processes on 127.0.0.1: every node listens only on
//! `/udp/0/quic-v1` and bootstraps from QUIC addresses; they all name the highest-priority
//! node; libp2p's metrics on node 0 show its connections are QUIC (and none TCP); the leader is
//! killed with SIGKILL and the survivors agree on the next highest.
//!
//! Bootstrap choices come from a printed seed; replay with `PEERAGE_SEED`.

mod common;

use common::{fast_config, free_port, http_get, start, wait_until, Peerage, Scratch};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::collections::BTreeMap;
use std::time::Duration;

const NODES: usize = 5;
const WAIT: Duration = Duration::from_secs(45);

fn spawn(cfg: &str, i: usize, bootstrap: &[String], metrics: Option<&str>) -> Peerage {
    let prio = i.to_string();
    let mut args = vec!["--log", "warn", "run", "--config", cfg, "--listen", "/ip4/127.0.0.1/udp/0/quic-v1"];
    args.extend(["--priority", &prio]);
    for b in bootstrap {
        args.extend(["--bootstrap", b.as_str()]);
    }
    if let Some(m) = metrics {
        args.extend(["--metrics", m]);
    }
    start(&args)
}

/// The leader every process names, if they all name the same one.
fn agreed(procs: &BTreeMap<usize, Peerage>) -> Option<String> {
    let named: Vec<Option<String>> = procs.values().map(Peerage::leader).collect();
    let first = named.first()?.clone()?;
    named.iter().all(|l| l.as_deref() == Some(first.as_str())).then_some(first)
}

fn describe(procs: &BTreeMap<usize, Peerage>) -> String {
    procs.iter().map(|(i, p)| format!("node {i} names {:?}\n", p.leader())).collect()
}

#[test]
fn quic_processes_agree_and_re_elect_after_sigkill() {
    let seed: u64 = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("seed {seed} (replay with PEERAGE_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = Scratch::new("quic");
    let cfg = dir.write("node.toml", &fast_config("algorithm = \"bully\""));
    let metrics = format!("127.0.0.1:{}", free_port());

    let mut procs = BTreeMap::new();
    let mut addrs: Vec<String> = Vec::new();
    for i in 0..NODES {
        let mut boot = addrs.clone();
        boot.shuffle(&mut rng);
        boot.truncate(2);
        let p = spawn(&cfg, i, &boot, (i == 0).then_some(metrics.as_str()));
        let addr = p.wait_for("a QUIC listen address", WAIT, Peerage::quic_addr);
        assert!(addr.starts_with("/ip4/127.0.0.1/udp/"), "{addr}");
        assert!(p.tcp_addr().is_none(), "node {i} listens on TCP too");
        addrs.push(addr);
        procs.insert(i, p);
    }
    let ids: Vec<String> = procs.values().map(|p| p.wait_for("the started line", WAIT, Peerage::node_id)).collect();

    let leader = wait_until("agreement on the highest node", WAIT, || agreed(&procs).filter(|l| *l == ids[NODES - 1]));
    assert_eq!(leader, ids[NODES - 1], "{}", describe(&procs));

    // Node 0's connections, as libp2p's metrics label them: QUIC only.
    let (code, body) = http_get(&metrics, "/metrics").expect("scrape node 0");
    assert_eq!(code, 200);
    let established: Vec<&str> =
        body.lines().filter(|l| l.starts_with("libp2p_swarm_connections_established_total{")).collect();
    assert!(!established.is_empty(), "node 0 counted no connection:\n{body}");
    assert!(
        established.iter().all(|l| l.contains("quic") && !l.contains("tcp")),
        "node 0 has non-QUIC connections: {established:?}"
    );

    // SIGKILL the leader (Child::kill sends SIGKILL on Unix); the next highest takes over.
    drop(procs.remove(&(NODES - 1)));
    let next = wait_until("re-election after SIGKILL", WAIT, || agreed(&procs).filter(|l| *l != leader));
    assert_eq!(next, ids[NODES - 2], "{}", describe(&procs));
    for p in procs.values() {
        assert!(p.bad_lines().is_empty(), "{:?}", p.bad_lines());
        assert!(!p.stderr().contains("panicked"), "{}", p.stderr());
    }
}

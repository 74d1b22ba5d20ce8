//! The Prometheus endpoint of `peerage run --metrics`: scraped over plain HTTP from a real
//! process on 127.0.0.1, it serves Peerage's own metrics (elections started and won, election
//! messages by direction and type, the current leader, peers, members) and libp2p's
//! (`libp2p_*`), and they change as elections happen:
//! 1. node A alone elects itself: `is_leader` 1, `leader{A}` 1, started and won >= 1, no peers;
//! 2. node B (higher priority) joins: A names B (`leader{B}` 1, `leader{A}` 0, `is_leader` 0),
//!    has a peer, has received a `Coordinator`, and libp2p counted an established connection;
//! 3. B is killed (SIGKILL): A holds an election and wins it again (started and won grow).

mod common;

use common::{fast_config, free_port, http_get, run_node, wait_until, Peerage, Scratch};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(40);

/// One scrape: (metric name, label set as text, value) per sample line.
struct Scrape(Vec<(String, String, f64)>);

impl Scrape {
    fn get(addr: &str) -> Option<Scrape> {
        let (code, body) = http_get(addr, "/metrics").ok()?;
        assert_eq!(code, 200, "metrics endpoint answered {code}: {body}");
        assert!(body.trim_end().ends_with("# EOF"), "not OpenMetrics text (no '# EOF'): {body}");
        let mut samples = Vec::new();
        for line in body.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("bad sample line {line:?}"));
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("bad sample value in {line:?}"));
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n.to_string(), l.trim_end_matches('}').to_string()),
                None => (series.to_string(), String::new()),
            };
            samples.push((name, labels, value));
        }
        Some(Scrape(samples))
    }

    /// Sum of the samples named `name` whose labels contain every one of `labels`.
    fn sum(&self, name: &str, labels: &[&str]) -> Option<f64> {
        let hits: Vec<f64> = self
            .0
            .iter()
            .filter(|(n, l, _)| n == name && labels.iter().all(|want| l.contains(want)))
            .map(|(_, _, v)| *v)
            .collect();
        (!hits.is_empty()).then(|| hits.iter().sum())
    }

    fn value(&self, name: &str, labels: &[&str]) -> f64 {
        self.sum(name, labels).unwrap_or_else(|| panic!("metric {name} {labels:?} missing; have: {:?}", self.names()))
    }

    fn names(&self) -> Vec<&str> {
        let mut n: Vec<&str> = self.0.iter().map(|(n, _, _)| n.as_str()).collect();
        n.dedup();
        n
    }

    fn leader_gauge(&self, node_id: &str) -> Option<f64> {
        self.sum("peerage_leader", &[&format!("leader=\"{node_id}\"")])
    }
}

fn scrape_until(addr: &str, what: &str, f: impl Fn(&Scrape) -> bool) -> Scrape {
    wait_until(what, WAIT, || Scrape::get(addr).filter(|s| f(s)))
}

#[test]
fn metrics_are_served_and_follow_the_elections() {
    let dir = Scratch::new("metrics");
    let cfg = dir.write("node.toml", &fast_config("algorithm = \"bully\""));
    let metrics = format!("127.0.0.1:{}", free_port());
    let a = run_node(&["--config", &cfg, "--priority", "0", "--metrics", &metrics]);
    let a_id = a.wait_for("A's started line", WAIT, Peerage::node_id);
    let a_addr = a.wait_for("A's address", WAIT, Peerage::tcp_addr);

    // 1. Alone, A elects itself.
    let s1 = scrape_until(&metrics, "A to lead alone", |s| s.sum("peerage_is_leader", &[]) == Some(1.0));
    assert_eq!(s1.leader_gauge(&a_id), Some(1.0), "leader gauge names A");
    assert!(s1.value("peerage_elections_started_total", &[]) >= 1.0);
    assert!(s1.value("peerage_elections_won_total", &[]) >= 1.0);
    assert_eq!(s1.value("peerage_peers", &[]), 0.0);
    assert!(s1.value("peerage_leader_changes_total", &[]) >= 1.0);
    let libp2p: Vec<&str> = s1.names().into_iter().filter(|n| n.starts_with("libp2p_")).collect();
    assert!(!libp2p.is_empty(), "no libp2p metrics: {:?}", s1.names());
    let conns_before = s1.sum("libp2p_swarm_connections_established_total", &[]).unwrap_or(0.0);

    // 2. B joins with a higher priority and takes over.
    let b = run_node(&["--config", &cfg, "--priority", "1", "--bootstrap", &a_addr]);
    let b_id = b.wait_for("B's started line", WAIT, Peerage::node_id);
    let s2 = scrape_until(&metrics, "A to name B", |s| s.leader_gauge(&b_id) == Some(1.0));
    assert_eq!(s2.value("peerage_is_leader", &[]), 0.0);
    assert_eq!(s2.leader_gauge(&a_id), Some(0.0), "A's own leader gauge is cleared");
    assert!(s2.value("peerage_peers", &[]) >= 1.0);
    assert_eq!(s2.value("peerage_members", &[]), 2.0);
    assert!(
        s2.value("peerage_election_messages_total", &["direction=\"received\"", "kind=\"Coordinator\""]) >= 1.0,
        "A received B's Coordinator"
    );
    assert!(s2.value("peerage_leader_changes_total", &[]) > s1.value("peerage_leader_changes_total", &[]));
    assert!(
        s2.value("libp2p_swarm_connections_established_total", &[]) > conns_before,
        "libp2p counted the connection from B"
    );

    // 3. B dies; A holds an election and wins.
    drop(b);
    let s3 =
        scrape_until(&metrics, "A to lead again after B was killed", |s| s.sum("peerage_is_leader", &[]) == Some(1.0));
    assert_eq!(s3.leader_gauge(&a_id), Some(1.0));
    assert_eq!(s3.leader_gauge(&b_id), Some(0.0));
    assert!(
        s3.value("peerage_elections_started_total", &[]) > s2.value("peerage_elections_started_total", &[]),
        "A started an election after B died"
    );
    assert!(s3.value("peerage_elections_won_total", &[]) > s2.value("peerage_elections_won_total", &[]));
    assert!(a.bad_lines().is_empty(), "{:?}", a.bad_lines());
}

#[test]
fn metrics_address_in_use_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let mut p = run_node(&["--metrics", &addr]);
    let status = p.wait_exit(Duration::from_secs(30));
    assert!(!status.success());
    let err = p.stderr();
    assert!(err.contains("cannot serve metrics") && err.contains(&addr), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

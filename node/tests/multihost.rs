//! Beyond one process: shards of one swarm in separate processes and their merged report,
//! the netns testbed (root: CI runs as root), and the generated cluster manifests.

use peerage_node::cli::{Cli, Command as CliCommand, ReportCommand};
use peerage_node::swarm::merge::schema_conflicts;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_peerage");

fn seed() -> u64 {
    let seed = std::env::var("PEERAGE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(41);
    eprintln!("seed {seed} (replay with PEERAGE_SEED={seed})");
    seed
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

/// A free port block for a run's nodes (shards listen at base + index).
fn port_base(seed: u64) -> u16 {
    30_000 + (seed % 300) as u16 * 100
}

/// Three shards of a 9-node swarm, each its own process on loopback, give the report a
/// single process gives for the same seed: the same schema, the same node ids at every index,
/// the same bully leader (the highest-ranked id), every node's row.
#[test]
fn three_shard_processes_make_the_report_one_process_makes() {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let common = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = [
            "swarm",
            "--nodes",
            "9",
            "--seed",
            &seed.to_string(),
            "--settle-s",
            "1",
            "--measure-s",
            "1",
            "--quiet",
            "--timeout-s",
            "60",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let single = dir.path().join("single.json");
    let st = Command::new(BIN)
        .args(common(&["--transport", "tcp", "--out", single.to_str().unwrap()]))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "single-process swarm failed");
    let control = format!("unix:{}", dir.path().join("c.sock").display());
    let base = port_base(seed).to_string();
    let mut children = Vec::new();
    for i in (0..3).rev() {
        let part = dir.path().join(format!("part-{i}.json"));
        let shard = format!("{i}/3");
        children.push(
            Command::new(BIN)
                .args(common(&[
                    "--shard",
                    &shard,
                    "--control",
                    &control,
                    "--port-base",
                    &base,
                    "--out",
                    part.to_str().unwrap(),
                ]))
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
    }
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a shard failed");
    }
    let merged_path = dir.path().join("merged.json");
    let st = Command::new(BIN)
        .args([
            "report",
            "merge",
            dir.path().join("part-2.json").to_str().unwrap(),
            dir.path().join("part-0.json").to_str().unwrap(),
        ])
        .args([dir.path().join("part-1.json").to_str().unwrap(), "--out", merged_path.to_str().unwrap()])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "merge failed");
    let one = read_json(&single);
    let merged = read_json(&merged_path);
    let conflicts = schema_conflicts(&one, &merged);
    assert!(conflicts.is_empty(), "schemas differ: {conflicts:?}");
    assert_eq!(merged["shards"], 3);
    assert_eq!(one["shards"], 1);
    let ids = |r: &Value| -> Vec<String> {
        r["node_rows"].as_array().unwrap().iter().map(|n| n["node_id"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(ids(&one).len(), 9);
    assert_eq!(ids(&one), ids(&merged), "same seed, same keys at every index");
    let shards: Vec<u64> =
        merged["node_rows"].as_array().unwrap().iter().map(|n| n["shard"].as_u64().unwrap()).collect();
    assert_eq!(shards, vec![0, 1, 2, 0, 1, 2, 0, 1, 2]);
    assert!(one["leader"].is_string() && merged["leader"].is_string(), "both agree on a leader");
    assert_eq!(one["leader"], merged["leader"], "bully elects the highest id: the same in both");
    assert_eq!(merged["rows_summary"]["alive"], 9);
    // A part missing is refused.
    let st = Command::new(BIN)
        .args(["report", "merge", dir.path().join("part-0.json").to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(!st.success(), "a merge with shards missing must fail");
}

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root && std::env::var("PEERAGE_NO_NETNS").is_ok() {
        eprintln!("not root and PEERAGE_NO_NETNS set: skipping a netns test");
        return false;
    }
    assert!(root, "the netns testbed needs root (CI runs as root); PEERAGE_NO_NETNS=1 skips these tests");
    true
}

fn testbed_namespaces(tag: &str) -> Vec<String> {
    peerage_node::testbed::namespaces().unwrap().into_iter().filter(|n| n.contains(tag)).collect()
}

/// Hosts reach each other over their veths; a cut link drops traffic both ways and a heal
/// restores it; a host reaches nothing outside the testbed; tear-down leaves nothing.
#[test]
fn testbed_hosts_connect_cut_heal_and_vanish() {
    if !root() {
        return;
    }
    use peerage_node::testbed::Testbed;
    use std::net::{SocketAddr, TcpListener, TcpStream};
    let mut tb = Testbed::create(3).unwrap();
    let tag = format!("{}{}-", peerage_node::testbed::PREFIX, tb.tag());
    assert_eq!(testbed_namespaces(&tag).len(), 4, "three hosts and the switch");
    let (a0, a2) = (tb.addr(0), tb.addr(2));
    // A listener in host 0 that accepts whatever comes.
    let listener = tb
        .in_host(0, move || {
            let l = TcpListener::bind((a0, 7000)).unwrap();
            l.set_nonblocking(false).unwrap();
            l
        })
        .unwrap()
        .join()
        .unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            drop(s);
        }
    });
    let connect_from = |tb: &Testbed, h: usize, to: SocketAddr| -> bool {
        tb.in_host(h, move || TcpStream::connect_timeout(&to, Duration::from_millis(700)).is_ok())
            .unwrap()
            .join()
            .unwrap()
    };
    let target: SocketAddr = (a0, 7000).into();
    assert!(connect_from(&tb, 2, target), "host 2 reaches host 0");
    assert!(connect_from(&tb, 1, target), "host 1 reaches host 0");
    tb.cut(0, 2).unwrap();
    assert!(!connect_from(&tb, 2, target), "the cut link drops host 2's traffic to host 0");
    assert!(connect_from(&tb, 1, target), "other links stay up");
    tb.heal(0, 2).unwrap();
    assert!(connect_from(&tb, 2, target), "the heal restores the link");
    // Nothing beyond the testbed: no route out of a host.
    let out: SocketAddr = "192.0.2.1:80".parse().unwrap();
    assert!(!connect_from(&tb, 1, out), "a host has no route outside the testbed");
    let _ = a2;
    tb.teardown(Duration::from_secs(2)).unwrap();
    assert!(testbed_namespaces(&tag).is_empty(), "tear-down removes every namespace");
}

/// `peerage testbed exec` interrupted by Ctrl-C (SIGINT) stops what ran in its hosts and
/// removes every namespace it made.
#[test]
fn testbed_ctrl_c_leaves_nothing_behind() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let before: Vec<String> = peerage_node::testbed::namespaces().unwrap();
    let mut child = Command::new(BIN)
        .args(["testbed", "exec", "--hosts", "2", "--logs", dir.path().to_str().unwrap(), "--", "sleep", "600"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for its namespaces and their sleeping processes.
    let until = Instant::now() + Duration::from_secs(20);
    let (ours, pids) = loop {
        let now: Vec<String> = peerage_node::testbed::namespaces()
            .unwrap()
            .into_iter()
            .filter(|n| !before.contains(n) && n.starts_with(peerage_node::testbed::PREFIX))
            .collect();
        let pids: Vec<i32> = now.iter().flat_map(|n| peerage_node::testbed::pids_in(n)).collect();
        if now.len() == 3 && pids.len() >= 2 {
            break (now, pids);
        }
        assert!(Instant::now() < until, "the testbed did not come up: {now:?}, pids {pids:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert!(st.success(), "the testbed should tear down and exit cleanly after Ctrl-C: {st}");
            break;
        }
        assert!(Instant::now() < until, "the testbed did not exit after Ctrl-C");
        std::thread::sleep(Duration::from_millis(100));
    }
    let left: Vec<String> =
        peerage_node::testbed::namespaces().unwrap().into_iter().filter(|n| ours.contains(n)).collect();
    assert!(left.is_empty(), "namespaces left: {left:?}");
    for p in pids {
        assert!(!Path::new(&format!("/proc/{p}")).exists(), "process {p} still runs");
    }
}

fn yaml_docs(text: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(text).map(|d| Value::deserialize(d).unwrap()).filter(|v| !v.is_null()).collect()
}

fn parse_swarm(args: &[String]) -> peerage_node::cli::SwarmArgs {
    let argv = std::iter::once("peerage".to_string()).chain(args.iter().cloned());
    match Cli::try_parse_from(argv).unwrap().command {
        CliCommand::Swarm(s) => s,
        other => panic!("not a swarm command: {other:?}"),
    }
}

use clap::Parser as _;

/// `peerage deploy k8s` writes a headless Service, a StatefulSet of M shards whose commands
/// parse as `peerage swarm` with the deploy's parameters, Prometheus annotations on the port
/// the shards serve `/metrics` on, and a Job whose command parses as `peerage report merge`.
#[test]
fn k8s_manifests_parse_and_match_the_command_line() {
    let out = Command::new(BIN)
        .args([
            "deploy",
            "k8s",
            "--nodes",
            "10000",
            "--shards",
            "20",
            "--seed",
            "7",
            "--namespace",
            "lab",
            "--http-port",
            "9200",
        ])
        .args(["--", "--latency", "internet", "--superpeers", "prefix", "--timeout-s", "900"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let docs = yaml_docs(&String::from_utf8(out.stdout).unwrap());
    let kind = |k: &str| docs.iter().find(|d| d["kind"] == k).unwrap_or_else(|| panic!("no {k}")).clone();
    let svc = kind("Service");
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(svc["spec"]["publishNotReadyAddresses"], true);
    let sts = kind("StatefulSet");
    assert_eq!(sts["spec"]["replicas"], 20);
    assert_eq!(sts["spec"]["serviceName"], svc["metadata"]["name"]);
    let tmpl = &sts["spec"]["template"];
    assert_eq!(tmpl["metadata"]["annotations"]["prometheus.io/scrape"], "true");
    assert_eq!(tmpl["metadata"]["annotations"]["prometheus.io/port"], "9200");
    assert_eq!(tmpl["spec"]["securityContext"]["runAsNonRoot"], true);
    let c = &tmpl["spec"]["containers"][0];
    let args: Vec<String> = c["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect();
    let var = format!("$({})", peerage_node::deploy::SHARD_VAR);
    assert!(c["env"].as_array().unwrap().iter().any(|e| e["name"] == peerage_node::deploy::SHARD_VAR));
    for i in [0u32, 19] {
        let a: Vec<String> = args.iter().map(|s| s.replace(&var, &i.to_string())).collect();
        let s = parse_swarm(&a);
        assert_eq!(s.nodes, 10_000);
        assert_eq!(s.seed, Some(7));
        assert_eq!(s.shard.as_deref(), Some(format!("{i}/20").as_str()));
        assert_eq!(s.shard_hosts.len(), 20);
        assert!(s.shard_hosts[3].starts_with("peerage-3.peerage.lab."));
        assert_eq!(s.http.map(|h| h.port()), Some(9200));
        assert!(s.linger);
        assert_eq!(s.superpeers, "prefix");
        assert_eq!(s.timeout_s, 900);
        assert!(s.control.starts_with("peerage-0.peerage.lab."));
    }
    let job = kind("Job");
    let merge: Vec<String> = job["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let cli = Cli::try_parse_from(std::iter::once("peerage".to_string()).chain(merge)).unwrap();
    assert!(matches!(cli.command, CliCommand::Report(r) if matches!(r.command, ReportCommand::Merge { .. })));
    let fetch = job["spec"]["template"]["spec"]["initContainers"][0]["command"][2].as_str().unwrap();
    assert!(fetch.contains("seq 0 19") && fetch.contains(":9200/part"), "{fetch}");
}

/// `peerage deploy compose` writes one service per shard, each a `peerage swarm --shard i/M`
/// of the same swarm, non-root, writing its part to the shared ./out.
#[test]
fn compose_file_has_one_parsing_service_per_shard() {
    let out = Command::new(BIN)
        .args(["deploy", "compose", "--nodes", "2000", "--shards", "50", "--seed", "3", "--shard-transport", "quic"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let docs = yaml_docs(&String::from_utf8(out.stdout).unwrap());
    let services = docs[0]["services"].as_object().unwrap();
    assert_eq!(services.len(), 50);
    let mut seen = std::collections::BTreeSet::new();
    for (name, svc) in services {
        assert_eq!(svc["user"], "65532:65532");
        let args: Vec<String> =
            svc["command"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect();
        let s = parse_swarm(&args);
        assert_eq!((s.nodes, s.seed), (2000, Some(3)));
        let (i, m) = peerage_node::swarm::shard::parse_shard(s.shard.as_deref().unwrap()).unwrap();
        assert_eq!(m, 50);
        assert_eq!(name, &format!("shard-{i}"));
        assert_eq!(s.out.as_ref().unwrap().to_str().unwrap(), format!("/out/part-{i}.json"));
        seen.insert(i);
    }
    assert_eq!(seen.len(), 50, "every shard once");
}

/// Testbeds made at the same instant, from threads of one process, each get a tag of their
/// own (a name already taken is drawn again), and each tear-down removes only its own.
#[test]
fn testbeds_made_at_once_do_not_share_a_tag() {
    if !root() {
        return;
    }
    use peerage_node::testbed::Testbed;
    let start = std::sync::Arc::new(std::sync::Barrier::new(8));
    let made: Vec<Testbed> = (0..8)
        .map(|_| {
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                Testbed::create(1)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap().unwrap())
        .collect();
    let tags: std::collections::BTreeSet<String> = made.iter().map(|t| t.tag().to_string()).collect();
    assert_eq!(tags.len(), 8, "tags: {tags:?}");
    for tb in &made {
        let own = format!("{}{}-", peerage_node::testbed::PREFIX, tb.tag());
        assert_eq!(testbed_namespaces(&own).len(), 2, "{own}: one host and the switch");
    }
    drop(made);
    for tag in &tags {
        let own = format!("{}{}-", peerage_node::testbed::PREFIX, tag);
        assert!(testbed_namespaces(&own).is_empty(), "{own} left behind");
    }
}

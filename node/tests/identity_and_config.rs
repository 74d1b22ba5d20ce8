//! `peerage run` keeps its id across restarts through the identity file, honours a TOML
//! `--config` file (flags win over it), and a config file it cannot use ends the process with a
//! clear message that names the problem, never a panic. Real processes on 127.0.0.1.

mod common;

use common::{free_port, run_node, start, Event, Peerage, Scratch};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// (peer id, node id, priority, algorithm) from the `started` line.
fn started(p: &Peerage) -> (String, String, u64, String) {
    let (node_id, priority, algorithm) = p.wait_for("the started line", WAIT, |p| {
        p.find(|e| match e {
            Event::Started { node_id, priority, algorithm } => Some((node_id.clone(), *priority, algorithm.clone())),
            _ => None,
        })
    });
    (p.lines()[0].peer.clone(), node_id, priority, algorithm)
}

#[test]
fn identity_file_keeps_the_id_across_restarts() {
    let dir = Scratch::new("identity");
    let key = dir.path("sub/node.key");
    let key_s = key.to_str().unwrap();
    assert!(!key.exists());

    let first = run_node(&["--identity", key_s]);
    let (peer1, node1, _, _) = started(&first);
    drop(first); // SIGKILL: the key must already be on disk
    assert!(key.exists(), "the identity file was created (with its directory)");
    let stored = std::fs::read_to_string(&key).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the key file is private");
    }

    let second = run_node(&["--identity", key_s]);
    let (peer2, node2, _, _) = started(&second);
    assert_eq!(peer1, peer2, "same peer id after a restart");
    assert_eq!(node1, node2, "same node id after a restart");
    assert_eq!(std::fs::read_to_string(&key).unwrap(), stored, "the key file is not rewritten");
    drop(second);

    // Without --identity every run is a new node (so the checks above can fail).
    let fresh = run_node(&[]);
    let (peer3, _, _, _) = started(&fresh);
    assert_ne!(peer3, peer1);
}

#[test]
fn toml_config_is_honoured_and_flags_win() {
    let dir = Scratch::new("config");
    let port = free_port();
    let key = dir.path("from-config.key");
    let cfg = dir.write(
        "node.toml",
        &format!(
            "listen = [\"/ip4/127.0.0.1/tcp/{port}\"]\nalgorithm = \"villadangos\"\npriority = 7\n\
             identity = {:?}\n[timing]\nstatus_ms = 300\nmembers_sync_ms = 100\n",
            key.to_str().unwrap()
        ),
    );
    let p = start(&["--log", "warn", "run", "--config", &cfg]);
    let (peer, _, priority, algorithm) = started(&p);
    assert_eq!((priority, algorithm.as_str()), (7, "villadangos"));
    let addr = p.wait_for("the listening line", WAIT, Peerage::tcp_addr);
    assert_eq!(addr, format!("/ip4/127.0.0.1/tcp/{port}/p2p/{peer}"), "listens where the file says");
    assert!(key.exists(), "the identity file named in the config was created");
    // status_ms = 300 (default 2,000): wait for 6 status lines and look at their spacing.
    let stamps = p.wait_for("six status lines", WAIT, |p| {
        let ts: Vec<u64> = p.lines().iter().filter(|l| matches!(l.event, Event::Status(_))).map(|l| l.ts).collect();
        (ts.len() >= 6).then_some(ts)
    });
    let mut gaps: Vec<u64> = stamps.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_unstable();
    assert!(gaps[gaps.len() / 2] < 1_200, "median status period {} ms; the file says 300", gaps[gaps.len() / 2]);
    drop(p);

    // Flags win over the file; the identity from the file is still used.
    let p = start(&[
        "--log",
        "warn",
        "run",
        "--config",
        &cfg,
        "--priority",
        "9",
        "--algorithm",
        "ring",
        "--listen",
        "/ip4/127.0.0.1/tcp/0",
    ]);
    let (peer2, _, priority, algorithm) = started(&p);
    assert_eq!((priority, algorithm.as_str()), (9, "ring"));
    assert_eq!(peer2, peer, "the identity file from the config is kept");
    let addr = p.wait_for("the listening line", WAIT, Peerage::tcp_addr);
    assert!(!addr.contains(&format!("/tcp/{port}/")), "--listen replaces the file's listen: {addr}");
}

#[test]
fn unusable_config_files_are_clear_errors() {
    let dir = Scratch::new("badconfig");
    // (file contents, what the error must mention)
    let cases: &[(&str, &[&str])] = &[
        ("[election]\nanswer_timeout = 300\n", &["unknown field", "answer_timeout"]),
        ("[timing]\nsettle = 1\n", &["unknown field", "settle"]),
        ("[limits]\nmax_conns = 5\n", &["unknown field", "max_conns"]),
        ("priority = \"high\"\n", &["priority", "invalid type"]),
        ("listen = [\n", &["node.toml"]),
        ("algorithm = \"paxos\"\n", &["unknown election algorithm", "paxos"]),
        ("[election]\nanswer_timeout_ms = 0\n", &["answer_timeout_ms must be at least 1"]),
        ("[limits]\ntarget_low = 20\ntarget_high = 10\n", &["bad limits", "target_low"]),
        ("[limits]\nmax_inbound_bytes_per_peer = 4096\n", &["bad limits", "max_inbound_bytes_per_peer"]),
        (
            "[limits]\nmax_inbound_bytes = 16777216\nmax_inbound_bytes_per_peer = 33554432\n",
            &["bad limits", "max_inbound_bytes_per_peer"],
        ),
        ("metrics = \"localhost\"\n", &["bad metrics address", "localhost"]),
        ("kad_protocol = \"peerage-kad\"\n", &["bad kad protocol name"]),
        ("listen = [\"/ip4/127.0.0.1/tcp/x\"]\n", &["bad listen address"]),
    ];
    for (text, wants) in cases {
        let cfg = dir.write("node.toml", text);
        let mut p = start(&["run", "--config", &cfg]);
        let status = p.wait_exit(WAIT);
        let err = p.stderr();
        assert!(!status.success(), "config {text:?} was accepted");
        assert!(!err.contains("panicked"), "config {text:?}: {err}");
        for w in *wants {
            assert!(err.contains(w), "config {text:?}: error does not mention {w:?}: {err}");
        }
    }
    let missing = dir.path("missing.toml");
    let mut p = start(&["run", "--config", missing.to_str().unwrap()]);
    assert!(!p.wait_exit(WAIT).success());
    assert!(p.stderr().contains("cannot read config file"), "{}", p.stderr());
}

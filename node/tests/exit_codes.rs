//! The exit codes of `peerage run` (README, usage): 0 after SIGTERM or Ctrl-C, with a
//! `shutdown` status line; 1 for a run-time failure, such as an address it cannot listen on
//! (the OS reason printed); 2 for a bad configuration, its cause printed once; 3 for a second
//! process on a key file a running node holds.

mod common;

use common::{run_node, Event, Scratch};
use std::process::Command;
use std::time::Duration;

fn peerage(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_peerage")).args(args).output().expect("run peerage");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "peerage panicked: {stderr}");
    (out.status.code().unwrap_or(-1), stderr)
}

#[test]
fn a_second_process_on_a_held_key_is_refused_with_code_3() {
    let dir = Scratch::new("held-key");
    let key = dir.path("node.key");
    let key = key.to_str().unwrap();
    let first = run_node(&["--identity", key]);
    let id = first.wait_for("the first node's start", Duration::from_secs(30), |p| p.node_id());
    let (code, err) = peerage(&["--log", "warn", "run", "--listen", "/ip4/127.0.0.1/tcp/0", "--identity", key]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("in use by another running node") && err.contains(key), "{err}");
    // The refused process did not touch the key: the first node's id is the file's.
    drop(first);
    let again = run_node(&["--identity", key]);
    let id2 = again.wait_for("the restarted node's start", Duration::from_secs(30), |p| p.node_id());
    assert_eq!(id, id2, "same key, same id");
}

#[test]
fn sigterm_is_a_clean_shutdown() {
    let mut node = run_node(&[]);
    node.wait_for("the node's address", Duration::from_secs(30), |p| p.tcp_addr());
    let ok = Command::new("kill").args(["-TERM", &node.child.id().to_string()]).status().expect("run kill");
    assert!(ok.success());
    let status = node.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "stderr: {}", node.stderr());
    let last = node.lines().last().cloned().expect("status lines");
    assert!(matches!(last.event, Event::Shutdown {}), "last line after SIGTERM: {last:?}");
}

#[test]
fn a_listen_error_carries_the_os_reason_and_code_1() {
    // TEST-NET-1 (RFC 5737): no interface has it.
    let (code, err) = peerage(&["--log", "warn", "run", "--listen", "/ip4/192.0.2.1/tcp/0"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot listen on /ip4/192.0.2.1/tcp/0: Cannot assign requested address"), "{err}");
}

#[test]
fn a_bad_config_is_code_2_with_each_cause_once() {
    let dir = Scratch::new("bad-config");
    let cfg = dir.write("node.toml", "[election]\nanswer_timeout_ms = 0\n");
    let (code, err) = peerage(&["--log", "warn", "run", "--listen", "/ip4/127.0.0.1/tcp/0", "--config", &cfg]);
    assert_eq!(code, 2, "{err}");
    let line = err.lines().find(|l| l.starts_with("peerage: error:")).unwrap_or_else(|| panic!("{err}"));
    let parts: Vec<&str> = line.trim_start_matches("peerage: error: ").split(": ").collect();
    let mut seen = std::collections::HashSet::new();
    assert!(parts.iter().all(|p| seen.insert(*p)), "a cause printed twice: {line}");
    let (code, err) = peerage(&["run", "--listen", "not-an-address"]);
    assert_eq!(code, 2, "{err}");
}

//! Bad flags, an unreachable bootstrap address and a corrupt key file end `peerage` with a
//! clear message on stderr and a non-zero exit code, never a panic.

use std::process::Command;
use std::time::Duration;

fn peerage(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_peerage")).args(args).output().expect("run peerage");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "peerage panicked: {stderr}");
    (out.status.code().unwrap_or(-1), stderr)
}

#[test]
fn bad_flags_are_clear_errors() {
    let (code, err) = peerage(&["run", "--algorithm", "paxos"]);
    assert_ne!(code, 0);
    assert!(err.contains("unknown election algorithm") && err.contains("paxos"), "{err}");

    let (code, err) = peerage(&["run", "--listen", "not-an-address"]);
    assert_ne!(code, 0);
    assert!(err.contains("bad listen address"), "{err}");

    let (code, err) = peerage(&["run", "--bootstrap", "/ip4/127.0.0.1/tcp/notaport"]);
    assert_ne!(code, 0);
    assert!(err.contains("bad bootstrap address"), "{err}");

    let (code, err) = peerage(&["run", "--priority", "lots"]);
    assert_ne!(code, 0);
    assert!(err.contains("--priority"), "{err}");

    let (code, err) = peerage(&["swarm", "--nodes", "0"]);
    assert_ne!(code, 0);
    assert!(err.contains("--nodes"), "{err}");

    let (code, err) = peerage(&["swarm", "--nodes", "2", "--no-leader-election"]);
    assert_ne!(code, 0);
    assert!(err.contains("--no-leader-election need") && err.contains("--superpeers"), "{err}");

    // The nodes' super-peer table from a file: only with super peers on, and checked.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).expect("writes");
        p.to_string_lossy().into_owned()
    };
    let good = file("good.toml", "[superpeer]\nshare = 0.1\n");
    let (code, err) = peerage(&["swarm", "--nodes", "2", "--sp-config", &good]);
    assert_ne!(code, 0);
    assert!(err.contains("--sp-config") && err.contains("--superpeers"), "{err}");

    let zero = file("zero.toml", "listen = []\n[superpeer.estimate]\nsamples = 0\n");
    let (code, err) = peerage(&["swarm", "--nodes", "2", "--superpeers", "prefix", "--sp-config", &zero]);
    assert_ne!(code, 0);
    assert!(err.contains("superpeer.estimate.samples must be in [1, 1000], got 0"), "{err}");

    let typo = file("typo.toml", "[superpeer.tokens]\nhold = 3\n");
    let (code, err) = peerage(&["swarm", "--nodes", "2", "--superpeers", "tokens", "--sp-config", &typo]);
    assert_ne!(code, 0);
    assert!(err.contains("bad [superpeer] table") && err.contains("hold"), "{err}");

    let missing = dir.path().join("missing.toml").to_string_lossy().into_owned();
    let (code, err) = peerage(&["swarm", "--nodes", "2", "--superpeers", "tokens", "--sp-config", &missing]);
    assert_ne!(code, 0);
    assert!(err.contains("reading") && err.contains("missing.toml"), "{err}");

    let (code, err) = peerage(&["--log", "peerage=[[", "swarm", "--nodes", "2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bad log filter"), "{err}");
}

#[test]
fn corrupt_key_file_is_a_clear_error() {
    // Removed when dropped, also when an assertion below fails.
    let file = tempfile::Builder::new().prefix("peerage-corrupt-").suffix(".key").tempfile().unwrap();
    std::fs::write(file.path(), "this is not a key\n").unwrap();
    let (code, err) =
        peerage(&["run", "--listen", "/ip4/127.0.0.1/tcp/0", "--identity", file.path().to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("corrupt"), "{err}");
}

#[test]
fn unreachable_bootstrap_is_a_clear_error() {
    // A port nobody listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let start = std::time::Instant::now();
    let (code, err) =
        peerage(&["run", "--listen", "/ip4/127.0.0.1/tcp/0", "--bootstrap", &format!("/ip4/127.0.0.1/tcp/{port}")]);
    assert_ne!(code, 0);
    assert!(err.contains("no bootstrap peer could be reached"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(60));
}

#[test]
fn config_file_with_unknown_key_is_a_clear_error() {
    let file = tempfile::Builder::new().prefix("peerage-cfg-").suffix(".toml").tempfile().unwrap();
    std::fs::write(file.path(), "lisen = [\"/ip4/127.0.0.1/tcp/0\"]\n").unwrap();
    let (code, err) = peerage(&["run", "--config", file.path().to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("unknown field") && err.contains("lisen"), "{err}");
}

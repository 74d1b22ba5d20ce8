//! Real `peerage run` processes on 127.0.0.1: they agree on a leader (read from their JSON
//! status lines), the leader is killed with SIGKILL, and the others agree on a new one.

use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Default, Debug, Clone)]
struct Seen {
    node_id: Option<String>,
    listen: Vec<String>,
    leader: Option<String>,
}

struct Proc {
    child: Child,
    seen: Arc<Mutex<Seen>>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(dir: &std::path::Path, i: usize, algorithm: &str, bootstrap: Option<&str>) -> Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_peerage"));
    cmd.args(["--log", "warn", "run", "--listen", "/ip4/127.0.0.1/tcp/0", "--algorithm", algorithm]);
    cmd.args(["--priority", &i.to_string()]);
    cmd.arg("--identity").arg(dir.join(format!("node{i}.key")));
    if let Some(b) = bootstrap {
        cmd.args(["--bootstrap", b]);
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("start peerage");
    let stdout = child.stdout.take().expect("stdout");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s = seen.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                panic!("status line is not JSON: {line}");
            };
            let mut g = s.lock().unwrap();
            match v["event"].as_str() {
                Some("started") => g.node_id = v["node_id"].as_str().map(String::from),
                Some("listening") => g.listen.extend(v["addr"].as_str().map(String::from)),
                Some("leader") => g.leader = v["leader"].as_str().map(String::from),
                _ => {}
            }
        }
    });
    Proc { child, seen }
}

fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn agreed(procs: &HashMap<usize, Proc>) -> Option<String> {
    let leaders: Vec<Option<String>> = procs.values().map(|p| p.seen.lock().unwrap().leader.clone()).collect();
    let first = leaders.first()?.clone()?;
    leaders.iter().all(|l| l.as_deref() == Some(first.as_str())).then_some(first)
}

#[test]
fn processes_agree_and_re_elect_after_the_leader_is_killed() {
    // The key files' directory, removed when dropped (after the processes, which are declared
    // later and so dropped first), also when an assertion below fails.
    let scratch = tempfile::Builder::new().prefix("peerage-mp-").tempdir().unwrap();
    let dir = scratch.path();
    let n = 4;
    let mut procs = HashMap::new();
    let first = spawn(dir, 0, "bully", None);
    let boot = wait_for("the first node's address", Duration::from_secs(20), || {
        first.seen.lock().unwrap().listen.iter().find(|a| a.contains("/tcp/")).cloned()
    });
    procs.insert(0, first);
    for i in 1..n {
        procs.insert(i, spawn(dir, i, "bully", Some(&boot)));
    }
    let leader = wait_for("agreement on a leader", Duration::from_secs(60), || agreed(&procs));
    let expected = procs[&(n - 1)].seen.lock().unwrap().node_id.clone();
    assert_eq!(Some(leader.clone()), expected, "the highest-priority process must lead");

    // SIGKILL the leader (Child::kill sends SIGKILL on Unix).
    let mut old = procs.remove(&(n - 1)).unwrap();
    old.child.kill().unwrap();
    let t = Instant::now();
    let new =
        wait_for("re-election after SIGKILL", Duration::from_secs(60), || agreed(&procs).filter(|l| *l != leader));
    println!("re-elected in {:?}", t.elapsed());
    let expected = procs[&(n - 2)].seen.lock().unwrap().node_id.clone();
    assert_eq!(Some(new), expected, "the next highest process must lead");
    drop(procs);
}

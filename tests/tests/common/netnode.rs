//! `peerage run` processes inside the hosts of a network-namespace testbed
//! (`peerage_node::testbed`), read through their JSON status lines.
//!
//! A [`NetNode`] is one process started with `ip netns exec` (which execs, so the child's pid
//! is the node's: SIGSTOP, SIGCONT and SIGKILL reach the node itself). Its stdout is parsed
//! line by line on a thread into the few facts the fault tests read ([`Seen`]); its stderr
//! goes to a log file whose tail a failing test prints. Dropping a `NetNode` kills it.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

/// The `peerage` binary: `PEERAGE_BIN`, else the one built beside this test binary
/// (`cargo nextest run --workspace` builds it; `cargo build -p peerage-node` otherwise).
pub fn peerage_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("PEERAGE_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test> -> target/<profile>/peerage
    let bin = exe.parent().and_then(Path::parent).map(|d| d.join("peerage")).expect("a target directory");
    assert!(bin.exists(), "{} is missing: build it with `cargo build -p peerage-node --bin peerage`", bin.display());
    bin
}

/// What a node's status lines said so far.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub node_id: Option<String>,
    /// The first TCP listen address (with `/p2p/<peer id>`).
    pub addr: Option<String>,
    /// The leader named by the latest `leader` line.
    pub leader: Option<String>,
    /// The latest `status` line's `bad_frames` and `inbound_streams_cut`.
    pub bad_frames: u64,
    pub streams_cut: u64,
    /// How many `status` lines came.
    pub statuses: u64,
    pub fatal: Option<String>,
    /// Lines that were not JSON.
    pub bad_lines: Vec<String>,
}

/// One `peerage run` process in a testbed host.
pub struct NetNode {
    pub host: usize,
    pub child: Child,
    pub log: PathBuf,
    seen: Arc<Mutex<Seen>>,
}

impl Drop for NetNode {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl NetNode {
    /// Start `peerage --log warn run <args>` (`PEERAGE_NODE_LOG` sets another log level) in namespace `ns`; stderr to `log`.
    pub fn start(ns: &str, host: usize, args: &[String], log: &Path) -> NetNode {
        let err = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("open the node's log");
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(peerage_bin())
            .args(["--log", &std::env::var("PEERAGE_NODE_LOG").unwrap_or_else(|_| "warn".into()), "run"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .expect("start peerage in a namespace");
        let stdout = child.stdout.take().expect("stdout");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let s = seen.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let mut g = s.lock().unwrap();
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    g.bad_lines.push(line);
                    continue;
                };
                match v["event"].as_str() {
                    Some("started") => g.node_id = v["node_id"].as_str().map(String::from),
                    Some("listening") if g.addr.is_none() => {
                        g.addr = v["addr"].as_str().filter(|a| a.contains("/tcp/")).map(String::from);
                    }
                    Some("leader") => g.leader = v["leader"].as_str().map(String::from),
                    Some("status") => {
                        g.statuses += 1;
                        g.bad_frames = v["bad_frames"].as_u64().unwrap_or(u64::MAX);
                        g.streams_cut = v["inbound_streams_cut"].as_u64().unwrap_or(0);
                    }
                    Some("fatal") => g.fatal = v["error"].as_str().map(String::from),
                    _ => {}
                }
            }
        });
        NetNode { host, child, log: log.to_path_buf(), seen }
    }

    pub fn seen(&self) -> Seen {
        self.seen.lock().unwrap().clone()
    }

    pub fn node_id(&self) -> Option<String> {
        self.seen.lock().unwrap().node_id.clone()
    }

    pub fn leader(&self) -> Option<String> {
        self.seen.lock().unwrap().leader.clone()
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// The leader every node of `nodes` names, when they all name the same one and it is one of
/// them.
pub fn agreed<'a>(nodes: impl IntoIterator<Item = &'a NetNode> + Clone) -> Option<String> {
    let ids: Vec<Option<String>> = nodes.clone().into_iter().map(|n| n.node_id()).collect();
    let mut leaders = nodes.into_iter().map(|n| n.leader());
    let first = leaders.next()??;
    (leaders.all(|l| l.as_deref() == Some(first.as_str())) && ids.iter().any(|i| i.as_deref() == Some(first.as_str())))
        .then_some(first)
}

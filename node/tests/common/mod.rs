//! Shared helpers for the tests that start real `peerage run` processes on 127.0.0.1.
//!
//! A [`Peerage`] process has its stdout read on a thread: every line must be one JSON status
//! object (`node/src/runtime/status.rs`), parsed with serde into a typed [`Line`] as it arrives; a line that does
//! not parse is kept in `bad_lines`, so a test can assert there were none. stderr (the logs) is
//! kept too, for failure messages. Dropping a [`Peerage`] kills the process.
//!
//! Each test binary uses a different part of this module, hence the `dead_code` allowance.
#![allow(dead_code)]

use serde::Deserialize;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One JSON status line: the fields every line has, and the event.
#[derive(Debug, Clone, Deserialize)]
pub struct Line {
    /// Unix time in ms.
    pub ts: u64,
    /// The emitting node's peer id.
    pub peer: String,
    #[serde(flatten)]
    pub event: Event,
}

/// The events of `node/src/runtime/status.rs`, with the fields the tests read.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    Started {
        node_id: String,
        priority: u64,
        algorithm: String,
    },
    Listening {
        addr: String,
    },
    Peers {
        peers: usize,
    },
    Members {
        members: usize,
    },
    ElectionStarted {
        state: String,
    },
    Leader {
        leader: Option<String>,
        leader_peer: Option<String>,
        previous: Option<String>,
        is_me: bool,
        state: String,
    },
    Rejected {
        from: String,
        reason: String,
    },
    Status(Status),
    Shutdown {},
    Fatal {
        error: String,
    },
    /// An event this test suite does not know yet (new events must not break old readers).
    #[serde(other)]
    Other,
}

/// The periodic `status` line (a `Snapshot`), the fields the tests read.
#[derive(Debug, Clone, Deserialize)]
pub struct Status {
    pub leader: Option<String>,
    pub state: String,
    pub in_election: bool,
    pub peers: usize,
    pub connections: usize,
    pub members: usize,
    pub elections_started: u64,
    pub elections_won: u64,
    pub messages_sent: u64,
    pub messages_received: u64,
    pub listen: Vec<String>,
}

#[derive(Default)]
struct Output {
    lines: Vec<Line>,
    bad_lines: Vec<String>,
    stderr: String,
}

/// A running `peerage` process.
pub struct Peerage {
    pub child: Child,
    out: Arc<Mutex<Output>>,
    /// The stdout and stderr readers: `wait_exit` joins them, so that everything the process
    /// wrote is in `out` when it returns (under load the readers lagged behind the exit and a
    /// test saw an empty stderr).
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Drop for Peerage {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `peerage <args>` (logs at `warn` unless the args say otherwise).
pub fn start(args: &[&str]) -> Peerage {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_peerage"));
    cmd.args(args);
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start peerage");
    let out = Arc::new(Mutex::new(Output::default()));
    let stdout = child.stdout.take().expect("stdout");
    let o = out.clone();
    let out_reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut g = o.lock().unwrap();
            match serde_json::from_str::<Line>(&line) {
                Ok(l) => g.lines.push(l),
                Err(e) => g.bad_lines.push(format!("{e}: {line}")),
            }
        }
    });
    let mut stderr = child.stderr.take().expect("stderr");
    let o = out.clone();
    let err_reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 {
                break;
            }
            o.lock().unwrap().stderr.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    Peerage { child, out, readers: vec![out_reader, err_reader] }
}

/// `peerage --log warn run --listen /ip4/127.0.0.1/tcp/0 <extra>`.
pub fn run_node(extra: &[&str]) -> Peerage {
    let mut args = vec!["--log", "warn", "run", "--listen", "/ip4/127.0.0.1/tcp/0"];
    args.extend_from_slice(extra);
    start(&args)
}

impl Peerage {
    /// Every status line so far.
    pub fn lines(&self) -> Vec<Line> {
        self.out.lock().unwrap().lines.clone()
    }
    /// Lines that were not a status object.
    pub fn bad_lines(&self) -> Vec<String> {
        self.out.lock().unwrap().bad_lines.clone()
    }
    pub fn stderr(&self) -> String {
        self.out.lock().unwrap().stderr.clone()
    }
    /// The first line whose event `f` picks out.
    pub fn find<T>(&self, f: impl Fn(&Event) -> Option<T>) -> Option<T> {
        self.out.lock().unwrap().lines.iter().find_map(|l| f(&l.event))
    }
    /// The last line whose event `f` picks out.
    pub fn find_last<T>(&self, f: impl Fn(&Event) -> Option<T>) -> Option<T> {
        self.out.lock().unwrap().lines.iter().rev().find_map(|l| f(&l.event))
    }
    /// The node id from the `started` line.
    pub fn node_id(&self) -> Option<String> {
        self.find(|e| match e {
            Event::Started { node_id, .. } => Some(node_id.clone()),
            _ => None,
        })
    }
    /// The first TCP listen address (with `/p2p/<peer id>`).
    pub fn tcp_addr(&self) -> Option<String> {
        self.listen_addr("/tcp/")
    }
    /// The first QUIC listen address (with `/p2p/<peer id>`).
    pub fn quic_addr(&self) -> Option<String> {
        self.listen_addr("/quic-v1/")
    }
    /// The first listen address containing `part`.
    pub fn listen_addr(&self, part: &str) -> Option<String> {
        self.find(|e| match e {
            Event::Listening { addr } if addr.contains(part) => Some(addr.clone()),
            _ => None,
        })
    }
    /// The leader named by the latest `leader` line.
    pub fn leader(&self) -> Option<String> {
        self.find_last(|e| match e {
            Event::Leader { leader, .. } => Some(leader.clone()),
            _ => None,
        })
        .flatten()
    }
    /// Wait for `f` to give a value; panics with the process's stderr after `timeout`.
    pub fn wait_for<T>(&self, what: &str, timeout: Duration, mut f: impl FnMut(&Peerage) -> Option<T>) -> T {
        let until = Instant::now() + timeout;
        loop {
            if let Some(v) = f(self) {
                return v;
            }
            assert!(
                Instant::now() < until,
                "timed out after {timeout:?} waiting for {what}; stderr:\n{}\nbad lines: {:?}",
                self.stderr(),
                self.bad_lines()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    /// Wait for the process to exit on its own.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let until = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                // The pipes reach end-of-file with the exit: read what is left in them.
                for r in self.readers.drain(..) {
                    let _ = r.join();
                }
                return s;
            }
            assert!(Instant::now() < until, "peerage did not exit within {timeout:?}; stderr:\n{}", self.stderr());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    /// Send SIGINT (what Ctrl-C sends) with the system's `kill` command.
    pub fn interrupt(&self) {
        let ok = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status().expect("run kill");
        assert!(ok.success(), "kill -INT failed");
    }
}

/// Wait until `f` holds, polling; panics naming `what` after `timeout`.
pub fn wait_until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < until, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A loopback TCP port that was free a moment ago (bound, read, closed).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A fresh scratch directory for one test: a `tempfile::TempDir`, removed when dropped, also
/// when the test fails (the drop runs while the panic unwinds).
pub struct Scratch(tempfile::TempDir);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        Scratch(tempfile::Builder::new().prefix(&format!("peerage-{name}-")).tempdir().unwrap())
    }
    pub fn path(&self, file: &str) -> PathBuf {
        self.0.path().join(file)
    }
    /// Write `text` to `file` in the directory and return its path as a string.
    pub fn write(&self, file: &str, text: &str) -> String {
        let p = self.path(file);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    }
}

/// `GET path` from `addr` over plain HTTP/1.1; returns (status code, body).
pub fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    let code = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((code, body.to_string()))
}

/// A TOML config file for quick local tests: short settle/fallback and status periods.
pub fn fast_config(extra: &str) -> String {
    format!("{extra}\n[timing]\nsettle_ms = 500\nfallback_ms = 1000\nstatus_ms = 300\n")
}

//! A local testbed of H hosts made of Linux network namespaces: real addresses, real sockets,
//! links that can be cut and healed, processes that can be killed, all undone at the end.
//!
//! Layout: one *switch* namespace holds a bridge; each host is a namespace with `lo` and one
//! veth `eth0` (address `10.213.0.(h+1)/24`) whose other end sits on the bridge. The veth pairs
//! are made inside the switch namespace with their host end placed straight into the host's
//! namespace, so nothing is ever added to the machine's own namespace, and no host namespace
//! has a route beyond its /24: its processes can reach the other hosts and their own loopback,
//! nothing else. Every testbed's namespaces are named `pbtb<tag>-...` with a tag of its own, so
//! several testbeds can run at once (their subnets overlap but never meet).
//!
//! Cutting the link between hosts `a` and `b` adds a blackhole route to the other's address
//! in each (packets are dropped silently, as in a real partition: connections are not reset,
//! they go quiet); healing deletes the routes. `tc netem` is not available in this kernel, so
//! link latency comes from Peerage's own transport (`node/src/net/latency_transport.rs`).
//!
//! Processes run through `ip netns exec`, each in its own process group. Tear-down (also on
//! drop, so on a failing test's panic; and from `peerage testbed` on Ctrl-C or SIGTERM)
//! stops every process in the namespaces (SIGTERM, then SIGKILL after a grace period),
//! deletes the namespaces (which removes their veths and the bridge) and checks that nothing
//! is left. [`clean_all`] removes what a killed testbed (SIGKILL: no tear-down) left behind.
//!
//! Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and `ip` from iproute2.

pub mod swarm;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The prefix of every testbed namespace.
pub const PREFIX: &str = "pbtb";
/// Most hosts in one testbed (one /24).
pub const MAX_HOSTS: usize = 250;
/// How long stopped processes get between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(5);

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    #[error("`{cmd}` failed: {stderr}")]
    Command { cmd: String, stderr: String },
    #[error("cannot run `{cmd}`: {source}")]
    Spawn { cmd: String, source: std::io::Error },
    #[error("a testbed has 1 to {MAX_HOSTS} hosts, not {0}")]
    Hosts(usize),
    #[error("no host {0} in this testbed")]
    NoHost(usize),
    #[error("tear-down left {0} behind")]
    Leftovers(String),
    #[error("namespace {ns}: {source}")]
    Netns { ns: String, source: std::io::Error },
}

/// Tags drawn in this process: two testbeds made at the same instant by one process differ.
static TAGS_DRAWN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// New tags a testbed draws when its switch's name is taken before it gives up.
const TAG_TRIES: u32 = 16;

/// A 20-bit tag from the process id, the clock and this process's count of tags drawn.
fn fresh_tag() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let n = TAGS_DRAWN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let x = (u64::from(std::process::id()) << 32) ^ nanos ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let x = x ^ (x >> 29) ^ (x >> 47);
    format!("{:05x}", x.wrapping_mul(0xbf58_476d_1ce4_e5b9) >> 44)
}

/// The switch namespace's name of the testbed tagged `tag`.
fn switch_of(tag: &str) -> String {
    format!("{PREFIX}{tag}-sw")
}

/// Run `ip` with `args`; its stdout on success.
fn ip(args: &[&str]) -> Result<String, TestbedError> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| TestbedError::Spawn { cmd: format!("ip {}", args.join(" ")), source })?;
    if !out.status.success() {
        return Err(TestbedError::Command {
            cmd: format!("ip {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every network namespace on the machine.
pub fn namespaces() -> Result<Vec<String>, TestbedError> {
    Ok(ip(&["netns", "list"])?.lines().filter_map(|l| l.split_whitespace().next().map(String::from)).collect())
}

/// The processes in namespace `ns`.
pub fn pids_in(ns: &str) -> Vec<i32> {
    ip(&["netns", "pids", ns])
        .map(|o| o.split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) with a pid we read from the namespace; no memory is involved.
    unsafe {
        libc::kill(pid, sig);
    }
}

fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists() && {
        // A zombie is dead for our purpose.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.rsplit_once(')').map(|(_, r)| !r.trim_start().starts_with('Z')).unwrap_or(true))
            .unwrap_or(false)
    }
}

/// Stop every process in `namespaces` (SIGTERM, then SIGKILL after `grace`) and delete them.
fn remove_namespaces(namespaces: &[String], grace: Duration) {
    let pids: Vec<i32> = namespaces.iter().flat_map(|ns| pids_in(ns)).collect();
    for &p in &pids {
        signal(p, libc::SIGTERM);
    }
    let until = Instant::now() + grace;
    while pids.iter().any(|&p| alive(p)) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    for ns in namespaces {
        for p in pids_in(ns) {
            signal(p, libc::SIGKILL);
        }
    }
    for &p in &pids {
        signal(p, libc::SIGKILL);
    }
    let until = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|&p| alive(p)) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    for ns in namespaces {
        let _ = ip(&["netns", "del", ns]);
    }
}

/// Remove every testbed namespace on the machine (and stop what runs in them): what testbeds
/// killed without a tear-down left. Returns the namespaces removed.
pub fn clean_all() -> Result<Vec<String>, TestbedError> {
    let ours: Vec<String> = namespaces()?.into_iter().filter(|n| n.starts_with(PREFIX)).collect();
    remove_namespaces(&ours, GRACE);
    Ok(ours)
}

/// A process started in a host.
pub struct Proc {
    pub host: usize,
    pub child: Child,
    pub name: String,
}

impl Proc {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Send `sig` to the process's whole group (it and what it started).
    pub fn signal(&self, sig: i32) {
        signal(-self.pid(), sig);
    }

    /// Kill it at once (SIGKILL), like a crash, and reap it.
    pub fn kill(&mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
    }

    /// Its exit status, if it has ended.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

/// A testbed of H hosts.
pub struct Testbed {
    tag: String,
    hosts: usize,
    cuts: BTreeSet<(usize, usize)>,
    procs: Vec<Proc>,
    down: bool,
}

impl Testbed {
    /// Build `hosts` hosts on a bridge.
    pub fn create(hosts: usize) -> Result<Testbed, TestbedError> {
        if hosts == 0 || hosts > MAX_HOSTS {
            return Err(TestbedError::Hosts(hosts));
        }
        // The tag is ours once our `ip netns add` of its switch succeeded: a name another
        // testbed holds (same process and instant, or another process) fails with "File
        // exists" and a new tag is drawn. Only then is the `Testbed` made, whose drop would
        // remove every namespace of its tag.
        let mut tries = 0;
        let tag = loop {
            let tag = fresh_tag();
            match ip(&["netns", "add", &switch_of(&tag)]) {
                Ok(_) => break tag,
                Err(TestbedError::Command { stderr, .. }) if stderr.contains("File exists") && tries < TAG_TRIES => {
                    tries += 1;
                }
                Err(e) => return Err(e),
            }
        };
        let tb = Testbed { tag, hosts, cuts: BTreeSet::new(), procs: Vec::new(), down: false };
        // On any failure the drop removes what was made so far.
        let sw = tb.switch();
        ip(&["-n", &sw, "link", "set", "lo", "up"])?;
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &sw, "link", "set", "br0", "up"])?;
        for h in 0..hosts {
            let ns = tb.ns(h);
            ip(&["netns", "add", &ns])?;
            let port = format!("p{h}");
            ip(&["-n", &sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns])?;
            ip(&["-n", &sw, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &sw, "link", "set", &port, "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", tb.addr(h)), "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(tb)
    }

    pub fn tag(&self) -> &str {
        &self.tag
    }

    pub fn hosts(&self) -> usize {
        self.hosts
    }

    fn switch(&self) -> String {
        switch_of(&self.tag)
    }

    /// Host `h`'s namespace name.
    pub fn ns(&self, h: usize) -> String {
        format!("{PREFIX}{}-h{h}", self.tag)
    }

    /// Every namespace of this testbed.
    pub fn namespaces(&self) -> Vec<String> {
        let mut v: Vec<String> = (0..self.hosts).map(|h| self.ns(h)).collect();
        v.push(self.switch());
        v
    }

    /// Host `h`'s address.
    pub fn addr(&self, h: usize) -> std::net::Ipv4Addr {
        std::net::Ipv4Addr::new(10, 213, 0, (h + 1) as u8)
    }

    fn check(&self, h: usize) -> Result<(), TestbedError> {
        if h >= self.hosts {
            return Err(TestbedError::NoHost(h));
        }
        Ok(())
    }

    /// Start `argv` in host `h`, stdout and stderr to `log` (appended), in its own process
    /// group; `env` is added to its environment.
    pub fn spawn(
        &mut self,
        h: usize,
        argv: &[String],
        env: &[(String, String)],
        log: &Path,
    ) -> Result<usize, TestbedError> {
        use std::os::unix::process::CommandExt;
        self.check(h)?;
        let cmd = argv.join(" ");
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|source| TestbedError::Spawn { cmd: cmd.clone(), source })?;
        let err = out.try_clone().map_err(|source| TestbedError::Spawn { cmd: cmd.clone(), source })?;
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns(h)])
            .args(argv)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|source| TestbedError::Spawn { cmd: cmd.clone(), source })?;
        self.procs.push(Proc { host: h, child, name: cmd });
        Ok(self.procs.len() - 1)
    }

    pub fn procs(&mut self) -> &mut [Proc] {
        &mut self.procs
    }

    /// Kill process `i` (SIGKILL to its group), as a crash.
    pub fn kill(&mut self, i: usize) {
        if let Some(p) = self.procs.get_mut(i) {
            p.kill();
        }
    }

    /// Run `f` on a thread inside host `h`'s namespace (sockets it opens live there).
    pub fn in_host<T: Send + 'static>(
        &self,
        h: usize,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<std::thread::JoinHandle<T>, TestbedError> {
        self.check(h)?;
        let ns = self.ns(h);
        let path = PathBuf::from("/var/run/netns").join(&ns);
        let file = std::fs::File::open(&path).map_err(|source| TestbedError::Netns { ns: ns.clone(), source })?;
        Ok(std::thread::spawn(move || {
            use std::os::fd::AsRawFd;
            // SAFETY: setns(2) on this thread only, with a namespace file we hold open.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns into {ns} failed: {}", std::io::Error::last_os_error());
            f()
        }))
    }

    /// Cut the link between hosts `a` and `b` (both ways).
    pub fn cut(&mut self, a: usize, b: usize) -> Result<(), TestbedError> {
        self.check(a)?;
        self.check(b)?;
        let key = (a.min(b), a.max(b));
        if a == b || self.cuts.contains(&key) {
            return Ok(());
        }
        ip(&["-n", &self.ns(a), "route", "add", "blackhole", &format!("{}/32", self.addr(b))])?;
        ip(&["-n", &self.ns(b), "route", "add", "blackhole", &format!("{}/32", self.addr(a))])?;
        self.cuts.insert(key);
        Ok(())
    }

    /// Heal the link between hosts `a` and `b`.
    pub fn heal(&mut self, a: usize, b: usize) -> Result<(), TestbedError> {
        let key = (a.min(b), a.max(b));
        if !self.cuts.remove(&key) {
            return Ok(());
        }
        ip(&["-n", &self.ns(a), "route", "del", "blackhole", &format!("{}/32", self.addr(b))])?;
        ip(&["-n", &self.ns(b), "route", "del", "blackhole", &format!("{}/32", self.addr(a))])?;
        Ok(())
    }

    /// Cut every link between the two sides.
    pub fn partition(&mut self, side_a: &[usize], side_b: &[usize]) -> Result<(), TestbedError> {
        for &a in side_a {
            for &b in side_b {
                self.cut(a, b)?;
            }
        }
        Ok(())
    }

    /// Heal every cut link.
    pub fn heal_all(&mut self) -> Result<(), TestbedError> {
        for (a, b) in self.cuts.clone() {
            self.heal(a, b)?;
        }
        Ok(())
    }

    /// The links cut now.
    pub fn cuts(&self) -> Vec<(usize, usize)> {
        self.cuts.iter().copied().collect()
    }

    /// Stop every process (SIGTERM to each group, SIGKILL after `grace`), delete every
    /// namespace, and check that nothing of this testbed is left.
    pub fn teardown(&mut self, grace: Duration) -> Result<(), TestbedError> {
        if self.down {
            return Ok(());
        }
        self.down = true;
        for p in &self.procs {
            p.signal(libc::SIGTERM);
        }
        let until = Instant::now() + grace;
        while self.procs.iter_mut().any(|p| p.try_wait().is_none()) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        for p in &mut self.procs {
            if p.try_wait().is_none() {
                p.kill();
            }
        }
        remove_namespaces(&self.namespaces(), grace);
        let left: Vec<String> =
            namespaces()?.into_iter().filter(|n| n.contains(&format!("{PREFIX}{}-", self.tag))).collect();
        let running: Vec<i32> = self.procs.iter().map(|p| p.pid()).filter(|&p| alive(p)).collect();
        if !left.is_empty() || !running.is_empty() {
            return Err(TestbedError::Leftovers(format!("namespaces {left:?}, processes {running:?}")));
        }
        Ok(())
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if let Err(e) = self.teardown(GRACE) {
            eprintln!("testbed {}: {e}", self.tag);
        }
    }
}

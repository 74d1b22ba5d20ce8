#!/usr/bin/env python3
"""Leader failover of real `peerage run` processes on 127.0.0.1, against T1 + T2 + 2 RTT.

Starts N processes (priority i, so node N-1 leads, then N-2, ...), each bootstrapping from up
to 3 random earlier nodes; waits until all name the top node and lets the swarm run for
`--steady-s` (plus a random part of the heartbeat period); then, `--kills` times, takes the current leader down and measures, from the
status lines' own timestamps (`ts`, Unix ms, same clock as this script):

  failover_ms  from the signal until the LAST survivor's `leader` line names the new leader
               (the highest-priority survivor);
  detect_ms    from the signal until the FIRST survivor's `election_started` line.

Two ways down (`--mode`):
  kill  SIGKILL: the kernel closes the process's sockets, so peers connected to the leader see
        the connection close at once (the node's redial-then-PeerDown path);
  stop  SIGSTOP: the process freezes with its sockets open, a silent crash; only coordinator
        silence (T1 = alive_interval x alive_error_factor) can reveal it. The stopped process
        is SIGKILLed after the measurement.

T1 and T2 are written into the nodes' config file (the defaults of
overlay/src/election/config.rs unless overridden); the RTT is the mean of libp2p's ping RTT
histogram on node 0 (`libp2p_ping_rtt_seconds`, ping every second), scraped from its
Prometheus endpoint at the end. Prints one JSON report (and writes it to `--out`).
Standard library only.
"""

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Node:
    def __init__(self, binary, cfg, i, bootstrap, metrics=None, log="error", log_dir=None):
        args = [binary, "--log", log, "run", "--config", cfg, "--priority", str(i),
                "--listen", "/ip4/127.0.0.1/tcp/0"]
        for b in bootstrap:
            args += ["--bootstrap", b]
        if metrics:
            args += ["--metrics", metrics]
        self.i = i
        err = open(os.path.join(log_dir, f"node{i}.log"), "w") if log_dir else subprocess.DEVNULL
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True)
        self.lock = threading.Lock()
        self.events = []  # (ts, event dict)
        self.node_id = None
        self.addr = None
        self.alive = True
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                print(f"node {self.i}: not a status line: {line!r}", file=sys.stderr)
                continue
            with self.lock:
                self.events.append((ev.get("ts", 0), ev))
                if ev.get("event") == "started":
                    self.node_id = ev.get("node_id")
                elif ev.get("event") == "listening" and "/tcp/" in ev.get("addr", "") and not self.addr:
                    self.addr = ev["addr"]

    def leader(self):
        with self.lock:
            for _, ev in reversed(self.events):
                if ev.get("event") == "leader":
                    return ev.get("leader")
        return None

    def since(self, t_ms, kind):
        with self.lock:
            return [(ts, ev) for ts, ev in self.events if ts >= t_ms and ev.get("event") == kind]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def wait(what, timeout, f):
    until = time.time() + timeout
    while time.time() < until:
        v = f()
        if v:
            return v
        time.sleep(0.02)
    raise SystemExit(f"timed out after {timeout} s waiting for {what}")


def scrape_rtt(metrics):
    body = urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10).read().decode()
    vals = {}
    for line in body.splitlines():
        for name in ("libp2p_ping_rtt_seconds_sum", "libp2p_ping_rtt_seconds_count"):
            if line.startswith(name + " "):
                vals[name] = float(line.split()[-1])
    s, c = vals.get("libp2p_ping_rtt_seconds_sum"), vals.get("libp2p_ping_rtt_seconds_count")
    return (s / c * 1000.0 if c else None), c


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/peerage", help="the peerage binary")
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--algorithm", default="bully")
    ap.add_argument("--mode", choices=["kill", "stop"], default="kill")
    ap.add_argument("--kills", type=int, default=3, help="leaders taken down one after another")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--steady-s", type=float, default=5.0, help="wait after each agreement")
    ap.add_argument("--alive-interval-ms", type=int, default=1000)
    ap.add_argument("--alive-error-factor", type=int, default=3)
    ap.add_argument("--answer-timeout-ms", type=int, default=500)
    ap.add_argument("--out", default=None)
    ap.add_argument("--log", default="error", help="the nodes' log filter (stderr)")
    ap.add_argument("--log-dir", default=None, help="keep each node's log here (node<i>.log)")
    ap.add_argument("--timeline", action="store_true",
                    help="add every survivor's status events after each kill to the report")
    a = ap.parse_args()
    if a.nodes < 2 or a.kills < 1 or a.kills >= a.nodes:
        raise SystemExit("need --nodes >= 2 and 1 <= --kills < --nodes")
    if not os.access(a.bin, os.X_OK):
        raise SystemExit(f"no peerage binary at {a.bin} (build it, or give --bin)")
    seed = a.seed if a.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    print(f"failover: {a.nodes} x {a.algorithm}, mode {a.mode}, seed {seed}", file=sys.stderr)

    # The nodes' config file lives in a temporary directory that is removed on the way out,
    # also when a wait times out or the run is interrupted.
    tmp = tempfile.TemporaryDirectory(prefix="peerage-failover-")
    cfg = os.path.join(tmp.name, "node.toml")
    nodes = []
    try:
        with open(cfg, "w") as f:
            f.write(f'algorithm = "{a.algorithm}"\n[election]\n'
                    f"alive_interval_ms = {a.alive_interval_ms}\nalive_error_factor = {a.alive_error_factor}\n"
                    f"answer_timeout_ms = {a.answer_timeout_ms}\n[timing]\nping_s = 1\n")
        metrics = f"127.0.0.1:{free_port()}"
        t_start = time.time()
        for i in range(a.nodes):
            earlier = [n.addr for n in nodes]
            rng.shuffle(earlier)
            n = Node(a.bin, cfg, i, earlier[:3], metrics if i == 0 else None, a.log, a.log_dir)
            wait(f"node {i}'s address", 30, lambda: n.addr and n.node_id)
            nodes.append(n)
        kills = []
        for k in range(a.kills):
            live = [n for n in nodes if n.alive]
            top = max(live, key=lambda n: n.i)
            wait(f"agreement on node {top.i}", 120, lambda: all(n.leader() == top.node_id for n in live))
            if k == 0:
                agreed_s = time.time() - t_start
            # A random phase against the leader's heartbeat, so the kill does not always land
            # just after an `Alive` (agreement is seen right after a `Coordinator`).
            time.sleep(a.steady_s + rng.uniform(0, a.alive_interval_ms / 1000.0))
            survivors = [n for n in live if n is not top]
            new = max(survivors, key=lambda n: n.i)
            t_kill = int(time.time() * 1000)
            os.kill(top.proc.pid, signal.SIGKILL if a.mode == "kill" else signal.SIGSTOP)
            top.alive = False
            wait(f"re-election of node {new.i}", 120, lambda: all(n.leader() == new.node_id for n in survivors))
            named = []
            for n in survivors:
                hits = [ts for ts, ev in n.since(t_kill, "leader") if ev.get("leader") == new.node_id]
                named.append(min(hits) if hits else None)
            starts = [ts for n in survivors for ts, _ in n.since(t_kill, "election_started")]
            kills.append({
                "killed": top.i,
                "new_leader": new.i,
                "failover_ms": max(t for t in named if t is not None) - t_kill,
                "first_named_ms": min(t for t in named if t is not None) - t_kill,
                "detect_ms": (min(starts) - t_kill) if starts else None,
                "elections_started": len(starts),
            })
            if a.timeline:
                time.sleep(1.0)  # late events (a second announcement) belong to the picture
                ids = {n.node_id: n.i for n in nodes}
                kills[-1]["timeline"] = list(
                    (ts - t_kill, n.i, ev.get("event"), ids.get(ev.get("leader"), ev.get("leader")), ev.get("state"))
                    for n in survivors for ts, ev in n.since(t_kill, "leader") + n.since(t_kill, "election_started"))
                kills[-1]["timeline"].sort(key=lambda e: (e[0], e[1]))
            print(f"kill {k + 1}: {kills[-1]}", file=sys.stderr)
            if a.mode == "stop":
                top.stop()
        rtt_ms, rtt_samples = scrape_rtt(metrics)
    finally:
        for n in nodes:
            n.stop()
        tmp.cleanup()
    t1 = a.alive_interval_ms * a.alive_error_factor
    t2 = a.answer_timeout_ms
    report = {
        "nodes": a.nodes, "algorithm": a.algorithm, "mode": a.mode, "seed": seed,
        "t1_ms": t1, "t2_ms": t2, "rtt_ms_mean": rtt_ms, "rtt_samples": rtt_samples,
        "bound_ms": t1 + t2 + 2 * (rtt_ms or 0.0),
        "first_agreement_s": agreed_s, "kills": kills,
        "load_average": open("/proc/loadavg").read().split()[:3],
    }
    text = json.dumps(report, indent=2)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Recompute the super-peer figures of a `peerage swarm --superpeers ... --out STEM.json`
report from the per-node files written beside it.

Usage: scripts/swarm_superpeers_check.py STEM.json [--quiet]

The report names N (`nodes`) and the seed (`seed`); the files are STEM_nN_sS_nodes.csv.gz
and STEM_nN_sS_pairs.csv.gz (at convergence: `superpeers.at_convergence`) and, when super
peers were killed, STEM_nN_sS_nodes_after_kill.csv.gz and ..._pairs_after_kill.csv.gz
(`superpeers.kill.after`). Columns: overlay/src/superpeer/record.rs; what each holds in a
swarm: node/src/superpeer/rows.rs.

Recomputed per measurement, with the definitions of node/src/superpeer/report.rs:
- live_nodes (rows), heads, unattached, head_share (heads over live nodes);
- latency_to_head_ms over the members: rtt_true_ms with `latency: model`, rtt_measured_ms
  with `latency: ping`; ping_to_head_ms over the members' rtt_measured_ms; each as count,
  mean, p50, p95, max (nearest rank, as scripts/superpeers_check.py; all 0 when empty);
- cluster sizes (the members naming each head): min, mean, max, coefficient of variation
  (population standard deviation over the mean); every row's cluster_size against the count;
- nearest_other_head_ms over the heads' nearest_head_ms (absent with fewer than two heads);
- vivaldi_pairs, vivaldi_err_p50, vivaldi_err_p90: the relative error |pred - true| /
  max(true, 0.001) over the pairs file;
- rtt_pred_ms of every member and every pair against the coordinates in the node file
  (Euclidean distance plus both heights; the node computes it in single precision, so to a
  relative 1e-5).

Standard library only. Exit status 0 when every value agrees (relative difference at most
1e-9), 1 otherwise (each disagreement printed).
"""

import json
import math
import os
import sys

sys.dont_write_bytecode = True  # leave no __pycache__ beside the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from superpeers_check import Checker, num, pop_sd, quantile, read_csv  # noqa: E402

PRED_TOL = 1e-5
COORDS = ["x%d" % i for i in range(8)]


def dist(values):
    """count, mean, p50, p95, max of a sample (overlay::stats::Summary; zeros when empty)."""
    v = sorted(values)
    if not v:
        return {"count": 0.0, "mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0.0}
    return {"count": float(len(v)), "mean": sum(v) / len(v), "p50": quantile(v, 0.5),
            "p95": quantile(v, 0.95), "max": v[-1]}


def predicted(a, b):
    e = math.sqrt(sum((num(a[c]) - num(b[c])) ** 2 for c in COORDS))
    return e + num(a["height_ms"]) + num(b["height_ms"])


def close(want, got):
    return abs(want - got) <= PRED_TOL * max(1.0, abs(want), abs(got))


def check_phase(ck, where, m, nodes, pairs):
    by_id = {r["id"]: r for r in nodes}
    heads = [r for r in nodes if r["role"] == "head"]
    members = [r for r in nodes if r["role"] == "member"]
    size = {r["id"]: 0 for r in heads}
    for r in members:
        if r["head"] not in size:
            ck.bad.append("%s: node %s is a member of %s, which is no head" % (where, r["id"], r["head"]))
            continue
        size[r["head"]] += 1
    for r in nodes:
        if r["role"] == "head" and r["head"] != r["id"]:
            ck.bad.append("%s: head %s names %s as its head" % (where, r["id"], r["head"]))
        if r["role"] in ("head", "member") and r["head"] in size and num(r["cluster_size"]) != size[r["head"]]:
            ck.bad.append("%s: node %s: cluster_size %s, counted %d" % (where, r["id"], r["cluster_size"],
                                                                          size[r["head"]]))
        if r["role"] == "member" and r["rtt_pred_ms"] != "" and r["head"] in by_id:
            got = predicted(r, by_id[r["head"]])
            if not close(num(r["rtt_pred_ms"]), got):
                ck.bad.append("%s: node %s: rtt_pred_ms %s, coordinates give %r" % (where, r["id"],
                                                                                  r["rtt_pred_ms"], got))
    live = len(nodes)
    ck.same(where, "live_nodes", float(m["live_nodes"]), float(live))
    ck.same(where, "heads", float(m["heads"]), float(len(heads)))
    ck.same(where, "unattached", float(m["unattached"]), float(sum(1 for r in nodes if r["role"] == "unattached")))
    ck.same(where, "head_share", m["head_share"], len(heads) / max(live, 1))
    measured = [num(r["rtt_measured_ms"]) for r in members if r["rtt_measured_ms"] != ""]
    if m["latency"] == "model":
        latency = [num(r["rtt_true_ms"]) for r in members]
    else:
        latency = measured
    for name, values in (("latency_to_head_ms", latency), ("ping_to_head_ms", measured)):
        for k, v in dist(values).items():
            ck.same(where, "%s.%s" % (name, k), float(m[name][k]), v)
    sizes = sorted(float(v) for v in size.values())
    if sizes:
        mean = sum(sizes) / len(sizes)
        cv = pop_sd(sizes) / mean if mean > 0 else 0.0
        want = {"cluster_size_min": sizes[0], "cluster_size_mean": mean, "cluster_size_max": sizes[-1],
                "cluster_size_cv": cv}
    else:
        want = {"cluster_size_min": 0.0, "cluster_size_mean": 0.0, "cluster_size_max": 0.0, "cluster_size_cv": 0.0}
    for k, v in want.items():
        ck.same(where, k, float(m[k]), v)
    nearest = [num(r["nearest_head_ms"]) for r in heads if r["nearest_head_ms"] != ""]
    if m["nearest_other_head_ms"] is None:
        if nearest:
            ck.bad.append("%s: nearest_other_head_ms is absent, the rows have %d" % (where, len(nearest)))
    else:
        for k, v in dist(nearest).items():
            ck.same(where, "nearest_other_head_ms.%s" % k, float(m["nearest_other_head_ms"][k]), v)
    errs = []
    for p in pairs:
        t, pred = num(p["rtt_true_ms"]), num(p["rtt_pred_ms"])
        errs.append(abs(pred - t) / max(t, 1e-3))
        a, b = by_id.get(p["a"]), by_id.get(p["b"])
        if a is None or b is None:
            ck.bad.append("%s: pair %s-%s: a node without a row" % (where, p["a"], p["b"]))
        elif not close(pred, predicted(a, b)):
            ck.bad.append("%s: pair %s-%s: rtt_pred_ms %r, coordinates give %r" % (where, p["a"], p["b"], pred,
                                                                                 predicted(a, b)))
    errs.sort()
    ck.same(where, "vivaldi_pairs", float(m["vivaldi_pairs"]), float(len(errs)))
    for k, q in (("vivaldi_err_p50", 0.5), ("vivaldi_err_p90", 0.9)):
        file_value = math.nan if m[k] is None else float(m[k])
        ck.same(where, k, file_value, quantile(errs, q))


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    path = argv[1]
    quiet = "--quiet" in argv[2:]
    with open(path) as f:
        report = json.load(f)
    # Shard 0 of a sharded swarm writes its part, with the report inside.
    if "part_version" in report:
        report = report["report"]
    sp = report.get("superpeers")
    if not sp:
        print("%s: no super-peer report" % path)
        return 1
    stem = path[: -len(".json")] if path.endswith(".json") else path
    base = "%s_n%d_s%d_" % (stem, report["nodes"], report["seed"])
    phases = [("at_convergence", sp["at_convergence"], "")]
    if sp.get("kill"):
        phases.append(("after_kill", sp["kill"]["after"], "_after_kill"))
    ck = Checker()
    for name, m, suffix in phases:
        nodes_path, pairs_path = base + "nodes%s.csv.gz" % suffix, base + "pairs%s.csv.gz" % suffix
        for p in (nodes_path, pairs_path):
            if not os.path.exists(p):
                print("missing %s" % p)
                return 1
        nodes, pairs = read_csv(nodes_path), read_csv(pairs_path)
        check_phase(ck, "%s %s" % (os.path.basename(stem), name), m, nodes, pairs)
        if not quiet:
            print("checked %s: %d nodes, %d pairs" % (name, len(nodes), len(pairs)))
    return ck.verdict()


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
"""Recompute the summary rows of `peerage-lab superpeers` from its per-node files.

Usage: scripts/superpeers_check.py OUT_DIR [--quiet]

For every run (population size N, seed S) in OUT_DIR this reads the per-node files
(superpeers_nN_sS_nodes_METHOD.csv.gz), the random draws (..._random_draws.csv), the
Vivaldi pairs (..._pairs.csv.gz) and the world file (..._world.csv.gz), recomputes every
column of ..._summary.csv with the definitions of experiments/src/superpeers/{measure,report,
yardstick}.rs, and compares. Then it recomputes every summary over seeds
(superpeers_nN_seedsA-B.csv, or superpeers_nN_seedsS.csv) from the summary rows.

Definitions (the same as the lab's):
- percentiles are nearest-rank: the value at index round((len - 1) * q) of the sorted values,
  half rounded away from zero; sums run over the sorted values; the standard deviation of a
  cluster size is the population one, that of a mean over draws or seeds the sample one;
- the random row is over the draws: the mean of each mean, percentile, cluster statistic and
  nearest-super-peer figure, the largest unattached, clusters_over_cap and cluster_max, the
  smallest cluster_min; its 95 % interval is Student's t over the draws' means;
- bound_floor_ms: the mean of the smallest N - k nearest-other-node RTTs (k = super peers
  wanted); bound_ms the larger of it and the Lagrangian bound (which needs the whole RTT
  matrix, so it is taken from the row);
- targets: x_kmedian <= 1.10; x_random <= 0.6 judged only where bound_x_random <= 0.6; no
  cluster over the cap and no node unattached.

Standard library only. Exit status 0 when every recomputed value agrees (relative
difference at most 1e-9), 1 otherwise (each disagreement printed).
"""

import csv
import glob
import gzip
import math
import os
import re
import sys

TOL = 1e-9
TARGET_X_KMEDIAN = 1.10
TARGET_X_RANDOM = 0.6
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042]
NAN = float("nan")


def t975(df):
    if df == 0:
        return NAN
    if df <= 30:
        return T975[df - 1]
    z, d = 1.959964, float(df)
    return z + (z ** 3 + z) / (4.0 * d) + (5.0 * z ** 5 + 16.0 * z ** 3 + 3.0 * z) / (96.0 * d * d)


def num(s):
    return NAN if s is None or s == "" else float(s)


def read_csv(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        return list(csv.DictReader(f))


def quantile(sorted_values, q):
    if not sorted_values:
        return NAN
    i = math.floor((len(sorted_values) - 1) * q + 0.5)
    return sorted_values[min(i, len(sorted_values) - 1)]


def mean(values):
    return sum(values) / len(values) if values else NAN


def pop_sd(sorted_values):
    m = sum(sorted_values) / len(sorted_values)
    return math.sqrt(sum((v - m) ** 2 for v in sorted_values) / len(sorted_values))


def ci95(values):
    """Mean, sample sd, and the 95 % interval of the mean (NaN where undefined)."""
    n = len(values)
    if n == 0:
        return NAN, NAN, NAN, NAN
    m = sum(values) / n
    if n == 1:
        return m, NAN, NAN, NAN
    sd = math.sqrt(sum((x - m) ** 2 for x in values) / (n - 1))
    h = t975(n - 1) * sd / math.sqrt(n)
    return m, sd, m - h, m + h


def measures(rows, cap):
    """The measures of one placement (experiments/src/superpeers/measure.rs)."""
    n = len(rows)
    heads = [r["id"] for r in rows if r["role"] == "head"]
    size = {h: 0 for h in heads}
    rtts = []
    unattached = 0
    for r in rows:
        if r["role"] == "member":
            size[r["head"]] += 1
            rtts.append(float(r["rtt_true_ms"]))
        elif r["role"] == "unattached":
            unattached += 1
    problems = []
    for r in rows:
        if r["role"] == "head" and int(r["cluster_size"]) != size[r["id"]]:
            problems.append("node %s: cluster_size %s, counted %d" % (r["id"], r["cluster_size"], size[r["id"]]))
        if r["role"] == "member" and int(r["cluster_size"]) != size[r["head"]]:
            problems.append("node %s: cluster_size %s, its head has %d" % (r["id"], r["cluster_size"], size[r["head"]]))
    rtts.sort()
    sizes = sorted(float(size[h]) for h in heads)
    nearest = sorted(num(r["nearest_head_ms"]) for r in rows if r["role"] == "head" and r["nearest_head_ms"] != "")
    nearest = [v for v in nearest if math.isfinite(v)]
    size_mean = sum(sizes) / len(sizes) if sizes else 0.0
    size_sd = pop_sd(sizes) if sizes else 0.0
    nn_mean = sum(nearest) / len(nearest) if nearest else 0.0
    nn_cv = (pop_sd(nearest) / nn_mean if nn_mean > 0 else NAN) if nearest else NAN
    m = {
        "super_peers": float(len(heads)),
        "share": len(heads) / max(n, 1),
        "unattached": float(unattached),
        "rtt_mean_ms": sum(rtts) / len(rtts) if rtts else 0.0,
        "rtt_p50_ms": quantile(rtts, 0.5),
        "rtt_p95_ms": quantile(rtts, 0.95),
        "rtt_max_ms": rtts[-1] if rtts else NAN,
        "cluster_mean": size_mean,
        "cluster_stddev": size_sd,
        "cluster_cv": (size_sd / size_mean if size_mean > 0 else NAN) if sizes else NAN,
        "cluster_min": sizes[0] if sizes else 0.0,
        "cluster_max": sizes[-1] if sizes else 0.0,
        "cap": float(cap),
        "clusters_over_cap": float(sum(1 for s in sizes if s > cap)),
        "nearest_sp_mean_ms": nn_mean,
        "nearest_sp_cv": nn_cv,
    }
    return m, problems


MEASURES = ["super_peers", "share", "unattached", "rtt_mean_ms", "rtt_p50_ms", "rtt_p95_ms", "rtt_max_ms",
            "cluster_mean", "cluster_stddev", "cluster_cv", "cluster_min", "cluster_max", "cap",
            "clusters_over_cap", "nearest_sp_mean_ms", "nearest_sp_cv"]


def over_draws(draws):
    """The random row's measures from its draws (experiments/src/superpeers/report.rs)."""
    col = lambda k: [num(d[k]) for d in draws]
    m = {k: mean(col(k)) for k in MEASURES}
    for k in ("unattached", "clusters_over_cap", "cluster_max"):
        m[k] = max(col(k))
    m["cluster_min"] = min(col("cluster_min"))
    return m


class Checker:
    def __init__(self):
        self.compared = 0
        self.bad = []

    def same(self, where, key, want, got):
        self.compared += 1
        if isinstance(want, bool) or isinstance(got, bool):
            ok = bool(want) == bool(got)
        elif math.isnan(want) and math.isnan(got):
            ok = True
        elif math.isnan(want) or math.isnan(got):
            ok = False
        else:
            ok = abs(want - got) <= TOL * max(1.0, abs(want), abs(got))
        if not ok:
            self.bad.append("%s %s: file says %r, recomputed %r" % (where, key, want, got))

    def verdict(self):
        """Print every disagreement and the count; the exit status (0: all agree)."""
        for b in self.bad:
            print("MISMATCH " + b)
        print("%d values compared, %d disagree" % (self.compared, len(self.bad)))
        return 1 if self.bad else 0


def check_run(ck, d, stem):
    summary = read_csv(os.path.join(d, stem + "_summary.csv"))
    by_method = {r["method"]: r for r in summary}
    recomputed = {}
    for r in summary:
        method = r["method"]
        cap = num(r["cap"])
        where = "%s %s" % (stem, method)
        nodes = read_csv(os.path.join(d, "%s_nodes_%s.csv.gz" % (stem, method)))
        m, problems = measures(nodes, cap)
        for p in problems:
            ck.bad.append("%s: %s" % (where, p))
        if method == "random":
            draws = read_csv(os.path.join(d, stem + "_random_draws.csv"))
            draws.sort(key=lambda x: int(x["draw"]))
            first = [x for x in draws if int(x["draw"]) == 0]
            if not first:
                ck.bad.append("%s: no draw 0 in the draws file" % where)
            else:
                for k in MEASURES:
                    ck.same(where + " draw 0 (per-node file vs draws file)", k, num(first[0][k]), m[k])
            m = over_draws(draws)
            mu, _, lo, hi = ci95([num(x["rtt_mean_ms"]) for x in draws])
            ck.same(where, "rtt_mean_ci95_lo", num(r["rtt_mean_ci95_lo"]), lo)
            ck.same(where, "rtt_mean_ci95_hi", num(r["rtt_mean_ci95_hi"]), hi)
            ck.same(where, "draws", num(r["draws"]), float(len(draws)))
            ck.same(where, "assign_gap_ms", num(r["assign_gap_ms"]), max(num(x["assign_gap_ms"]) for x in draws))
        for k in MEASURES:
            ck.same(where, k, num(r[k]), m[k])
        recomputed[method] = m
    kmedian = recomputed["kmedian"]["rtt_mean_ms"]
    random = recomputed["random"]["rtt_mean_ms"]
    world = read_csv(os.path.join(d, stem + "_world.csv.gz"))
    nearest = sorted(float(x["nearest_other_ms"]) for x in world)
    k = int(round(recomputed["kmedian"]["super_peers"]))
    floor = sum(nearest[: len(nearest) - k]) / (len(nearest) - k) if k < len(nearest) else 0.0
    pairs = read_csv(os.path.join(d, stem + "_pairs.csv.gz"))
    errs = sorted(abs(float(p["rtt_pred_ms"]) - float(p["rtt_true_ms"])) / max(float(p["rtt_true_ms"]), 1e-3)
                  for p in pairs)
    for r in summary:
        where = "%s %s" % (stem, r["method"])
        m = recomputed[r["method"]]
        lagrangian = num(r["bound_lagrangian_ms"])
        bound = floor if math.isnan(lagrangian) else max(lagrangian, floor)
        ck.same(where, "x_kmedian", num(r["x_kmedian"]), m["rtt_mean_ms"] / kmedian)
        ck.same(where, "x_random", num(r["x_random"]), m["rtt_mean_ms"] / random)
        ck.same(where, "bound_floor_ms", num(r["bound_floor_ms"]), floor)
        ck.same(where, "bound_ms", num(r["bound_ms"]), bound)
        ck.same(where, "bound_x_random", num(r["bound_x_random"]), bound / random)
        ck.same(where, "vivaldi_err_p50", num(r["vivaldi_err_p50"]), quantile(errs, 0.5))
        ck.same(where, "vivaldi_err_p90", num(r["vivaldi_err_p90"]), quantile(errs, 0.9))
    return summary


def verdict(r):
    eligible = num(r["bound_x_random"]) <= TARGET_X_RANDOM
    return {
        "kmedian_met": num(r["x_kmedian"]) <= TARGET_X_KMEDIAN,
        "random_eligible": eligible,
        "random_met": eligible and num(r["x_random"]) <= TARGET_X_RANDOM,
        "load_met": num(r["clusters_over_cap"]) == 0 and num(r["unattached"]) == 0,
    }


def check_seeds(ck, path, n, rows):
    file_rows = read_csv(path)
    methods = []
    for r in rows:
        if r["method"] not in methods:
            methods.append(r["method"])
    if [r["method"] for r in file_rows] != methods:
        ck.bad.append("%s: methods %s, expected %s" % (path, [r["method"] for r in file_rows], methods))
        return
    for f in file_rows:
        rs = [r for r in rows if r["method"] == f["method"]]
        where = "%s %s" % (os.path.basename(path), f["method"])
        col = lambda k: [num(r[k]) for r in rs]
        mu, sd, lo, hi = ci95(col("rtt_mean_ms"))
        xk, xk_sd, _, _ = ci95(col("x_kmedian"))
        xr, xr_sd, _, _ = ci95(col("x_random"))
        want = {
            "runs": float(len(rs)), "rtt_mean_ms": mu, "rtt_sd_ms": sd, "rtt_ci95_lo": lo, "rtt_ci95_hi": hi,
            "rtt_min_ms": min(col("rtt_mean_ms")), "rtt_max_ms": max(col("rtt_mean_ms")),
            "x_kmedian_mean": xk, "x_kmedian_sd": xk_sd, "x_kmedian_max": max(col("x_kmedian")),
            "x_random_mean": xr, "x_random_sd": xr_sd, "x_random_max": max(col("x_random")),
            "super_peers_mean": sum(col("super_peers")) / len(rs),
        }
        if all(r["kind"] == "protocol" for r in rs):
            v = [verdict(r) for r in rs]
            want["kmedian_met"] = float(sum(x["kmedian_met"] for x in v))
            want["random_met"] = float(sum(x["random_met"] for x in v))
            want["random_eligible"] = float(sum(x["random_eligible"] for x in v))
            want["load_met"] = float(sum(x["load_met"] for x in v))
        for k, value in want.items():
            ck.same(where, k, num(f[k]), value)


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    d = argv[1]
    quiet = "--quiet" in argv[2:]
    ck = Checker()
    runs = {}
    for path in sorted(glob.glob(os.path.join(d, "superpeers_n*_s*_summary.csv"))):
        stem = os.path.basename(path)[: -len("_summary.csv")]
        m = re.fullmatch(r"superpeers_n(\d+)_s(\d+)", stem)
        if not m:
            continue
        rows = check_run(ck, d, stem)
        runs[(int(m.group(1)), int(m.group(2)))] = rows
        if not quiet:
            print("checked %s: %d rows" % (stem, len(rows)))
    for path in sorted(glob.glob(os.path.join(d, "superpeers_n*_seeds*.csv"))):
        m = re.fullmatch(r"superpeers_n(\d+)_seeds(\d+)(?:-(\d+))?\.csv", os.path.basename(path))
        if not m:
            continue
        n, a = int(m.group(1)), int(m.group(2))
        b = int(m.group(3)) if m.group(3) else a
        rows = []
        for s in range(a, b + 1):
            if (n, s) not in runs:
                ck.bad.append("%s: the run of seed %d is missing" % (path, s))
                continue
            rows.extend(runs[(n, s)])
        check_seeds(ck, path, n, rows)
        if not quiet:
            print("checked %s" % os.path.basename(path))
    if not runs:
        print("no superpeers_n*_s*_summary.csv in %s" % d)
        return 1
    return ck.verdict()


if __name__ == "__main__":
    sys.exit(main(sys.argv))

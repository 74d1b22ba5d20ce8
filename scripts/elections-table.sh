#!/usr/bin/env bash
# Regenerate the election tables of docs/results/elections.md, section "Elections in the
# simulator": messages per election (best/worst/average over seeds) and virtual
# time to agreement for every algorithm at N = 16, 64, 256, 1,024, 4,096, and 100,000 for the
# non-quadratic algorithms, plus the simulator benchmark. Prints Markdown on stdout; CSV and
# JSON of every run go to $OUT (default target/elections-table).
#
# Usage: scripts/elections-table.sh [SEEDS_SMALL] [SEEDS_4096] [SEEDS_100K]
# Defaults: 20 seeds up to N = 1,024, 3 at N = 4,096, 2 at N = 100,000. Takes tens of
# minutes (bully and fast bully with all initiating at N = 4,096: ~17 M messages per seed).
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS_SMALL=${1:-20}
SEEDS_4096=${2:-3}
SEEDS_100K=${3:-2}
OUT=${OUT:-target/elections-table}
LAB=${LAB:-}
if [[ -z "$LAB" ]]; then
  cargo build --release -q -p peerage-experiments --bin peerage-lab
  LAB="${CARGO_TARGET_DIR:-target}/release/peerage-lab"
fi
mkdir -p "$OUT"
COMMON=(--latency const:5ms --detect-delay 100ms --topology regular:4 --capacities 1000)

echo "Machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'); $(date -u +%Y-%m-%dT%H:%MZ)"
echo
for init in 1 all; do
  echo "### Initiators: $init (no crashes, const 5 ms latency; echo on a random 4-regular topology)"
  echo
  first=1
  for spec in "16,64,256,1024:$SEEDS_SMALL" "4096:$SEEDS_4096" "100000:$SEEDS_100K"; do
    nodes=${spec%%:*}; seeds=${spec##*:}
    if [[ $nodes == 100000 ]]; then
      # Quadratic algorithms are left out at N = 100,000. So is the list-based ring: each hop
      # scans and extends the O(N) list it carries (O(N^2) work and bytes per election, about
      # 10^10 rank comparisons at N = 100,000), too slow for this script on a shared 2-core
      # machine. Run it by hand: peerage-lab elections --algorithm ring --nodes 100000 ...
      algs="chang-roberts,villadangos,echo"
    else
      algs=all
      [[ $init == all && $nodes == 4096 ]] && algs="bully,fast-bully,chang-roberts,villadangos,echo"
    fi
    bytes=(); [[ $nodes != 100000 ]] && bytes=(--count-bytes)
    "$LAB" elections --algorithm "$algs" --nodes "$nodes" --initiators "$init" --seeds "0..$seeds" \
      "${COMMON[@]}" "${bytes[@]}" --no-leaders --out "$OUT/init-$init-n$nodes" --markdown \
      | { if [[ $first == 1 ]]; then cat; else tail -n +3; fi; }
    first=0
  done
  echo
done

echo "### Simulator throughput and memory"
echo
echo '```'
"$LAB" bench --algorithm chang-roberts --nodes 100000 --initiators all --latency const:5ms --seeds 0..3 2>&1
"$LAB" bench --algorithm bully --nodes 4096 --initiators all --latency const:5ms --seeds 0..1 2>&1
"$LAB" bench --algorithm echo --nodes 100000 --initiators all --latency range:1ms..50ms --seeds 0..1 2>&1
echo '```'

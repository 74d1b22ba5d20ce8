#!/usr/bin/env bash
# Run `peerage swarm` benchmarks and keep each JSON report under out/swarm/.
# Usage: scripts/swarm.sh [N ...]   (default: 50 200 500 1000)
# Extra flags for peerage swarm can be given in PEERAGE_SWARM_ARGS, e.g.
#   PEERAGE_SWARM_ARGS="--algorithm villadangos --kill-leader-at 5" scripts/swarm.sh 200
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p peerage-node --bin peerage
BIN="${CARGO_TARGET_DIR:-target}/release/peerage"
mkdir -p out/swarm
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(50 200 500 1000)
for n in "${sizes[@]}"; do
  out="out/swarm/n${n}-$(date -u +%Y%m%dT%H%M%SZ).json"
  # shellcheck disable=SC2086
  "$BIN" --log warn swarm --nodes "$n" ${PEERAGE_SWARM_ARGS:-} --out "$out"
  echo "report: $out" >&2
done

#!/usr/bin/env bash
# js-libp2p interop: two `peerage run` nodes on loopback TCP and a js-libp2p peer that
# connects, identifies, pings, finds node B in the DHT through node A and gossips on the
# election topic (scripts/js-interop/interop.mjs). Needs node and npm; installs the js
# packages from the npm registry into scripts/js-interop/node_modules on first use.
# Usage: bash scripts/js-interop/run.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$(mktemp -d)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
(cd "$here" && [ -d node_modules ] || npm install --no-audit --no-fund >/dev/null)
cargo build -q -p peerage-node --manifest-path "$root/Cargo.toml"
bin="$root/target/debug/peerage"
addr_of() { # first TCP listen address in a node's status lines
    for _ in $(seq 100); do
        a=$(grep -o '"addr":"/ip4/127.0.0.1/tcp/[^"]*' "$1" 2>/dev/null | head -1 | cut -d'"' -f4 || true)
        [ -n "$a" ] && { echo "$a"; return; }
        sleep 0.1
    done
    echo "no listen address in $1" >&2; exit 1
}
"$bin" run --listen /ip4/127.0.0.1/tcp/0 >"$work/a.json" 2>"$work/a.log" & pids+=($!)
a=$(addr_of "$work/a.json")
"$bin" run --listen /ip4/127.0.0.1/tcp/0 --bootstrap "$a" >"$work/b.json" 2>"$work/b.log" & pids+=($!)
b=$(addr_of "$work/b.json")
sleep 3
node --import "$here/polyfill.mjs" "$here/interop.mjs" "$a" "$b"

#!/usr/bin/env bash
# js-libp2p interop: four `peerage run` nodes on loopback TCP and two js-libp2p peers that
# connect, identify, ping, look a node up in the DHT and gossip on the election topic both
# ways (scripts/js-interop/interop.mjs says what is checked). Exits non-zero if any check
# fails. Needs node (20 or later) and npm; installs the pinned js packages
# (package-lock.json) from the npm registry into scripts/js-interop/node_modules on first use.
#
# The nodes form a star around A (`target_low = 1`: nobody dials beyond its bootstrap peer).
# D has the highest priority and joins once A, B and C have elected, so it becomes the bully
# leader while connected to A alone: its `Coordinator` and `Alive` heartbeats go to three
# members it is mostly not connected to, which the node sends once over gossipsub
# (`node/src/election/driver.rs`), and A relays them to the js peer.
# Usage: bash scripts/js-interop/run.sh   (node logs: set KEEP_LOGS=<dir> to keep them there)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$(mktemp -d)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ -n "${KEEP_LOGS:-}" ]; then mkdir -p "$KEEP_LOGS" && cp "$work"/* "$KEEP_LOGS"/; fi
    rm -rf "$work"
}
trap cleanup EXIT
(cd "$here" && [ -d node_modules ] || npm ci --no-audit --no-fund >/dev/null)
cargo build -q --release -p peerage-node --manifest-path "$root/Cargo.toml"
bin="$root/target/release/peerage"
addr_of() { # first TCP listen address in a node's status lines
    for _ in $(seq 100); do
        a=$(grep -o '"addr":"/ip4/127.0.0.1/tcp/[^"]*' "$1" 2>/dev/null | head -1 | cut -d'"' -f4 || true)
        [ -n "$a" ] && { echo "$a"; return; }
        sleep 0.1
    done
    echo "no listen address in $1" >&2
    exit 1
}
printf '[limits]\ntarget_low = 1\n' >"$work/star.toml"
start() { # name priority [bootstrap]
    "$bin" run --config "$work/star.toml" --listen /ip4/127.0.0.1/tcp/0 --priority "$2" \
        ${3:+--bootstrap "$3"} >"$work/$1.json" 2>"$work/$1.log" &
    pids+=($!)
}
start a 1
a=$(addr_of "$work/a.json")
start b 2 "$a"
start c 3 "$a"
b=$(addr_of "$work/b.json")
c=$(addr_of "$work/c.json")
sleep 5
start d 9 "$a"
d=$(addr_of "$work/d.json")
sleep 4
node --import "$here/polyfill.mjs" "$here/interop.mjs" "$a" "$b" "$c" "$d"

#!/bin/sh
# Runs the same load against bidi-http (benches' `http-server`, flow `stream` at
# /bidi-flow/stream), raw axum (the same process, axum's Sse at /raw/stream), Genkit JS
# (server.mjs, telemetry off) and plain node:http (raw.mjs), each
# with two clients: load.mjs (Node fetch) and `http-load` (its Rust twin, same checks), REPS
# times (default 3). Prints one line per run:
#   <server> <client> <requests> <concurrency> <chunksPerRequest> <client's JSON>
# Usage, from this directory after `npm ci` and
# `cargo build --release -p benches --bins` (CARGO_TARGET_DIR honoured):
#   ./vs-bidi.sh [REPS] > results/vs-bidi.txt
set -eu
REPS=${1:-3}
TARGET=${CARGO_TARGET_DIR:-../../../target}
BIDI_SERVER="$TARGET/release/http-server"
RUST_LOAD="$TARGET/release/http-load"
CONFIGS=${CONFIGS:-"5000:1:1 10000:10:1 10000:50:1 2000:10:100 200:10:10000 20:1:100000"}
for bin in "$BIDI_SERVER" "$RUST_LOAD"; do
  [ -x "$bin" ] || { echo "$bin missing: cargo build --release -p benches --bins" >&2; exit 1; }
done
LOGS=$(mktemp -d)
PIDS=""
trap 'for p in $PIDS; do kill "$p" 2>/dev/null || true; done; rm -rf "$LOGS"' EXIT INT TERM

start() { # name, command...
  name=$1; shift
  "$@" > "$LOGS/$name" 2>&1 &
  PIDS="$PIDS $!"
  for _ in $(seq 1 100); do
    if grep -q '^http://' "$LOGS/$name"; then return; fi
    sleep 0.1
  done
  echo "$name did not start:" >&2; cat "$LOGS/$name" >&2; exit 1
}

start bidi "$BIDI_SERVER" 0
start genkit node server.mjs 0 --telemetry=off
start raw node raw.mjs 0

for rep in $(seq 1 "$REPS"); do
  for config in $CONFIGS; do
    args=$(echo "$config" | tr ':' ' ')
    for name in bidi axum genkit raw; do
      case $name in
        bidi) url="$(head -1 "$LOGS/bidi")/bidi-flow/stream" ;;
        axum) url="$(head -1 "$LOGS/bidi")/raw/stream" ;;
        *) url="$(head -1 "$LOGS/$name")/stream" ;;
      esac
      # shellcheck disable=SC2086
      echo "$name node $args $(node load.mjs "$url" $args)"
      # shellcheck disable=SC2086
      echo "$name rust $args $("$RUST_LOAD" "$url" $args)"
    done
  done
done

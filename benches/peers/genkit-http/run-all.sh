#!/bin/sh
# Runs load.mjs against raw.mjs, server.mjs (telemetry off) and server.mjs (telemetry default),
# the same configurations REPS times each (default 3), printing one line per run:
#   <server> <requests> <concurrency> <chunksPerRequest> <load.mjs JSON>
# Usage, from this directory after `npm ci`: ./run-all.sh [REPS]
set -eu
REPS=${1:-3}
CONFIGS="5000:1:1 10000:10:1 10000:50:1 2000:10:100 200:10:10000 20:1:100000"
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

start raw node raw.mjs 0
start genkit-off node server.mjs 0 --telemetry=off
start genkit-default node server.mjs 0 --telemetry=default

for rep in $(seq 1 "$REPS"); do
  for config in $CONFIGS; do
    args=$(echo "$config" | tr ':' ' ')
    for name in raw genkit-off genkit-default; do
      url="$(head -1 "$LOGS/$name")/stream"
      # shellcheck disable=SC2086
      echo "$name $args $(node load.mjs "$url" $args)"
    done
  done
done

#!/usr/bin/env bash
# Times a start of `dagr serve` and reads its memory once it idles
# (docs/BENCHMARKS.md, "Start and idle memory"):
#
#   scripts/bench-start.sh BINARY DATA_DIR [fresh]
#
# `fresh` removes DATA_DIR first (a first start: the built-in plugins are
# compiled into the code cache). Prints the seconds until /healthz answers,
# until it says "ok" (ready), and the RSS 4 s after that.
set -euo pipefail
BIN=$1 DIR=$2 PORT=${PORT:-18181}
[ "${3:-}" = fresh ] && rm -rf "$DIR"
start=$(date +%s.%N)
"$BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$DIR" > "$DIR.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null || true' EXIT
until curl -sf "127.0.0.1:$PORT/healthz" > /dev/null; do sleep 0.01; done
answered=$(date +%s.%N)
until curl -sf "127.0.0.1:$PORT/healthz" | grep -q '"status":"ok"'; do sleep 0.01; done
ready=$(date +%s.%N)
sleep 4
echo "healthz $(echo "$answered - $start" | bc) s, ready $(echo "$ready - $start" | bc) s;" \
    "$(grep -E 'VmRSS|RssAnon|RssFile' /proc/$PID/status | tr -s ' \t\n' ' ')"

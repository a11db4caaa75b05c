#!/usr/bin/env bash
# What watching a fan-out costs, process by process (issue 15): one
# `dagr serve`, a fan-out of TASKS `echo` tasks measured with `dagr bench
# --remote`, alternating nothing watching and 100 SSE followers of every
# event; prints each fan-out's wall time, the server's CPU and the bench
# process's own CPU (the followers live there, on the same cores).
#
#   scripts/bench-events-cpu.sh [ROUNDS] [TASKS]
#
# The binary is $DAGR_BIN (default target/release/dagr).
set -euo pipefail
. "$(dirname "$0")/bench-serve.sh"
ROUNDS=${1:-2}
TASKS=${2:-10000}
start_serve events-cpu
cpu() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
times=$(mktemp)
for round in $(seq "$ROUNDS"); do
  for extra in "" "--sse 100"; do
    before=$(cpu)
    # shellcheck disable=SC2086 # $extra is two words or none
    /usr/bin/time -o "$times" -f "bench_cpu_s=%U+%S" "$BIN" bench --remote "$URL" --dag "fanout:$TASKS" --json $extra
    after=$(cpu)
    echo "round $round [${extra:-nothing watching}] server_cpu_ms=$(( (after - before) * 10 )) $(cat "$times")"
  done
done
rm -f "$times"

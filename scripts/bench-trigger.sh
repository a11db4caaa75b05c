#!/usr/bin/env bash
# How long a trigger takes (POST /v1/workflows/NAME/runs, answered once the
# run is stored): one `dagr serve` (SQLite), a one-task workflow, 50
# triggers to warm up, then N in a row, each timed by curl (`time_total`);
# prints their p50 and p90. The runs themselves go on meanwhile.
#
#   scripts/bench-trigger.sh [N]      # default 300
#
# The binary is $DAGR_BIN (default target/release/dagr).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${DAGR_BIN:-$ROOT/target/release/dagr}
[ -x "$BIN" ] || { echo "no $BIN (cargo build --release -p dagr)" >&2; exit 1; }
N=${1:-300}
W=$(mktemp -d /tmp/dagr-bench-trigger.XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
DAGR_LOG=warn "$BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$W/data" >"$W/log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 600); do curl -sf "127.0.0.1:$PORT/healthz" | grep -q '"ok"' && break; sleep 0.1; done
TOKEN=$(cat "$W/data/token")
URL="http://127.0.0.1:$PORT"
curl -sf -H "authorization: Bearer $TOKEN" -H 'content-type: application/yaml' \
  --data-binary $'name: one\ntasks:\n  - name: a\n    plugin: echo\n' "$URL/v1/workflows" >/dev/null
trigger() { curl -sf -o /dev/null -w '%{time_total}\n' -X POST -H "authorization: Bearer $TOKEN" "$URL/v1/workflows/one/runs"; }
for _ in $(seq 50); do trigger >/dev/null; done
for _ in $(seq "$N"); do trigger; done | sort -n |
  awk '{ms[NR] = $1 * 1000} END {printf "%d triggers: p50 %.2f ms, p90 %.2f ms\n", NR, ms[int(NR * 0.5)], ms[int(NR * 0.9)]}'

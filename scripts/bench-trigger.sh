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
. "$(dirname "$0")/bench-serve.sh"
N=${1:-300}
start_serve trigger
curl -sf -H "authorization: Bearer $DAGR_TOKEN" -H 'content-type: application/yaml' \
  --data-binary $'name: one\ntasks:\n  - name: a\n    plugin: echo\n' "$URL/v1/workflows" >/dev/null
trigger() { curl -sf -o /dev/null -w '%{time_total}\n' -X POST -H "authorization: Bearer $DAGR_TOKEN" "$URL/v1/workflows/one/runs"; }
for _ in $(seq 50); do trigger >/dev/null; done
for _ in $(seq "$N"); do trigger; done | sort -n |
  awk '{ms[NR] = $1 * 1000} END {printf "%d triggers: p50 %.2f ms, p90 %.2f ms\n", NR, ms[int(NR * 0.5)], ms[int(NR * 0.9)]}'

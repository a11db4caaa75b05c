#!/usr/bin/env bash
# Issue 18, item 7: Buffalo's resource scheduler against each master's own
# view, in the 3 masters + 3 workers cluster of tests/local-cluster.sh
# (PostgreSQL, etcd, an API node; everything on this machine).
#
#   DAGR_BIN=/work/target-rel/release/dagr scripts/bench-resources.sh [ROUNDS]
#
# Each round brings up a fresh cluster per mode (`[master] resources =
# "local"`, then `"leader"`), alternating, and measures:
# - throughput: 6 concurrent fan-outs of 1,000 `echo` (2 runs), 6 of 5,000
#   (1 run), one fan-out of 2,000 (2 runs), a chain of 40 `fib` n = 1 (3
#   runs);
# - dispatch latency: for every task, from the engine's decision that it is
#   ready (`task.state` → queued) to its first attempt's dispatch (→
#   running), p50 / p99 / max per workflow, from the events table (in the
#   fan-outs it includes the wait for a free slot: 30,006 tasks, 768
#   slots);
# - refusals: attempts workers refused (the masters' `dispatch_refused`);
# - uneven load: attempts per worker over the whole round.
set -euo pipefail
ROUNDS=${1:-2}
BIN=${DAGR_BIN:?set DAGR_BIN to a dagr binary}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PG=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
OUT=${DAGR_BENCH_OUT:-/tmp/bench-resources}
mkdir -p "$OUT"

bench() { "$BIN" bench --remote "$API" "$@" --json 2>/dev/null | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
print(" ".join("%s:%.0f/s(%.0fms)" % (r["state"][:4], r["tasks_per_s"], r["wall_ms"]) for r in rows))'; }

for round in $(seq 1 "$ROUNDS"); do
  for mode in local leader; do
    dir="$OUT/$mode-$round"
    rm -rf "$dir"
    export DAGR_CLUSTER_DIR="$dir" DAGR_BIN="$BIN" DAGR_MASTER__RESOURCES="$mode"
    API=$("$ROOT/tests/local-cluster.sh" up --masters 3 --workers 3 --ttl 3s | tail -n 1)
    export DAGR_TOKEN; DAGR_TOKEN=$(cat "$dir/api/token")
    f6k=$(bench --dag fanout:1000 --concurrent 6 --runs 2)
    f30k=$(bench --dag fanout:5000 --concurrent 6 --runs 1)
    f2k=$(bench --dag fanout:2000 --runs 2)
    chain=$(bench --dag chain:40 --plugin fib --fib-n 1 --runs 3)
    url=$(cat "$dir/postgres.url")
    # (Without nested loops: the planner guesses one row for each side and
    # would compare every task with every task.)
    latency=$(PGOPTIONS='-c enable_nestloop=off' "$PG/psql" "$url" -Atc "
      with q as (select run_id, task, min(at) at from events
                 where kind = 'task.state' and data like '%\"to\":\"queued\"%' group by 1, 2),
           r as (select run_id, task, min(at) at from events
                 where kind = 'task.state' and data like '%\"to\":\"running\"%' group by 1, 2)
      select string_agg(line, ', ' order by line) from (
        select runs.workflow || ' ' || percentile_disc(0.5) within group (order by r.at - q.at) || '/' ||
               percentile_disc(0.99) within group (order by r.at - q.at) || '/' || max(r.at - q.at) || ' ms' line
        from q join r using (run_id, task) join runs on runs.id = q.run_id group by runs.workflow) l")
    per_worker=$("$PG/psql" "$url" -Atc "select string_agg(worker || '=' || n, ' ' order by worker) from
      (select worker, count(*) n from attempts group by worker) w")
    secret=$(sed -n 's/^secret = "\(.*\)"/\1/p' "$dir/dagr.toml")
    refused=0
    for m in m1 m2 m3; do
      addr=$(grep -o 'listening on [^ ]*' "$dir/$m.log" | tail -n 1 | cut -d' ' -f3)
      n=$(curl -s -H "x-dagr-cluster-secret: $secret" "$addr/internal/load" |
        python3 -c 'import json,sys; print(json.load(sys.stdin).get("dispatch_refused", 0))')
      refused=$((refused + n))
    done
    echo "round $round $mode: 6x1000 $f6k | 6x5000 $f30k | 1x2000 $f2k | chain40 $chain | ready->dispatch p50/p99/max $latency | refused $refused | attempts per worker $per_worker" | tee -a "$OUT/summary.txt"
    "$ROOT/tests/local-cluster.sh" down >/dev/null 2>&1 || true
  done
done

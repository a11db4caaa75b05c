#!/usr/bin/env bash
# Where a cluster's CPU goes: the 3 masters + 3 workers cluster of
# tests/local-cluster.sh (PostgreSQL, etcd, an API node; everything on this
# machine), ROUNDS rounds of six concurrent fan-outs of 5,000 `echo` tasks
# after one to warm up. Per round: throughput, and the CPU each kind of
# process spent (/proc/PID/stat); at the end, PostgreSQL's row counters
# for the engine's tables (inserts, updates, HOT updates).
#
#   DAGR_BIN=/work/target-rel/release/dagr scripts/bench-cluster-cpu.sh [ROUNDS]
#
# With CAP=N the rounds alternate between the default tenant without a
# limit and with `max_concurrent` N (a limit counted per slot: the runs
# made meanwhile share one slot, so one master drives them, and each
# attempt start is checked against the other masters' in the store), so
# the two compare in one cluster.
set -euo pipefail
ROUNDS=${1:-3}
BIN=${DAGR_BIN:?set DAGR_BIN to a dagr binary}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PG=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
DIR=$(mktemp -d /tmp/dagr-bench-cluster-cpu.XXXXXX)
chmod 755 "$DIR" # PostgreSQL runs as another user
export DAGR_CLUSTER_DIR="$DIR/cluster" DAGR_BIN="$BIN"
trap '"$ROOT/tests/local-cluster.sh" down >/dev/null 2>&1 || true; rm -rf "$DIR" 2>/dev/null || true' EXIT
API=$("$ROOT/tests/local-cluster.sh" up --masters 3 --workers 3 --ttl 3s | tail -n 1)
export DAGR_TOKEN; DAGR_TOKEN=$(cat "$DAGR_CLUSTER_DIR/api/token")
URL=$(cat "$DAGR_CLUSTER_DIR/postgres.url")

# CPU ms by kind of process (the cluster's own, found by its directory).
cpu() {
  for p in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
    case "$cmd" in
      *"$DAGR_CLUSTER_DIR"*) ;;
      postgres:*) ;; # PostgreSQL's backends rename themselves
      *) continue ;;
    esac
    case "$cmd" in
      *postgres*) kind=postgres ;;
      *etcd*) kind=etcd ;;
      *" master "*) kind=masters ;;
      *" worker "*) kind=workers ;;
      *" api "*) kind=api ;;
      *) continue ;;
    esac
    echo "$kind $(awk '{print $14 + $15}' "$p/stat" 2>/dev/null || echo 0)"
  done | awk '{a[$1] += $2} END {for (k in a) print k, a[k] * 10}' | sort
}

"$BIN" bench --remote "$API" --dag fanout:5000 --concurrent 6 --runs 1 >/dev/null 2>&1
limit() { # uncapped | capped: the default tenant's max_concurrent
  if [ "$1" = capped ]; then set -- --max-concurrent "$CAP"; else set -- --clear max-concurrent; fi
  "$BIN" tenant set default "$@" --server "$API" --token "$(cat "$DAGR_CLUSTER_DIR/api/admin.token")" >/dev/null
}
for round in $(seq "$ROUNDS"); do
  mode=""
  if [ -n "${CAP:-}" ]; then
    if [ $((round % 2)) = 1 ]; then mode=uncapped; else mode=capped; fi
    limit "$mode"
  fi
  before=$(cpu)
  speed=$("$BIN" bench --remote "$API" --dag fanout:5000 --concurrent 6 --runs 1 --json 2>/dev/null |
    python3 -c 'import json,sys; r=[json.loads(l) for l in sys.stdin if l.startswith("{")][0]; print("%.0f tasks/s (%.0f ms)" % (r["tasks_per_s"], r["wall_ms"]))')
  after=$(cpu)
  spent=$(join <(echo "$before") <(echo "$after") | awk '{printf "%s %d ms, ", $1, $3 - $2}')
  echo "round $round${mode:+ ($mode)}: 6x5000 $speed | CPU ${spent%, }"
done
"$PG/psql" "$URL" -Atc "select relname || ': ' || n_tup_ins || ' inserted, ' || n_tup_upd || ' updated, ' || n_tup_hot_upd || ' HOT'
  from pg_stat_user_tables where relname in ('tasks', 'attempts', 'events', 'task_outputs') order by 1"

#!/usr/bin/env bash
# Where a DAG's CPU goes, thread by thread: one `dagr serve` (SQLite), a
# warm-up run of DAG, then RUNS runs through `dagr bench --remote`; prints
# dagr bench's summary, each of the server's threads that used CPU meanwhile
# (user + system from /proc/PID/task/TID/stat, per run, busiest first),
# and the engine's steps and commits per run with the commits' time (from
# /metrics), and the process's minor page faults per run. A thread busy
# for most of a run's wall time is what limits it.
#
#   scripts/bench-threads.sh [DAG] [RUNS]      # default fanout:10000 3
#
# The binary is $DAGR_BIN (default target/release/dagr); VAR=VALUE pairs in
# $DAGR_ENV go to the server (e.g. DAGR_ENV=DAGR_SERVER__THREADS=2).
set -euo pipefail
. "$(dirname "$0")/bench-serve.sh"
DAG=${1:-fanout:10000}
RUNS=${2:-3}
# shellcheck disable=SC2086 # DAGR_ENV is a list of VAR=VALUE words
start_serve threads ${DAGR_ENV:-}
"$BIN" bench --remote "$URL" --dag "$DAG" >/dev/null
threads() {
  for t in /proc/"$PID"/task/*; do
    echo "${t##*/} $(awk '{print $14 + $15}' "$t/stat") $(tr ' ' '_' <"$t/comm")"
  done | sort
}
engine() {
  curl -sf -H "authorization: Bearer $DAGR_ADMIN_TOKEN" "$URL/metrics" |
    awk '/^dagr_engine_steps_total /{s=$2} /^dagr_store_commit_seconds_count /{c=$2} /^dagr_store_commit_seconds_sum /{t=$2} END {print s, c, t}'
}
faults() { awk '{print $10}' "/proc/$PID/stat"; } # minor page faults
before=$(threads); engine_before=$(engine); faults_before=$(faults)
"$BIN" bench --remote "$URL" --dag "$DAG" --runs "$RUNS" | tail -1
after=$(threads); engine_after=$(engine); faults_after=$(faults)
hz=$(getconf CLK_TCK)
join <(echo "$before") <(echo "$after") |
  awk -v hz="$hz" -v runs="$RUNS" '{ms = ($4 - $2) * 1000 / hz / runs; if (ms > 0) printf "%-18s %6s  %6.0f ms/run\n", $3, $1, ms}' |
  sort -k3 -n -r
echo "$engine_before $engine_after" |
  awk -v runs="$RUNS" '{printf "engine: %.0f steps, %.0f commits, %.0f ms committing per run\n", ($4 - $1) / runs, ($5 - $2) / runs, ($6 - $3) * 1000 / runs}'
echo "page faults (minor): $(( (faults_after - faults_before) / RUNS )) per run"

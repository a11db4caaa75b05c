#!/usr/bin/env bash
# A backlog of queued runs: one `dagr serve` (SQLite), a one-task workflow
# with a minutely schedule, BACKFILLS backfills of CYCLES cycles each made
# at once (each `parallel: 256`, so most of their runs wait queued), then
# the runs finished per second while the backlog drains, sampled every
# SECS seconds from `/metrics` (`dagr_run_transitions_total`), with the
# server's CPU over the same interval and its resident memory, until every run has finished or
# LIMIT seconds have passed.
#
#   scripts/bench-backlog.sh [BACKFILLS] [CYCLES] [SECS] [LIMIT]   # default 10 10000 5 600
#
# The binary is $DAGR_BIN (default target/release/dagr).
set -euo pipefail
. "$(dirname "$0")/bench-serve.sh"
BACKFILLS=${1:-10}
CYCLES=${2:-10000}
SECS=${3:-5}
LIMIT=${4:-600}
# Every run is queued at once, past the default limit of a tenant's unfinished runs if asked.
start_serve backlog DAGR_API__MAX_UNFINISHED_RUNS=$((BACKFILLS * CYCLES + 1))
auth=(-H "authorization: Bearer $DAGR_TOKEN")
curl -sf "${auth[@]}" -H 'content-type: application/yaml' --data-binary @- "$URL/v1/workflows" >/dev/null <<'YAML'
name: many
schedule: {cron: '* * * * *'}
tasks:
- {name: a, plugin: echo}
YAML
succeeded() {
  curl -sf -H "authorization: Bearer $DAGR_ADMIN_TOKEN" "$URL/metrics" |
    awk '/^dagr_run_transitions_total\{.*state="succeeded"/ {n += $2} END {print n + 0}'
}
ticks() { awk '{print $14 + $15}' /proc/$PID/stat; }
hz=$(getconf CLK_TCK)
total=$((BACKFILLS * CYCLES))
made=$(date +%s.%N)
for i in $(seq 0 $((BACKFILLS - 1))); do
  from=$(date -u -d "2020-01-01 + $((i * 8)) days" +%Y-%m-%dT%H:%M:%S)
  to=$(date -u -d "2020-01-01 + $((i * 8)) days + $((CYCLES - 1)) minutes" +%Y-%m-%dT%H:%M:%S)
  curl -sf "${auth[@]}" -H 'content-type: application/json' \
    -d "{\"workflow\":\"many\",\"from\":\"$from\",\"to\":\"$to\",\"parallel\":256}" "$URL/v1/backfills" >/dev/null
done
echo "$total runs asked for in $(python3 -c "import time; print(f'{time.time() - $made:.1f}')") s"
echo "| after | runs finished | per second | server CPU | server RSS |"
echo "|---|---|---|---|---|"
t0=$(date +%s.%N); last=0; last_ticks=$(ticks); last_t=$t0
while :; do
  sleep "$SECS"
  now=$(date +%s.%N); done_=$(succeeded); tk=$(ticks); rss=$(awk '/^VmRSS/{print $2}' /proc/$PID/status)
  python3 -c "d=$now-$last_t; print(f'| {$now-$t0:.0f} s | {$done_} | {($done_-$last)/d:.0f} | {($tk-$last_ticks)/$hz/d*100:.0f} % | {$rss/1024:.0f} MiB |')"
  last=$done_; last_ticks=$tk; last_t=$now
  [ "$done_" -ge "$total" ] && break
  python3 -c "import sys; sys.exit(0 if $now - $t0 < $LIMIT else 1)" || { echo "stopped after $LIMIT s"; break; }
done

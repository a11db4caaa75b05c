#!/usr/bin/env bash
# Event delivery under load (issue 15): one `dagr serve`, a fan-out of
# 10,000 tasks measured with `dagr bench --remote`, alternating rounds
# without watchers, with 100 SSE followers and 10 webhook subscriptions
# (one event per request), the same with batching subscriptions (up to 100
# events per request), and with /metrics scraped every second. Prints dagr
# bench's lines, and per fan-out the server's CPU and the bench process's
# own (where the followers and receivers live, on the same cores). MODES picks others: `sse` (the 100 followers alone),
# `webhooks` (the 10 subscriptions alone, one event per request),
# `webhooks-batched`.
#
#   scripts/bench-events.sh [ROUNDS] [TASKS]
#   MODES="plain sse webhooks webhooks-batched" scripts/bench-events.sh 1
#
# The binary is $DAGR_BIN (default target/release/dagr).
set -euo pipefail
. "$(dirname "$0")/bench-serve.sh"
ROUNDS=${1:-3}
TASKS=${2:-10000}
start_serve events DAGR_WEBHOOKS__ALLOW_PRIVATE=true
cpu() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
times=$W/times
for round in $(seq "$ROUNDS"); do
  for mode in ${MODES:-plain watched batched scraped}; do
    case $mode in
      plain) extra=() ;;
      watched) extra=(--sse 100 --webhooks 10) ;;
      batched) extra=(--sse 100 --webhooks 10 --webhook-batch 100) ;;
      scraped) extra=(--scrape) ;;
      sse) extra=(--sse 100) ;;
      webhooks) extra=(--webhooks 10) ;;
      webhooks-batched) extra=(--webhooks 10 --webhook-batch 100) ;;
      *) echo "unknown mode $mode" >&2; exit 1 ;;
    esac
    before=$(cpu)
    out=$(/usr/bin/time -o "$times" -f "bench_cpu_s=%U+%S" "$BIN" bench --remote "$URL" --dag "fanout:$TASKS" --json "${extra[@]}")
    after=$(cpu)
    echo "round $round $mode server_cpu_ms=$(( (after - before) * 10 )) $(cat "$times")"
    echo "$out"
  done
done

#!/usr/bin/env bash
# Event delivery under load (issue 15): one `dagr serve`, a fan-out of
# 10,000 tasks measured with `dagr bench --remote`, alternating rounds
# without watchers, with 100 SSE followers and 10 webhook subscriptions
# (one event per request), the same with batching subscriptions (up to 100
# events per request), and with /metrics scraped every second. Prints dagr
# bench's lines. MODES picks others: `sse` (the 100 followers alone),
# `webhooks` (the 10 subscriptions alone, one event per request),
# `webhooks-batched`.
#
#   scripts/bench-events.sh [ROUNDS] [TASKS]
#   MODES="plain sse webhooks webhooks-batched" scripts/bench-events.sh 1
#
# The binary is $DAGR_BIN (default target/release/dagr).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${DAGR_BIN:-$ROOT/target/release/dagr}
[ -x "$BIN" ] || { echo "no $BIN (cargo build --release -p dagr)" >&2; exit 1; }
ROUNDS=${1:-3}
TASKS=${2:-10000}
W=$(mktemp -d /tmp/dagr-bench-events.XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
DAGR_LOG=warn DAGR_WEBHOOKS__ALLOW_PRIVATE=true "$BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$W/data" >"$W/log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 120); do curl -sf "127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.5; done
export DAGR_TOKEN=$(cat "$W/data/token") DAGR_ADMIN_TOKEN=$(cat "$W/data/admin.token")
URL="http://127.0.0.1:$PORT"
cpu() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
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
    out=$("$BIN" bench --remote "$URL" --dag "fanout:$TASKS" --json "${extra[@]}")
    after=$(cpu)
    echo "round $round $mode server_cpu_ms=$(( (after - before) * 10 ))"
    echo "$out"
  done
done

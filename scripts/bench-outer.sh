#!/usr/bin/env bash
# The outer DAG at Buffalo's shape (issue 13), on one `dagr serve` or on a
# 3-master cluster (tests/local-cluster.sh); the measuring is
# scripts/bench-outer.py's (its --help says what it measures).
#
#   scripts/bench-outer.sh node    [bench-outer.py options]   # one dagr serve, SQLite
#   scripts/bench-outer.sh cluster [bench-outer.py options]   # 3 masters, 1 worker, 1 api, PostgreSQL, etcd
#
# The binary is $DAGR_BIN (default target/release/dagr).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${DAGR_BIN:-$ROOT/target/release/dagr}
[ -x "$BIN" ] || { echo "no $BIN (cargo build --release -p dagr)" >&2; exit 1; }
mode=${1:-node}; shift || true
W=$(mktemp -d /tmp/dagr-bench-outer.XXXXXX)
chmod 755 "$W"   # PostgreSQL runs as its own user (tests/local-cluster.sh)

case $mode in
  node)
    D=$W/data
    PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    DAGR_LOG=warn "$BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$D" >"$W/log" 2>&1 &
    PID=$!
    trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$W" 2>/dev/null || true' EXIT
    for _ in $(seq 120); do curl -sf "127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.5; done
    python3 "$ROOT/scripts/bench-outer.py" --url "http://127.0.0.1:$PORT" --token "$(cat "$D/token")" \
      --sqlite "$D/dagr.db" --pids "$PID" "$@"
    ;;
  cluster)
    # (tests/local-cluster.sh waits for each node's "listening on" line: info level.)
    export DAGR_CLUSTER_DIR=$W/cluster DAGR_BIN=$BIN
    trap '"$ROOT/tests/local-cluster.sh" down >/dev/null 2>&1; rm -rf "$W" 2>/dev/null || true' EXIT
    URL=$("$ROOT/tests/local-cluster.sh" up --masters 3 --workers 1)
    C=$DAGR_CLUSTER_DIR
    for _ in $(seq 120); do curl -sf "$URL/healthz" >/dev/null && [ -s "$C/api/token" ] && break; sleep 0.5; done
    PIDS=$(cat "$C/m1.pid"),$(cat "$C/m2.pid"),$(cat "$C/m3.pid"),$(cat "$C/w1.pid"),$(cat "$C/api.pid")
    python3 "$ROOT/scripts/bench-outer.py" --url "$URL" --token "$(cat "$C/api/token")" \
      --postgres "$(cat "$C/postgres.url")" --pids "$PIDS" "$@"
    ;;
  *) sed -n '2,9p' "$0"; exit 2 ;;
esac

#!/usr/bin/env bash
# What a DAG costs the store in bytes: one `dagr serve` (SQLite), a warm-up
# run of DAG, then RUNS runs of it through `dagr bench --remote`; prints
# dagr bench's table, the bytes the server wrote per run (`wchar` of
# /proc/PID/io: the WAL, checkpoints, logs, and its HTTP answers), the
# server's CPU time per run (user + system, /proc/PID/stat) and, after a
# final checkpoint,
# the database's size and its largest tables and indexes (SQLite's
# `dbstat`).
#
#   scripts/bench-writes.sh DAG [RUNS]      # e.g. fanout:10000 5, chain:40 30
#
# The binary is $DAGR_BIN (default target/release/dagr); needs sqlite3.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${DAGR_BIN:-$ROOT/target/release/dagr}
[ -x "$BIN" ] || { echo "no $BIN (cargo build --release -p dagr)" >&2; exit 1; }
DAG=${1:?usage: scripts/bench-writes.sh DAG [RUNS]}
RUNS=${2:-5}
W=$(mktemp -d /tmp/dagr-bench-writes.XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
DAGR_LOG=warn "$BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$W/data" >"$W/log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 120); do curl -sf "127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.5; done
export DAGR_TOKEN=$(cat "$W/data/token")
"$BIN" bench --remote "http://127.0.0.1:$PORT" --dag "$DAG" >/dev/null
sleep 1
before=$(awk '/^wchar/{print $2}' /proc/$PID/io)
ticks_before=$(awk '{print $14 + $15}' /proc/$PID/stat)
"$BIN" bench --remote "http://127.0.0.1:$PORT" --dag "$DAG" --runs "$RUNS"
sleep 1
after=$(awk '/^wchar/{print $2}' /proc/$PID/io)
ticks_after=$(awk '{print $14 + $15}' /proc/$PID/stat)
hz=$(getconf CLK_TCK)
python3 -c "print(f'written per run: {($after - $before) / $RUNS / 1e6:.2f} MB')"
python3 -c "print(f'server CPU per run: {($ticks_after - $ticks_before) / $hz / $RUNS * 1000:.0f} ms')"
kill $PID; wait $PID 2>/dev/null || true
sqlite3 "$W/data/dagr.db" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
echo "database: $(stat -c %s "$W/data/dagr.db") bytes after $((RUNS + 1)) runs"
sqlite3 "$W/data/dagr.db" "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC LIMIT 12" | tr '|' '\t'

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
. "$(dirname "$0")/bench-serve.sh"
DAG=${1:?usage: scripts/bench-writes.sh DAG [RUNS]}
RUNS=${2:-5}
start_serve writes
"$BIN" bench --remote "$URL" --dag "$DAG" >/dev/null
sleep 1
before=$(awk '/^wchar/{print $2}' /proc/$PID/io)
ticks_before=$(awk '{print $14 + $15}' /proc/$PID/stat)
"$BIN" bench --remote "$URL" --dag "$DAG" --runs "$RUNS"
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

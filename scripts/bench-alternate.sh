#!/usr/bin/env bash
# Two dagr binaries, alternated round by round on the same DAGs (issue 11's
# "no regression"): a chain of 40 `fib` (n = 1) and a fan-out of 10,000 `echo`, each run
# on a fresh embedded node by `dagr bench`. Alternating spreads the shared
# machine's load over both binaries instead of favouring whichever ran
# while it was quiet.
#
#   scripts/bench-alternate.sh OLD_BIN NEW_BIN [ROUNDS]   # default 5 rounds
#
# Prints one JSON line per run to stderr as it goes, then a table per DAG
# and binary: runs, wall time and CPU time (min / median / max).
set -euo pipefail
OLD=${1:?old binary}; NEW=${2:?new binary}; ROUNDS=${3:-5}
OUT=$(mktemp /tmp/dagr-alternate.XXXXXX)
trap 'rm -f "$OUT"' EXIT
for round in $(seq 1 "$ROUNDS"); do
  for which in old new; do
    bin=$OLD; [ "$which" = new ] && bin=$NEW
    # The chain runs `fib` with n = 1 (no work, a small output): `echo`
    # returns its inputs, so a chain of 40 nests its output 40 deep and
    # passes [worker] max_output_depth (64) at task 32.
    for spec in "chain:40 5 fib" "fanout:10000 2 echo"; do
      set -- $spec
      "$bin" bench --dag "$1" --runs "$2" --plugin "$3" --fib-n 1 --json 2>/dev/null |
        python3 -c 'import json,sys
for line in sys.stdin:
    d = json.loads(line); d["binary"] = sys.argv[1]; d["round"] = int(sys.argv[2]); print(json.dumps(d))' "$which" "$round" |
        tee -a "$OUT" >&2
    done
  done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'DAG':<10} {'BINARY':<6} {'RUNS':>4}  {'WALL MS min/median/max':<26} {'CPU MS min/median/max':<24}")
for dag in sorted({r["dag"] for r in rows}):
    for which in ("old", "new"):
        rs = [r for r in rows if r["dag"] == dag and r["binary"] == which and r["state"] == "succeeded"]
        if not rs:
            continue
        def three(key):
            v = [r[key] for r in rs if r.get(key) is not None]
            return f"{min(v):.0f} / {statistics.median(v):.0f} / {max(v):.0f}" if v else "-"
        print(f"{dag:<10} {which:<6} {len(rs):>4}  {three('wall_ms'):<26} {three('cpu_ms'):<24}")
PY

#!/usr/bin/env bash
# Measures reading a run of 100,000 echo tasks over the API: GET /v1/runs/{id}
# (counts and the first page), a task by name, and a page of 1,000 tasks.
#   scripts/bench-run-detail.sh [path/to/dagr]   # default target/release/dagr
set -euo pipefail
BIN=${1:-target/release/dagr}
W=$(mktemp -d /tmp/dagr-bench.XXXXXX); D=$W/data
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
DAGR_LOG=warn $BIN serve --listen 127.0.0.1:$PORT --data-dir $D > $W/log 2>&1 &
PID=$!
trap "kill $PID; rm -rf $W" EXIT
for i in $(seq 60); do curl -sf 127.0.0.1:$PORT/healthz >/dev/null && break; sleep 1; done
T=$(cat $D/token)
python3 - > $W/wf.yaml <<'PY'
print("name: big\ntasks:")
for i in range(100000):
    print(f"- {{name: t{i}, plugin: echo}}")
PY
ls -la $W/wf.yaml | awk '{print "definition bytes:", $5}'
curl -s -o /dev/null -w "apply: %{http_code} %{time_total}s\n" -H "Authorization: Bearer $T" -H "content-type: application/yaml" --data-binary @$W/wf.yaml 127.0.0.1:$PORT/v1/workflows
RUN=$(curl -s -H "Authorization: Bearer $T" -X POST 127.0.0.1:$PORT/v1/workflows/big/runs | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
echo run $RUN
for i in $(seq 600); do
  S=$(curl -s -H "Authorization: Bearer $T" 127.0.0.1:$PORT/v1/runs/$RUN | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
  [ "$S" = succeeded ] || [ "$S" = failed ] && break; sleep 2
done
echo state $S
for k in 1 2 3; do
curl -s -o /dev/null -w "GET /v1/runs/{id}: %{http_code} %{size_download} B %{time_total}s\n" -H "Authorization: Bearer $T" 127.0.0.1:$PORT/v1/runs/$RUN
curl -s -o /dev/null -w "GET /v1/runs/{id}/tasks/t99999: %{http_code} %{size_download} B %{time_total}s\n" -H "Authorization: Bearer $T" 127.0.0.1:$PORT/v1/runs/$RUN/tasks/t99999
curl -s -o /dev/null -w "GET /v1/runs/{id}/tasks?after=50000&limit=1000: %{http_code} %{size_download} B %{time_total}s\n" -H "Authorization: Bearer $T" "127.0.0.1:$PORT/v1/runs/$RUN/tasks?after=50000&limit=1000"
done

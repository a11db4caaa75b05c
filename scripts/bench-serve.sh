# Sourced by the bench scripts (not run): the release binary and one
# `dagr serve` of it on a fresh data directory, stopped and removed when
# the script exits.
#
#   . "$(dirname "$0")/bench-serve.sh"
#   start_serve NAME [VAR=VALUE ...]     # the server's extra environment
#
# Sets ROOT, BIN ($DAGR_BIN, default target/release/dagr), W (the temporary
# directory; the data in $W/data), PORT, URL, PID, and exports DAGR_TOKEN
# (the default tenant's) and DAGR_ADMIN_TOKEN. Returns once the server is
# ready (`/healthz` says "ok").
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${DAGR_BIN:-$ROOT/target/release/dagr}
[ -x "$BIN" ] || { echo "no $BIN (cargo build --release -p dagr)" >&2; exit 1; }

start_serve() { # NAME [VAR=VALUE ...]
  W=$(mktemp -d "/tmp/dagr-bench-$1.XXXXXX")
  shift
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  env DAGR_LOG=warn "$@" "$BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$W/data" >"$W/log" 2>&1 &
  PID=$!
  # errexit holds in the trap too: a server the script stopped itself
  # (bench-writes.sh) must not leave the directory behind.
  trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; rm -rf "$W"' EXIT
  for _ in $(seq 600); do curl -sf "127.0.0.1:$PORT/healthz" | grep -q '"ok"' && break; sleep 0.1; done
  URL="http://127.0.0.1:$PORT"
  DAGR_TOKEN=$(cat "$W/data/token")
  DAGR_ADMIN_TOKEN=$(cat "$W/data/admin.token")
  export DAGR_TOKEN DAGR_ADMIN_TOKEN
}

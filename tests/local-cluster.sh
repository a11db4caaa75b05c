#!/usr/bin/env bash
# A dagr cluster on this machine, for people and tests: PostgreSQL, etcd,
# N masters, M workers and an API, all on loopback ports, in a fresh
# directory.
#
#   tests/local-cluster.sh up [--masters N] [--workers M] [--ttl 10s] [--tls]   # prints the API URL
#   tests/local-cluster.sh status                  # nodes with pids and roles
#   tests/local-cluster.sh kill|stop|cont NODE     # SIGKILL / SIGSTOP / SIGCONT (NODE: m1, w2, api, etcd, postgres)
#   tests/local-cluster.sh restart NODE            # start a node again (after kill, or now)
#   tests/local-cluster.sh add master|worker       # one more master or worker
#   tests/local-cluster.sh down [--keep]           # stop everything and remove the directory (--keep: keep it)
#
# The directory is $DAGR_CLUSTER_DIR (default ./.local-cluster); logs are in
# it, as are the API's tokens (api/token: tenant default; api/admin.token).
# The binary is $DAGR_BIN (default target/debug/dagr, built if missing).
# $DAGR_CLUSTER_PG_OPTS is added to PostgreSQL's command line (e.g. "-c
# shared_preload_libraries=pg_stat_statements" to see which statements cost).
#
# --tls (or DAGR_CLUSTER_TLS=1): internal traffic (API -> masters, masters
# <-> workers) over mutual TLS: `dagr cert` makes a private CA in certs/ and
# a certificate for each node as it starts (certs/NAME.pem, NAME.key).
# Without it, plain HTTP with the cluster secret: the test suite's default,
# whose other tests reach nodes' internal ports directly.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${DAGR_CLUSTER_DIR:-$ROOT/.local-cluster}
BIN=${DAGR_BIN:-$ROOT/target/debug/dagr}

die() { echo "local-cluster: $*" >&2; exit 1; }
# Every node of the cluster shares one compiled-code cache.
export DAGR_WORKER__CACHE_DIR=${DAGR_WORKER__CACHE_DIR:-$DIR/cache}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
# PostgreSQL refuses to run as root.
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
exec_pg() { if [ "$(id -u)" = 0 ]; then exec setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; else exec "$@"; fi; }
alive() { [ -f "$DIR/$1.pid" ] && kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }

wait_for_line() { # file pattern seconds
  local i
  for i in $(seq 1 $(( $3 * 10 ))); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# Starts a node and waits until it listens. The API's port was picked free
# when the cluster was made, and another process may have taken it since:
# then it starts again on another.
start_node() { # name role
  local name=$1 role=$2 tries=0
  until start_node_once "$name" "$role"; do
    if [ "$role" = api ] && grep -q "Address already in use" "$DIR/$name.log" && [ $((tries += 1)) -lt 5 ]; then
      free_port >"$DIR/api.port"
      continue
    fi
    die "$name did not start; see $DIR/$name.log"
  done
}

# Waits for a node's "listening on" line; fails at once if the node exits.
wait_listening() { # name
  local i
  for i in $(seq 1 1200); do
    grep -q "listening on" "$DIR/$1.log" 2>/dev/null && return 0
    kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# A restarted process starts a fresh log (its start is found by its first
# lines); what its earlier lives wrote is appended to NAME.old.log.
keep_log() { # log
  [ -s "$1" ] && cat "$1" >>"${1%.log}.old.log"
  : >"$1"
}

start_node_once() { # name role
  local name=$1 role=$2 listen=127.0.0.1:0 tls=()
  [ "$role" = api ] && listen="127.0.0.1:$(cat "$DIR/api.port")"
  if [ -f "$DIR/certs/ca.pem" ]; then
    [ -f "$DIR/certs/$name.pem" ] || "$BIN" cert node "$name" --ip 127.0.0.1 --dns localhost \
      --ca "$DIR/certs" --out "$DIR/certs" >/dev/null
    tls=(DAGR_CLUSTER__TLS_CERT="$DIR/certs/$name.pem" DAGR_CLUSTER__TLS_KEY="$DIR/certs/$name.key"
      DAGR_CLUSTER__TLS_CA="$DIR/certs/ca.pem")
  fi
  keep_log "$DIR/$name.log"
  env "${tls[@]}" DAGR_CONFIG="$DIR/dagr.toml" "$BIN" "$role" --node-id "$name" --listen "$listen" \
    --data-dir "$DIR/$name" >>"$DIR/$name.log" 2>&1 &
  echo $! >"$DIR/$name.pid"
  echo "$role" >"$DIR/$name.role"
  wait_listening "$name"
}

up() {
  local masters=1 workers=1 ttl=10s tls=${DAGR_CLUSTER_TLS:-0}
  while [ $# -gt 0 ]; do
    case $1 in
      --masters) masters=$2; shift 2 ;;
      --workers) workers=$2; shift 2 ;;
      --ttl) ttl=$2; shift 2 ;;
      --tls) tls=1; shift ;;
      *) die "unknown option $1" ;;
    esac
  done
  [ -e "$DIR/dagr.toml" ] && die "a cluster is already up in $DIR (run: $0 down)"
  [ -x "$BIN" ] || (cd "$ROOT" && cargo build -q -p dagr)
  command -v etcd >/dev/null || die "etcd is not installed (apt-get install etcd-server)"
  local pgbin; pgbin=$(pg_bin); [ -n "$pgbin" ] || die "PostgreSQL is not installed"
  mkdir -p "$DIR"; chmod 755 "$DIR"
  # Should anything below fail, what it started is stopped (the logs stay).
  trap 'down --keep' EXIT

  local pgport; pgport=$(free_port)
  mkdir -p "$DIR/postgres"; [ "$(id -u)" = 0 ] && chown postgres "$DIR/postgres"
  as_pg "$pgbin/initdb" -D "$DIR/postgres/data" -A trust -U postgres >"$DIR/postgres.log" 2>&1
  echo "$pgbin/postgres -D $DIR/postgres/data -p $pgport -k $DIR/postgres -c listen_addresses=127.0.0.1 -c max_connections=400 ${DAGR_CLUSTER_PG_OPTS:-}" >"$DIR/postgres.cmd"
  echo "$pgport" >"$DIR/postgres.port"
  start_postgres
  echo "postgres://postgres@127.0.0.1:$pgport/postgres" >"$DIR/postgres.url"

  local eport pport; eport=$(free_port); pport=$(free_port)
  echo "etcd --data-dir $DIR/etcd-data --listen-client-urls http://127.0.0.1:$eport --advertise-client-urls http://127.0.0.1:$eport --listen-peer-urls http://127.0.0.1:$pport --initial-advertise-peer-urls http://127.0.0.1:$pport --initial-cluster default=http://127.0.0.1:$pport" >"$DIR/etcd.cmd"
  start_etcd
  free_port >"$DIR/api.port"

  cat >"$DIR/dagr.toml" <<EOF
[store]
url = "$(cat "$DIR/postgres.url")"
[cluster]
etcd = ["http://127.0.0.1:$eport"]
prefix = "/dagr"
ttl = "$ttl"
secret = "$(python3 -c 'import secrets; print(secrets.token_hex(32))')"
[secrets]
# Seals tenants' secrets in PostgreSQL; the api and workers share it.
key = "$(python3 -c 'import secrets; print(secrets.token_hex(32))')"
[auth]
# At its first start the API node makes the admin token (api/admin.token)
# and the tenant "default" with a first token (api/token).
default_tenant = true
EOF
  if [ -n "${DAGR_CLUSTER_EXTRA:-}" ]; then printf '%s\n' "$DAGR_CLUSTER_EXTRA" >>"$DIR/dagr.toml"; fi
  if [ "$tls" = 1 ]; then "$BIN" cert ca --name "local cluster CA" --out "$DIR/certs" >/dev/null; fi
  for i in $(seq 1 "$masters"); do start_node "m$i" master; done
  for i in $(seq 1 "$workers"); do start_node "w$i" worker; done
  start_node api api
  trap - EXIT
  echo "http://127.0.0.1:$(cat "$DIR/api.port")"
}

start_postgres() {
  # The subshell execs into postgres, so $! is postgres itself.
  # shellcheck disable=SC2046
  (exec_pg $(cat "$DIR/postgres.cmd") >>"$DIR/postgres.log" 2>&1) &
  echo $! >"$DIR/postgres.pid"; echo postgres >"$DIR/postgres.role"
  local i
  for i in $(seq 1 100); do "$(pg_bin)/pg_isready" -q -h 127.0.0.1 -p "$(cat "$DIR/postgres.port")" && return 0; sleep 0.1; done
  die "postgres did not start; see $DIR/postgres.log"
}

start_etcd() {
  keep_log "$DIR/etcd.log"
  # shellcheck disable=SC2046
  (exec $(cat "$DIR/etcd.cmd") >>"$DIR/etcd.log" 2>&1) &
  echo $! >"$DIR/etcd.pid"; echo etcd >"$DIR/etcd.role"
  wait_for_line "$DIR/etcd.log" "ready to serve client requests" 30 || die "etcd did not start; see $DIR/etcd.log"
}

status() {
  [ -e "$DIR/dagr.toml" ] || die "no cluster is up"
  printf '%-10s %-9s %-8s %s\n' NODE ROLE PID STATE
  local f name
  for f in "$DIR"/*.role; do
    name=$(basename "$f" .role)
    local state=down
    if alive "$name"; then
      state=up
      [ "$(ps -o stat= -p "$(cat "$DIR/$name.pid")" | cut -c1)" = T ] && state=stopped
    fi
    printf '%-10s %-9s %-8s %s\n' "$name" "$(cat "$f")" "$(cat "$DIR/$name.pid" 2>/dev/null || echo -)" "$state"
  done
  echo "api: http://127.0.0.1:$(cat "$DIR/api.port")"
  if [ -f "$DIR/certs/ca.pem" ]; then echo "internal traffic: mutual TLS (CA $DIR/certs/ca.pem)"; fi
}

signal() { # SIG node
  [ -f "$DIR/$2.pid" ] || die "no node $2"
  kill "-$1" "$(cat "$DIR/$2.pid")"
}

restart() {
  local name=$1 role
  [ -f "$DIR/$name.role" ] || die "no node $name"
  role=$(cat "$DIR/$name.role")
  if alive "$name"; then
    kill -CONT "$(cat "$DIR/$name.pid")" 2>/dev/null || true
    # PostgreSQL stops cleanly on SIGINT (fast shutdown); the others are killed.
    # It may have died since `alive` looked (a node killed just before).
    if [ "$role" = postgres ]; then kill -INT "$(cat "$DIR/$name.pid")" 2>/dev/null || true
    else kill -9 "$(cat "$DIR/$name.pid")" 2>/dev/null || true; fi
    for _ in $(seq 1 100); do alive "$name" || break; sleep 0.1; done
  fi
  case $role in
    etcd) start_etcd ;;
    postgres) sleep 0.5; start_postgres ;;
    *) start_node "$name" "$role" ;;
  esac
}

add() {
  local role=$1 prefix n
  case $role in master) prefix=m ;; worker) prefix=w ;; *) die "add master|worker" ;; esac
  n=1; while [ -f "$DIR/$prefix$n.role" ]; do n=$((n + 1)); done
  start_node "$prefix$n" "$role"
  echo "$prefix$n"
}

down() {
  [ -d "$DIR" ] || return 0
  local f name
  for f in "$DIR"/*.pid; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .pid)
    [ "$name" = postgres ] || [ "$name" = etcd ] && continue
    kill -CONT "$(cat "$f")" 2>/dev/null || true
    kill -TERM "$(cat "$f")" 2>/dev/null || true
  done
  sleep 0.5
  for name in etcd postgres; do
    [ -f "$DIR/$name.pid" ] && { kill -CONT "$(cat "$DIR/$name.pid")" 2>/dev/null; kill -TERM "$(cat "$DIR/$name.pid")" 2>/dev/null || true; }
  done
  sleep 0.5
  for f in "$DIR"/*.pid; do [ -e "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true; done
  # PostgreSQL's backends outlive a killed postmaster for a moment, still
  # writing in its directory: the removal tries again once they are gone.
  for f in "$DIR"/*.pid; do
    for _ in $(seq 1 50); do [ -e "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null || break; sleep 0.1; done
  done
  if [ "${1:-}" = --keep ]; then rm -f "$DIR"/*.pid; else rm -rf "$DIR" 2>/dev/null || { sleep 1; rm -rf "$DIR"; }; fi
}

cmd=${1:-}; shift || true
case $cmd in
  up) up "$@" ;;
  status) status ;;
  kill) signal KILL "$1" ;;
  stop) signal STOP "$1" ;;
  cont) signal CONT "$1" ;;
  restart) restart "$1" ;;
  add) add "$1" ;;
  down) down "${1:-}" ;;
  *) sed -n '2,21p' "$0"; exit 2 ;;
esac

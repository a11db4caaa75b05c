#!/usr/bin/env bash
# Runs dagr's whole test suite on this machine, setting up what it needs:
# the wasm32-wasip2 target, Schemathesis (pinned, in a venv under the target
# directory), the pinned Python and JavaScript plugin toolchains
# (scripts/toolchains.sh, cached under the target directory), a throw-away
# PostgreSQL and a throw-away etcd on free loopback ports, an SMTP server,
# and (Debian's chromium and chromium-driver, installed when missing) the
# headless browser of the web UI's tests. Everything it starts is stopped
# when it exits.
#
#   scripts/test.sh                 # the whole suite
#   scripts/test.sh -p dagr-core    # extra arguments go to `cargo test`
#
# With no arguments and DAGR_FUZZ_SECONDS=N it also fuzzes the parsers for N
# seconds per target (scripts/fuzz.sh --ci).
#
# Set DAGR_KEEP_TEST_DIRS=1 to keep the services' directories.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\033[1m[test]\033[0m %s\n' "$*" >&2; }

need_root_install() {
  # Installs Debian packages when we can (CI runs as root); otherwise says what is missing.
  local pkgs=("$@")
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing ${pkgs[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null
  else
    log "missing: ${pkgs[*]} (install them, e.g. apt-get install ${pkgs[*]})"
    exit 1
  fi
}

rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
command -v protoc >/dev/null || need_root_install protobuf-compiler
command -v etcd >/dev/null || need_root_install etcd-server
command -v node >/dev/null || need_root_install nodejs npm
command -v promtool >/dev/null || need_root_install prometheus
command -v nats-server >/dev/null || need_root_install nats-server
# A real headless browser for the web UI's tests (tests/all/ui.rs).
{ command -v chromium >/dev/null && command -v chromedriver >/dev/null; } || need_root_install chromium chromium-driver
python3 -c 'import venv' 2>/dev/null || need_root_install python3-venv
export DAGR_TOOLCHAINS="${CARGO_TARGET_DIR:-$PWD/target}/toolchains"
scripts/toolchains.sh
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$PGBIN" ]; then
  need_root_install postgresql
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
fi

# Schemathesis, pinned, for the API contract test (tests/all/contract.rs):
# in a virtualenv under the target directory, kept between runs.
ST_VERSION=4.32.5
ST_VENV="${CARGO_TARGET_DIR:-target}/schemathesis"
if [ "$(cat "$ST_VENV/.version" 2>/dev/null)" != "$ST_VERSION" ]; then
  log "installing Schemathesis $ST_VERSION into $ST_VENV"
  rm -rf "$ST_VENV"
  python3 -m venv "$ST_VENV" 2>/dev/null || { need_root_install python3-venv; python3 -m venv "$ST_VENV"; }
  "$ST_VENV/bin/pip" install -q --disable-pip-version-check "schemathesis==$ST_VERSION"
  echo "$ST_VERSION" > "$ST_VENV/.version"
fi
export DAGR_SCHEMATHESIS="$(cd "$ST_VENV" && pwd)/bin/st"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

WORK=$(mktemp -d /tmp/dagr-test.XXXXXX)
chmod 755 "$WORK"
PGPORT=$(free_port)
cleanup() {
  set +e
  # The background parts (below), each a process group of its own.
  for pid in "${PLUGINS_PID:-}" "${CLUSTER_PID:-}"; do
    if [ -n "$pid" ]; then kill -- "-$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
  done
  if [ -n "${ETCD_PID:-}" ]; then kill "$ETCD_PID" 2>/dev/null; wait "$ETCD_PID" 2>/dev/null; fi
  if [ -n "${SMTP_PID:-}" ]; then kill "$SMTP_PID" 2>/dev/null; wait "$SMTP_PID" 2>/dev/null; fi
  as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -m immediate stop >/dev/null 2>&1
  if [ "${DAGR_KEEP_TEST_DIRS:-}" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# PostgreSQL refuses to run as root: run it as the postgres user then.
if [ "$(id -u)" = 0 ]; then
  as_pg() { runuser -u postgres -- "$@"; }
  mkdir -p "$WORK/pg"; chown postgres "$WORK/pg"
else
  as_pg() { "$@"; }
fi
log "starting PostgreSQL on 127.0.0.1:$PGPORT"
as_pg "$PGBIN/initdb" -D "$WORK/pg" -A trust -U postgres >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -o "-p $PGPORT -k $WORK/pg -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off" -l "$WORK/pg/log" -w start >/dev/null
export DAGR_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$PGPORT/postgres"
export DAGR_TEST_PG_BIN="$PGBIN"

ETCD_CLIENT=$(free_port); ETCD_PEER=$(free_port)
log "starting etcd on 127.0.0.1:$ETCD_CLIENT"
etcd --data-dir "$WORK/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT" \
  --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT" --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" \
  --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" --initial-cluster "default=http://127.0.0.1:$ETCD_PEER" \
  >"$WORK/etcd.log" 2>&1 &
ETCD_PID=$!
export DAGR_TEST_ETCD="http://127.0.0.1:$ETCD_CLIENT"

# A real SMTP server for the alert tests: aiosmtpd, keeping each mail it
# receives as a Maildir file.
SMTP_PORT=$(free_port)
mkdir -p "$WORK/mail/tmp" "$WORK/mail/new" "$WORK/mail/cur"   # a Maildir
log "starting an SMTP server (aiosmtpd) on 127.0.0.1:$SMTP_PORT"
"$DAGR_TOOLCHAINS/py/bin/python" -m aiosmtpd -n -l "127.0.0.1:$SMTP_PORT" -c aiosmtpd.handlers.Mailbox "$WORK/mail" \
  >"$WORK/smtp.log" 2>&1 &
SMTP_PID=$!
export DAGR_TEST_SMTP="127.0.0.1:$SMTP_PORT" DAGR_TEST_MAILDIR="$WORK/mail"

# DAGR_DENY_WARNINGS=1 (CI sets it) makes every rustc warning in the
# workspace an error, on the very build the tests use: no second build. It
# goes through the environment, not `--config`: the tests' own `cargo build
# -p dagr` (tests/all/support.rs) must see the same flags, or it rebuilds
# every crate with other flags (a second full build, ~15 minutes cold).
if [ "${DAGR_DENY_WARNINGS:-}" = 1 ]; then export CARGO_BUILD_RUSTFLAGS="-D warnings"; fi
# The whole workspace, unless the arguments name packages (`-p X`).
scope=(--workspace)
for arg in "$@"; do
  case "$arg" in
    --) break ;;
    -p | -p* | --package | --package=*) scope=() ;;
  esac
done

if [ $# -gt 0 ]; then
  log "cargo test ${scope[*]} $* ${CARGO_BUILD_RUSTFLAGS:+(CARGO_BUILD_RUSTFLAGS=$CARGO_BUILD_RUSTFLAGS)}"
  cargo test "${scope[@]}" "$@"
  exit 0
fi

# The whole suite. Two parts run in the background beside the main
# `cargo test`, each in a process group of its own (`set -m` while it
# starts), so that `cleanup` stops the whole group: cargo does not pass a
# signal on to what it runs. Every part runs to its end, every part's
# result is shown, and the script exits with the first failure's status.
failed=0
part() { # WHAT COMMAND...: runs it; a failure is logged, the first one kept as the exit status
  local what=$1 status=0
  shift
  "$@" || status=$?
  if [ "$status" != 0 ]; then
    log "$what: failed (exit $status)"
    if [ "$failed" = 0 ]; then failed=$status; fi
  fi
}
in_background() { # LOG COMMAND...: starts it in its own process group; its pid in $!
  local out=$1
  shift
  set -m
  "$@" >"$out" 2>&1 &
  set +m
}
logs="${CARGO_TARGET_DIR:-$PWD/target}"
mkdir -p "$logs"

# The plugins' own workspace (built to wasm32-wasip2 by dagr-builtins): its
# native unit tests and its lints, on the host target, in its own target
# directory. From the start: on a cold machine it fills the moments the
# main build leaves a core idle (about two minutes of work that used to
# come after the whole suite).
plugins_step() {
  local host
  host=$(rustc -vV | sed -n 's/^host: //p')
  cd plugins
  export CARGO_TARGET_DIR="$PWD/../target/plugins-native"
  cargo fmt --all -- --check
  cargo clippy --target "$host" --workspace --all-targets -- -D warnings
  cargo test --target "$host" --workspace
}
PLUGINS_LOG="$logs/plugins-native.log"
log "plugins/: cargo test, clippy and fmt on the host target, in the background (log: $PLUGINS_LOG)"
in_background "$PLUGINS_LOG" plugins_step
PLUGINS_PID=$!

# The tests that start a whole cluster (tests/all: each starts masters,
# workers and an API process) run one at a time, under their own lock
# (cluster::exclusive). In one test process, the second test thread waited
# on that lock behind them and the machine sat mostly idle for minutes. So
# they run in a second process of the same test binary (built once: this
# one waits on cargo's lock for the build, then only runs), beside the
# rest, which skips them.
CLUSTER_TESTS=(cluster::failover:: cluster_resources:: tls::a_cluster_over_mutual_tls traces::a_run_in_a_cluster)
CLUSTER_LOG="$logs/cluster-tests.log"
log "the cluster tests (${CLUSTER_TESTS[*]}): a second cargo test, in the background (log: $CLUSTER_LOG)"
in_background "$CLUSTER_LOG" cargo test --workspace --test all -- "${CLUSTER_TESTS[@]}"
CLUSTER_PID=$!

skips=()
for t in "${CLUSTER_TESTS[@]}"; do skips+=(--skip "$t"); done
log "cargo test --workspace -- ${skips[*]} ${CARGO_BUILD_RUSTFLAGS:+(CARGO_BUILD_RUSTFLAGS=$CARGO_BUILD_RUSTFLAGS)}"
part "cargo test" cargo test --workspace -- "${skips[@]}"

log "the cluster tests: waiting for them"
part "the cluster tests" wait "$CLUSTER_PID"
CLUSTER_PID=
cat "$CLUSTER_LOG"

if [ -n "${DAGR_FUZZ_SECONDS:-}" ]; then
  # Coverage-guided fuzzing of the parsers, DAGR_FUZZ_SECONDS per target.
  # Not by default: its inputs are random, so it could fail a run on a bug
  # the change at hand did not make; `cargo test` above already checks the
  # same properties on the seeds and a bounded, seeded set of mutations.
  log "libFuzzer over tests/props' targets (scripts/fuzz.sh --ci)"
  part "scripts/fuzz.sh --ci" scripts/fuzz.sh --ci
fi

# The web UI's pure modules (layout, diff, line splitting, routes, the
# hygiene checks): node's own test runner, no dependencies.
log "web UI: node --test host/api/ui/test/"
part "node --test host/api/ui/test/" node --test host/api/ui/test/

log "plugins/: waiting for its cargo test, clippy and fmt"
part "plugins/" wait "$PLUGINS_PID"
PLUGINS_PID=
cat "$PLUGINS_LOG"

if [ "$failed" = 0 ]; then log "all passed"; fi
exit "$failed"

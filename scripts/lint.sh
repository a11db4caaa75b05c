#!/usr/bin/env bash
# The lints to run before committing: formatting and clippy, warnings denied,
# over the host workspace and the plugins' workspace. Like scripts/test.sh it
# sets up what the build needs on a fresh machine: the wasm32-wasip2 target
# (dagr-builtins builds plugins/ for it) and protoc (etcd-client's build
# script), installed with apt when run as root, named when not.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
if ! command -v protoc >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler >/dev/null
  else
    echo "lint: protoc is missing (apt-get install protobuf-compiler)" >&2
    exit 1
  fi
fi
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
HOST=$(rustc -vV | sed -n 's/^host: //p')
(cd plugins && cargo fmt --all -- --check && CARGO_TARGET_DIR="$PWD/../target/plugins-native" cargo clippy --target "$HOST" --workspace --all-targets -- -D warnings)

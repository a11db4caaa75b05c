#!/usr/bin/env bash
# Builds dagr (with its built-in plugins) and runs `dagr serve` on its
# embedded defaults: API on 127.0.0.1:8080, data in ./dagr-data.
# Extra arguments go to `dagr serve` (e.g. --listen 127.0.0.1:9090).
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
if ! command -v protoc >/dev/null; then
  # etcd-client (cluster mode) compiles etcd's protobuf definitions.
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing protobuf-compiler (needed to build the etcd client)" >&2
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler >/dev/null
  else
    echo "dagr's build needs protoc: install protobuf-compiler (e.g. sudo apt-get install protobuf-compiler)" >&2
    exit 1
  fi
fi
cargo build --release -p dagr
exec ./target/release/dagr serve "$@"

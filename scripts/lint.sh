#!/usr/bin/env bash
# The lints to run before committing: formatting and clippy, warnings denied,
# over the host workspace and the plugins' workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
HOST=$(rustc -vV | sed -n 's/^host: //p')
(cd plugins && cargo fmt --all -- --check && CARGO_TARGET_DIR="$PWD/../target/plugins-native" cargo clippy --target "$HOST" --workspace --all-targets -- -D warnings)

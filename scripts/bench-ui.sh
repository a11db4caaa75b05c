#!/usr/bin/env bash
# The web UI's figures (issue 14; docs/BENCHMARKS.md): in a real headless
# Chromium against a release `dagr serve`, time to first paint and to the
# main content for the workflows list (1,000 workflows), the montage DAG's
# graph (2,122 tasks), a run page of that DAG while it runs and the runs
# list (100,000 runs); bytes transferred; live-update delay.
#
#   scripts/bench-ui.sh [path/to/dagr]    # default: a release build in target/release
#
# DAGR_BENCH_UI_RUNS and DAGR_BENCH_UI_WORKFLOWS make the data smaller.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-}
if [ -z "$BIN" ]; then
  cargo build --release -p dagr --bin dagr
  BIN="${CARGO_TARGET_DIR:-target}/release/dagr"
fi
BIN=$(realpath "$BIN")
DAGR_TEST_BINARY="$BIN" cargo test --workspace --test all -- --ignored --nocapture --exact ui_bench::ui_bench_pages

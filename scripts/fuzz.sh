#!/usr/bin/env bash
# Coverage-guided fuzzing of what dagr parses from users and plugins
# (definitions, templates, schedules, plugins' outputs, small fields), with
# libFuzzer on stable Rust: the targets in fuzz/ are built with the
# sanitizer-coverage instrumentation rustc offers on stable (no sanitizer:
# dagr's host code has no `unsafe`), and check the properties of
# tests/props (dagr-props), which `cargo test` also checks, bounded.
#
#   scripts/fuzz.sh                     # every target, 60 s each
#   scripts/fuzz.sh template 3600       # one target for an hour (or several: a,b)
#   scripts/fuzz.sh --ci                # every target for DAGR_FUZZ_SECONDS (default 20) each: CI's run
#   scripts/fuzz.sh --jobs 2 schedule 600   # two fuzzing processes
#
# The corpus grows in $CARGO_TARGET_DIR/fuzz/corpus/<target> (kept between
# runs), seeded from the golden cases, the README's examples, the datasets
# and tests/props/regressions. An input that breaks a property is saved in
# $CARGO_TARGET_DIR/fuzz/artifacts/<target>/; copy it to
# tests/props/regressions/<target>/ with the fix (see the README there).
# With cargo-fuzz installed, `cargo fuzz run -s none TARGET` works too.
set -euo pipefail
cd "$(dirname "$0")/.."
ALL=(definition template schedule output fields)
TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
FUZZ_DIR=$TARGET_DIR/fuzz
seconds=60 jobs=1 ci=0 targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --ci) ci=1; seconds=${DAGR_FUZZ_SECONDS:-20}; shift ;;
    --jobs) jobs=$2; shift 2 ;;
    [0-9]*) seconds=$1; shift ;;
    *) IFS=, read -r -a more <<<"$1"; targets+=("${more[@]}"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${ALL[@]}")
log() { printf '\033[1m[fuzz]\033[0m %s\n' "$*" >&2; }

# The flags cargo-fuzz passes with `--sanitizer none`: all stable.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"
log "building the targets (instrumented, release) into $FUZZ_DIR/build"
cargo build -q --release --manifest-path fuzz/Cargo.toml --target-dir "$FUZZ_DIR/build" --bins
unset RUSTFLAGS
log "writing the seeds"
cargo run -q -p dagr-props --example seeds -- "$FUZZ_DIR/seeds" >/dev/null

failed=()
for t in "${targets[@]}"; do
  bin=$FUZZ_DIR/build/release/$t
  [ -x "$bin" ] || { log "no target $t (targets: ${ALL[*]})"; exit 2; }
  mkdir -p "$FUZZ_DIR/corpus/$t" "$FUZZ_DIR/artifacts/$t"
  log "$t for ${seconds}s"
  # -timeout: an input that takes more than 5 s is a failure (superlinear
  # time); -rss_limit_mb: so is one that needs more than 2 GiB.
  if ! "$bin" "$FUZZ_DIR/corpus/$t" "$FUZZ_DIR/seeds/$t" \
      -dict="$FUZZ_DIR/seeds/$t.dict" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 \
      -max_len=65536 -jobs="$jobs" -workers="$jobs" -print_final_stats=1 \
      -artifact_prefix="$FUZZ_DIR/artifacts/$t/" >"$FUZZ_DIR/$t.log" 2>&1; then
    failed+=("$t")
    log "$t FAILED: $(grep -E 'panicked|ERROR|Test unit written' "$FUZZ_DIR/$t.log" | head -n 5)"
    log "the log is $FUZZ_DIR/$t.log; the input is in $FUZZ_DIR/artifacts/$t/"
  else
    log "$t: $(grep -E '^stat::number_of_executed_units' "$FUZZ_DIR/$t.log" | tail -n 1 | awk '{print $2}') inputs, corpus $(ls "$FUZZ_DIR/corpus/$t" | wc -l)"
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  log "properties broken in: ${failed[*]}"
  exit 1
fi
log "no property broken"

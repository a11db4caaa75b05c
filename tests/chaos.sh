#!/usr/bin/env bash
# The chaos soak, long form: 3 masters + 3 workers on PostgreSQL and etcd,
# random SIGKILL, SIGSTOP/SIGCONT and restarts for N minutes while DAGs from
# the datasets run; then every run must have finished, every task instance
# succeeded exactly once, and no two executions of one task instance may
# have overlapped (checked against a ledger the tasks report to).
#
#   tests/chaos.sh [MINUTES]        # default 10
#
# CI runs the same test for 30 seconds as part of the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-10}
export DAGR_CHAOS_SECS=$((minutes * 60))
exec cargo test -p dagr-tests --test all cluster::failover::chaos_soak -- --nocapture

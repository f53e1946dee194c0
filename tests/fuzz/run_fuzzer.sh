#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time: run_fuzzer.sh BINARY SEEDS WORKDIR SECONDS.
# The seeds are copied into WORKDIR/corpus (new inputs land there, not in the tree); a crash, leak
# or timeout leaves its input in WORKDIR/artifacts and fails the test. The last status line
# (execs, coverage, corpus size) is printed for the record.
set -euo pipefail
bin=$1 seeds=$2 work=$3 seconds=$4
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
cp "$seeds"/* "$work/corpus/"
log="$work/fuzz.log"
status=0
"$bin" "$work/corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -max_len=8192 -print_final_stats=1 -artifact_prefix="$work/artifacts/" >"$log" 2>&1 || status=$?
grep -E '^#[0-9]+[[:space:]].*cov:' "$log" | tail -n 1 || true
grep -E '^stat::(number_of_executed_units|peak_rss_mb|new_units_added)' "$log" || true
if [ "$status" -ne 0 ]; then
  tail -n 60 "$log"
  echo "fuzz target $(basename "$bin") failed (exit $status); inputs in $work/artifacts" >&2
  exit 1
fi

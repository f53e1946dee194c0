#!/usr/bin/env bash
# One device-machine session for the prefill kernels: build (or reuse a build), GPU tests, SASS
# summary, benchmark with torch baselines, compute-sanitizer memcheck/racecheck/synccheck on a
# small subset (both kernels). Everything lands in $1.
# Usage (repo root, on the GPU machine): bench/gpu_prefill.sh OUT_DIR [skip-sanitizer]
# env: B=build dir (default build/prefill-gpu; on a shared GPU machine use a folder of your own
# under /tmp: another session may have left its build in /tmp/b); PREBUILT=1 skips configure+build (e.g. after
# `SRC=... BUILD=$B TARGETS="test_attention_prefill bench_attention_prefill"
# tests/backends/carried_session.sh build`); ITERS=timed runs; PROFILE=1 adds ncu; TEST_FILTER (gtest
# filter of the full test run, default all), BENCH_IMPLS (the bench's impl filter, default all),
# SAN_FILTER (the sanitizer subset, default '*AttentionPrefillSmall*'), RESULT (name of the merged
# records copied to $1/results/<GPU>/RESULT.jsonl, default prefill_v5_contig) choose a leaner run;
# TEST_TIMEOUT, BENCH_TIMEOUT, SAN_TIMEOUT (seconds, per step) bound it.
# The public launcher's test also runs with FLASHSERVE_PREFILL_KV=paged (since session 29 the
# contiguous path is the default on Hopper); the bench impl "flashserve:kv_contig" times the
# contiguous path next to the launcher without fresh rows (paged K/V).
set -uo pipefail
DEST=${1:?out dir}
B=${B:-build/prefill-gpu}
LOG=$DEST/log.txt
mkdir -p "$DEST"
step() { echo "=== $* ($(date +%T), ${SECONDS}s)" | tee -a "$LOG"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,driver_version --format=csv >>"$LOG" 2>&1
if [ "${PREBUILT:-0}" != 1 ]; then
  step configure
  cmake -S . -B $B -G Ninja -DFLASHSERVE_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release >>"$LOG" 2>&1
  step build
  if ! timeout 240 ninja -C $B -j16 test_attention_prefill bench_attention_prefill >"$DEST/build.txt" 2>&1; then
    tail -60 "$DEST/build.txt"; exit 1
  fi
  grep -E "spill|Used|C75" "$DEST/build.txt" | head -60 >>"$LOG"
fi
step tests
timeout ${TEST_TIMEOUT:-300} $B/tests/kernels/test_attention_prefill --gtest_filter="${TEST_FILTER:-*}" >"$DEST/tests.txt" 2>&1
echo "test exit code $?" >>"$DEST/tests.txt"
grep -E "FAIL|OK \]|PASSED|SKIPPED|tests ran|Error|error|launcher runs|exit code" "$DEST/tests.txt" | head -40 | tee -a "$LOG"
step "tests, launcher with FLASHSERVE_PREFILL_KV=paged"
FLASHSERVE_PREFILL_KV=paged timeout 120 $B/tests/kernels/test_attention_prefill \
  --gtest_filter='AttentionPrefill.MatchesReferencePublicLauncher' >"$DEST/tests_kv_contig.txt" 2>&1
echo "test exit code $?" >>"$DEST/tests_kv_contig.txt"
grep -E "FAIL|OK \]|PASSED|launcher runs|exit code" "$DEST/tests_kv_contig.txt" | head -10 | tee -a "$LOG"
step sass
# Per kernel: wgmma (HGMMA), mma.sync (HMMA), ldmatrix (LDSM), exp2 (MUFU), local memory (STL/LDL),
# mbarrier operations (SYNCS), barriers (BAR), instructions.
for f in $(find $B/kernels -name 'attention_prefill*.o'); do
  cuobjdump -sass "$f" 2>/dev/null | awk '/Function :/{if(fn)print fn, h, hm, l, m, st, ld, sy, bar, tot; fn=$3; h=hm=l=m=st=ld=sy=bar=tot=0}
    /HGMMA/{h++} /HMMA/{hm++} /LDSM/{l++} /MUFU/{m++} /STL/{st++} /LDL/{ld++} /SYNCS/{sy++} /BAR/{bar++}
    /\/\*[0-9a-f]+\*\//{tot++} END{if(fn)print fn, h, hm, l, m, st, ld, sy, bar, tot}' >>"$DEST/sass.txt"
done
sed -i '1i function HGMMA HMMA LDSM MUFU STL LDL SYNCS BAR total' "$DEST/sass.txt"
for f in $(find $B/kernels -name 'attention_prefill_sm90_hdim128*.o'); do cuobjdump -sass "$f" >"$DEST/sass_sm90_hdim128.txt" 2>&1; done
grep -E "sm90_kernel" "$DEST/sass.txt" | sed 's/_ZN10flashserve4cuda6detail4sm9029attention_prefill_sm90_kernelINS2_10Sm90Traits//' | tee -a "$LOG"
step bench
BUILD=$B ITERS=${ITERS:-40} IMPLS="${BENCH_IMPLS:-}" CONTIG_LAUNCHER=1 timeout ${BENCH_TIMEOUT:-300} \
  bench/run_prefill_bench.sh "$DEST" 2>&1 | tee -a "$LOG" | grep -vE "^(b|c)[0-9a-z_]+ +flashserve:m"
# The merged records where bench/results/<GPU>/ keeps them (copy them over in the repo).
gpu_dir=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '_')
mkdir -p "$DEST/results/$gpu_dir" && cp "$DEST/prefill.jsonl" "$DEST/results/$gpu_dir/${RESULT:-prefill_v5_contig}.jsonl"
if [ "${PROFILE:-0}" = 1 ]; then  # optional: ncu of Hopper kernel variants (NCU_IMPLS) on one shape
  step ncu
  for impl in ${NCU_IMPLS:-flashserve:sm90:wg2_s2_tma_pp}; do
    echo "##### $impl" >>"$DEST/ncu.txt"
    timeout 120 ncu --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
      --section Occupancy --section MemoryWorkloadAnalysis \
      --metrics sm__pipe_tensor_op_hgmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active \
      -k regex:attention_prefill_sm90 --launch-skip 1 --launch-count 1 \
      $B/bench/bench_attention_prefill 30 ${NCU_SHAPE:-b1_h8_l8192} "$impl\$" >>"$DEST/ncu.txt" 2>&1
    # Where the warps wait: issue-stall reasons per issued instruction.
    timeout 90 ncu --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      -k regex:attention_prefill_sm90 --launch-skip 1 --launch-count 1 \
      $B/bench/bench_attention_prefill 30 ${NCU_SHAPE:-b1_h8_l8192} "$impl\$" 2>&1 |
      grep -E "stalled" | sort -k3 -n -r | head -12 >>"$DEST/ncu.txt"
  done
  grep -E "#####|Duration|Compute \(SM\) Throughput|L2 Cache Throughput|pipe_xu|stalled|Warp Cycles Per Issued|highest-utilized" "$DEST/ncu.txt" | head -80 | tee -a "$LOG"
fi
if [ "${2:-}" != skip-sanitizer ]; then
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck synccheck; do
    step "compute-sanitizer $tool"
    timeout ${SAN_TIMEOUT:-90} $SAN --tool $tool --error-exitcode 9 $B/tests/kernels/test_attention_prefill \
      --gtest_filter="${SAN_FILTER:-*AttentionPrefillSmall*}" >"$DEST/sanitizer_$tool.txt" 2>&1
    echo "exit code $?" >>"$DEST/sanitizer_$tool.txt"
    tail -4 "$DEST/sanitizer_$tool.txt" | tee -a "$LOG"
  done
fi
step done

#!/usr/bin/env bash
# One device-machine session for the prefill kernel: build, GPU tests, benchmark with torch
# baselines, compute-sanitizer memcheck/racecheck on a small subset. Everything lands in $1.
# Usage (repo root, on the GPU machine): bench/gpu_prefill.sh OUT_DIR [skip-sanitizer]
set -uo pipefail
DEST=${1:?out dir}
B=build/prefill-gpu
LOG=$DEST/log.txt
step() { echo "=== $* ($(date +%T))" | tee -a "$LOG"; }
step configure
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,driver_version --format=csv >>"$LOG" 2>&1
cmake -S . -B $B -G Ninja -DFLASHSERVE_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release >>"$LOG" 2>&1
step build
if ! timeout 170 ninja -C $B -j16 test_attention_prefill bench_attention_prefill >"$DEST/build.txt" 2>&1; then
  tail -60 "$DEST/build.txt"; exit 1
fi
grep -E "spill|Used" "$DEST/build.txt" | head -40 >>"$LOG"
step tests
timeout 120 $B/tests/kernels/test_attention_prefill 2>&1 | tee -a "$LOG" | grep -E "FAIL|OK \]|PASSED|tests ran|Error|error" | head -40
step bench
BUILD=$B ITERS=${ITERS:-40} timeout 150 bench/run_prefill_bench.sh "$DEST" 2>&1 | tee -a "$LOG"
if [ "${PROFILE:-0}" = 1 ]; then  # optional: SASS summary and ncu of two variants
  step sass
  OBJ=$B/kernels/CMakeFiles/flashserve_kernels_cuda.dir/cuda
  for f in $OBJ/attention_prefill_hdim128_bf16.cu.o $OBJ/attention_prefill_hdim64_bf16.cu.o; do
    cuobjdump -sass $f | awk '/Function :/{if(fn)print fn, h, l, m, st, ld, bar, tot; fn=$3; h=l=m=st=ld=bar=tot=0}
      /HMMA/{h++} /LDSM/{l++} /MUFU/{m++} /STL/{st++} /LDL/{ld++} /BAR/{bar++} /\/\*[0-9a-f]+\*\//{tot++}
      END{print fn, h, l, m, st, ld, bar, tot}' >>"$DEST/sass.txt" 2>&1
  done
  sed -i '1i function HMMA LDSM MUFU STL LDL BAR total' "$DEST/sass.txt"
  step ncu
  for v in m128n64w8s2q m128n32w4s3; do
    timeout 60 ncu --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
      --section Occupancy --section MemoryWorkloadAnalysis -k regex:attention_prefill --launch-skip 1 \
      --launch-count 1 $B/bench/bench_attention_prefill 30 b1_h8_l8192 $v >>"$DEST/ncu.txt" 2>&1
  done
fi
if [ "${2:-}" != skip-sanitizer ]; then
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck; do
    step "compute-sanitizer $tool"
    timeout 60 $SAN --tool $tool --error-exitcode 9 $B/tests/kernels/test_attention_prefill \
      --gtest_filter='AttentionPrefillSmall.*' >"$DEST/sanitizer_$tool.txt" 2>&1
    echo "exit code $?" >>"$DEST/sanitizer_$tool.txt"
    tail -5 "$DEST/sanitizer_$tool.txt" | tee -a "$LOG"
  done
fi
step done

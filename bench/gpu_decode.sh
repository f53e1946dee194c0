#!/usr/bin/env bash
# One device-machine session for the decode attention work: build the decode targets, run the
# plan and GPU tests, compute-sanitizer on a small subset, then the benchmark + PyTorch baseline.
# Everything lands in $OUT (logs, JSON lines). Usage on the device: bash bench/gpu_decode.sh
set -uo pipefail
OUT=${OUT:-/tmp/decode_out}
mkdir -p "$OUT"
exec > >(tee "$OUT/session.log") 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,driver_version --format=csv
nvcc --version | tail -1
B=build/dev_decode
T0=$(date +%s)
# CMake first; if someone else's kernel in kernels/cuda breaks the shared library, build ours directly.
if cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.log" 2>&1 &&
   timeout 150 ninja -C $B -j16 test_decode_plan test_attention_decode bench_attention_decode > "$OUT/build.log" 2>&1; then
  PLAN=$B/tests/decode_plan/test_decode_plan
  TEST=$B/tests/gpu_decode/test_attention_decode
  BENCH_BUILD=$B
else
  echo "cmake build failed (tail below); building decode sources directly with nvcc"
  tail -20 "$OUT/build.log"
  D=build/direct_decode
  mkdir -p $D/bench
  NV="nvcc -O3 -std=c++17 -arch=sm_90a -lineinfo --expt-relaxed-constexpr -I. -DFLASHSERVE_HAS_CUDA=1"
  SRC="kernels/cuda/attention_decode.cu kernels/cuda/attention_decode_hdim64.cu kernels/cuda/attention_decode_hdim128.cu kernels/cuda/attention_decode_merge.cu kernels/decode_plan.cpp"
  $NV -o $D/test_decode_plan tests/decode_plan/test_decode_plan.cpp kernels/decode_plan.cpp -lgtest -lgtest_main &
  $NV -o $D/test_attention_decode tests/gpu_decode/test_attention_decode.cu tests/common/gpu_test_main.cpp $SRC kernels/cpu/paged_attention_ref.cpp -lgtest &
  $NV -o $D/bench/bench_attention_decode bench/bench_attention_decode.cu $SRC &
  wait
  PLAN=$D/test_decode_plan
  TEST=$D/test_attention_decode
  BENCH_BUILD=$D
fi
echo "build: $(( $(date +%s) - T0 )) s"
$PLAN > "$OUT/test_decode_plan.log" 2>&1; echo "test_decode_plan rc=$?"; tail -3 "$OUT/test_decode_plan.log"
T1=$(date +%s)
timeout 100 $TEST > "$OUT/test_attention_decode.log" 2>&1; echo "test_attention_decode rc=$? ($(( $(date +%s) - T1 )) s)"
grep -E "^\[  (FAILED|PASSED|  OK) |Failure|Expected|Which is|got|worst" "$OUT/test_attention_decode.log" | head -60
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do
  T1=$(date +%s)
  timeout 40 $SAN --tool $tool --error-exitcode 9 $TEST --gtest_filter='AttentionDecode.SmallForSanitizer:AttentionDecode.EmptySequences*' > "$OUT/sanitizer_$tool.log" 2>&1
  echo "sanitizer $tool rc=$? ($(( $(date +%s) - T1 )) s)"; tail -4 "$OUT/sanitizer_$tool.log"
done
T1=$(date +%s)
timeout 40 $SAN --tool memcheck --error-exitcode 9 $TEST --gtest_filter='AttentionDecodeMerge.*' > "$OUT/sanitizer_memcheck_merge.log" 2>&1
echo "sanitizer memcheck merge rc=$? ($(( $(date +%s) - T1 )) s)"; tail -3 "$OUT/sanitizer_memcheck_merge.log"
T1=$(date +%s)
OURS_TIMEOUT=80 TORCH_TIMEOUT=120 bench/run_decode_bench.sh "$OUT" $BENCH_BUILD
echo "bench (rotating KV copies) rc=$? ($(( $(date +%s) - T1 )) s)"
T1=$(date +%s)
OURS_TIMEOUT=50 TORCH_TIMEOUT=60 bench/run_decode_bench.sh "$OUT/flush" $BENCH_BUILD "--l2 flush" > "$OUT/flush_table.txt" 2>&1
echo "bench (memset L2 flush) rc=$? ($(( $(date +%s) - T1 )) s)"
echo "total $(( $(date +%s) - T0 )) s"
# Only a few files come back from the device: pack the logs, keep the two JSON-lines files loose.
cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz --exclude=session.log . ; find . -type f ! -name logs.tgz ! -name decode.jsonl -delete

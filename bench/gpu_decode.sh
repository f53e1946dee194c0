#!/usr/bin/env bash
# One device-machine session for the decode attention work: build the decode targets, run the
# plan and GPU tests, compute-sanitizer on a small subset, then the benchmark + PyTorch baseline.
# Everything lands in $OUT, 7 files: session.log (also the main text table), logs.tgz (every log
# and table), the results to copy into bench/results/<gpu>/: decode_${TAG}_rotate.jsonl (main),
# decode_${TAG}_memset_flush.jsonl (memset L2 flush, as v1), decode_${TAG}_rotate_held.jsonl
# (rotating copies, timed runs queued behind a spin kernel), and the docs' markdown tables
# decode_${TAG}_table.md (main, with v2's times) and decode_${TAG}_rotate_held_table.md.
# Usage on the device: [TAG=v3] bash bench/gpu_decode.sh
set -uo pipefail
OUT=${OUT:-/tmp/decode_out}
export TAG=${TAG:-v3} SESSION_COMMAND="bash bench/gpu_decode.sh (TAG=${TAG:-v3})"
mkdir -p "$OUT"
exec > >(tee "$OUT/session.log") 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,driver_version --format=csv
nvcc --version | tail -1
B=build/dev_decode
T0=$(date +%s)
# CMake first; if someone else's kernel in kernels/cuda breaks the shared library, build ours directly.
if cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.log" 2>&1 &&
   timeout 150 ninja -C $B -j16 test_decode_plan test_attention_decode bench_attention_decode > "$OUT/build.log" 2>&1; then
  PLAN=$B/tests/kernels/test_decode_plan
  TEST=$B/tests/kernels/test_attention_decode
  BENCH_BUILD=$B
else
  echo "cmake build failed (tail below); building decode sources directly with nvcc"
  tail -20 "$OUT/build.log"
  D=build/direct_decode
  mkdir -p $D/bench
  NV="nvcc -O3 -std=c++17 -arch=sm_90a -lineinfo --expt-relaxed-constexpr -I. -DFLASHSERVE_HAS_CUDA=1"
  SRC="kernels/cuda/attention_decode.cu kernels/cuda/attention_decode_hdim64.cu kernels/cuda/attention_decode_hdim128.cu kernels/cuda/attention_decode_merge.cu kernels/decode_plan.cpp"
  $NV -o $D/test_decode_plan tests/kernels/test_decode_plan.cpp kernels/decode_plan.cpp -lgtest -lgtest_main &
  $NV -o $D/test_attention_decode tests/kernels/test_attention_decode.cu tests/common/gpu_test_main.cpp $SRC kernels/cpu/paged_attention_ref.cpp -lgtest &
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
  timeout 40 $SAN --tool $tool --error-exitcode 9 $TEST --gtest_filter='AttentionDecode.SmallForSanitizer:AttentionDecode.EmptySequences*:AttentionDecodeMerge.RepeatedRuns*' > "$OUT/sanitizer_$tool.log" 2>&1
  echo "sanitizer $tool rc=$? ($(( $(date +%s) - T1 )) s)"; tail -4 "$OUT/sanitizer_$tool.log"
done
T1=$(date +%s)
timeout 60 $SAN --tool memcheck --error-exitcode 9 $TEST --gtest_filter='AttentionDecodeMerge.*' > "$OUT/sanitizer_memcheck_merge.log" 2>&1
echo "sanitizer memcheck merge rc=$? ($(( $(date +%s) - T1 )) s)"; tail -3 "$OUT/sanitizer_memcheck_merge.log"
T1=$(date +%s)
# Earlier results of this GPU (same timing method) become the tables' "prev µs" column.
GPU_DIR=bench/results/$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '_')
PREV_JSONL=$GPU_DIR/decode_v2_rotate.jsonl OURS_TIMEOUT=80 TORCH_TIMEOUT=120 \
  bench/run_decode_bench.sh "$OUT" $BENCH_BUILD
echo "bench (rotating KV copies) rc=$? ($(( $(date +%s) - T1 )) s)"
T1=$(date +%s)
PREV_JSONL=$GPU_DIR/decode_v1_memset_flush.jsonl OURS_TIMEOUT=50 TORCH_TIMEOUT=60 \
  bench/run_decode_bench.sh "$OUT/flush" $BENCH_BUILD "--l2 flush" > "$OUT/flush_table.txt" 2>&1
echo "bench (memset L2 flush) rc=$? ($(( $(date +%s) - T1 )) s)"
T1=$(date +%s)
OURS_TIMEOUT=60 TORCH_TIMEOUT=90 bench/run_decode_bench.sh "$OUT/held" $BENCH_BUILD "--hold" > "$OUT/held_table.txt" 2>&1
echo "bench (rotating copies, runs held behind a spin kernel) rc=$? ($(( $(date +%s) - T1 )) s)"
grep -E "^flashserve +1 |copy" "$OUT/held_table.txt" | head -40
echo "total $(( $(date +%s) - T0 )) s"
# Only a few files come back from the device: pack the logs, keep the results loose.
cd "$OUT" || exit 1
[ -f decode.jsonl ] && cp decode.jsonl "decode_${TAG}_rotate.jsonl"
[ -f decode_table.md ] && cp decode_table.md "decode_${TAG}_table.md"
[ -f held/decode_table.md ] && cp held/decode_table.md "decode_${TAG}_rotate_held_table.md"
[ -f flush/decode.jsonl ] && cp flush/decode.jsonl "decode_${TAG}_memset_flush.jsonl"
[ -f held/decode.jsonl ] && cp held/decode.jsonl "decode_${TAG}_rotate_held.jsonl"
tar czf logs.tgz --exclude=logs.tgz --exclude=session.log --exclude="decode_${TAG}_*" .
find . -type f ! -name logs.tgz ! -name session.log ! -name "decode_${TAG}_*" -delete
find . -mindepth 1 -type d -empty -delete
ls -l "$OUT"

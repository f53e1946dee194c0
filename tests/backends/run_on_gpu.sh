#!/usr/bin/env bash
# Runs on the GPU machine from the repo root: configure, build the CUDA backend's tests and the
# generate CLI, run the tests/backends gpu tests, a CLI generation on stories260K (cpu and cuda) and
# compute-sanitizer over a few tests; logs go to $OUT.
# Needs .carry/models/{stories260K,llama2-tokenizer} (copied from /work/shared/models).
set -u
OUT=${OUT:-/tmp/fs_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
cmake -S . -B build/dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHSERVE_BUILD_BENCH=OFF \
  -DFS_MODELS_DIR="$PWD/.carry/models" > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
ninja -C build/dev -j16 test_cuda_backend test_cuda_ops flashserve-generate flashserve-random-model ${EXTRA_TARGETS:-} \
  > "$OUT/build.log" 2>&1 || { grep -B2 -A10 -E "error|FAILED" "$OUT/build.log" | head -80; exit 1; }
rc=0
for t in test_cuda_ops test_cuda_backend; do
  build/dev/tests/backends/$t > "$OUT/$t.log" 2>&1 || rc=1
  grep -E "max abs|NMSE|difference|backend:|OK|FAILED|PASSED|Failure" "$OUT/$t.log" | tail -70
done
M=.carry/models/stories260K
for b in cpu cuda; do
  timeout 60 build/dev/tools/flashserve-generate --model $M --backend $b --temperature 0 \
    --max-tokens 200 > "$OUT/generate_$b.txt" 2>&1 || rc=1
done
# Compare the generated text only (the statistics line after it differs).
strip() { sed 's/prompt [0-9]* tokens in .*//' "$1"; }
cmp -s <(strip "$OUT/generate_cpu.txt") <(strip "$OUT/generate_cuda.txt") \
  && echo "generate: cpu and cuda texts identical" || { echo "generate: texts differ"; rc=1; }
tail -3 "$OUT/generate_cuda.txt"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$CS" ]; then
  timeout 240 "$CS" --error-exitcode 9 build/dev/tests/backends/test_cuda_backend \
    --gtest_filter='CudaBackend.Stories260kRagged*:Shapes/CudaRandomModel.*d64*' \
    > "$OUT/sanitizer.log" 2>&1; echo "compute-sanitizer rc=$?"; tail -4 "$OUT/sanitizer.log"
else
  echo "compute-sanitizer not found"
fi
# Informal (not a benchmark record): batch-1 greedy decode speed of the TinyLlama-1.1B shape.
if [ "${TINYLLAMA:-1}" = 1 ]; then
  T=/tmp/fs_tinyllama
  timeout 200 build/dev/weights/flashserve-random-model --out $T --preset tinyllama-1.1b \
    --dtype bf16 --tokenizer .carry/models/llama2-tokenizer/tokenizer.model > "$OUT/tinyllama.txt" 2>&1
  timeout 120 build/dev/tools/flashserve-generate --model $T --backend cuda --temperature 0 \
    --max-tokens 256 >> "$OUT/tinyllama.txt" 2>&1
  tail -c 400 "$OUT/tinyllama.txt"; echo
fi
echo "test rc=$rc"
exit $rc

#!/usr/bin/env bash
# The GPU half of issue 8, for the GPU machine once the CUDA backend is in (not run yet):
#  1. compute-sanitizer memcheck and racecheck over every `gpu` test program;
#  2. a short end-to-end run: `flashserve --backend cuda` under memcheck (leak check on), a few
#     completions (plain, streamed, n=4, a hang-up), SIGTERM; the log must show no errors;
#  3. the soak test against the CUDA backend for a few minutes (FS_SOAK_REQUESTS, default 20000).
# Usage: tests/soak/run_on_gpu.sh [OUT_DIR]   (default build/gpu-reliability). Logs and the soak's
# JSON line land in OUT_DIR; the exit status is non-zero if any step found a problem.
# FS_RELIABILITY_STEPS picks steps (default "kernels e2e soak").
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/build/gpu-reliability}
build=$root/build/gpu-rel
mkdir -p "$out"
sanitizer=${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
echo "GPU: $gpu" | tee "$out/summary.txt"
failed=0
note() { echo "$*" | tee -a "$out/summary.txt"; }
steps=" ${FS_RELIABILITY_STEPS:-kernels e2e soak} "

if [ -n "${FS_PREBUILT:-}" ]; then  # binaries built elsewhere (tests/backends/carried_session.sh)
  build=$FS_PREBUILT
  gpu_tests="test_cuda_ops test_cuda_backend test_attention_decode test_attention_prefill"
else
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHSERVE_CUDA=ON \
    -DFLASHSERVE_BUILD_BENCH=OFF >/dev/null || exit 1
  cmake --build "$build" -j"$(nproc)" || exit 1
  gpu_tests=$(ctest --test-dir "$build" -L gpu -N | awk '/Test +#/ {print $3}')
fi

# 1. Kernel tests under memcheck and racecheck (FS_SANITIZER_FILTER: a gtest filter per program,
# as "name=filter;name=filter", to keep the slow ones to a subset).
[[ $steps == *" kernels "* ]] || gpu_tests=""
for name in $gpu_tests; do
  exe=$(find "$build/tests" -type f -perm -u+x -name "$name" | head -n 1)
  [ -n "$exe" ] || continue
  for tool in memcheck racecheck; do
    log="$out/${name}_${tool}.log"
    filters=${FS_SANITIZER_FILTER:-}
    [ "$tool" = racecheck ] && filters=${FS_RACECHECK_FILTER:-$filters}
    filter=$(echo "$filters" | tr ';' '\n' | sed -n "s/^$name=//p")
    if timeout "${FS_SANITIZER_TIMEOUT:-600}" "$sanitizer" --tool "$tool" --error-exitcode 99 \
         "$exe" ${filter:+--gtest_filter="$filter"} >"$log" 2>&1; then
      note "$name $tool: ok ($(grep -Eo 'ERROR SUMMARY: [0-9]+ errors?' "$log" | tail -n 1))"
    else
      note "$name $tool: FAILED (see $log)"
      failed=1
    fi
  done
done

# 2. End-to-end under memcheck.
if [[ $steps == *" e2e "* ]]; then
model=${FS_MODEL:-$root/../shared/models/stories260K}
log="$out/e2e_memcheck.log"
"$sanitizer" --tool memcheck --leak-check full --error-exitcode 99 \
  "$build/server/flashserve" --model "$model" --backend cuda --port 18731 \
  --kv-cache-tokens 65536 >"$log" 2>&1 &
pid=$!
for _ in $(seq 600); do curl -sf localhost:18731/health >/dev/null && break; sleep 0.5; done
url=localhost:18731/v1/completions
curl -sf "$url" -d '{"prompt":"Once upon a time","max_tokens":64,"temperature":0}' >"$out/e2e_1.json" || failed=1
curl -sfN "$url" -d '{"prompt":"Once","max_tokens":64,"stream":true}' >"$out/e2e_2.txt" || failed=1
curl -sf "$url" -d '{"prompt":["a","b"],"n":4,"max_tokens":32,"logprobs":2,"echo":true}' >"$out/e2e_3.json" || failed=1
# Sampled on the GPU: truncation, penalties and bias (kernels/cuda/sampling.cu).
curl -sf "$url" -d '{"prompt":["Once","The dog"],"n":3,"max_tokens":48,"temperature":0.8,"top_k":20,"top_p":0.9,"min_p":0.02,"frequency_penalty":0.5,"presence_penalty":0.3,"repetition_penalty":1.2,"logit_bias":{"5":2,"7":-100},"seed":3}' >"$out/e2e_4.json" || failed=1
curl -s --max-time 0.3 -N "$url" -d '{"prompt":"x","max_tokens":400,"stream":true,"ignore_eos":true}' >/dev/null
sleep 1
# SIGTERM to the server itself (compute-sanitizer does not forward it); the sanitizer then exits
# with the server's status, or 99 if it found errors.
pkill -TERM -x flashserve
wait "$pid"
status=$?
if [ "$status" -eq 0 ] && grep -q "ERROR SUMMARY: 0 errors" "$log"; then
  note "flashserve --backend cuda under memcheck: ok (exit 0, 0 errors)"
else
  note "flashserve --backend cuda under memcheck: FAILED (exit $status, see $log)"
  failed=1
fi
fi

# 3. Soak on the CUDA backend.
# Probe texts are not compared exactly on the GPU: see tests/soak/soak_client.h (probes_differ).
if [[ $steps != *" soak "* ]]; then
  :
elif FS_SOAK_REQUESTS=${FS_SOAK_REQUESTS:-20000} FS_SOAK_CONCURRENCY=${FS_SOAK_CONCURRENCY:-32} \
   FS_SOAK_PROBES_EXACT=0 FS_SOAK_RSS_MARGIN_MIB=${FS_SOAK_RSS_MARGIN_MIB:-16} \
   FS_SOAK_SERVER_ARGS="--backend cuda" FS_SOAK_REPORT="$out/soak_cuda.jsonl" \
   "$build/tests/soak/test_soak" >"$out/soak_cuda.log" 2>&1; then
  note "soak (cuda): ok: $(tail -n 1 "$out/soak_cuda.jsonl")"
else
  note "soak (cuda): FAILED (see $out/soak_cuda.log)"
  failed=1
fi
exit $failed

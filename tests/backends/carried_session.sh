#!/usr/bin/env bash
# GPU-machine session over binaries built on the development machine (sm_90a) instead of a build
# there: the GPU machine has no cpp-httplib, and building costs device time. Pack them here with
#   tests/backends/carried_session.sh pack [BUILD_DIR]    (default build/release; configured
#   with -DFS_MODELS_DIR=/work/shared/models, where run links the carried models, or the tests
#   that load stories260K fail with "model path does not exist")
# which writes .carry/bin.tar.xz (binaries) and .carry/lib (the shared libraries they need that a
# CUDA Ubuntu image may lack); .carry/models must hold stories260K and llama2-tokenizer. Then on
# the GPU machine (device tool, carry .carry):
#   tests/backends/carried_session.sh run STAGE...   (OUT=dir for the logs)
# Or build on the GPU machine itself: `carried_session.sh build` (see below), then run. Fill
# .carry/debs here first: (cd .carry/debs && apt-get download libcpp-httplib-dev libcpp-httplib0.11
# libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev
# libutf8proc2 libcli11-dev libbrotli1 libbrotli-dev libssl-dev zlib1g-dev nettle-dev libnettle8
# libhogweed6 libgmp-dev libgmp10); for ab_e2e, .carry/old holds `git archive` of the older commit.
# Stages: gpu (every gpu-labelled test program + cpu/cuda generate), graphs (TinyLlama-1.1B
# shape: batch-1 decode with and without CUDA graphs, bench_e2e records), linear (bench_linear),
# e2e_tinyllama (bench_e2e alone), e2e (bench/gpu_e2e.sh over the carried binaries), serve (the
# HTTP server on the GPU under bench_server), reliability (tests/soak/run_on_gpu.sh over them),
# sampling (the GPU sampler: its test, under compute-sanitizer too, bench_sampling, and bench_e2e
# with sampled requests, GPU sampler vs host sampler), sanitize_e2e (only flashserve under
# memcheck), ops (bench_decode_ops), e2e_7b_compile, same_run (flashserve + transformers eager and
# compiled on the same cases in one call), soak_wide (256 concurrent streaming clients on CUDA),
# sampling_test (test_cuda_sampling alone), soak_long, profile, ab_e2e (bench_e2e of an
# older build against this one, alternated), families (the other architectures of the Llama
# family against transformers), prefix_cache (the prefix-cache engine test on CUDA and the
# cascade attention test, then bench/prefix_cache.sh over the carried binaries), prefill (the
# prefill kernels: bench/gpu_prefill.sh over the built binaries, lean filters for one call, plus
# the CUDA backend's random models with FLASHSERVE_PREFILL_KV=contig) (see each below).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
bins=(server/flashserve tools/flashserve-generate weights/flashserve-random-model
      bench/bench_e2e bench/flashserve-logits bench/bench_server bench/bench_linear
      bench/bench_decode_ops bench/bench_sampling
      tests/backends/test_cuda_backend tests/backends/test_cuda_ops
      tests/backends/test_cuda_sampling
      tests/kernels/test_attention_decode tests/kernels/test_attention_prefill
      tests/soak/test_soak tests/engine/test_prefix_cache_engine
      tests/backends/test_cascade_attention)

if [ "${1:-}" = pack ]; then
  build=${2:-build/release}
  mkdir -p .carry/lib
  tar -C "$build" -cJf .carry/bin.tar.xz "${bins[@]}"
  # Not Nettle: the image has a newer one, which its own curl (gnutls) needs.
  for lib in libcpp-httplib.so.0.11 libsentencepiece.so.0 libbrotlidec.so.1 libbrotlienc.so.1 \
             libbrotlicommon.so.1 libutf8proc.so.2; do
    cp -L "/usr/lib/x86_64-linux-gnu/$lib" .carry/lib/
  done
  du -sh .carry/bin.tar.xz .carry/lib
  exit 0
fi
if [ "${1:-}" = build ]; then
  # On the GPU machine instead of `pack` here: 16 cores build the CUDA code in a few minutes,
  # where this 2-core machine takes far longer. cpp-httplib, PCRE2, utf8proc, CLI11 and
  # nettle-dev (the prefix cache's SHA-256) are not installed there (nor the headers of OpenSSL,
  # zlib and brotli that Debian's httplib.h includes), so their Debian packages travel in .carry/debs (apt-get download here) and
  # are unpacked into /opt/fsdev, with their pkg-config files pointed there.
  # SRC (default .), BUILD (default build/release), ARCHS (default 90a) and TARGETS (default:
  # every binary listed above) choose what is built.
  dev=/opt/fsdev
  mkdir -p $dev .carry/lib
  for f in .carry/debs/*.deb; do dpkg -x "$f" $dev; done
  # Requires.private names openssl/zlib/brotli .pc files that image lacks; shared linking needs
  # none of them.
  sed -i -e "s|^prefix=.*|prefix=$dev/usr|" -e '/^Requires.private/d' $(find $dev -name '*.pc')
  export PKG_CONFIG_PATH=$dev/usr/lib/x86_64-linux-gnu/pkgconfig:$dev/usr/share/pkgconfig
  cp -a $dev/usr/lib/x86_64-linux-gnu/lib{cpp-httplib,utf8proc,brotli}*.so* .carry/lib/
  # Only what the image lacks: an older copy first on LD_LIBRARY_PATH would break its own
  # programs (curl's gnutls needs the image's newer Nettle). grep -c, not -q: with pipefail,
  # -q closing the pipe early makes ldconfig's SIGPIPE read as "not found".
  have() { [ "$(ldconfig -p | grep -c "$1 ")" -gt 0 ]; }
  have libpcre2-8.so.0 || cp -a $dev/usr/lib/x86_64-linux-gnu/libpcre2-8.so* .carry/lib/
  have libnettle.so.8 || cp -a $dev/usr/lib/x86_64-linux-gnu/libnettle.so* .carry/lib/
  targets=${TARGETS:-$(for b in "${bins[@]}"; do basename "$b"; done)}
  cmake -S "${SRC:-.}" -B "${BUILD:-build/release}" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH=$dev/usr -DFS_MODELS_DIR=/work/shared/models \
    -DCMAKE_CXX_FLAGS="-isystem $dev/usr/include -isystem $dev/usr/include/x86_64-linux-gnu" \
    -DCMAKE_CUDA_ARCHITECTURES="${ARCHS:-90a}" > /tmp/fs_configure.log 2>&1 \
    || { cat /tmp/fs_configure.log; exit 1; }
  grep -E "flashserve|CUDA" /tmp/fs_configure.log
  cmake --build "${BUILD:-build/release}" -j"$(nproc)" --target $targets > /tmp/fs_build.log 2>&1
  r=$?
  [ $r -eq 0 ] && tail -2 /tmp/fs_build.log || grep -B3 -A20 -m3 "FAILED" /tmp/fs_build.log
  exit $r
fi
[ "${1:-}" = run ] || { echo "usage: $0 pack [BUILD_DIR] | build | run STAGE..." >&2; exit 2; }
shift
OUT=${OUT:-/tmp/fs_out}
mkdir -p "$OUT"
# build/release: the paths the test programs were compiled with (FS_BINARY_DIR) hold there too.
B=$root/build/release
# Binaries packed here (pack), or built there already (build).
if [ -f .carry/bin.tar.xz ]; then
  mkdir -p "$B" && tar -C "$B" -xJf .carry/bin.tar.xz || exit 1
fi
export LD_LIBRARY_PATH=$root/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
# The test programs were compiled with FS_MODELS_DIR=/work/shared/models.
mkdir -p /work/shared && ln -sfn "$root/.carry/models" /work/shared/models
M=$root/.carry/models
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
rc=0

for stage in "$@"; do
  echo "== stage $stage (t=${SECONDS}s)"
  case $stage in
  gpu)
    for t in tests/backends/test_cuda_ops tests/backends/test_cuda_backend \
             tests/kernels/test_attention_decode tests/kernels/test_attention_prefill; do
      name=$(basename $t)
      timeout 300 "$B/$t" > "$OUT/$name.log" 2>&1; r=$?
      [ $r -ne 0 ] && rc=1
      echo "$name rc=$r: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$name.log" | tr '\n' ' ')"
      grep -E "graphs vs eager|first difference|NMSE|FAILED  \]|Failure" "$OUT/$name.log" | head -30
    done
    for b in cpu cuda; do
      timeout 60 "$B/tools/flashserve-generate" --model $M/stories260K --backend $b \
        --temperature 0 --max-tokens 200 > "$OUT/generate_$b.txt" 2>&1 || rc=1
    done
    strip() { sed 's/prompt [0-9]* tokens in .*//' "$1"; }
    if cmp -s <(strip "$OUT/generate_cpu.txt") <(strip "$OUT/generate_cuda.txt"); then
      echo "generate stories260K: cpu and cuda (graphs) texts identical"
    else
      echo "generate stories260K: texts differ"; rc=1
    fi
    ;;
  graphs)
    T=/tmp/fs_models/tinyllama-1.1b
    [ -f $T/config.json ] || timeout 200 "$B/weights/flashserve-random-model" --out $T \
      --preset tinyllama-1.1b --tokenizer $M/llama2-tokenizer/tokenizer.model > "$OUT/random_model.log" 2>&1
    for g in 256 0; do
      timeout 200 "$B/bench/bench_e2e" --model $T --backend cuda --label tinyllama-1.1b \
        --cases decode:1x128x256 --cuda-graph-max-batch $g --no-ceilings $([ $g = 0 ] && echo 1 || echo 0) \
        >> "$OUT/graphs.jsonl" 2> "$OUT/graphs_$g.log" || rc=1
      tail -n 1 "$OUT/graphs.jsonl" | python3 -c "import json,sys; j=json.loads(sys.stdin.read()); \
print('graph max batch', j.get('cuda_graph_max_batch'), 'decode tok/s', j.get('decode_tokens_per_s'), \
'frac_of_roofline', j.get('frac_of_roofline'), 'err', j.get('error'))"
    done
    ;;
  linear)  # the decode step's projections: skinny-matmul kernel vs cuBLASLt
    timeout 300 "$B/bench/bench_linear" > "$OUT/linear.jsonl" 2> "$OUT/linear.log" || rc=1
    python3 - "$OUT/linear.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if j["bench"] == "linear" and j["m"] in (1, 8):
        print(f'{j["shape"]:15} {j["proj"]:8} m={j["m"]:<3} {j["us"]:8.1f} us {j["gb_s"]:7.0f} GB/s '
              f'(cuBLASLt {j["cublaslt_us"]:8.1f} us {j["cublaslt_gb_s"]:7.0f} GB/s) x{j["speedup_vs_cublaslt"]:.2f}')
    elif j["bench"] == "linear_weights_per_step":
        print(f'{j["shape"]:15} step m={j["m"]:<3} {j["ms"]:.3f} ms frac_of_copy_bw {j["frac_of_copy_bw"]:.2f} '
              f'(cuBLASLt {j["cublaslt_ms"]:.3f} ms, {j["cublaslt_frac_of_copy_bw"]:.2f}) x{j["speedup_vs_cublaslt"]:.2f}')
PY
    ;;
  ops)  # one decode layer's ops, each timed inside a CUDA graph
    for cfg in "tinyllama-1.1b 1 256" "tinyllama-1.1b 16 256" "llama2-7b 1 256"; do
      set -- $cfg
      timeout 120 "$B/bench/bench_decode_ops" --shape $1 --m $2 --kv-len $3 >> "$OUT/decode_ops.jsonl" \
        2>> "$OUT/decode_ops.log" || rc=1
    done
    python3 - "$OUT/decode_ops.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if j["bench"] == "decode_op":
        print(f'{j["shape"]:15} m={j["m"]:<3} {j["op"]:20} {j["us"]:7.2f} us  x layers {j["us_per_step"]:8.1f} us  frac_bw {j["frac_of_copy_bw"]:.2f}')
    else:
        print(f'{j["shape"]:15} m={j["m"]:<3} layer {j["layer_us"]:.1f} us, all layers {j["layers_ms"]:.3f} ms (bytes at copy bw {j["bytes_ms_at_copy_bw"]:.3f} ms)')
PY
    ;;
  profile)  # where the decode step's GPU time goes (Nsight Systems, when the machine has it)
    T=/tmp/fs_models/tinyllama-1.1b
    [ -f $T/config.json ] || timeout 200 "$B/weights/flashserve-random-model" --out $T \
      --preset tinyllama-1.1b --tokenizer $M/llama2-tokenizer/tokenizer.model > "$OUT/random_model.log" 2>&1
    NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys \
           /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -n 1)
    if [ -n "$NSYS" ]; then
      timeout 240 "$NSYS" profile -o /tmp/prof --force-overwrite true --trace cuda \
        "$B/bench/bench_e2e" --model $T --backend cuda --label tinyllama-1.1b \
        --cases decode:1x128x128 --repeats 1 --no-ceilings 1 > "$OUT/profile.log" 2>&1
      timeout 120 "$NSYS" stats --report cuda_gpu_kern_sum --format csv /tmp/prof.nsys-rep \
        > "$OUT/profile_kernels.csv" 2>&1
      timeout 120 "$NSYS" stats --report cuda_api_sum --format csv /tmp/prof.nsys-rep \
        > "$OUT/profile_api.csv" 2>&1
      python3 - "$OUT/profile_kernels.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 8]
hdr, body = rows[0], rows[1:]
print("kernels by total GPU time (nsys):", hdr[:4], hdr[-1])
for r in body[:14]:
    print(r[0], r[1], r[2], r[3], r[-1][:110])
PY
      head -c 1500 "$OUT/profile_api.csv"
    else
      echo "no nsys on this machine"
    fi
    ;;
  sampling)
    timeout 300 "$B/tests/backends/test_cuda_sampling" > "$OUT/test_cuda_sampling.log" 2>&1 || rc=1
    grep -E "^vocab|^\[  (PASSED|FAILED)|Failure" "$OUT/test_cuda_sampling.log" | head -20
    if command -v compute-sanitizer > /dev/null; then
      for tool in memcheck racecheck; do
        timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 \
          "$B/tests/backends/test_cuda_sampling" > "$OUT/sanitizer_sampling_$tool.log" 2>&1; r=$?
        [ $r -ne 0 ] && rc=1
        echo "compute-sanitizer $tool test_cuda_sampling rc=$r: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' "$OUT/sanitizer_sampling_$tool.log" | tr '\n' ' ')"
      done
    fi
    timeout 400 "$B/bench/bench_sampling" > "$OUT/sampling.jsonl" 2> "$OUT/sampling.log" || rc=1
    python3 - "$OUT/sampling.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    print(f'vocab {j["vocab"]:6} batch {j["batch"]:3} {j["mix"]:12} gpu {j["gpu_sampler_us"]:9.1f} us  host {j["host_sampler_us"]:11.1f} us  x{j["speedup_vs_host_sampler"]:8.1f}  equal {j["tokens_equal"]}')
PY
    T=/tmp/fs_models/tinyllama-1.1b
    [ -f $T/config.json ] || timeout 200 "$B/weights/flashserve-random-model" --out $T \
      --preset tinyllama-1.1b --tokenizer $M/llama2-tokenizer/tokenizer.model > "$OUT/random_model.log" 2>&1
    for run in "greedy 0 0" "sampled 1 0" "sampled_host 1 1"; do
      set -- $run
      timeout 200 "$B/bench/bench_e2e" --model $T --backend cuda --label tinyllama-1.1b-$1 \
        --cases decode:1x128x256,offline:256x128x128 --temperature $2 --top-k $([ $2 = 1 ] && echo 50 || echo 0) \
        --top-p $([ $2 = 1 ] && echo 0.9 || echo 1) --host-sampling $3 --no-ceilings $([ $1 = greedy ] && echo 0 || echo 1) \
        --max-seconds 90 >> "$OUT/e2e_sampling.jsonl" 2> "$OUT/e2e_sampling_$1.log" || rc=1
      grep -E "^(decode|offline)" "$OUT/e2e_sampling_$1.log"
    done
    ;;
  e2e_tinyllama)  # bench_e2e alone on the TinyLlama shape (decode + offline), no baselines
    T=/tmp/fs_models/tinyllama-1.1b
    [ -f $T/config.json ] || timeout 200 "$B/weights/flashserve-random-model" --out $T \
      --preset tinyllama-1.1b --tokenizer $M/llama2-tokenizer/tokenizer.model > "$OUT/random_model.log" 2>&1
    timeout 300 "$B/bench/bench_e2e" --model $T --backend cuda --label tinyllama-1.1b \
      --cases decode:1x128x256,offline:16x128x256,offline:256x128x128,offline:256x512x256 \
      --max-seconds 60 > "$OUT/e2e_tinyllama.jsonl" 2> "$OUT/e2e_tinyllama.log" || rc=1
    grep -E "^(decode|offline)" "$OUT/e2e_tinyllama.log"
    python3 -c "
import json
for l in open('$OUT/e2e_tinyllama.jsonl'):
    j = json.loads(l)
    if 'engine_steps' in j:
        print(j['bench'], j.get('num_requests', 1), 'frac', j.get('frac_of_roofline', j.get('frac_of_step_lower_bound')),
              'ms/step: schedule %.3f forward %.3f sample %.3f' % (j['engine_schedule_ms_per_step'],
              j['engine_forward_ms_per_step'], j['engine_sample_ms_per_step']), 'steps', j['engine_steps'])
"
    ;;
  serve)  # HTTP serving on the GPU: bench_server against flashserve --backend cuda
    T=/tmp/fs_models/tinyllama-1.1b
    [ -f $T/config.json ] || timeout 200 "$B/weights/flashserve-random-model" --out $T \
      --preset tinyllama-1.1b --tokenizer $M/llama2-tokenizer/tokenizer.model > "$OUT/random_model.log" 2>&1
    port=18790
    cmd="flashserve --model $T --backend cuda --port $port --max-num-seqs 256 --max-num-batched-tokens 8192 --max-queue 1024 --no-request-log"
    "$B/server/flashserve" --model $T --backend cuda --port $port --max-num-seqs 256 \
      --max-num-batched-tokens 8192 --max-queue 1024 --no-request-log > "$OUT/serve_server.log" 2>&1 &
    spid=$!
    for _ in $(seq 240); do curl -sf localhost:$port/health > /dev/null && break; sleep 0.5; done
    head -3 "$OUT/serve_server.log"
    timeout 240 "$B/bench/bench_server" --port $port --concurrency 1,16,64,256 --num-requests 512 \
      --prompt-len 128 --max-tokens 128 --token-range 1000,20000 --label tinyllama-1.1b \
      --server-command "$cmd" > "$OUT/serve.jsonl" 2> "$OUT/serve_client.log" || rc=1
    # TTFT of a single 2040-token prompt (+ 8 generated: the shape's context is 2048), 4 requests.
    timeout 60 "$B/bench/bench_server" --port $port --concurrency 1 --num-requests 4 \
      --prompt-len 2040 --max-tokens 8 --token-range 1000,20000 --label tinyllama-1.1b-ttft2048 \
      --server-command "$cmd" >> "$OUT/serve.jsonl" 2>> "$OUT/serve_client.log" || rc=1
    kill -TERM $spid; wait $spid; echo "server exit $? after SIGTERM"
    python3 -c "
import json
for l in open('$OUT/serve.jsonl'):
    j = json.loads(l); print({k: j.get(k) for k in ('label','concurrency','requests_per_s','output_tokens_per_s','ttft_ms_p50','ttft_ms_p99','tpot_ms_p50','tpot_ms_p99','errors')})
"
    ;;
  prefix_cache)  # automatic prefix caching: its GPU tests (the engine test with the cuda
                 # parameter, cascade attention vs plain decode), then shared system prompt +
                 # multi-turn chat with caching, with caching but no cascade, and without
                 # (bench/prefix_cache.sh)
    for t in tests/engine/test_prefix_cache_engine tests/backends/test_cascade_attention; do
      name=$(basename $t)
      timeout 120 "$B/$t" > "$OUT/$name.log" 2>&1 || rc=1
      echo "$name: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$name.log" | tr '\n' ' ')"
      grep -E "FAILED  \]|Failure|per layer|sequences sharing|rel Frobenius|NMSE" "$OUT/$name.log" | head -30
    done
    FS_MODELS=$M FS_PC_OUT="$OUT/prefix_cache_v2.jsonl" timeout 400 bench/prefix_cache.sh "$B" \
      2> "$OUT/prefix_cache.log" || rc=1
    ;;
  e2e_7b_compile)  # what the 10-minute e2e calls left out: Llama-2-7B bench + eager baseline,
                   # and transformers' static cache + torch.compile baseline for TinyLlama
    CFG=/tmp/fs_models/fs_configs
    for sh in llama2-7b tinyllama-1.1b; do
      "$B/weights/flashserve-random-model" --out "$CFG/$sh" --preset $sh --config-only 1 > /dev/null 2>&1
    done
    T7=/tmp/fs_models/llama2-7b
    timeout 200 "$B/weights/flashserve-random-model" --out $T7 --preset llama2-7b \
      --tokenizer $M/llama2-tokenizer/tokenizer.model > "$OUT/random_7b.log" 2>&1 || rc=1
    timeout 150 "$B/bench/bench_e2e" --model $T7 --backend cuda --label llama2-7b \
      --cases decode:1x128x256,offline:16x128x256 --max-seconds 60 > "$OUT/e2e_7b.jsonl" \
      2> "$OUT/e2e_7b.log" || rc=1
    grep -E "^(decode|offline)" "$OUT/e2e_7b.log"
    rm -rf $T7
    PYTHONUNBUFFERED=1 timeout 120 python3 bench/hf_generate_baseline.py --out "$OUT/hf_7b.jsonl" \
      --shapes llama2-7b --cases 1x128x256,16x128x256 --config-dir $CFG --budget-s 90 \
      > "$OUT/hf_7b.log" 2>&1 || rc=1
    tail -4 "$OUT/hf_7b.log"
    PYTHONUNBUFFERED=1 timeout 230 python3 bench/hf_generate_baseline.py --out "$OUT/hf_compile.jsonl" \
      --shapes tinyllama-1.1b --cases "" --compile-cases 1x128x256,16x128x256 --config-dir $CFG \
      --budget-s 200 > "$OUT/hf_compile.log" 2>&1 || rc=1
    tail -4 "$OUT/hf_compile.log"
    ;;
  same_run)  # flashserve and both transformers baselines (eager; static cache + torch.compile)
             # on the same cases in one call, merged into speedup_vs_hf_* records. Settings:
             # SR_SHAPE, SR_CASES (bench_e2e's), SR_HF_CASES, SR_COMPILE_CASES (batch x prompt x
             # output), SR_HF_TIMEOUT (s). Each batch size compiles anew (1-2 min).
    shape=${SR_SHAPE:-tinyllama-1.1b}
    fs_cases=${SR_CASES:-decode:1x128x256,offline:16x128x256,offline:256x128x128,offline:256x512x256}
    hf_cases=${SR_HF_CASES-1x128x256,16x128x256,256x128x128,256x512x256}
    compile_cases=${SR_COMPILE_CASES-1x128x256,256x128x128}
    CFG=/tmp/fs_models/fs_configs
    "$B/weights/flashserve-random-model" --out "$CFG/$shape" --preset $shape --config-only 1 > /dev/null 2>&1
    T=/tmp/fs_models/$shape
    [ -f $T/config.json ] || timeout 300 "$B/weights/flashserve-random-model" --out $T --preset $shape \
      --tokenizer $M/llama2-tokenizer/tokenizer.model > "$OUT/random_$shape.log" 2>&1 || rc=1
    timeout 300 "$B/bench/bench_e2e" --model $T --backend cuda --label $shape --cases "$fs_cases" \
      --max-seconds 90 >> "$OUT/same_run_fs.jsonl" 2> "$OUT/same_run_fs_$shape.log" || rc=1
    grep -E "^(decode|offline)" "$OUT/same_run_fs_$shape.log"
    rm -rf $T  # the disk and page cache go to transformers next
    PYTHONUNBUFFERED=1 timeout ${SR_HF_TIMEOUT:-420} python3 bench/hf_generate_baseline.py \
      --out "$OUT/same_run_hf.jsonl" --shapes $shape --cases "$hf_cases" --compile-cases "$compile_cases" \
      --config-dir $CFG > "$OUT/same_run_hf_$shape.log" 2>&1 || rc=1
    grep -E "decode_tokens_per_s|Error|error" "$OUT/same_run_hf_$shape.log" | cut -c1-400 | tail -12
    python3 bench/merge_e2e.py --flashserve "$OUT/same_run_fs.jsonl" --hf "$OUT/same_run_hf.jsonl" \
      --out "$OUT/same_run.jsonl" || rc=1
    ;;
  e2e)
    E2E_SKIP_BUILD=1 E2E_BUILD=$B OUT=$OUT bash bench/gpu_e2e.sh || rc=1
    ;;
  soak_wide)  # hundreds of concurrent streaming clients (docs/API_CONTRACT.md #10): 256 clients, 256 running
              # sequences, a KV cache small enough that they preempt each other
    FS_SOAK_REQUESTS=${FS_SOAK_WIDE_REQUESTS:-10000} FS_SOAK_CONCURRENCY=256 FS_SOAK_PROBES_EXACT=0 \
      FS_SOAK_RSS_MARGIN_MIB=64 FS_SOAK_REPORT="$OUT/soak_wide.jsonl" \
      FS_SOAK_SERVER_ARGS="--backend cuda --max-num-seqs 256 --max-queue 512 --kv-cache-tokens 16384" \
      timeout 400 "$B/tests/soak/test_soak" > "$OUT/soak_wide.log" 2>&1 || rc=1
    grep -E "^\[  (PASSED|FAILED)|Failure" "$OUT/soak_wide.log"
    tail -n 1 "$OUT/soak_wide.jsonl"
    ;;
  sampling_test)  # the GPU sampler's test alone (the sampling stage also benchmarks)
    timeout 300 "$B/tests/backends/test_cuda_sampling" > "$OUT/test_cuda_sampling.log" 2>&1 || rc=1
    grep -E "^\[  (PASSED|FAILED)|Failure" "$OUT/test_cuda_sampling.log" | head -20
    ;;
  soak_long)  # the CUDA soak at 3x the requests: does RSS keep growing, or level off?
    FS_SOAK_REQUESTS=${FS_SOAK_LONG_REQUESTS:-30000} FS_SOAK_CONCURRENCY=32 FS_SOAK_PROBES_EXACT=0 \
      FS_SOAK_RSS_MARGIN_MIB=64 FS_SOAK_SERVER_ARGS="--backend cuda" FS_SOAK_REPORT="$OUT/soak_long.jsonl" \
      timeout 300 "$B/tests/soak/test_soak" > "$OUT/soak_long.log" 2>&1 || rc=1
    tail -n 1 "$OUT/soak_long.jsonl"
    ;;
  reliability)
    # The sanitizers slow kernels 10-100x: the attention tests run their sanitizer subsets, the
    # backend tests their stories260K and head_dim-64 cases.
    FS_SANITIZER_FILTER="test_attention_prefill=*AttentionPrefillSmall*:AttentionPrefill.RejectsUnsupportedArguments;test_attention_decode=AttentionDecode.SmallForSanitizer:AttentionDecode.EmptySequencesAndEmptySplits:AttentionDecodeMerge.*;test_cuda_backend=CudaBackend.Stories260kRagged*:CudaGraphs.*:Shapes/CudaRandomModel.*d64*" \
    FS_RACECHECK_FILTER="test_attention_prefill=*AttentionPrefillSmall*;test_attention_decode=AttentionDecode.SmallForSanitizer:AttentionDecodeMerge.*;test_cuda_backend=Shapes/CudaRandomModel.LogitsCloseToCpu/d64_gqa_tied_bf16" \
    FS_SANITIZER_TIMEOUT=200 FS_SOAK_REQUESTS=${FS_SOAK_REQUESTS:-10000} \
      FS_PREBUILT=$B FS_MODEL=$M/stories260K bash tests/soak/run_on_gpu.sh "$OUT/reliability" || rc=1
    cat "$OUT/reliability/summary.txt"
    ;;
  sanitize_e2e)  # only the end-to-end memcheck run of tests/soak/run_on_gpu.sh
    FS_RELIABILITY_STEPS=e2e FS_PREBUILT=$B FS_MODEL=$M/stories260K \
      bash tests/soak/run_on_gpu.sh "$OUT/sanitize_e2e" || rc=1
    cat "$OUT/sanitize_e2e/summary.txt"
    head -c 600 "$OUT/sanitize_e2e/e2e_4.json"; echo
    ;;
  ab_e2e)  # "no change of speed": bench_e2e of another build (AB_OLD: its build folder, e.g. a
            # `build` of an older commit with SRC/BUILD) against this one on the same random
            # TinyLlama model, alternated AB_ROUNDS times (default 2) so drift shows as noise.
    shape=tinyllama-1.1b T=/tmp/fs_models/tinyllama-1.1b
    cases=${AB_CASES:-decode:1x128x256,offline:16x128x256,offline:256x128x128,offline:256x512x256}
    [ -f $T/config.json ] || timeout 300 "$B/weights/flashserve-random-model" --out $T --preset $shape \
      --tokenizer $M/llama2-tokenizer/tokenizer.model > "$OUT/random_$shape.log" 2>&1 || rc=1
    for round in $(seq ${AB_ROUNDS:-2}); do
      for side in old new; do
        bin=$B/bench/bench_e2e; [ $side = old ] && bin=$AB_OLD/bench/bench_e2e
        timeout 300 "$bin" --model $T --backend cuda --label "$shape@$side" --cases "$cases" \
          --max-seconds 60 --no-ceilings 1 >> "$OUT/ab_e2e.jsonl" 2> "$OUT/ab_e2e_${side}_$round.log" || rc=1
        echo "round $round $side:"; grep -E "^(decode|offline)" "$OUT/ab_e2e_${side}_$round.log"
      done
    done
    ;;
  families)  # Llama 3.2 (llama3 RoPE, tied head), Qwen2.5 (q/k/v biases), Qwen3 (q/k norms,
              # head_dim 128) and Mistral shapes against transformers (tools/hf_compare.py), after
              # the GPU tests of their ops. FS_FAMILIES picks the shapes (tools/hf_models.py);
              # mistral-7b takes ~5 min alone, so it is not in the default list (run it with
              # FS_FAMILIES=mistral-7b FS_FAMILIES_TESTS=0: the tests need not run twice).
    if [ "${FS_FAMILIES_TESTS:-1}" = 1 ]; then
      timeout 120 "$B/tests/backends/test_cuda_ops" --gtest_filter='Ops.BiasAddAndQkNorm' \
        > "$OUT/families_test_cuda_ops.log" 2>&1 || rc=1
      timeout 300 "$B/tests/backends/test_cuda_backend" \
        --gtest_filter='Shapes/CudaRandomModel.*:CudaGraphs.*' > "$OUT/families_test_cuda_backend.log" 2>&1 || rc=1
      grep -hE "^(add_bias|qk_norm)|^(mistral|qwen)|graphs vs eager|^\[  (PASSED|FAILED)|Failure" \
        "$OUT/families_test_cuda_ops.log" "$OUT/families_test_cuda_backend.log" | sort | uniq -c | head -30
    fi
    CFG=/tmp/fs_models/fs_configs
    for s in ${FS_FAMILIES:-llama3.2-1b qwen2.5-0.5b qwen3-0.6b}; do
      "$B/weights/flashserve-random-model" --out "$CFG/$s" --preset $s --config-only 1 > /dev/null 2>&1 || rc=1
      lim=170 chunk=256
      [ $s = mistral-7b ] && lim=420 chunk=0
      PYTHONUNBUFFERED=1 timeout $lim python3 tools/hf_compare.py --fs-logits "$B/bench/flashserve-logits" \
        --tokenizer $M/llama2-tokenizer/tokenizer.model --workdir /tmp/fs_models --logdir "$OUT" \
        --out "$OUT/hf_compare_families.jsonl" --shapes $s --config-dir $CFG --steps 64 \
        --prefill-chunk $chunk > "$OUT/compare_$s.log" 2>&1 || rc=1
      grep -E "^(model|-----|$s)|first divergence|Error" "$OUT/compare_$s.log" | head -16
      rm -rf /tmp/fs_models/$s /tmp/fs_models/${s}_legacy_rope  # disk for the next shape
    done
    ;;
  prefill)
    # Issue 18's Hopper prefill kernel in one call: its tests (the mma.sync kernel's are
    # unchanged by the contiguous path: left out here), the launcher with
    # FLASHSERVE_PREFILL_KV=contig, the benchmark (launcher, fa2 default, every Hopper variant,
    # the no-load diagnostic, torch flash/cuDNN, bf16 GEMM rate) and compute-sanitizer on the
    # contiguous path's small subset. Build first: TARGETS="test_attention_prefill
    # bench_attention_prefill test_cuda_backend" carried_session.sh build.
    # Timeouts keep build (~2-3 min on 16 cores) + this stage inside one 600 s device call.
    B=$B PREBUILT=1 TEST_FILTER="${PREFILL_TEST_FILTER:--*/fa2}" TEST_TIMEOUT=180 BENCH_TIMEOUT=220 \
      BENCH_IMPLS="${PREFILL_BENCH_IMPLS:-flashserve\$|flashserve:fa2\$|flashserve:sm90:|diag:}" \
      SAN_FILTER="${PREFILL_SAN_FILTER:-*AttentionPrefillSmall*sm90_contig*}" SAN_TIMEOUT=60 ITERS=${ITERS:-30} \
      timeout 500 bash bench/gpu_prefill.sh "$OUT/prefill" || rc=1
    grep -qE "exit code 0" "$OUT/prefill/tests.txt" || rc=1
    # The backend hands the prefill kernel its fresh K/V (turned K kept by qkv_rope_write_kv, V
    # from qkv): random models against the CPU backend, and graph capture with the switch on.
    if [ -x "$B/tests/backends/test_cuda_backend" ]; then
      FLASHSERVE_PREFILL_KV=contig timeout 120 "$B/tests/backends/test_cuda_backend" \
        --gtest_filter='Shapes/CudaRandomModel.*:CudaGraphs.*' > "$OUT/test_cuda_backend_kv_contig.log" 2>&1 || rc=1
      grep -E "NMSE|PASSED|FAILED" "$OUT/test_cuda_backend_kv_contig.log" | head -14
    fi
    ;;
  *) echo "unknown stage $stage"; rc=1 ;;
  esac
done
echo "session rc=$rc (t=${SECONDS}s)"
# The device returns at most 8 files: everything goes back as one archive.
tar czf /tmp/session.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/session.tgz "$OUT/"
exit $rc

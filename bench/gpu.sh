#!/usr/bin/env bash
# The GPU runner: builds flashserve on a machine with an NVIDIA GPU, runs its GPU tests and its
# benchmarks, and writes what the benchmarks measured as JSON lines (schema:
# bench/results/README.md) to $OUT/<gpu name>/, logs to $OUT/logs.tgz. bench/README.md has the
# walk-through; `bench/gpu.sh help` prints the usage below.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1

usage() {
  cat <<'EOF'
usage: bench/gpu.sh COMMAND...          (commands run in the order given; exit 1 if any failed)
on the development machine:
  pack [OLD_REV]   fill .carry/ (ignored by git) for a GPU machine without the development
                   packages or the models: .carry/debs, .carry/models, and with OLD_REV
                   .carry/old.tar (`git archive OLD_REV`, for `ab .carry/old.tar`)
on the GPU machine (repository root, a copy of the working tree):
  build            configure and build in $BUILD (default build/gpu) for $ARCHS (default 90a)
  test             ctest -L gpu, and stories260K's greedy text on cpu and cuda compared
  tp               the GPU tests with their models at tensor-parallel 2 (needs 2+ GPUs)
  soak             compute-sanitizer over the GPU tests, flashserve under memcheck, the soak test
                   on the CUDA backend
  multihost        two flashserve processes as the nodes of one group (--nnodes 2, GPU 0 and
                   GPU 1, NCCL between processes; needs 2+ GPUs): greedy texts as at TP 2 in one
                   process, bench_server of both, then a worker killed and one stopped mid-stream
                   (node 0 must end the stream with node_group_lost and exit 1 within the bound)
  bench SUITE...   benchmarks, each beside its baseline in the same run:
                     decode   decode attention vs torch SDPA (bench_attention_decode)
                     prefill  prefill attention vs torch flash/cuDNN (bench_attention_prefill)
                     e2e      bench_e2e on random TinyLlama-1.1B and Llama-2-7B shapes, and
                              transformers' generate (eager, static cache + torch.compile)
                     hf       logits and greedy text vs transformers on the model families
                     fp8      FP8 weights vs bf16: bench_linear, bench_e2e, logit quality
                     tp       bench_e2e and the collectives at each tensor-parallel size
                     serve    HTTP serving under bench_server
                     defaults the online benchmark (open loop, 500 in / 128 out) on the Llama-2-7B
                              shape: the serving defaults sized from the GPU against the fixed
                              64 sequences / 512 step tokens, goodput at one SLO
                     prefix   automatic prefix caching on and off (shared prefix, multi-turn)
                     moe      one MoE layer's experts and routing at m = 1..64, Qwen3-30B-A3B,
                              Mixtral-8x7B and Qwen1.5-MoE shapes, bf16/FP8/block-FP8/int4
                              (bench_moe_decode), vs the copy bandwidth
                     moe-e2e  bench_e2e on layer-reduced random Qwen3-30B-A3B (bf16) and
                              Mixtral-8x7B (FP8) models ($MOE_E2E: shape:layers:dtype ...)
                     structured  bench_e2e free vs JSON-Schema-constrained on random TinyLlama-1.1B
                              and Llama-2-7B shapes at vocab 32000 and 128256 (Llama 2's
                              tokenizer stretched by --synthetic-vocab)
                     speculative  bench_speculative on random TinyLlama-1.1B and Llama-2-7B
                              shapes: verification step cost (B x (K+1) rows vs B x 1 row, B =
                              1 4 16 64, K = 1..7) and the oracle proposer's end-to-end speed at
                              alpha 0.6 and 0.8, K = 4, against no speculation; on the 7B shape
                              also with a TinyLlama-shaped draft model run for its cost
                     moe-gemm the MoE grouped GEMM vs cuBLAS's grouped GEMM and a dense
                              cuBLASLt GEMM of the same FLOPs (bench_moe_grouped_gemm;
                              MOE_GEMM_ARGS)
                     mxfp4    the MXFP4 GEMV (one expert, and gpt-oss-20b's decode experts) vs
                              the copy bandwidth and the MXFP4 GEMM vs the cuBLASLt bf16 GEMM of
                              the same shape (bench_mxfp4)
  ab OLD           OLD (a git revision, or a tarball of `git archive OLD_REV`) built beside this
                   tree, then bench_e2e of old and new alternated $AB_ROUNDS (2) times on the
                   TinyLlama-1.1B and Llama-2-7B shapes: speedup_vs_old per case
environment: OUT (default out/gpu), BUILD, ARCHS, TARGETS (build: default all), FS_MODELS (default
.carry/models, else ../shared/models: stories260K and llama2-tokenizer), AB_ROUNDS, TP_SIZES
(default 1 2 4 as the GPUs allow), E2E_SHAPES, HF_SHAPES, ITERS (prefill timed runs, 40),
MOE_GEMM_ARGS (bench_moe_grouped_gemm's flags, e.g. --shapes qwen3-30b-a3b --tokens 8192)
EOF
}

OUT=${OUT:-$root/out/gpu}
B=${BUILD:-$root/build/gpu}
M=${FS_MODELS:-$root/.carry/models}
[ -d "$M" ] || M=$(cd "$root/.." && pwd)/shared/models
WORK=/tmp/fs_models  # random-weight models, written once per machine
LOGS=$OUT/logs
rc=0
fail() { echo "FAILED: $*"; rc=1; }
gpu_name() { nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1; }
num_gpus() { nvidia-smi -L 2>/dev/null | grep -c '^GPU'; }
RES=$OUT/$(gpu_name | tr ' ' '_')
[ "$RES" = "$OUT/" ] && RES=$OUT/cpu
# The development packages the GPU machine's image lacks (unpacked there into /opt/fsdev).
debs="libcpp-httplib-dev libcpp-httplib0.11 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0
  libpcre2-posix3 libutf8proc-dev libutf8proc2 libcli11-dev libbrotli1 libbrotli-dev libssl-dev
  zlib1g-dev nettle-dev libnettle8 libhogweed6 libgmp-dev libgmp10"
export LD_LIBRARY_PATH=$root/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off (flashserve sets it too)

# run NAME SECONDS CMD...: stdout and stderr to $LOGS/NAME.log, a time limit, a failure noted.
run() {
  local name=$1 secs=$2; shift 2
  timeout --kill-after=10 "$secs" "$@" > "$LOGS/$name.log" 2>&1 || { fail "$name (see logs/$name.log)"; return 1; }
}

# random_model PRESET [flags]: a random-weight bf16 model of a preset's shape; prints its folder.
# Flags (the writer's, e.g. --vocab-size 128256) name the folder too: PRESET_vocabsize_128256.
random_model() {
  local name=$1
  [ $# -gt 1 ] && name=$1$(printf '_%s' "${@:2}" | tr -d -)
  local dir=$WORK/$name
  [ -f "$dir/config.json" ] || timeout 400 "$B/weights/flashserve-random-model" --out "$dir" \
    --preset "$1" --tokenizer "$M/llama2-tokenizer/tokenizer.model" "${@:2}" > "$LOGS/random_$name.log" 2>&1 \
    || fail "random model $name"
  echo "$dir"
}

# config_only PRESET: the preset's config.json alone (what the Python baselines read).
config_only() {
  "$B/weights/flashserve-random-model" --out "$WORK/fs_configs/$1" --preset "$1" --config-only 1 > /dev/null 2>&1
}

# e2e LABEL MODEL CASES [flags]: bench_e2e's records on stdout, its table in the log; each case
# cancelled after E2E_MAX_SECONDS (90).
e2e() {
  timeout 400 "$B/bench/bench_e2e" --model "$2" --backend cuda --label "$1" --cases "$3" \
    --max-seconds "${E2E_MAX_SECONDS:-90}" "${@:4}" 2>> "$LOGS/bench_e2e.log" || fail "bench_e2e $1 $3 $*"
}

# tag KEY=VALUE...: adds the fields to every JSON line from stdin.
tag() {
  python3 -c 'import json, sys
extra = dict(a.split("=", 1) for a in sys.argv[1:])
for l in sys.stdin:
    if l.startswith("{"): print(json.dumps({**json.loads(l), **extra}))' "$@"
}

# build_tree SRC BUILD TARGETS...: configures with the development packages of .carry/debs when
# the machine lacks them, for $ARCHS, with the tests reading their models from $M.
build_tree() {
  local src=$1 build=$2 dev=/opt/fsdev; shift 2
  local extra=()
  if ls .carry/debs/*.deb > /dev/null 2>&1; then
    mkdir -p $dev .carry/lib
    for f in .carry/debs/*.deb; do dpkg -x "$f" $dev; done
    # Their .pc files name other .pc files the image lacks; shared linking needs none of them.
    sed -i -e "s|^prefix=.*|prefix=$dev/usr|" -e '/^Requires.private/d' $(find $dev -name '*.pc')
    export PKG_CONFIG_PATH=$dev/usr/lib/x86_64-linux-gnu/pkgconfig:$dev/usr/share/pkgconfig
    cp -a $dev/usr/lib/x86_64-linux-gnu/lib{cpp-httplib,utf8proc,brotli}*.so* .carry/lib/
    # Only what the image lacks: an older copy first on LD_LIBRARY_PATH would break its own
    # programs (curl needs the image's newer Nettle).
    have() { [ "$(ldconfig -p | grep -c "$1 ")" -gt 0 ]; }
    have libpcre2-8.so.0 || cp -a $dev/usr/lib/x86_64-linux-gnu/libpcre2-8.so* .carry/lib/
    have libnettle.so.8 || cp -a $dev/usr/lib/x86_64-linux-gnu/libnettle.so* .carry/lib/
    extra=(-DCMAKE_PREFIX_PATH=$dev/usr
           "-DCMAKE_CXX_FLAGS=-isystem $dev/usr/include -isystem $dev/usr/include/x86_64-linux-gnu")
  fi
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHSERVE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${ARCHS:-90a}" -DFS_MODELS_DIR="$M" "${extra[@]}" \
    > "$LOGS/configure_$(basename "$build").log" 2>&1 || { fail "configure $src"; return 1; }
  local t=(); [ $# -gt 0 ] && t=(--target "$@")
  cmake --build "$build" -j"$(nproc)" "${t[@]}" -- -k 0 > "$LOGS/build_$(basename "$build").log" 2>&1 \
    || { grep -B3 -A20 -m3 FAILED "$LOGS/build_$(basename "$build").log"; fail "build $src"; return 1; }
}

# Greedy stories260K on cpu and cuda (at tensor-parallel $1): the same text.
same_text() {
  for b in cpu cuda; do
    timeout 60 "$B/tools/flashserve-generate" --model "$M/stories260K" --backend $b --temperature 0 \
      --max-tokens 200 --tensor-parallel-size "$([ $b = cuda ] && echo "$1" || echo 1)" \
      2> /dev/null | grep -v '^NCCL' > "$LOGS/generate_${b}_tp$1.txt" || fail "generate $b"
  done
  cmp -s "$LOGS/generate_cpu_tp$1.txt" "$LOGS/generate_cuda_tp$1.txt" \
    && echo "stories260K greedy: cpu and cuda (TP $1) texts identical" \
    || echo "stories260K greedy: cuda text at TP $1 differs from the cpu one (a bf16 near-tie?)"
}

stage_soak() {
  local san=${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}
  # Sanitizers slow kernels 10-100x: each program runs a subset made for them.
  local -A filter=(
    [test_attention_prefill]='*AttentionPrefillSmall*:AttentionPrefill.RejectsUnsupportedArguments'
    [test_attention_decode]='AttentionDecode.SmallForSanitizer:AttentionDecode.EmptySequencesAndEmptySplits:AttentionDecodeMerge.*'
    [test_cuda_backend]='CudaBackend.Stories260kRagged*:CudaGraphs.*:Shapes/CudaRandomModel.*d64*'
    [test_cuda_ops]='*' [test_cuda_sampling]='*'
    [test_moe_grouped_gemm]='MoeGroupedGemm.RowCountsAroundTheTiles:MoeGroupedGemm.ExpertsWithNoRows:MoeGroupedGemm.GarbageOffsetsStayInBounds')
  for name in "${!filter[@]}"; do
    local exe; exe=$(find "$B/tests" -type f -name "$name" | head -n 1)
    for tool in memcheck racecheck; do
      run "${name}_$tool" 300 "$san" --tool $tool --error-exitcode 99 "$exe" --gtest_filter="${filter[$name]}" \
        && echo "$name $tool: $(grep -Eo '(ERROR|RACECHECK) SUMMARY: [0-9]+ \w+' "$LOGS/${name}_$tool.log" | tail -1)"
    done
  done
  # The server under memcheck (leaks too): plain, streamed, n>1 with logprobs, sampled on the GPU
  # with every filter, a client hanging up; then SIGTERM to the server (not to the sanitizer).
  local port=18731 url=localhost:18731/v1/completions
  "$san" --tool memcheck --leak-check full --error-exitcode 99 "$B/server/flashserve" \
    --model "$M/stories260K" --backend cuda --port $port --kv-cache-tokens 65536 > "$LOGS/memcheck_server.log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do curl -sf localhost:$port/health > /dev/null && break; sleep 0.5; done
  curl -sf "$url" -d '{"prompt":"Once upon a time","max_tokens":64,"temperature":0}' > /dev/null || fail "memcheck request 1"
  curl -sfN "$url" -d '{"prompt":"Once","max_tokens":64,"stream":true}' > /dev/null || fail "memcheck request 2"
  curl -sf "$url" -d '{"prompt":["a","b"],"n":4,"max_tokens":32,"logprobs":2,"echo":true}' > /dev/null || fail "memcheck request 3"
  curl -sf "$url" -d '{"prompt":["Once","The dog"],"n":3,"max_tokens":48,"temperature":0.8,"top_k":20,"top_p":0.9,"min_p":0.02,"frequency_penalty":0.5,"presence_penalty":0.3,"repetition_penalty":1.2,"logit_bias":{"5":2,"7":-100},"seed":3}' > /dev/null || fail "memcheck request 4"
  curl -s --max-time 0.3 -N "$url" -d '{"prompt":"x","max_tokens":400,"stream":true,"ignore_eos":true}' > /dev/null
  sleep 1
  kill -TERM "$(pgrep -P $pid -x flashserve || echo $pid)"
  wait $pid && grep -q "ERROR SUMMARY: 0 errors" "$LOGS/memcheck_server.log" \
    && echo "flashserve --backend cuda under memcheck: exit 0, 0 errors" || fail "flashserve under memcheck"
  # The soak test on the CUDA backend (probe texts not compared exactly: tests/soak/soak_client.h).
  FS_SOAK_REQUESTS=${FS_SOAK_REQUESTS:-20000} FS_SOAK_CONCURRENCY=${FS_SOAK_CONCURRENCY:-32} \
    FS_SOAK_PROBES_EXACT=0 FS_SOAK_RSS_MARGIN_MIB=64 FS_SOAK_SERVER_ARGS="--backend cuda" \
    FS_SOAK_REPORT="$RES/soak.jsonl" run soak 900 "$B/tests/soak/test_soak" && tail -n 1 "$RES/soak.jsonl"
}

bench_decode() {  # rotating KV copies, so every timed run reads from HBM
  timeout 600 "$B/bench/bench_attention_decode" ${DECODE_ARGS:-} > "$LOGS/decode_ours.jsonl" \
    2> "$LOGS/decode_ours.log" || fail "bench_attention_decode"
  timeout 600 python3 bench/attention_decode_baseline.py ${DECODE_ARGS:-} > "$LOGS/decode_torch.jsonl" \
    2> "$LOGS/decode_torch.log" || fail "decode baseline"
  python3 bench/merge_records.py decode --ours "$LOGS/decode_ours.jsonl" --torch "$LOGS/decode_torch.jsonl" \
    --out "$RES/decode.jsonl" --command "bench/gpu.sh bench decode (DECODE_ARGS=${DECODE_ARGS:-})"
}

bench_moe() {  # each format's experts of one layer; Mixtral's bf16 layer is 2.8 GB
  timeout 900 "$B/bench/bench_moe_decode" --rows 1,2,4,8,16,32,64 >> "$RES/moe_decode.jsonl" \
    2> "$LOGS/moe_decode.log" || fail "bench_moe_decode"
}

bench_prefill() {
  local iters=${ITERS:-40}
  timeout 600 "$B/bench/bench_attention_prefill" "$iters" "" "${PREFILL_IMPLS:-}" > "$LOGS/prefill_ours.jsonl" \
    2> "$LOGS/prefill_ours.log" || fail "bench_attention_prefill"
  timeout 600 python3 bench/attention_prefill_baseline.py --iters "$iters" > "$LOGS/prefill_torch.jsonl" \
    2> "$LOGS/prefill_torch.log" || fail "prefill baseline"
  python3 bench/merge_records.py prefill --ours "$LOGS/prefill_ours.jsonl" --torch "$LOGS/prefill_torch.jsonl" \
    --out "$RES/prefill.jsonl" --command "bench/gpu.sh bench prefill (ITERS=$iters)"
}

bench_e2e() {  # flashserve, then transformers on the same cases (the disk goes to it)
  local fs=$LOGS/e2e_flashserve.jsonl hf=$LOGS/e2e_hf.jsonl
  for s in ${E2E_SHAPES:-tinyllama-1.1b llama2-7b}; do
    local cases=decode:1x128x256,offline:16x128x256,offline:256x128x128,offline:256x512x256
    local hf_cases=1x128x256,16x128x256,256x128x128 compile=1x128x256,256x128x128
    [ "$s" = llama2-7b ] && cases=decode:1x128x256,offline:16x128x256 hf_cases=1x128x256,16x128x256 compile=""
    config_only "$s"
    e2e "$s" "$(random_model "$s")" "$cases" >> "$fs"
    rm -rf "${WORK:?}/$s"
    PYTHONUNBUFFERED=1 run "hf_generate_$s" 600 python3 bench/hf_generate_baseline.py --out "$hf" --shapes "$s" \
      --cases "$hf_cases" --compile-cases "$compile" --config-dir "$WORK/fs_configs"
  done
  python3 bench/merge_e2e.py --flashserve "$fs" --hf "$hf" --out "$RES/e2e.jsonl"
}

bench_speculative() {  # docs/SPECULATIVE.md: verification cost, then the oracle at batch 1, 16
  # and 64 (K = 4, every draft verified; then the adaptive policy at 64, which must not lose)
  for s in ${E2E_SHAPES:-tinyllama-1.1b llama2-7b}; do
    local dir; dir=$(random_model "$s")
    local spec=("$B/bench/bench_speculative" --model "$dir" --backend cuda)
    timeout 600 "${spec[@]}" --label "$s" --mode verify --batches 1,4,16,64 --ks 1,2,3,4,5,6,7 \
      >> "$RES/speculative_verify.jsonl" 2>> "$LOGS/bench_speculative.log" || fail "bench_speculative verify $s"
    timeout 900 "${spec[@]}" --label "$s" --mode oracle --batches 1,16,64 --alphas 0.6,0.8 --k 4 \
      >> "$RES/speculative_oracle.jsonl" 2>> "$LOGS/bench_speculative.log" || fail "bench_speculative oracle $s"
    timeout 600 "${spec[@]}" --label "$s" --mode oracle --batches 64 --alphas 0.6,0.8 --k 4 --policy adaptive \
      >> "$RES/speculative_oracle.jsonl" 2>> "$LOGS/bench_speculative.log" || fail "bench_speculative adaptive $s"
    if [ "$s" = llama2-7b ]; then  # a TinyLlama-1.1B-shaped draft model, at the oracle's acceptance
      local draft; draft=$(random_model tinyllama-1.1b)
      timeout 600 "${spec[@]}" --label "$s+tinyllama-draft" --mode oracle --batches 1,16 --alphas 0.6,0.8 \
        --k 4 --draft-model "$draft" >> "$RES/speculative_oracle.jsonl" 2>> "$LOGS/bench_speculative.log" \
        || fail "bench_speculative draft $s"
      rm -rf "${draft:?}"
    fi
    tail -n 20 "$LOGS/bench_speculative.log"
    rm -rf "${dir:?}"
  done
}

bench_moe-e2e() {  # whole MoE models, layer-reduced: batch-1 decode against the active-bytes
  # roofline (attention, dense parts and the selected experts), offline 16/64 x 128/128 against
  # the bytes every step must read (bench/e2e_cost.h), and 16 x 512 prefill
  local cases=decode:1x128x128,offline:16x128x128,offline:64x128x128,offline:16x512x2
  for spec in ${MOE_E2E:-qwen3-30b-a3b:8:bf16 mixtral-8x7b:4:fp8}; do
    IFS=: read -r s layers dt <<< "$spec"
    local dir; dir=$(random_model "$s" --layers "$layers" --dtype "$dt")
    e2e "$s-${layers}l-$dt" "$dir" "$cases" >> "$RES/moe_e2e.jsonl"
    grep -h "$s" "$LOGS/bench_e2e.log" | tail -4
    rm -rf "${dir:?}"
  done
}

bench_hf() {  # tools/hf_compare.py writes each shape's model, once with transformers' weights
  for s in ${HF_SHAPES:-tinyllama-1.1b llama3.2-1b qwen2.5-0.5b qwen3-0.6b}; do
    config_only "$s"
    PYTHONUNBUFFERED=1 run "hf_compare_$s" 600 python3 tools/hf_compare.py --fs-logits "$B/bench/flashserve-logits" \
      --tokenizer "$M/llama2-tokenizer/tokenizer.model" --workdir "$WORK" --logdir "$LOGS" \
      --out "$RES/hf_compare.jsonl" --shapes "$s" --config-dir "$WORK/fs_configs" --steps 64 --prefill-chunk 256
    grep -E "^(model|-----|$s)|first divergence" "$LOGS/hf_compare_$s.log" | head -8
    rm -rf "${WORK:?}/$s" "${WORK:?}/${s}_legacy_rope"
  done
}

bench_fp8() {
  timeout 300 "$B/bench/bench_linear" --dtype fp8 --rows 1,2,4,8,16,32,64,256 >> "$RES/fp8_linear.jsonl" \
    2> "$LOGS/fp8_linear.log" || fail "bench_linear fp8"
  local cases=decode:1x128x256,offline:8x128x256,offline:64x128x256,offline:16x512x2
  for s in tinyllama-1.1b llama2-7b; do
    local T; T=$(random_model "$s")
    e2e "$s" "$T" "$cases" > "$LOGS/fp8_e2e_${s}_bf16.jsonl"
    e2e "$s" "$T" "$cases" --quantize fp8 > "$LOGS/fp8_e2e_${s}_fp8.jsonl"
    python3 bench/merge_records.py fp8 --bf16 "$LOGS/fp8_e2e_${s}_bf16.jsonl" --fp8 "$LOGS/fp8_e2e_${s}_fp8.jsonl" \
      --out "$RES/fp8_e2e.jsonl" --command "bench/gpu.sh bench fp8"
  done
  # Quality: 8 random 256-token prompts, teacher-forced logits of bf16 and FP8 weights.
  python3 -c "import json, random; random.seed(19)
json.dump({'prompts': [[1] + [random.randrange(3, 32000) for _ in range(255)] for _ in range(8)]},
          open('$LOGS/fp8_prompts.json', 'w'))"
  for q in none fp8; do
    run "fp8_logits_$q" 300 "$B/bench/flashserve-logits" --model "$WORK/tinyllama-1.1b" --backend cuda \
      --quantize $q --prompts "$LOGS/fp8_prompts.json" --steps 64 --out-logits "/tmp/fp8_last_$q.npy" \
      --out-json "$LOGS/fp8_logits_$q.json" --out-all-logits "/tmp/fp8_all_$q.npy"
  done
  python3 bench/fp8_quality.py --label tinyllama-1.1b-random --bf16 /tmp/fp8_all_none.npy \
    "$LOGS/fp8_logits_none.json" --fp8 /tmp/fp8_all_fp8.npy "$LOGS/fp8_logits_fp8.json" \
    >> "$RES/fp8_quality.jsonl" || fail "fp8 quality"
}

bench_tp() {  # Llama-2-7B shape at each TP size the GPUs allow
  local sizes="" T
  for n in 1 2 4; do [ "$n" -le "$(num_gpus)" ] && sizes="$sizes $n"; done
  T=$(random_model llama2-7b)
  for n in ${TP_SIZES:-$sizes}; do
    e2e llama2-7b "$T" decode:1x128x256,offline:16x128x256 --tensor-parallel-size "$n" >> "$LOGS/tp_e2e.jsonl"
    timeout 120 "$B/bench/bench_tp_collectives" --model "$T" --tensor-parallel-size "$n" --batch 1,16 \
      >> "$LOGS/tp_collectives.jsonl" 2>> "$LOGS/tp_collectives.log" || fail "bench_tp_collectives TP $n"
  done
  python3 bench/tp_merge.py --e2e "$LOGS/tp_e2e.jsonl" --collectives "$LOGS/tp_collectives.jsonl" \
    --out "$RES/tensor_parallel.jsonl"
}

# Free vs constrained decoding (--json-schema realistic) at Llama 2's 32000-token vocabulary and at
# 128256 (the grammar's vocabulary: the tokenizer's stretched to the model's, --synthetic-vocab).
bench_structured() {
  local cases=decode:1x128x256,offline:16x128x256,offline:64x128x256
  for s in tinyllama-1.1b llama2-7b; do
    for v in 32000 128256; do
      local T log=$LOGS/structured_${s}_v$v.jsonl stretch=()
      T=$(random_model "$s" --vocab-size $v)
      [ $v != 32000 ] && stretch=(--synthetic-vocab $v)
      E2E_MAX_SECONDS=60 e2e "$s" "$T" "$cases" --repeats 2 --json-schema realistic "${stretch[@]}" > "$log"
      grep '^FAILED' "$log"
      tag vocab_size=$v < "$log" >> "$RES/e2e_constrained.jsonl"
      rm -rf "${WORK:?}/$(basename "$T")"
    done
  done
}

# The experts' grouped GEMM on the Qwen3-30B-A3B, Mixtral-8x7B and Qwen1.5-MoE-A2.7B shapes at
# 512/2048/8192 tokens, uniform and skewed routing; its baselines run in the same process.
bench_moe-gemm() {
  timeout 540 "$B/bench/bench_moe_grouped_gemm" ${MOE_GEMM_ARGS:-} \
    >> "$RES/moe_grouped_gemm.jsonl" 2> "$LOGS/moe_grouped_gemm.log" || fail "bench_moe_grouped_gemm"
  grep -E "^(qwen3|mixtral|qwen1)" "$LOGS/moe_grouped_gemm.log"
}

# The MXFP4 kernels on gpt-oss's expert shapes; the ceilings are measured in the same process.
bench_mxfp4() {
  timeout 300 "$B/bench/bench_mxfp4" >> "$RES/mxfp4.jsonl" 2> "$LOGS/mxfp4.log" || fail "bench_mxfp4"
  tail -n 8 "$RES/mxfp4.jsonl"
}

# serve_start ARGS...: flashserve on port 18790 in the background; serve_stop ends it.
serve_start() {
  server_cmd="flashserve $* --port 18790 --no-request-log"
  "$B/server/flashserve" "$@" --port 18790 --no-request-log > "$LOGS/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do curl -sf localhost:18790/health > /dev/null && return 0
    kill -0 $server_pid 2> /dev/null || break; sleep 0.5; done
  fail "server did not start: $(tail -n 3 "$LOGS/server.log")"; return 1
}
serve_stop() { kill -TERM $server_pid; wait $server_pid || fail "server exit status $?"; }

bench_serve() {
  local T; T=$(random_model tinyllama-1.1b)
  serve_start --model "$T" --backend cuda --max-num-seqs 256 --max-num-batched-tokens 8192 --max-queue 1024 || return
  "$B/bench/bench_server" --port 18790 --concurrency 1,16,64,256 --num-requests 512 --prompt-len 128 \
    --max-tokens 128 --token-range 1000,20000 --label tinyllama-1.1b --server-command "$server_cmd" \
    >> "$RES/serve.jsonl" 2>> "$LOGS/serve.log" || fail "bench_server"
  # TTFT of 2040-token prompts (+ 8 generated: the shape's context is 2048).
  "$B/bench/bench_server" --port 18790 --concurrency 1 --num-requests 4 --prompt-len 2040 --max-tokens 8 \
    --token-range 1000,20000 --label tinyllama-1.1b-ttft2048 --server-command "$server_cmd" \
    >> "$RES/serve.jsonl" 2>> "$LOGS/serve.log" || fail "bench_server ttft"
  serve_stop
}

# Goodput of the sized serving defaults against the old fixed ones (--max-num-seqs 64
# --max-num-batched-tokens 512), the same requests at the same rates. The load generator is one
# address, so the per-address connection cap is off on both (as behind a load balancer).
bench_defaults() {
  local T side; T=$(random_model llama2-7b)
  for side in fixed sized; do
    local flags=(); [ $side = fixed ] && flags=(--max-num-seqs 64 --max-num-batched-tokens 512)
    serve_start --model "$T" --backend cuda --max-queue 4096 --max-connections-per-client 0 "${flags[@]}" || continue
    grep -m1 "max_num_seqs" "$LOGS/server.log"
    "$B/bench/bench_server" --port 18790 --request-rate ${DEFAULTS_RATES:-16,24,32,40,48} --num-requests 300 \
      --prompt-len 500 --max-tokens 128 --token-range 1000,20000 --slo-ttft-ms 1000 --slo-tpot-ms 50 \
      --label llama2-7b-$side --weights bf16 --server-command "$server_cmd" > "$LOGS/defaults_$side.jsonl" 2>> "$LOGS/defaults.log" \
      || fail "bench_server defaults $side"
    serve_stop
  done
  python3 bench/merge_records.py defaults --fixed "$LOGS/defaults_fixed.jsonl" --sized "$LOGS/defaults_sized.jsonl" \
    --out "$RES/serving_defaults.jsonl" --command "bench/gpu.sh bench defaults" || fail "defaults records"
}

bench_prefix() {  # TinyLlama's shape with its context raised to 8,192 so that turn 8 fits
  local T d=$LOGS/prefix model=$WORK/tinyllama-1.1b-ctx8k
  T=$(random_model tinyllama-1.1b)
  mkdir -p "$d" "$model"
  for f in "$T"/*; do [ "$(basename "$f")" = config.json ] || ln -sfn "$f" "$model/"; done
  python3 -c "import json, sys; c = json.load(open(sys.argv[1])); c['max_position_embeddings'] = 8192
json.dump(c, open(sys.argv[2], 'w'), indent=1)" "$T/config.json" "$model/config.json"
  for mode in cache no_cache; do
    serve_start --model "$model" --backend cuda --max-num-seqs 256 --max-num-batched-tokens 8192 \
      --max-queue 1024 $([ $mode = no_cache ] && echo --no-prefix-caching) || continue
    for w in shared_prefix multi_turn; do
      local args="--concurrency 64 --num-requests 512 --prefix-len 1024 --prompt-len 64" runs=1
      [ $w = multi_turn ] && args="--concurrency 16 --turns 8 --prompt-len 512 --turn-tokens 512" runs=3
      curl -s localhost:18790/metrics > "$d/metrics_${mode}_${w}_0.txt"
      for r in $(seq $runs); do
        "$B/bench/bench_server" --port 18790 --workload $w $args --max-tokens 128 --token-range 1000,20000 \
          --seed $((1000 * r)) --label tinyllama-1.1b-ctx8k --server-command "$server_cmd" \
          >> "$d/$mode.jsonl" 2>> "$LOGS/prefix.log" || fail "bench_server $mode $w"
      done
      curl -s localhost:18790/metrics > "$d/metrics_${mode}_${w}_1.txt"
    done
    serve_stop
  done
  python3 bench/merge_records.py prefix --dir "$d" --last-turn 8 --out "$RES/prefix_cache.jsonl" \
    --command "bench/gpu.sh bench prefix" || fail "prefix cache records"
}

# multihost: node 1 (GPU 1) in the background, then node 0 (GPU 0) through serve_start; each
# node one GPU (CUDA_VISIBLE_DEVICES), so the two ranks meet only through NCCL between processes.
group_start() {
  FLASHSERVE_GROUP_TOKEN=gpu-sh CUDA_VISIBLE_DEVICES=1 "$B/server/flashserve" "$@" --nnodes 2 \
    --node-rank 1 --master-port 29555 --heartbeat-timeout 5 > "$LOGS/multihost_node1.log" 2>&1 &
  node1_pid=$!
  FLASHSERVE_GROUP_TOKEN=gpu-sh CUDA_VISIBLE_DEVICES=0 serve_start "$@" --nnodes 2 --node-rank 0 \
    --master-port 29555 --heartbeat-timeout 5
}
greedy_texts() {  # the texts of a few greedy completions from the server on 18790
  for p in "Once upon a time" "The little dog" "Lily liked"; do
    curl -sf localhost:18790/v1/completions -d "{\"prompt\":\"$p\",\"max_tokens\":64,\"temperature\":0}" \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])'
  done
}
stage_multihost() {
  if [ "$(num_gpus)" -lt 2 ]; then echo "multihost: skipped, fewer than 2 GPUs"; return; fi
  local T; T=$(random_model tinyllama-1.1b)
  for m in "$M/stories260K" "$T"; do
    local name; name=$(basename "$m")
    serve_start --model "$m" --backend cuda --tensor-parallel-size 2 || return
    greedy_texts > "$LOGS/multihost_${name}_tp2.txt"; serve_stop
    group_start --model "$m" --backend cuda || return
    greedy_texts > "$LOGS/multihost_${name}_2nodes.txt"
    cmp -s "$LOGS/multihost_${name}_tp2.txt" "$LOGS/multihost_${name}_2nodes.txt" \
      && echo "multihost $name: two nodes give TP 2's greedy texts" || fail "multihost $name: texts differ from TP 2"
    serve_stop; wait $node1_pid || fail "multihost: node 1 exit status $? after node 0's clean stop"
  done
  for mode in tp2 2nodes; do  # serving throughput: one process at TP 2, then two processes
    if [ $mode = tp2 ]; then serve_start --model "$T" --backend cuda --tensor-parallel-size 2 --max-num-seqs 64 || return
    else group_start --model "$T" --backend cuda --max-num-seqs 64 || return; fi
    "$B/bench/bench_server" --port 18790 --concurrency 1,16,64 --num-requests 256 --prompt-len 128 \
      --max-tokens 128 --token-range 1000,20000 --label "tinyllama-1.1b-$mode" --server-command "$server_cmd" \
      >> "$RES/multihost.jsonl" 2>> "$LOGS/multihost_bench.log" || fail "bench_server $mode"
    serve_stop; [ $mode = 2nodes ] && wait $node1_pid
  done
  for sig in KILL STOP; do  # a lost worker mid-stream: node 0 fails within the 5 s heartbeat + margin
    group_start --model "$T" --backend cuda || return
    curl -sN localhost:18790/v1/completions -d '{"prompt":"Once","max_tokens":2000,"stream":true,"ignore_eos":true}' \
      > "$LOGS/multihost_stream_$sig.txt" &
    local curl_pid=$! t0
    sleep 1; kill -$sig $node1_pid; t0=$SECONDS
    wait $curl_pid; wait $server_pid; local code=$?
    kill -KILL $node1_pid 2> /dev/null; wait $node1_pid 2> /dev/null
    echo "multihost SIG$sig: node 0 exit $code after $((SECONDS - t0)) s"
    grep -q node_group_lost "$LOGS/multihost_stream_$sig.txt" && [ $code = 1 ] && [ $((SECONDS - t0)) -le 15 ] \
      || fail "multihost SIG$sig: want node_group_lost in the stream and exit 1 within 15 s"
  done
}

# ab OLD: OLD's tree from git or from a `git archive` tarball, built into build/ab-old.
stage_ab() {
  local old=$1 src=$root/build/ab-old/src ob=$root/build/ab-old/build
  rm -rf "$src" && mkdir -p "$src"
  if [ -f "$old" ]; then tar -xf "$old" -C "$src"
  else git archive "$old" | tar -x -C "$src" || { fail "no git revision or tarball $old"; return; }; fi
  build_tree "$src" "$ob" bench_e2e || return
  [ -x "$B/bench/bench_e2e" ] || build_tree "$root" "$B" bench_e2e flashserve-random-model || return
  local cases=decode:1x128x256,offline:16x128x256,offline:256x128x128
  for s in tinyllama-1.1b llama2-7b; do
    local T; T=$(random_model "$s")
    for round in $(seq "${AB_ROUNDS:-2}"); do
      for side in old new; do
        local bin=$B/bench/bench_e2e; [ $side = old ] && bin=$ob/bench/bench_e2e
        timeout 400 "$bin" --model "$T" --backend cuda --label "$s" --cases "$cases" --max-seconds 90 \
          --no-ceilings 1 2>> "$LOGS/ab.log" | tag side=$side round="$round" >> "$LOGS/ab_runs.jsonl" \
          || fail "bench_e2e $side $s"
      done
    done
    rm -rf "${WORK:?}/$s"
  done
  python3 bench/merge_records.py ab --runs "$LOGS/ab_runs.jsonl" --old-rev "$(basename "$old")" \
    --out "$RES/ab.jsonl" --command "bench/gpu.sh ab $(basename "$old")"
}

stage_pack() {  # on the development machine
  local shared; shared=$(cd "$root/.." && pwd)/shared/models
  mkdir -p .carry/debs .carry/models
  (cd .carry/debs && apt-get download $debs) || fail "apt-get download"
  cp -rL "$shared/stories260K" "$shared/llama2-tokenizer" .carry/models/ || fail "models from $shared"
  if [ -n "${1:-}" ]; then git archive -o .carry/old.tar "$1" && echo "old tree: .carry/old.tar ($1)"; fi
  du -sh .carry
}

[ $# -gt 0 ] || { usage >&2; exit 2; }
case $1 in help|-h|--help) usage; exit 0 ;; esac
if [ "$1" = pack ]; then mkdir -p "$LOGS"; stage_pack "${2:-}"; exit $rc; fi
mkdir -p "$RES" "$LOGS"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$LOGS/gpu.txt"
# Whatever happens, the logs go back as one archive.
trap 'tar czf "$OUT/logs.tgz" -C "$OUT" logs 2> /dev/null' EXIT
while [ $# -gt 0 ]; do
  cmd=$1; shift
  echo "== $cmd (t=${SECONDS}s)"
  case $cmd in
  build) build_tree "$root" "$B" ${TARGETS:-} ;;
  test)
    ctest --test-dir "$B" -L gpu --output-on-failure > "$LOGS/ctest_gpu.log" 2>&1 || fail "ctest -L gpu"
    grep -E "tests passed|Failed|\*\*\*|Skipped" "$LOGS/ctest_gpu.log"
    same_text 1 ;;
  tp)
    if [ "$(num_gpus)" -lt 2 ]; then echo "tp: skipped, fewer than 2 GPUs"; continue; fi
    for l in "-L gpu" "-R ^test_prefix_cache_engine$"; do
      FLASHSERVE_TEST_TENSOR_PARALLEL=2 ctest --test-dir "$B" $l --output-on-failure >> "$LOGS/ctest_tp2.log" 2>&1 \
        || fail "ctest at TP 2 ($l)"
    done
    grep -E "tests passed|Failed|\*\*\*" "$LOGS/ctest_tp2.log"
    same_text 2 ;;
  soak) stage_soak ;;
  multihost) stage_multihost ;;
  bench)
    while [ $# -gt 0 ] && [[ " decode prefill e2e hf fp8 tp serve defaults prefix structured speculative moe moe-gemm moe-e2e mxfp4 " == *" $1 "* ]]; do
      echo "== bench $1 (t=${SECONDS}s)"; "bench_$1"; shift
    done ;;
  ab) [ $# -gt 0 ] || { usage >&2; exit 2; }; stage_ab "$1"; shift ;;
  *) echo "unknown command $cmd" >&2; usage >&2; exit 2 ;;
  esac
done
echo "== done (t=${SECONDS}s): records in $RES, logs in $OUT/logs.tgz; rc=$rc"
exit $rc

#!/usr/bin/env bash
# flashserve beside llama.cpp on the GPU machine, on the same random weights, in one call per
# model. llama.cpp's sources come from ../shared/peers (or .carry/, where the call carries them);
# it is a peer to measure against, never a dependency. bench/README.md describes the cases.
#   bench/llama_cpp/run.sh build             llama.cpp's CUDA build for sm_90 in build/llama.cpp
#   bench/llama_cpp/run.sh prep              the models of dense and moe, converted (no build needed)
#   bench/llama_cpp/run.sh dense             Llama-2-7B: bf16 and GPTQ int4 against llama.cpp's
#                                            bf16, Q4_0 and Q4_K_M conversions of the same weights
#   bench/llama_cpp/run.sh moe               Mixtral-8x7B (2 layers) and Qwen3-30B-A3B (6
#                                            layers): bf16 against bf16, --quantize fp8 against Q8_0
#   bench/llama_cpp/run.sh gptoss            gpt-oss-20b (MXFP4 experts) against llama.cpp's
#                                            MXFP4 conversion
# Needs flashserve's build/gpu (bench/gpu.sh build). Records: $OUT/<gpu>/vs_llama_cpp.jsonl.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
OUT=${OUT:-$root/out/gpu}
B=${BUILD:-$root/build/gpu}
P=$root/build/llama.cpp
M=${FS_MODELS:-$root/.carry/models}
[ -d "$M" ] || M=$(cd "$root/.." && pwd)/shared/models
WORK=/tmp/fs_models
LOGS=$OUT/logs/llama_cpp
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
RES=$OUT/${GPU// /_}
mkdir -p "$LOGS" "$RES" "$WORK"
export LD_LIBRARY_PATH=$root/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
rc=0
fail() { echo "FAILED: $*" | tee -a "$LOGS/failed" >&2; rc=1; }  # also from $(...) subshells
CASES=decode:1x128x256,offline:1x512x1,offline:16x128x128,offline:64x128x128

build() {
  local tgz; tgz=$(ls "$root"/.carry/llama.cpp-*.tgz "$root"/../shared/peers/llama.cpp-*.tgz 2>/dev/null | head -n 1)
  [ -n "$tgz" ] || { fail "no llama.cpp archive in .carry/ or ../shared/peers/"; return; }
  mkdir -p "$P" && tar xzf "$tgz" -C "$P" || { fail "unpack $tgz"; return; }
  cmake -S "$P" -B "$P/build" -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_NUMBER=10587 \
    -DLLAMA_BUILD_COMMIT=3f545bec -DCMAKE_BUILD_TYPE=Release > "$LOGS/configure.log" 2>&1 \
    && ninja -C "$P/build" -j"${JOBS:-$(nproc)}" llama-bench llama-batched-bench llama-quantize \
      > "$LOGS/build.log" 2>&1 || fail "llama.cpp build (logs/llama_cpp/build.log)"
}

# model NAME PRESET [flags]: a random bf16 model; prints its folder.
model() {
  local dir=$WORK/$1
  [ -f "$dir/config.json" ] || timeout 600 "$B/weights/flashserve-random-model" --out "$dir" --preset "$2" \
    --tokenizer "$M/llama2-tokenizer/tokenizer.model" "${@:3}" > "$LOGS/random_$1.log" 2>&1 || fail "random model $1"
  echo "$dir"
}

gptq() {  # gptq DIR: its GPTQ int4 copy (group 128), as the common -GPTQ-Int4 uploads
  [ -f "$1-gptq/config.json" ] || timeout 900 python3 tools/quantize_checkpoint.py --source "$1" --out "$1-gptq" \
    --format gptq --group-size 128 > "$LOGS/gptq_$(basename "$1").log" 2>&1 || fail "gptq $1"
  echo "$1-gptq"
}

gguf() {  # gguf DIR TYPE: llama.cpp's conversion (bf16 from the folder, quantized from the bf16)
  local f16=$1.bf16.gguf out=$1.$2.gguf
  [ -f "$f16" ] || timeout 900 python3 bench/llama_cpp/convert.py "$P" "$1" --outtype bf16 --outfile "$f16" \
    > "$LOGS/convert_$(basename "$1").log" 2>&1 || { fail "convert $1"; rm -f "$f16"; }
  [ "$2" = bf16 ] || [ -f "$out" ] || timeout 900 "$P/build/bin/llama-quantize" "$f16" "$out" "$2" \
    > "$LOGS/quantize_$(basename "$1")_$2.log" 2>&1 || fail "llama-quantize $1 $2"
  echo "$out"
}

# side LABEL SHAPE FS_DIR FS_WEIGHTS GGUF LLAMA_WEIGHTS [bench_e2e flags]: both engines' cases,
# then the pairs.
side() {
  local label=$1 shape=$2 dir=$3 w=$4 g=$5 lw=$6 base=$LOGS/$1_$4_vs_$6
  timeout 600 "$B/bench/bench_e2e" --model "$dir" --backend cuda --label "$label" --cases "$CASES" \
    --max-seconds 120 "${@:7}" > "$base.e2e.jsonl" 2> "$base.e2e.log" || fail "bench_e2e $label $w"
  timeout 600 "$P/build/bin/llama-bench" -m "$g" -ngl 99 -fa 1 -p 512 -n 256 -d 0,128 -r 3 -o jsonl \
    > "$base.bench.jsonl" 2> "$base.bench.log" || fail "llama-bench $label $lw"
  timeout 600 "$P/build/bin/llama-batched-bench" -m "$g" -ngl 99 -fa on -c 16384 -b 2048 -ub 512 \
    -npp 128 -ntg 128 -npl 16,64 --output-format jsonl > "$base.batched.log" 2>&1 || fail "llama-batched-bench $label $lw"
  python3 bench/llama_cpp/records.py --label "$label" --model "$shape" --weights "$w" --llama-weights "$lw" \
    --e2e "$base.e2e.jsonl" --llama-bench "$base.bench.jsonl" --llama-batched "$base.batched.log" --gpu "$GPU" \
    --command "bench/llama_cpp/run.sh $CMD (bench_e2e --cases $CASES; llama-bench -fa 1 -p 512 -n 256 -d 0,128 -r 3; llama-batched-bench -fa on -npp 128 -ntg 128 -npl 16,64)" \
    >> "$RES/vs_llama_cpp.jsonl" || fail "records $label"
}

dense() {
  local t; t=$(model llama2-7b llama2-7b)
  local g; g=$(gptq "$t")
  side llama2-7b llama2-7b "$t" bf16 "$(gguf "$t" bf16)" bf16
  side llama2-7b llama2-7b "$g" int4-gptq "$(gguf "$t" Q4_K_M)" Q4_K_M
  side llama2-7b llama2-7b "$g" int4-gptq "$(gguf "$t" Q4_0)" Q4_0
  drop "$t"
}

moe() {
  local s layers t
  for s in mixtral-8x7b:2 qwen3-30b-a3b:6; do
    layers=${s#*:}; s=${s%:*}
    t=$(model "$s-${layers}l" "$s" --layers "$layers")
    side "$s-${layers}l" "$s" "$t" bf16 "$(gguf "$t" bf16)" bf16
    side "$s-${layers}l" "$s" "$t" fp8 "$(gguf "$t" Q8_0)" Q8_0 --quantize fp8
    drop "$t"
  done
}

prep() {  # dense's random model, GPTQ copy and bf16 GGUF (no llama.cpp build needed)
  local t; t=$(model llama2-7b llama2-7b); gptq "$t" > /dev/null; gguf "$t" bf16 > /dev/null
}

drop() { rm -rf "$1" "$1-gptq" "$1".*.gguf; }  # a family's files, once measured (the disk is 64 GB)

gptoss() {
  local t; t=$(model gpt-oss-20b gpt-oss-20b)
  side gpt-oss-20b gpt-oss-20b "$t" mxfp4 "$(gguf "$t" bf16)" mxfp4
  drop "$t"
}

for CMD in "$@"; do
  case $CMD in
    build|prep|dense|moe|gptoss) echo "== $CMD $(date +%T)"; $CMD ;;
    *) echo "unknown command $CMD (build, prep, dense, moe, gptoss)"; exit 2 ;;
  esac
done
[ -s "$LOGS/failed" ] && rc=1
exit $rc

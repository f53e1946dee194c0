#!/usr/bin/env bash
# One GPU-machine session for issue 6's end-to-end work: builds the tools, then per model shape
# (TinyLlama-1.1B, Llama-2-7B, Llama-3.2-1B-like) compares flashserve with Hugging Face
# transformers (tools/hf_compare.py, which also writes the random-weight models), benchmarks
# flashserve end to end (bench_e2e, cuda backend) and runs the transformers `generate` baselines;
# then joins ratios (bench/merge_e2e.py) and prints a summary. Every step logs and has a timeout;
# a failing step does not stop the others; steps that would start after the time budget are
# skipped and say so. Results land in $OUT (few files: the device returns at most 8):
#   e2e.jsonl          flashserve records with speedup_vs_hf_* (+ the ceilings)
#   hf_compare.jsonl   flashserve vs transformers logits / greedy agreement
#   hf_generate.jsonl  transformers baselines
#   summary.log        this script's output        logs.tgz   every step's log + saved configs
# Usage on the device: bash bench/gpu_e2e.sh   (env: OUT; E2E_BUDGET_S=440: no step starts
# after this many seconds from the start and none runs past it + 60 s, so the whole run stays
# under 10 minutes; E2E_SHAPES (in priority order); E2E_7B_OFFLINE=1 adds 7B offline cases;
# E2E_COMPILE=0 skips the torch.compile baselines; E2E_WORK=/tmp/fs_models holds the models;
# for a dry run on a CPU machine: E2E_BACKEND=cpu E2E_SHAPES=tiny E2E_CASES=decode:1x16x8
# E2E_BUILD=build/bench E2E_SKIP_BUILD=1)
set -uo pipefail
OUT=${OUT:-/tmp/e2e_out}
WORK=${E2E_WORK:-/tmp/fs_models}
LOGS=$OUT/logs
mkdir -p "$OUT" "$LOGS" "$WORK"
exec > >(tee "$OUT/summary.log") 2>&1
BUDGET=${E2E_BUDGET_S:-440}
SHAPES=${E2E_SHAPES:-"tinyllama-1.1b llama3.2-1b llama2-7b"}
B=${E2E_BUILD:-build/e2e}
BACKEND=${E2E_BACKEND:-cuda}
T0=$(date +%s)
now() { echo $(( $(date +%s) - T0 )); }

# step NAME TIMEOUT_S CMD...: output to $LOGS/NAME.log, limited to TIMEOUT_S and to the budget's
# end + 60 s; skipped when fewer than 20 s of budget are left.
step() {
  local name=$1 limit=$2; shift 2
  local left=$(( BUDGET - $(now) ))
  if [ "$left" -lt 20 ]; then
    echo "== $name: SKIPPED (budget of ${BUDGET}s spent at t=$(now)s)"; return 0
  fi
  [ "$limit" -gt $(( left + 60 )) ] && limit=$(( left + 60 ))
  echo "== $name (t=$(now)s, limit ${limit}s): $*"
  local t=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  echo "   $name rc=$rc in $(( $(date +%s) - t ))s$([ $rc -eq 124 ] && echo ' (TIMED OUT)')"
  [ $rc -ne 0 ] && tail -5 "$LOGS/$name.log" | sed 's/^/   | /'
  return 0
}

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit,driver_version --format=csv
nvcc --version | tail -1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"

# ---- build (only what these steps need; no cpp-httplib there, so no server) ------------------
if [ "${E2E_SKIP_BUILD:-0}" != 1 ]; then
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHSERVE_BUILD_TESTS=OFF \
    -DFS_MODELS_DIR="$PWD/.carry/models" > "$LOGS/cmake.log" 2>&1
  echo "cmake rc=$?"
  timeout 240 ninja -C $B -j"$(nproc)" flashserve-logits bench_e2e flashserve-random-model \
    > "$LOGS/build.log" 2>&1
  echo "build rc=$? at t=$(now)s"; grep -E "error|FAILED" "$LOGS/build.log" | head -20
fi
LOGITS=$B/bench/flashserve-logits
E2E=$B/bench/bench_e2e
RANDOM_MODEL=$B/weights/flashserve-random-model

TOK=""
for t in .carry/models/llama2-tokenizer/tokenizer.model shared/models/llama2-tokenizer/tokenizer.model \
         ../shared/models/llama2-tokenizer/tokenizer.model; do
  if [ -f "$t" ]; then TOK=$(realpath "$t"); break; fi
done
echo "tokenizer: ${TOK:-NOT FOUND}"

# flashserve's own preset configs: the single source of the shapes for the python side too.
CFG=$WORK/fs_configs
for s in $SHAPES; do
  $RANDOM_MODEL --out "$CFG/$s" --preset "$s" --config-only 1 > /dev/null 2>&1 || echo "no preset config for $s"
done

FS_JSONL=$OUT/flashserve_e2e.jsonl
for s in $SHAPES; do
  lim=150 chunk=256  # a second flashserve run with chunked prefill (not for 7B: load time)
  [ "$s" = llama2-7b ] && lim=300 chunk=0
  step "compare_$s" $lim python3 tools/hf_compare.py --fs-logits "$LOGITS" --tokenizer "$TOK" \
    --workdir "$WORK" --logdir "$LOGS" --out "$OUT/hf_compare.jsonl" --shapes "$s" \
    --config-dir "$CFG" --backend "$BACKEND" --steps 64 --prefill-chunk $chunk
  grep -E "^(model|-----|$s)|first divergence" "$LOGS/compare_$s.log" | head -14
  if [ ! -f "$WORK/$s/config.json" ]; then  # the comparison did not leave a model: write one
    step "random_model_$s" 200 $RANDOM_MODEL --out "$WORK/$s" --preset "$s" --tokenizer "$TOK"
  fi
  cases=decode:1x128x256,offline:16x128x256,offline:256x128x128,offline:256x512x256
  [ "$s" = llama2-7b ] && [ "${E2E_7B_OFFLINE:-0}" != 1 ] && cases=decode:1x128x256,offline:16x128x256
  cases=${E2E_CASES:-$cases}
  step "bench_$s" 240 bash -c "$E2E --model $WORK/$s --backend $BACKEND --label $s --cases $cases \
    --max-seconds 60 >> $FS_JSONL"
  grep -hE "^(decode|offline|ceilings)|error" "$LOGS/bench_$s.log" | head -8 | sed 's/^/   /'
  hf_cases=1x128x256,16x128x256
  [ "$s" = tinyllama-1.1b ] && hf_cases=$hf_cases,256x128x128,256x512x256
  step "hf_eager_$s" 200 python3 bench/hf_generate_baseline.py --out "$OUT/hf_generate.jsonl" \
    --shapes "$s" --cases "$hf_cases" --config-dir "$CFG" --budget-s 150
  [ "$s" = llama2-7b ] && rm -rf "$WORK/$s" "$WORK/${s}_legacy_rope"  # 13 GB of disk back
done
if [ "${E2E_COMPILE:-1}" = 1 ]; then
  step hf_compile_tinyllama 240 python3 bench/hf_generate_baseline.py --out "$OUT/hf_generate.jsonl" \
    --shapes tinyllama-1.1b --cases "" --compile-cases 1x128x256,16x128x256 --config-dir "$CFG" \
    --budget-s 150
fi

echo "== summary (t=$(now)s)"
python3 bench/merge_e2e.py --flashserve "$FS_JSONL" --hf "$OUT/hf_generate.jsonl" \
  --compare "$OUT/hf_compare.jsonl" --out "$OUT/e2e.jsonl"
echo "total $(now)s"
# Only a few files come back from the device: pack the logs, keep the JSON lines loose.
cp -r "$CFG" "$LOGS/fs_configs" 2>/dev/null
mv "$FS_JSONL" "$LOGS/" 2>/dev/null
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"

#!/usr/bin/env bash
# End-to-end A/B of the prefill attention kernels on the GPU machine: bench_e2e on random-weight
# models of the PRESETS' shapes (default: TinyLlama-1.1B and Llama-2-7B), time to first token of
# one 2046-token prompt and throughput of 16 x 512-token prompts with two output tokens each
# (bench_e2e needs at least 2), with the Hopper kernel (the default on 9.x), the Hopper kernel
# reading fresh prompts' K/V from the step's own rows (sm90_contig: FLASHSERVE_PREFILL_KV=contig)
# and the mma.sync kernel (FLASHSERVE_PREFILL_KERNEL=fa2), alternated twice in one session.
# Records: OUT_DIR/prefill_e2e.jsonl (bench_e2e's lines plus prefill_kernel and round).
# Usage: [PRESETS="tinyllama-1.1b llama2-7b"] bench/prefill_e2e_ab.sh BUILD_DIR OUT_DIR TOKENIZER_MODEL
set -uo pipefail
B=${1:?build dir}
DEST=${2:?out dir}
TOK=${3:?tokenizer.model}
mkdir -p "$DEST"
for preset in ${PRESETS:-tinyllama-1.1b llama2-7b}; do
T=/tmp/fs_models/$preset
[ -f $T/config.json ] || timeout 200 "$B/weights/flashserve-random-model" --out $T \
  --preset $preset --tokenizer "$TOK" >"$DEST/random_model_$preset.log" 2>&1
for round in 1 2; do
  for kernel in fa2 sm90 sm90_contig; do
    kv=paged
    [ $kernel = sm90_contig ] && kv=contig
    FLASHSERVE_PREFILL_KERNEL=${kernel%_contig} FLASHSERVE_PREFILL_KV=$kv timeout 120 "$B/bench/bench_e2e" \
      --model $T --backend cuda \
      --label $preset --cases decode:1x2046x2,offline:16x512x2 --no-ceilings 1 \
      --max-seconds 60 2>>"$DEST/prefill_e2e.log" |
      python3 -c "
import json, sys
for l in sys.stdin:
    if l.strip():
        print(json.dumps({**json.loads(l), 'prefill_kernel': '$kernel', 'round': $round}))" \
        >>"$DEST/prefill_e2e.jsonl"
    echo "$preset round $round $kernel: $(grep -E '^(decode|offline)' "$DEST/prefill_e2e.log" | tail -2 | tr '\n' ' ')"
  done
done
done

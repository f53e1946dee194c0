#!/usr/bin/env bash
# Makes a tiny random Llama that speaks harmony (gpt-oss's chat template, a byte-level BPE
# tokenizer with harmony's markers as special tokens, <|return|> and <|call|> ending the output:
# make_harmony_model.py) and runs harmony.mjs against it through run.sh.
# Usage: run_harmony.sh FLASHSERVE_BINARY RANDOM_MODEL_BINARY SOURCE_DIR WORK_DIR
set -euo pipefail
bin=$1 random_model=$2 src=$3 work=$4
here=$(cd "$(dirname "$0")" && pwd)
command -v node >/dev/null && command -v npm >/dev/null || { echo "node/npm not found"; exit 77; }
model="$work/harmony_model"
rm -rf "$model"
vocab=$(python3 "$here/make_harmony_model.py" "$src" "$model")
"$random_model" --out "$model" --preset tiny --vocab-size "$vocab" --dtype f32 >/dev/null
exec bash "$here/run.sh" "$bin" "$model" "$work" harmony.mjs

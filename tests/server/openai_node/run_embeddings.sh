#!/usr/bin/env bash
# Makes a tiny random embedding model (a 2-layer Llama of width 256 over stories260K's tokenizer,
# with a sentence-transformers modules.json and last-token 1_Pooling config) and runs
# embeddings.mjs against it through run.sh.
# Usage: run_embeddings.sh FLASHSERVE_BINARY RANDOM_MODEL_BINARY MODELS_DIR WORK_DIR
set -euo pipefail
bin=$1 random_model=$2 models=$3 work=$4
here=$(cd "$(dirname "$0")" && pwd)
command -v node >/dev/null && command -v npm >/dev/null || { echo "node/npm not found"; exit 77; }
model="$work/embedding_model"
rm -rf "$model"
"$random_model" --out "$model" --preset tiny --vocab-size 512 --dtype f32 \
                --tokenizer "$models/stories260K/tok512.model" >/dev/null
mkdir -p "$model/1_Pooling"
cat >"$model/modules.json" <<'JSON'
[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
 {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
 {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
JSON
echo '{"word_embedding_dimension": 256, "pooling_mode_lasttoken": true}' >"$model/1_Pooling/config.json"
exec bash "$here/run.sh" "$bin" "$model" "$work" embeddings.mjs

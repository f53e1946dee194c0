#!/usr/bin/env bash
# Runs completions.mjs and chat.mjs (the official `openai` npm package) against a fresh
# flashserve on 127.0.0.1 (with the built-in ChatML template for /v1/chat/completions). Usage: run.sh FLASHSERVE_BINARY MODEL_DIR WORK_DIR
# Installs `openai` into WORK_DIR with `npm install --prefix` (once). Exit 77 (skipped) when node
# or npm is missing.
set -euo pipefail
bin=$1 model=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
command -v node >/dev/null && command -v npm >/dev/null || { echo "node/npm not found"; exit 77; }
mkdir -p "$work"
if ! grep -q '"version": "6\.' "$work/node_modules/openai/package.json" 2>/dev/null; then
  npm install --prefix "$work" --no-audit --no-fund --loglevel=error openai@6 >/dev/null
fi
cp "$here/completions.mjs" "$here/chat.mjs" "$work/"  # so `import 'openai'` resolves in $work

key=node-test-key
out=$(mktemp) log=$(mktemp)
"$bin" --model "$model" --backend cpu --threads 1 --port 0 --api-key "$key" --chat-template chatml >"$out" 2>"$log" &
pid=$!
cleanup() { kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$out" "$log"; }
trap cleanup EXIT
port=""
for _ in $(seq 1 300); do
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$out")
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "server did not start"; cat "$log"; exit 1; }
node "$work/completions.mjs" "$port" "$key"
node "$work/chat.mjs" "$port" "$key"
kill -TERM "$pid"
wait "$pid"  # must exit 0
trap - EXIT
rm -f "$out" "$log"

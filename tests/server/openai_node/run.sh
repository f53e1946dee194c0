#!/usr/bin/env bash
# Runs node client scripts (default: completions.mjs chat.mjs) against a fresh flashserve on
# 127.0.0.1 with the model's chat_template.jinja or else the built-in ChatML template, printing
# each one's time.
# Usage: run.sh FLASHSERVE_BINARY MODEL_DIR WORK_DIR [SCRIPT.mjs...]
# Installs the client packages (majors pinned) into WORK_DIR with npm, once per WORK_DIR and
# package list; a failed install fails the test. Exit 77 (skipped) only when node or npm is missing.
set -euo pipefail
bin=$1 model=$2 work=$3
shift 3
scripts=("$@")
[ ${#scripts[@]} -gt 0 ] || scripts=(completions.mjs chat.mjs)
here=$(cd "$(dirname "$0")" && pwd)
command -v node >/dev/null && command -v npm >/dev/null || { echo "node/npm not found"; exit 77; }

# Majors that run on node 20 (npm picks the newest release whose `engines` accept this node).
packages="openai@6 ajv@8 zod@4 ai@6 @ai-sdk/openai@3 @langchain/openai@1 @langchain/core@1"
mkdir -p "$work"
(
  flock 9  # tests sharing WORK_DIR may run in parallel
  if [ "$(cat "$work/.installed" 2>/dev/null)" != "$packages" ]; then
    start=$SECONDS
    # shellcheck disable=SC2086
    npm install --prefix "$work" --no-audit --no-fund --loglevel=error $packages >/dev/null
    echo "$packages" >"$work/.installed"
    echo "npm install: $((SECONDS - start)) s"
  fi
) 9>"$work/.install.lock"
echo "installed: $(npm ls --prefix "$work" --depth=0 2>/dev/null | tail -n +2 | sed 's/^[^ ]* //' | tr '\n' ' ')"
cp "$here"/*.mjs "$work/"  # so that imports of the packages resolve in $work

key=node-test-key
out=$(mktemp) log=$(mktemp)
# A model folder without a chat template (stories260K) is served with the built-in ChatML.
template=(--chat-template chatml)
[ ! -e "$model/chat_template.jinja" ] || template=()
"$bin" --model "$model" --backend cpu --threads 1 --port 0 --api-key "$key" "${template[@]}" >"$out" 2>"$log" &
pid=$!
cleanup() {
  local rc=$?
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  [ "$rc" = 0 ] || { echo "--- server log (last lines)"; tail -n 30 "$log"; }
  rm -f "$out" "$log"
}
trap cleanup EXIT
port=""
for _ in $(seq 1 300); do
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$out")
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "server did not start"; cat "$log"; exit 1; }
for s in "${scripts[@]}"; do
  start=$SECONDS
  node "$work/$s" "$port" "$key"
  echo "$s: $((SECONDS - start)) s"
done
kill -TERM "$pid"
wait "$pid"  # must exit 0
trap - EXIT
rm -f "$out" "$log"

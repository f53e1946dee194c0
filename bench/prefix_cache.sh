#!/usr/bin/env bash
# Prefix-cache benchmark: the same two workloads against flashserve with prefix caching (the
# default) and with --no-prefix-caching, one server after the other in one run, merged into JSON
# lines with speedup_vs_no_cache (docs/PREFIX_CACHE.md, "Benchmark"):
#   shared_prefix  a 1,024-token system prompt + a 64-token question, 128 output tokens,
#                  64 concurrent clients: throughput and TTFT p50/p99 (target: >= 3x, <= 1/3)
#   multi_turn     16 conversations of 8 turns, each resending the whole history (512 tokens,
#                  + 512 per turn: 4,096 at turn 8): TTFT per turn, turn 8 vs turn 1
# Usage: bench/prefix_cache.sh [BUILD_DIR]           (default build/release)
# Environment: FS_PC_BACKEND (default cuda), FS_PC_SCALE=full|tiny (tiny: stories260K on a few
# clients, a smoke test for machines without a GPU), FS_PC_OUT (default
# bench/results/<GPU name>/prefix_cache_v1.jsonl), FS_PC_MODEL (a model folder to use instead of
# the random TinyLlama-1.1B-shaped one made with flashserve-random-model), FS_MODELS (default
# /work/shared/models: llama2-tokenizer/ and stories260K/), FS_PC_PORT (default 18795).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:-$root/build/release}" && pwd)
backend=${FS_PC_BACKEND:-cuda}
scale=${FS_PC_SCALE:-full}
port=${FS_PC_PORT:-18795}
M=${FS_MODELS:-/work/shared/models}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)
out=${FS_PC_OUT:-$root/bench/results/$(echo "${gpu:-cpu}" | tr ' ' '_')/prefix_cache_v1.jsonl}
tmp=$(mktemp -d)
spid=""
trap '[ -n "$spid" ] && kill -TERM $spid 2>/dev/null; rm -rf "$tmp"' EXIT
command_line="bench/prefix_cache.sh $*"
[ -n "${FS_PC_BACKEND:-}" ] && command_line="FS_PC_BACKEND=$backend $command_line"
[ "$scale" != full ] && command_line="FS_PC_SCALE=$scale $command_line"

if [ "$scale" = tiny ]; then  # stories260K: context 512, vocab 512
  model=${FS_PC_MODEL:-$M/stories260K}
  range=3,500
  shared_args="--concurrency 8 --num-requests 32 --prefix-len 192 --prompt-len 16 --max-tokens 16"
  turn_args="--concurrency 4 --turns 4 --prompt-len 64 --turn-tokens 64 --max-tokens 16"
  server_args="--max-num-seqs 64 --max-num-batched-tokens 512 --threads 2"
  last_turn=4
else
  model=${FS_PC_MODEL:-}
  if [ -z "$model" ]; then
    # TinyLlama-1.1B's shape with random weights, its context raised to 8,192 positions (RoPE
    # is defined for any position) so that turn 8 of a chat (4,096 + 128 tokens) fits.
    T=/tmp/fs_models/tinyllama-1.1b
    [ -f $T/config.json ] || "$B/weights/flashserve-random-model" --out $T --preset tinyllama-1.1b \
      --tokenizer "$M/llama2-tokenizer/tokenizer.model" > "$tmp/random_model.log" 2>&1
    model=/tmp/fs_models/tinyllama-1.1b-ctx8k
    mkdir -p $model
    for f in $T/*; do [ "$(basename "$f")" = config.json ] || ln -sfn "$f" "$model/"; done
    python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c['max_position_embeddings']=8192; \
json.dump(c, open(sys.argv[2],'w'), indent=1)" $T/config.json $model/config.json
  fi
  range=1000,20000
  shared_args="--concurrency 64 --num-requests 512 --prefix-len 1024 --prompt-len 64 --max-tokens 128"
  turn_args="--concurrency 16 --turns 8 --prompt-len 512 --turn-tokens 512 --max-tokens 128"
  server_args="--max-num-seqs 256 --max-num-batched-tokens 8192 --max-queue 1024"
  last_turn=8
fi

for mode in cache no_cache; do
  flag=$([ $mode = no_cache ] && echo --no-prefix-caching || true)
  cmd="flashserve --model $model --backend $backend --port $port $server_args --no-request-log $flag"
  "$B/server/flashserve" --model "$model" --backend "$backend" --port $port $server_args \
    --no-request-log $flag > "$tmp/server_$mode.log" 2>&1 &
  spid=$!
  for _ in $(seq 600); do
    curl -sf localhost:$port/health > /dev/null 2>&1 && break
    kill -0 $spid 2>/dev/null || { cat "$tmp/server_$mode.log" >&2; exit 1; }
    sleep 0.5
  done
  for w in shared_prefix multi_turn; do
    args=$([ $w = shared_prefix ] && echo "$shared_args" || echo "$turn_args")
    "$B/bench/bench_server" --port $port --workload $w $args --token-range $range \
      --label "$(basename "$model")" --server-command "$cmd" >> "$tmp/$mode.jsonl"
  done
  curl -s localhost:$port/metrics | grep -E "^flashserve_(prefix_cache|kv_blocks)" \
    > "$tmp/metrics_$mode.txt" || true
  kill -TERM $spid
  wait $spid || { echo "server ($mode) exited non-zero" >&2; cat "$tmp/server_$mode.log" >&2; exit 1; }
  spid=""
done

mkdir -p "$(dirname "$out")"
python3 - "$tmp" "$out" "$command_line" "${gpu:-none}" "$last_turn" <<'PY'
import json, sys
tmp, out, command, gpu, last_turn = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
def load(mode):
    recs = {}
    for line in open(f"{tmp}/{mode}.jsonl"):
        j = json.loads(line)
        recs[(j["workload"], str(j.get("turn", "")))] = j
    return recs
def metrics(mode):
    m = {}
    for line in open(f"{tmp}/metrics_{mode}.txt"):
        k, v = line.split()
        m[k] = float(v)
    return m
on, off = load("cache"), load("no_cache")
m_on, m_off = metrics("cache"), metrics("no_cache")
lines = []
for key in on:
    for mode, recs, mets in (("cache", on, m_on), ("no_cache", off, m_off)):
        r = dict(recs[key])
        base = off[key]
        r["bench"] = "prefix_cache"
        r["prefix_caching"] = mode == "cache"
        r["bench_command"] = r.pop("command")
        r["command"] = command
        r["gpu"] = gpu
        r["server_metrics"] = mets
        # Throughput for the whole-run records, TTFT for the per-turn ones (what each measures).
        per_turn = key[0] == "multi_turn" and key[1] not in ("", "all")
        if per_turn:
            r["speedup_vs_no_cache"] = base["ttft_ms_p50"] / max(r["ttft_ms_p50"], 1e-9)
        else:
            r["speedup_vs_no_cache"] = r["output_tokens_per_s"] / max(base["output_tokens_per_s"], 1e-9)
        r["ttft_p50_vs_no_cache"] = r["ttft_ms_p50"] / max(base["ttft_ms_p50"], 1e-9)
        r["ttft_p99_vs_no_cache"] = r["ttft_ms_p99"] / max(base["ttft_ms_p99"], 1e-9)
        if key[0] == "shared_prefix" and mode == "cache":
            r["target"] = "throughput >= 3x and TTFT p50 <= 1/3 of no cache"
            r["meets_target"] = r["speedup_vs_no_cache"] >= 3 and r["ttft_p50_vs_no_cache"] <= 1 / 3
        if key[0] == "multi_turn" and key[1] == str(last_turn):
            first = (on if mode == "cache" else off)[("multi_turn", "1")]
            r["ttft_vs_turn_1"] = r["ttft_ms_p50"] / max(first["ttft_ms_p50"], 1e-9)
        lines.append(r)
bad = [r for r in lines if r["errors"] or r["ok"] != r["num_requests"]]
with open(out, "a") as f:
    for r in lines:
        f.write(json.dumps(r) + "\n")
for r in lines:
    if r["workload"] == "shared_prefix" or str(r.get("turn")) in ("1", str(last_turn), "all"):
        print(f'{r["workload"]:13} turn={str(r.get("turn", "-")):3} caching={int(r["prefix_caching"])} '
              f'out_tok/s={r.get("output_tokens_per_s", float("nan")):9.1f} ttft_p50={r["ttft_ms_p50"]:8.1f} ms '
              f'p99={r["ttft_ms_p99"]:8.1f} ms cached={r["cached_tokens"]}/{r["prompt_tokens"]} '
              f'speedup_vs_no_cache={r["speedup_vs_no_cache"]:.2f}'
              + (f' meets_target={r["meets_target"]}' if "meets_target" in r else ""))
print(f"{len(lines)} records appended to {out}")
sys.exit(1 if bad else 0)
PY

#!/usr/bin/env bash
# Prefix-cache benchmark: the same two workloads against flashserve with prefix caching (the
# default), with caching and cascade attention (FLASHSERVE_CASCADE=1), and with
# --no-prefix-caching, one server after the other in one run, merged into JSON lines with
# speedup_vs_no_cache and speedup_vs_no_cascade (docs/PREFIX_CACHE.md, "Benchmark"):
#   shared_prefix  a 1,024-token system prompt + a 64-token question, 128 output tokens,
#                  64 concurrent clients: throughput and TTFT p50/p99 (target: >= 3x, <= 1/3)
#   multi_turn     16 conversations of 8 turns, each resending the whole history (512 tokens,
#                  + 512 per turn: 4,096 at turn 8): TTFT per turn, turn 8 vs turn 1
# Usage: bench/prefix_cache.sh [BUILD_DIR]           (default build/release)
# Environment: FS_PC_BACKEND (default cuda), FS_PC_SCALE=full|tiny (tiny: stories260K on a few
# clients, a smoke test for machines without a GPU), FS_PC_OUT (default
# bench/results/<GPU name>/prefix_cache_v2.jsonl), FS_PC_MODES (default "cache cache_cascade
# no_cache"), FS_PC_MODEL (a model folder to use instead of
# the random TinyLlama-1.1B-shaped one made with flashserve-random-model), FS_PC_TURN_RUNS (default
# 3: multi_turn runs with other conversations, seeds 1000, 2000, ..; the last turn's TTFT over the
# first's is taken from the medians over runs, since one run's turn TTFTs vary by +-20% with how
# the 16 arrivals fall into engine steps), FS_MODELS (default
# /work/shared/models: llama2-tokenizer/ and stories260K/), FS_PC_PORT (default 18795).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:-$root/build/release}" && pwd)
backend=${FS_PC_BACKEND:-cuda}
scale=${FS_PC_SCALE:-full}
port=${FS_PC_PORT:-18795}
M=${FS_MODELS:-/work/shared/models}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)
out=${FS_PC_OUT:-$root/bench/results/$(echo "${gpu:-cpu}" | tr ' ' '_')/prefix_cache_v2.jsonl}
modes=${FS_PC_MODES:-cache cache_cascade no_cache}
turn_runs=${FS_PC_TURN_RUNS:-3}
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

# One server per mode; a mode whose server or bench fails is reported and left out of the
# records (the others are still merged), and the script exits non-zero.
ran="" failed=""
for mode in $modes; do
  flag="" envs=""
  case $mode in
    cache) ;;
    cache_cascade) envs=FLASHSERVE_CASCADE=1 ;;
    no_cache) flag=--no-prefix-caching ;;
    *) echo "unknown mode $mode" >&2; exit 2 ;;
  esac
  cmd="${envs:+$envs }flashserve --model $model --backend $backend --port $port $server_args --no-request-log $flag"
  env $envs "$B/server/flashserve" --model "$model" --backend "$backend" --port $port $server_args \
    --no-request-log $flag > "$tmp/server_$mode.log" 2>&1 &
  spid=$!
  ok=1
  for _ in $(seq 600); do
    curl -sf localhost:$port/health > /dev/null 2>&1 && break
    kill -0 $spid 2>/dev/null || { ok=0; break; }
    sleep 0.5
  done
  for w in shared_prefix multi_turn; do
    [ $ok = 1 ] || break
    args=$([ $w = shared_prefix ] && echo "$shared_args" || echo "$turn_args")
    curl -s localhost:$port/metrics > "$tmp/metrics_${mode}_${w}_0.txt"
    for run in $(seq $([ $w = multi_turn ] && echo "$turn_runs" || echo 1)); do
      "$B/bench/bench_server" --port $port --workload $w $args --token-range $range \
        --seed $((1000 * run)) --label "$(basename "$model")" --server-command "$cmd" \
        >> "$tmp/$mode.jsonl" || ok=0
    done
    curl -s localhost:$port/metrics > "$tmp/metrics_${mode}_${w}_1.txt"
  done
  kill -TERM $spid 2>/dev/null
  wait $spid || ok=0
  spid=""
  if [ $ok = 1 ]; then
    ran="$ran $mode"
  else
    failed="$failed $mode"
    echo "mode $mode failed; its server's log:" >&2
    tail -n 30 "$tmp/server_$mode.log" >&2
  fi
done
[ -n "$ran" ] || exit 1

mkdir -p "$(dirname "$out")"
python3 - "$tmp" "$out" "$command_line" "${gpu:-none}" "$last_turn" "$ran" "$failed" <<'PY'
import json, re, sys
tmp, out, command, gpu, last_turn, modes, failed = sys.argv[1:8]
last_turn, modes = int(last_turn), modes.split()
def load(mode):
    recs = {}
    for line in open(f"{tmp}/{mode}.jsonl"):
        j = json.loads(line)
        recs[(j["workload"], str(j.get("turn", "")), j["seed"])] = j
    return recs
def metrics(path):
    m = {}
    for line in open(path):
        x = re.match(r"^(flashserve_[a-z_]+(?:\{[^}]*\})?) ([-0-9.eE+naif]+)$", line.strip())
        if x:
            m[x.group(1)] = float(x.group(2))
    return m
def engine(mode, workload):
    # What the server's engine did during one workload: counter differences.
    a = metrics(f"{tmp}/metrics_{mode}_{workload}_0.txt")
    b = metrics(f"{tmp}/metrics_{mode}_{workload}_1.txt")
    d = lambda k: b.get(k, 0.0) - a.get(k, 0.0)
    steps = d("flashserve_engine_steps_total")
    ttft_n = d("flashserve_time_to_first_token_seconds_count")
    return {"steps": steps,
            "forward_ms_per_step": 1e3 * d('flashserve_engine_step_seconds_total{phase="forward"}') / max(steps, 1),
            "host_ms_per_step": 1e3 * (d('flashserve_engine_step_seconds_total{phase="schedule"}') +
                                       d('flashserve_engine_step_seconds_total{phase="sample"}')) / max(steps, 1),
            "cascade_steps": d("flashserve_prefix_cache_cascade_steps_total"),
            "prompt_tokens": d("flashserve_prompt_tokens_total"),
            "prompt_tokens_from_cache": d("flashserve_prefix_cache_hits_tokens_total"),
            "generated_tokens": d("flashserve_generation_tokens_total"),
            "server_ttft_ms_mean": 1e3 * d("flashserve_time_to_first_token_seconds_sum") / max(ttft_n, 1)}
recs = {m: load(m) for m in modes}
base_mode = "no_cache"
lines = []
def ratio(r, base, per_turn):
    # Throughput for the whole-run records, TTFT for the per-turn ones (what each measures).
    if per_turn:
        return base["ttft_ms_p50"] / max(r["ttft_ms_p50"], 1e-9)
    return r["output_tokens_per_s"] / max(base["output_tokens_per_s"], 1e-9)
for key in recs[modes[0]]:
    for mode in modes:
        r = dict(recs[mode][key])
        per_turn = key[0] == "multi_turn" and key[1] not in ("", "all")
        r["bench"] = "prefix_cache"
        r["mode"] = mode
        r["prefix_caching"] = mode != "no_cache"
        r["cascade"] = mode == "cache_cascade"  # allowed; it runs only when a group pays
        r["bench_command"] = r.pop("command")
        r["command"] = command
        r["gpu"] = gpu
        r["engine"] = engine(mode, key[0])  # the whole workload's, also on per-turn records
        for other, name in ((base_mode, "no_cache"), ("cache", "no_cascade")):
            if other in recs and (name == "no_cache" or mode == "cache_cascade"):
                base = recs[other][key]
                r["speedup_vs_" + name] = ratio(r, base, per_turn)
                r["ttft_p50_vs_" + name] = r["ttft_ms_p50"] / max(base["ttft_ms_p50"], 1e-9)
                r["ttft_p99_vs_" + name] = r["ttft_ms_p99"] / max(base["ttft_ms_p99"], 1e-9)
        if key[0] == "shared_prefix" and mode == "cache" and "speedup_vs_no_cache" in r:
            r["target"] = "throughput >= 3x and TTFT p50 <= 1/3 of no cache"
            r["meets_target"] = r["speedup_vs_no_cache"] >= 3 and r["ttft_p50_vs_no_cache"] <= 1 / 3
        if key[0] == "multi_turn" and key[1] == str(last_turn):
            first = recs[mode][("multi_turn", "1", key[2])]
            r["ttft_vs_turn_1"] = r["ttft_ms_p50"] / max(first["ttft_ms_p50"], 1e-9)
        lines.append(r)
# Per mode, the multi-turn TTFT p50 of each turn as the median over the runs (other conversations).
def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
for mode in modes:
    seeds = sorted({k[2] for k in recs[mode] if k[0] == "multi_turn"})
    if not seeds:
        continue
    per_turn = {t: [recs[mode][("multi_turn", str(t), s)]["ttft_ms_p50"] for s in seeds]
                for t in range(1, last_turn + 1)}
    r = {"bench": "prefix_cache", "workload": "multi_turn_summary", "mode": mode,
         "prefix_caching": mode != "no_cache", "cascade": mode == "cache_cascade",
         "seeds": seeds, "command": command, "gpu": gpu,
         "ttft_ms_p50_by_turn_runs": per_turn,
         "ttft_ms_p50_by_turn_median": {t: median(v) for t, v in per_turn.items()},
         "ttft_vs_turn_1_runs": [a / b for a, b in zip(per_turn[last_turn], per_turn[1])]}
    r["ttft_vs_turn_1"] = median(per_turn[last_turn]) / median(per_turn[1])
    if mode == "cache":
        r["target"] = "TTFT p50 of the last turn <= 1.2x turn 1's (medians over runs)"
        r["meets_target"] = r["ttft_vs_turn_1"] <= 1.2
    for other, name in ((base_mode, "no_cache"), ("cache", "no_cascade")):
        if other in recs and (name == "no_cache" or mode == "cache_cascade"):
            base = [recs[other][("multi_turn", str(last_turn), s)]["ttft_ms_p50"] for s in seeds]
            r[f"last_turn_ttft_speedup_vs_{name}"] = median(base) / median(per_turn[last_turn])
    lines.append(r)
bad = [r for r in lines if "errors" in r and (r["errors"] or r["ok"] != r["num_requests"])]
with open(out, "a") as f:
    for r in lines:
        f.write(json.dumps(r) + "\n")
for r in lines:
    if r["workload"] == "multi_turn_summary":
        med = r["ttft_ms_p50_by_turn_median"]
        print(f'multi_turn summary {r["mode"]:16} TTFT p50 medians over {len(r["seeds"])} runs: '
              f'turn 1 {med[1]:.1f} ms, turn {last_turn} {med[last_turn]:.1f} ms, ratio {r["ttft_vs_turn_1"]:.2f} '
              f'(runs: {", ".join(f"{x:.2f}" for x in r["ttft_vs_turn_1_runs"])})'
              + (f' meets_target={r["meets_target"]}' if "meets_target" in r else ""))
        continue
    if r["workload"] == "shared_prefix" or (r.get("seed") == 1000 and str(r.get("turn")) in ("1", str(last_turn), "all")):
        e = r["engine"]
        print(f'{r["workload"]:13} turn={str(r.get("turn", "-")):3} {r["mode"]:16} '
              f'out_tok/s={r.get("output_tokens_per_s", float("nan")):9.1f} ttft_p50={r["ttft_ms_p50"]:7.1f} ms '
              f'p99={r["ttft_ms_p99"]:7.1f} ms cached={r["cached_tokens"]}/{r["prompt_tokens"]} '
              + (f' vs_no_cache={r["speedup_vs_no_cache"]:.2f}' if "speedup_vs_no_cache" in r else "")
              + (f' vs_no_cascade={r["speedup_vs_no_cascade"]:.2f}' if "speedup_vs_no_cascade" in r else "")
              + (f' vs_turn_1={r["ttft_vs_turn_1"]:.2f}' if "ttft_vs_turn_1" in r else "")
              + (f' meets_target={r["meets_target"]}' if "meets_target" in r else "")
              + (f' | steps={e["steps"]:.0f} fwd={e["forward_ms_per_step"]:.2f} ms host={e["host_ms_per_step"]:.2f} ms '
                 f'cascade_steps={e["cascade_steps"]:.0f} server_ttft={e["server_ttft_ms_mean"]:.1f} ms'
                 if str(r.get("turn", "")) in ("", "all") else ""))
print(f"{len(lines)} records appended to {out}" + (f"; failed modes:{failed}" if failed.strip() else ""))
sys.exit(1 if bad or failed.strip() else 0)
PY

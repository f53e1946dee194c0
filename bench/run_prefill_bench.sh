#!/usr/bin/env bash
# Runs the prefill attention benchmark and its torch baselines (SDPA flash and cuDNN backends,
# plus a bf16 matmul ceiling) in the same session on the same GPU, then merges them into JSON
# lines with speedup_vs_torch_flash, speedup_vs_torch_cudnn and frac_of_bf16_matmul.
# Usage: bench/run_prefill_bench.sh [out_dir]   (env: BUILD=build dir, ITERS=timed runs >= 30,
# IMPLS=the bench's impl filter ('|'-separated substrings), CONTIG_LAUNCHER=1: also the public
# launcher with FLASHSERVE_PREFILL_KV=contig, recorded as impl "flashserve:kv_contig")
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/prefill}
DEST=${1:-$ROOT/bench/results/latest}
ITERS=${ITERS:-40}
mkdir -p "$DEST"
OURS_CMD="$BUILD/bench/bench_attention_prefill $ITERS"
TORCH_CMD="python3 $ROOT/bench/attention_prefill_baseline.py --iters $ITERS"
$OURS_CMD "" "${IMPLS:-}" > "$DEST/prefill_ours_raw.jsonl"
if [ "${CONTIG_LAUNCHER:-0}" = 1 ]; then
  # The contiguous variants again beside the launcher, in the same process: run 5 saw the d64
  # launcher 8-27% slower than the same variant timed in the first process (their records carry
  # "prefill_kv": "contig").
  FLASHSERVE_PREFILL_KV=contig $OURS_CMD "" 'flashserve:kv_contig$|_contig_pp' >> "$DEST/prefill_ours_raw.jsonl"
  OURS_CMD="$OURS_CMD; FLASHSERVE_PREFILL_KV=contig $OURS_CMD '' 'flashserve:kv_contig\$|_contig_pp'"
fi
$TORCH_CMD > "$DEST/prefill_torch_raw.jsonl"
python3 - "$DEST" "bench/run_prefill_bench.sh (ITERS=$ITERS): $OURS_CMD ; $TORCH_CMD" <<'PY'
import json, sys
dest, command = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for f in ("prefill_ours_raw.jsonl", "prefill_torch_raw.jsonl")
        for l in open(f"{dest}/{f}") if l.strip()]
mm = [r for r in rows if r["bench"] == "bf16_matmul"]
mm_tflops = mm[0]["tflops"] if mm else None
base = {}
for r in rows:
    if r["bench"] == "attention_prefill" and r["impl"].startswith("torch_") and "time_us_p50" in r:
        base[(r["shape"], r["impl"])] = r["time_us_p50"]
keys = ("bench", "impl", "shape", "dtype", "batch", "num_heads", "q_len", "kv_len", "head_dim",
        "causal", "block_size", "mask", "time_us_p50", "time_us_p10", "time_us_p90", "tflops", "gpu", "default_kernel", "prefill_kv",
        "max_abs_diff_vs_default", "max_abs_diff_vs_math", "error")
with open(f"{dest}/prefill.jsonl", "w") as out:
    for r in rows:
        rec = {k: r[k] for k in keys if k in r}
        if r["bench"] == "attention_prefill" and "time_us_p50" in r:
            for b in ("torch_flash", "torch_cudnn"):
                t = base.get((r["shape"], b))
                rec[f"speedup_vs_{b}"] = round(t / r["time_us_p50"], 4) if t else None
            rec["frac_of_bf16_matmul"] = round(r["tflops"] / mm_tflops, 4) if mm_tflops else None
        rec["command"] = command
        out.write(json.dumps(rec) + "\n")
# Human-readable summary on stderr.
print(f"{'shape':42} {'impl':28} {'us':>9} {'TFLOP/s':>8} {'vs flash':>8} {'vs cudnn':>8}", file=sys.stderr)
for l in open(f"{dest}/prefill.jsonl"):
    r = json.loads(l)
    if r["bench"] != "attention_prefill" or "time_us_p50" not in r:
        continue
    impl = r["impl"] + (" [2nd run]" if r.get("prefill_kv") == "contig" and "kv_contig" not in r["impl"] else "")
    print(f"{r['shape']:42} {impl:28} {r['time_us_p50']:9.1f} {r['tflops']:8.1f} "
          f"{r.get('speedup_vs_torch_flash') or 0:8.3f} {r.get('speedup_vs_torch_cudnn') or 0:8.3f}", file=sys.stderr)
if mm_tflops:
    print(f"bf16 matmul 8192^3: {mm_tflops:.1f} TFLOP/s", file=sys.stderr)
PY

#!/usr/bin/env bash
# Runs the decode-attention benchmark and its PyTorch baseline on the same GPU and joins them:
# writes JSON lines {bench, impl, B, kv_len, hq, hkv, d, num_splits, time_us_p50, gb_s, gpu,
# frac_of_copy_bw, speedup_vs_torch_best, command, ...} to $1/decode.jsonl (default: bench/results/).
# TAG=v3 adds "tag": "v3" to every record (which kernel version produced it). Also writes
# $1/decode_table.md, the docs' table; PREV_JSONL=<earlier records> adds their times as a column.
# Usage: [TAG=...] bench/run_decode_bench.sh [out_dir] [build_dir] [--quick | "--l2 flush"]
set -euo pipefail
OUT_DIR=${1:-bench/results}
BUILD=${2:-build}
EXTRA=${3:-}
mkdir -p "$OUT_DIR"
timeout ${OURS_TIMEOUT:-900} "$BUILD/bench/bench_attention_decode" $EXTRA > "$OUT_DIR/decode_ours.jsonl" 2> "$OUT_DIR/decode_ours.log" || true
timeout ${TORCH_TIMEOUT:-900} python3 bench/attention_decode_baseline.py $EXTRA > "$OUT_DIR/decode_torch.jsonl" 2> "$OUT_DIR/decode_torch.log" || true
python3 - "$OUT_DIR" "${TAG:-}" <<'PY'
import json, sys, os
out, tag = sys.argv[1], sys.argv[2]
ours = [json.loads(l) for l in open(os.path.join(out, "decode_ours.jsonl")) if l.strip()]
torch = [json.loads(l) for l in open(os.path.join(out, "decode_torch.jsonl")) if l.strip()]
copy = next((r["gb_s"] for r in ours if r["impl"] == "d2d_copy"), None)
key = lambda r: (r.get("B"), r.get("kv_len"), r.get("hq"), r.get("hkv"), r.get("d"))
best = {key(r): r for r in torch if r["impl"] == "torch_best"}
with open(os.path.join(out, "decode.jsonl"), "w") as f:
    for r in ours + torch:
        if tag:
            r["tag"] = tag
        if os.environ.get("SESSION_COMMAND"):
            r["session_command"] = os.environ["SESSION_COMMAND"]
        if r["impl"] != "d2d_copy" and copy:
            r["frac_of_copy_bw"] = r["gb_s"] / copy
        b = best.get(key(r))
        if r["impl"].startswith("flashserve"):
            r["speedup_vs_torch_best"] = b["time_us_p50"] / r["time_us_p50"] if b else None
            r["torch_best_impl"] = b.get("best_of") if b else None
        f.write(json.dumps(r) + "\n")
rows = [r for r in ours if r["impl"].startswith("flashserve")]
print(f"{'impl':18s} {'B':>4s} {'L':>6s} {'hq':>3s} {'hkv':>3s} {'d':>4s} {'S':>3s} {'us':>9s} {'GB/s':>7s} {'copy':>5s} {'torch_us':>9s} {'x_torch':>7s}")
for r in rows:
    b = best.get(key(r))
    print(f"{r['impl']:18s} {r['B']:4d} {r['kv_len']:6d} {r['hq']:3d} {r['hkv']:3d} {r['d']:4d} {r['num_splits']:3d} "
          f"{r['time_us_p50']:9.2f} {r['gb_s']:7.0f} {r['gb_s']/copy:5.2f} "
          f"{(b['time_us_p50'] if b else float('nan')):9.2f} {(b['time_us_p50']/r['time_us_p50'] if b else float('nan')):7.2f}")
print(f"d2d copy {copy:.0f} GB/s")
# The doc's table (markdown): the plan's choice per shape, with PREV_JSONL's time (an earlier
# version's records, same method) when given, and the best forced/tuned variant for comparison.
prev = {}
if os.environ.get("PREV_JSONL") and os.path.exists(os.environ["PREV_JSONL"]):
    prev = {key(r): r for r in map(json.loads, open(os.environ["PREV_JSONL"])) if r.get("impl") == "flashserve"}
fmt = lambda x, spec: format(x, spec) if x is not None else "–"
with open(os.path.join(out, "decode_table.md"), "w") as f:
    f.write("| B | kv_len | hq/hkv | d | K+V MB | splits | prev µs | µs | GB/s | frac_of_copy_bw | torch best µs "
            "| speedup_vs_torch_best | best other variant µs (impl, splits) |\n")
    f.write("|" + "---|" * 13 + "\n")
    for r in (r for r in ours if r["impl"] == "flashserve"):
        b, p = best.get(key(r)), prev.get(key(r))
        others = [o for o in ours if o["impl"].startswith("flashserve") and o["impl"] != "flashserve" and key(o) == key(r)]
        o = min(others, key=lambda o: o["time_us_p50"]) if others else None
        kv_mb = 4.0 * r["B"] * r["kv_len"] * r["hkv"] * r["d"] / 1e6
        f.write(f"| {r['B']} | {r['kv_len']} | {r['hq']}/{r['hkv']} | {r['d']} | {kv_mb:.0f} | {r['num_splits']} "
                f"| {fmt(p and p['time_us_p50'], '.1f')} | {r['time_us_p50']:.1f} | {r['gb_s']:.0f} "
                f"| {r['gb_s'] / copy:.2f} | {fmt(b and b['time_us_p50'], '.1f')} "
                f"| {fmt(b and b['time_us_p50'] / r['time_us_p50'], '.2f')} "
                f"| {fmt(o and o['time_us_p50'], '.1f')}{' (' + o['impl'][11:] + ', ' + str(o['num_splits']) + ')' if o else ''} |\n")
PY

#!/usr/bin/env python3
"""Joins the tensor-parallel runs of one `bench/gpu.sh bench tp` call: bench_e2e records
at several tensor_parallel_size values, and bench_tp_collectives records. Adds to each e2e record

  speedup_vs_tp1            its throughput over the TP = 1 record of the same case (same model
                            label, prompt, output and request count; 1.0 for TP 1 itself):
                            decode_tokens_per_s (e2e_decode), output_tokens_per_s (e2e_offline)
  allreduce_ms_per_step     the collectives' time per decode step at this TP and batch (batch 1
  gather_ms_per_step        for decode, the request count for offline), measured alone
  allreduce_frac_of_step    (decode only) allreduce_ms_per_step over the measured step time

and prints a table. Standard library only.

  tp_merge.py --e2e e2e.jsonl --collectives coll.jsonl --out merged.jsonl
"""
import argparse
import json

from merge_e2e import read_jsonl


def case_key(r):
    return (r.get("bench"), r.get("model"), r.get("prompt_len"), r.get("output_len"),
            r.get("num_requests", 1))


def metric_of(r):
    return "decode_tokens_per_s" if r["bench"] == "e2e_decode" else "output_tokens_per_s"


def merge(e2e, coll):
    tp1 = {case_key(r): r for r in e2e if r.get("tensor_parallel_size") == 1 and metric_of(r) in r}
    # Keyed by model too: one run may measure several shapes (the folder name is the label).
    # bench_tp_collectives names it "shape", not "model".
    by_tp_m = {(c.get("model", c.get("shape")), c["tensor_parallel_size"], c["m"]): c
               for c in coll if c.get("bench") == "tp_collectives"}
    out = []
    for r in e2e:
        if r.get("bench") not in ("e2e_decode", "e2e_offline"):
            out.append(r)
            continue
        r = dict(r)
        m = metric_of(r)
        base = tp1.get(case_key(r))
        if m in r and base is not None:
            r["speedup_vs_tp1"] = r[m] / base[m]
        tp = r.get("tensor_parallel_size", 1)
        c = by_tp_m.get((r.get("model"), tp,
                         r.get("num_requests", 1) if r["bench"] == "e2e_offline" else 1))
        if c is not None:
            r["allreduce_ms_per_step"] = c["allreduce_ms_per_step"]
            r["gather_ms_per_step"] = c["gather_ms_per_step"]
            if r["bench"] == "e2e_decode" and m in r:
                r["allreduce_frac_of_step"] = c["allreduce_ms_per_step"] / (1e3 / r[m])
        out.append(r)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--e2e", required=True)
    ap.add_argument("--collectives", default="")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    merged = merge(read_jsonl(a.e2e), read_jsonl(a.collectives))
    with open(a.out, "w") as f:
        for r in merged:
            f.write(json.dumps(r) + "\n")
    print(f"{'case':34} {'TP':>3} {'tokens/s':>10} {'vs TP1':>7} {'allreduce ms/step':>18} {'frac':>6}")
    for r in merged:
        if r.get("bench") not in ("e2e_decode", "e2e_offline"):
            continue
        case = f"{r['bench'][4:]} {r.get('model')} {r.get('num_requests', 1)}x{r.get('prompt_len')}x{r.get('output_len')}"
        val = r.get(metric_of(r))
        fmt = lambda v, p: "-" if v is None else f"{v:.{p}f}"
        print(f"{case:34} {r.get('tensor_parallel_size', 1):>3} {fmt(val, 1):>10} "
              f"{fmt(r.get('speedup_vs_tp1'), 2):>7} {fmt(r.get('allreduce_ms_per_step'), 3):>18} "
              f"{fmt(r.get('allreduce_frac_of_step'), 2):>6}" + (f"  error: {r['error']}" if "error" in r else ""))


if __name__ == "__main__":
    main()

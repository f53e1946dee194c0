#!/usr/bin/env python3
"""Pairs flashserve's bench_e2e records with llama.cpp's on the same weights, one record per case.

    records.py --label L --model SHAPE --weights W --llama-weights Q --e2e E2E.jsonl \
        --llama-bench BENCH.jsonl --llama-batched BATCHED.log --command CMD >> vs_llama_cpp_vN.jsonl

Cases, each like with like:
- decode: bench_e2e `decode:1x128x256` (tokens after the first over the decode time) against
  llama-bench `-p 0 -n 256 -d 128` (256 tokens generated after a 128-token context);
- prefill: bench_e2e `offline:1x512x1` (512 prompt tokens over the request's whole time)
  against llama-bench `-p 512 -n 0`;
- offline NxPxO: bench_e2e `offline:NxPxO` (output tokens over the run) against
  llama-batched-bench `-npp P -ntg O -npl N` (N*O over its prompt plus generation time).
A case that either side failed gets an `error` and no ratio.
"""
import argparse
import json
import sys


def lines(path, prefix="{"):
    with open(path) as f:
        return [json.loads(l) for l in f if l.startswith(prefix)]


def main():
    ap = argparse.ArgumentParser()
    for name in ("label", "model", "weights", "llama-weights", "e2e", "llama-bench",
                 "llama-batched", "command", "gpu"):
        ap.add_argument("--" + name, required=True)
    ap.add_argument("--llama-build", default="10587")
    ap.add_argument("--llama-commit", default="3f545bec")
    a = ap.parse_args()

    ours = {}
    for r in lines(a.e2e):  # bench_e2e also writes its ceilings: no case
        if r["bench"] == "e2e_decode":
            ours[("decode", r["prompt_len"], r["output_len"], 1)] = r
        elif r["bench"] == "e2e_offline":
            ours[("offline", r["prompt_len"], r["output_len"], r["num_requests"])] = r
    bench = lines(a.llama_bench)
    batched = lines(a.llama_batched, '{"n_kv_max"')

    def llama_rate(kind, p, o, n):
        if kind == "decode":
            hit = [r for r in bench if r["n_prompt"] == 0 and r["n_gen"] == o and r["n_depth"] == p]
            return hit[0]["avg_ts"] if hit else None
        if kind == "prefill":
            hit = [r for r in bench if r["n_prompt"] == p and r["n_gen"] == 0 and r["n_depth"] == 0]
            return hit[0]["avg_ts"] if hit else None
        hit = [r for r in batched if r["pp"] == p and r["tg"] == o and r["pl"] == n]
        return n * o / hit[0]["t"] if hit else None

    for (kind, p, o, n), r in sorted(ours.items()):
        if kind == "offline" and n == 1 and o == 1:
            case, ours_rate = ("prefill", p, 0, 1), (None if "error" in r else p * r["num_requests"] / r["elapsed_s"])
        elif kind == "decode":
            case, ours_rate = (kind, p, o, 1), r.get("decode_tokens_per_s")
        else:
            case, ours_rate = (kind, p, o, n), r.get("output_tokens_per_s")
        theirs = llama_rate(*case)
        rec = {"bench": "vs_llama_cpp", "gpu": a.gpu, "model": a.model, "label": a.label,
               "case": "%s:%dx%dx%d" % (case[0], case[3], case[1], case[2]),
               "weights": a.weights, "llama_cpp_weights": a.llama_weights,
               "flashserve_tokens_per_s": ours_rate, "llama_cpp_tokens_per_s": theirs,
               "llama_cpp_build": a.llama_build, "llama_cpp_commit": a.llama_commit,
               "command": a.command, "flashserve_command": r.get("command")}
        if ours_rate and theirs:
            rec["speedup_vs_llama_cpp"] = ours_rate / theirs
        else:
            rec["error"] = r.get("error") or "llama.cpp has no result for this case"
        print(json.dumps(rec))


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Joins one benchmark suite's raw lines with the baseline measured in the same run and writes
the records bench/results/README.md describes (speedup_vs_<baseline>, frac_of_<ceiling>,
command). bench/gpu.sh calls it once per suite; standard library only.

  merge_records.py decode  --ours O --torch T --out R [--command C]
  merge_records.py prefill --ours O --torch T --out R [--command C]
  merge_records.py fp8     --bf16 B --fp8 F --out R [--command C]
  merge_records.py ab      --runs A --out R [--command C]
  merge_records.py prefix  --dir D --modes "cache no_cache" --last-turn N --out R [--command C]
  merge_records.py defaults --fixed F --sized S --out R [--command C]
"""
import argparse
import json
import os
import re
import sys

from merge_e2e import read_jsonl


def write(path, records, command):
    with open(path, "a") as f:
        for r in records:
            if command:
                r["command"] = command
            f.write(json.dumps(r) + "\n")


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def decode(a):
    """bench_attention_decode vs attention_decode_baseline.py: the copy kernel is the ceiling."""
    ours, torch = read_jsonl(a.ours), read_jsonl(a.torch)
    copy = next((r["gb_s"] for r in ours if r["impl"] == "d2d_copy"), None)
    key = lambda r: (r.get("B"), r.get("kv_len"), r.get("hq"), r.get("hkv"), r.get("d"))
    best = {key(r): r for r in torch if r["impl"] == "torch_best"}
    for r in ours + torch:
        if r["impl"] != "d2d_copy" and copy:
            r["frac_of_copy_bw"] = r["gb_s"] / copy
        b = best.get(key(r))
        if r["impl"].startswith("flashserve"):
            r["speedup_vs_torch_best"] = b["time_us_p50"] / r["time_us_p50"] if b else None
            r["torch_best_impl"] = b.get("best_of") if b else None
            print(f'B={r["B"]:<3} kv_len={r["kv_len"]:<6} hq/hkv={r["hq"]}/{r["hkv"]} d={r["d"]:<3} '
                  f'{r["impl"]:20} {r["time_us_p50"]:9.1f} us {r["gb_s"]:6.0f} GB/s '
                  f'x{r["speedup_vs_torch_best"] or 0:.2f} vs torch', file=sys.stderr)
    write(a.out, ours + torch, a.command)


def prefill(a):
    """bench_attention_prefill vs attention_prefill_baseline.py (flash, cuDNN, bf16 matmul rate)."""
    rows = read_jsonl(a.ours) + read_jsonl(a.torch)
    mm = [r for r in rows if r["bench"] == "bf16_matmul"]
    mm_tflops = mm[0]["tflops"] if mm else None
    base = {(r["shape"], r["impl"]): r["time_us_p50"] for r in rows
            if r["bench"] == "attention_prefill" and r["impl"].startswith("torch_") and "time_us_p50" in r}
    for r in rows:
        if r["bench"] == "attention_prefill" and "time_us_p50" in r:
            for b in ("torch_flash", "torch_cudnn"):
                t = base.get((r["shape"], b))
                r[f"speedup_vs_{b}"] = round(t / r["time_us_p50"], 4) if t else None
            r["frac_of_bf16_matmul"] = round(r["tflops"] / mm_tflops, 4) if mm_tflops else None
            if r["impl"].startswith("flashserve") and ":" not in r["impl"]:
                print(f'{r["shape"]:42} {r["tflops"]:7.1f} TFLOP/s  x{r["speedup_vs_torch_flash"] or 0:.3f} '
                      f'vs flash  x{r["speedup_vs_torch_cudnn"] or 0:.3f} vs cuDNN', file=sys.stderr)
    write(a.out, rows, a.command)


def e2e_rate(j):
    """Tokens/s of a bench_e2e record: total tokens for prefill cases (at most 2 output tokens)."""
    if j["output_len"] <= 2 and j["bench"] == "e2e_offline":
        return j.get("total_tokens_per_s")
    return j.get("decode_tokens_per_s", j.get("output_tokens_per_s"))


def e2e_key(j):
    return (j.get("model"), j["bench"], j.get("num_requests", 1), j["prompt_len"], j["output_len"])


def e2e_runs(path):
    """bench_e2e's run records (not its ceilings line)."""
    return [j for j in read_jsonl(path) if j.get("bench") in ("e2e_decode", "e2e_offline")]


def fp8(a):
    """bench_e2e of FP8 weights against bf16 weights of the same model and case."""
    bf16, quant = e2e_runs(a.bf16), e2e_runs(a.fp8)
    for j in quant:
        base = [b for b in bf16 if e2e_key(b) == e2e_key(j) and e2e_rate(b) and e2e_rate(j)]
        if base:
            j["bf16_tokens_per_s"] = e2e_rate(base[0])
            j["speedup_vs_bf16"] = e2e_rate(j) / e2e_rate(base[0])
            j["weight_bytes_ratio_vs_bf16"] = j["weight_bytes"] / base[0]["weight_bytes"]
            print(f'{j["model"]:15} {j["bench"]:12} n={j.get("num_requests", 1):<3} p={j["prompt_len"]:<4} '
                  f'fp8 {e2e_rate(j):9.1f} tok/s  x{j["speedup_vs_bf16"]:.3f} vs bf16', file=sys.stderr)
    write(a.out, bf16 + quant, a.command)


def ab(a):
    """Alternated bench_e2e runs of an old and a new build ("side" old/new, "round"): one summary
    record per case with the medians over rounds and speedup_vs_old."""
    runs = e2e_runs(a.runs)
    summary = []
    for key in sorted({e2e_key(j) for j in runs}, key=str):
        side = {s: [e2e_rate(j) for j in runs if e2e_key(j) == key and j.get("side") == s and e2e_rate(j)]
                for s in ("old", "new")}
        if not side["old"] or not side["new"]:
            continue
        old, new = median(side["old"]), median(side["new"])
        r = {"bench": "ab_e2e", "model": key[0], "case": key[1], "num_requests": key[2],
             "prompt_len": key[3], "output_len": key[4], "gpu": runs[0].get("gpu"),
             "old_rev": a.old_rev, "old_tokens_per_s": old, "new_tokens_per_s": new,
             "old_runs": side["old"], "new_runs": side["new"], "speedup_vs_old": new / old}
        print(f'{key[0]:15} {key[1]:12} {key[2]}x{key[3]}/{key[4]}: old {old:9.1f} new {new:9.1f} '
              f'tok/s  x{new / old:.3f}', file=sys.stderr)
        summary.append(r)
    write(a.out, runs + summary, a.command)


def prefix(a):
    """bench_server's shared_prefix and multi_turn workloads, one server per mode (cache,
    no_cache), with the engine's /metrics counters before and after each workload."""
    modes, last_turn = a.modes.split(), a.last_turn

    def load(mode):
        return {(j["workload"], str(j.get("turn", "")), j["seed"]): j
                for j in read_jsonl(os.path.join(a.dir, f"{mode}.jsonl"))}

    def metrics(path):
        m = {}
        for line in open(path):
            x = re.match(r"^(flashserve_[a-z_]+(?:\{[^}]*\})?) ([-0-9.eE+naif]+)$", line.strip())
            if x:
                m[x.group(1)] = float(x.group(2))
        return m

    def engine(mode, workload):  # counter differences over one workload
        before = metrics(os.path.join(a.dir, f"metrics_{mode}_{workload}_0.txt"))
        after = metrics(os.path.join(a.dir, f"metrics_{mode}_{workload}_1.txt"))
        d = lambda k: after.get(k, 0.0) - before.get(k, 0.0)
        steps = max(d("flashserve_engine_steps_total"), 1)
        phase = lambda p: d(f'flashserve_engine_step_seconds_total{{phase="{p}"}}')
        return {"steps": steps, "forward_ms_per_step": 1e3 * phase("forward") / steps,
                "host_ms_per_step": 1e3 * (phase("schedule") + phase("sample")) / steps,
                "prompt_tokens": d("flashserve_prompt_tokens_total"),
                "prompt_tokens_from_cache": d("flashserve_prefix_cache_hits_tokens_total"),
                "generated_tokens": d("flashserve_generation_tokens_total")}

    recs = {m: load(m) for m in modes}
    lines = []
    for key in recs[modes[0]]:
        for mode in modes:
            r = dict(recs[mode][key])
            per_turn = key[0] == "multi_turn" and key[1] not in ("", "all")
            r.update(bench="prefix_cache", mode=mode, prefix_caching=mode != "no_cache",
                     bench_command=r.pop("command", None), engine=engine(mode, key[0]))
            if "no_cache" in recs and mode != "no_cache":
                base = recs["no_cache"][key]
                r["speedup_vs_no_cache"] = (base["ttft_ms_p50"] / max(r["ttft_ms_p50"], 1e-9) if per_turn else
                                            r["output_tokens_per_s"] / max(base["output_tokens_per_s"], 1e-9))
                r["ttft_p50_vs_no_cache"] = r["ttft_ms_p50"] / max(base["ttft_ms_p50"], 1e-9)
                r["ttft_p99_vs_no_cache"] = r["ttft_ms_p99"] / max(base["ttft_ms_p99"], 1e-9)
            lines.append(r)
    # Per mode, each turn's TTFT p50 as the median over runs with other conversations (seeds):
    # one run's turn TTFTs vary by +-20% with how the arrivals fall into engine steps.
    for mode in modes:
        seeds = sorted({k[2] for k in recs[mode] if k[0] == "multi_turn"})
        if not seeds:
            continue
        per_turn = {t: [recs[mode][("multi_turn", str(t), s)]["ttft_ms_p50"] for s in seeds]
                    for t in range(1, last_turn + 1)}
        r = {"bench": "prefix_cache", "workload": "multi_turn_summary", "mode": mode,
             "prefix_caching": mode != "no_cache", "seeds": seeds, "gpu": lines[0].get("gpu"),
             "ttft_ms_p50_by_turn_median": {t: median(v) for t, v in per_turn.items()},
             "ttft_vs_turn_1": median(per_turn[last_turn]) / median(per_turn[1])}
        if "no_cache" in recs and mode != "no_cache":
            base = [recs["no_cache"][("multi_turn", str(last_turn), s)]["ttft_ms_p50"] for s in seeds]
            r["last_turn_ttft_speedup_vs_no_cache"] = median(base) / median(per_turn[last_turn])
        print(f'multi_turn {mode:9} turn 1 {r["ttft_ms_p50_by_turn_median"][1]:.1f} ms, turn {last_turn} '
              f'{r["ttft_ms_p50_by_turn_median"][last_turn]:.1f} ms (x{r["ttft_vs_turn_1"]:.2f})', file=sys.stderr)
        lines.append(r)
    for r in lines:
        if r["workload"] == "shared_prefix":
            print(f'shared_prefix {r["mode"]:9} {r["output_tokens_per_s"]:9.1f} tok/s  TTFT p50 '
                  f'{r["ttft_ms_p50"]:.1f} ms p99 {r["ttft_ms_p99"]:.1f} ms', file=sys.stderr)
    write(a.out, lines, a.command)
    return 1 if any(r.get("errors") or r.get("ok", r.get("num_requests")) != r.get("num_requests")
                    for r in lines if "errors" in r) else 0


def defaults(a):
    """bench_server's open loop against the fixed and the sized serving defaults: per rate, the
    sized side's record gains speedup_vs_fixed_defaults (goodput over goodput). A rate with
    refused or failed requests stays in the records with its error counts, never as a win."""
    sides = {"fixed": read_jsonl(a.fixed), "sized": read_jsonl(a.sized)}
    fixed = {r["request_rate"]: r for r in sides["fixed"]}
    for r in sides["sized"]:
        f = fixed.get(r["request_rate"])
        r["defaults"], bad = "sized", r["errors"] or r["rejected_429_503"]
        if f and f["goodput_requests_per_s"] > 0 and not bad:
            r["speedup_vs_fixed_defaults"] = r["goodput_requests_per_s"] / f["goodput_requests_per_s"]
        print(f'rate {r["request_rate"]:5.1f}/s: goodput fixed {f["goodput_requests_per_s"] if f else 0:6.2f} '
              f'sized {r["goodput_requests_per_s"]:6.2f} req/s (errors {r["errors"]}, refused '
              f'{r["rejected_429_503"]})', file=sys.stderr)
    for r in sides["fixed"]:
        r["defaults"] = "fixed"
    write(a.out, sides["fixed"] + sides["sized"], a.command)
    return 1 if any(r["errors"] or r["rejected_429_503"] for s in sides.values() for r in s) else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="suite", required=True)
    for name, args in (("decode", ("--ours", "--torch")), ("prefill", ("--ours", "--torch")),
                       ("fp8", ("--bf16", "--fp8")), ("ab", ("--runs",)), ("prefix", ("--dir",)),
                       ("defaults", ("--fixed", "--sized"))):
        p = sub.add_parser(name)
        for flag in args:
            p.add_argument(flag, required=True)
        p.add_argument("--out", required=True, help="JSON lines, appended")
        p.add_argument("--command", default="", help="recorded in every record")
        if name == "ab":
            p.add_argument("--old-rev", default="")
        if name == "prefix":
            p.add_argument("--modes", default="cache no_cache")
            p.add_argument("--last-turn", type=int, default=8)
    a = ap.parse_args()
    sys.exit({"decode": decode, "prefill": prefill, "fp8": fp8, "ab": ab, "prefix": prefix,
              "defaults": defaults}[a.suite](a) or 0)


if __name__ == "__main__":
    main()

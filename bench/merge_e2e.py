#!/usr/bin/env python3
"""Joins bench_e2e's flashserve records with the transformers baselines of the same run and adds
speedup_vs_<baseline> fields; prints a summary table (with the hf_compare results, if given).

Matching (same model label, prompt and output length):
  e2e_decode  (batch 1)     vs hf_generate batch_size 1:   decode_tokens_per_s / decode_tokens_per_s
  e2e_offline (N requests)  vs hf_generate batch_size N:   output_tokens_per_s / output_tokens_per_s
Standard library only.

  merge_e2e.py --flashserve fs.jsonl --hf hf.jsonl --out merged.jsonl [--compare cmp.jsonl]
"""
import argparse
import json


def read_jsonl(path):
    if not path:
        return []
    recs = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        recs.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass  # a line cut short by a timeout
    except FileNotFoundError:
        pass
    return recs


def metric_of(rec):
    return "decode_tokens_per_s" if rec["bench"] == "e2e_decode" else "output_tokens_per_s"


def merge(fs_recs, hf_recs):
    out = []
    for r in fs_recs:
        r = dict(r)
        if r.get("bench") in ("e2e_decode", "e2e_offline") and "error" not in r:
            batch = 1 if r["bench"] == "e2e_decode" else r.get("num_requests")
            key = metric_of(r)
            for h in hf_recs:
                if (h.get("bench") == "hf_generate" and h.get("model") == r.get("model") and
                        h.get("batch_size") == batch and h.get("prompt_len") == r.get("prompt_len")
                        and h.get("output_len") == r.get("output_len") and h.get(key)):
                    r[f"speedup_vs_{h['impl']}"] = r[key] / h[key]
                    r[f"{h['impl']}_{key}"] = h[key]
        out.append(r)
    return out


def fmt(x, spec):
    return format(x, spec) if isinstance(x, (int, float)) else "-"


def of_bench(recs, *names):
    return [r for r in recs if r.get("bench") in names]


def row(name, model, case):
    """The columns every summary row starts with."""
    return f"{name:<12} {model:<15} {case:<14}"


def summary(merged, hf_recs, cmp_recs):
    lines = []
    for r in of_bench(merged, "e2e_ceilings"):
        if "error" in r:
            lines.append(f"ceilings: ERROR {r['error'][:100]}")
        else:
            lines.append(f"ceilings on {r['gpu']}: copy {r['copy_gb_s']:.0f} GB/s, "
                         f"bf16 GEMM {r['bf16_tflops']:.0f} TFLOP/s ({r['gemm_shape']})")
    lines.append(f"{row('bench', 'model', 'case')} {'tokens/s':>10} {'frac':>6} "
                 f"{'vs_eager':>8} {'vs_compile':>10}  notes")
    for r in of_bench(merged, "e2e_decode", "e2e_offline"):
        if "error" in r:
            lines.append(f"{r['bench']:<12} {r.get('model', '?'):<15} ERROR {r['error'][:100]}")
            continue
        n = 1 if r["bench"] == "e2e_decode" else r.get("num_requests")
        case = f"{n}x{r['prompt_len']}/{r['output_len']}"
        frac = r.get("frac_of_roofline", r.get("frac_of_step_lower_bound"))
        notes = [] if r.get("all_finished_by_length", True) else ["not all finished by length"]
        if r.get("timed_out"):
            notes.append("timed out")
        lines.append(f"{row(r['bench'], r['model'], case)} {fmt(r[metric_of(r)], '10.1f')} "
                     f"{fmt(frac, '6.3f')} {fmt(r.get('speedup_vs_hf_eager'), '8.2f')} "
                     f"{fmt(r.get('speedup_vs_hf_static_compile'), '10.2f')}  {' '.join(notes)}")
    for h in of_bench(hf_recs, "hf_generate"):
        case = f"{h.get('batch_size')}x{h.get('prompt_len')}/{h.get('output_len')}"
        if "error" in h or "skipped" in h:
            lines.append(f"{row(h.get('impl', 'hf'), h['model'], case)} "
                         f"{h.get('error', h.get('skipped'))[:100]}")
        else:
            lines.append(f"{row(h['impl'], h['model'], case)} "
                         f"decode {fmt(h.get('decode_tokens_per_s'), '.1f')} tok/s, output "
                         f"{fmt(h.get('output_tokens_per_s'), '.1f')} tok/s")
    for c in of_bench(cmp_recs, "hf_compare"):
        head = f"compare {c['model']:<15} {c.get('candidate', '?')} vs {c.get('reference', '?')}"
        if "error" in c:
            lines.append(f"{head}: ERROR {c['error'][:100]}")
        else:
            lines.append(f"{head} [{c.get('config', '-')}]: NMSE {c['nmse_mean']:.2e}, max|err| "
                         f"{c['max_abs_err']:.3f}, top1 {c['top1_agreement']:.2f}, greedy "
                         f"{c['greedy_overall_agreement']:.3f} (prefix "
                         f"{c['greedy_prefix_agreement']:.3f}), forced "
                         f"{fmt(c.get('teacher_forced_agreement'), '.3f')}, logits_pass "
                         f"{c.get('logits_pass', '-')}, greedy_pass {c.get('greedy_pass', '-')}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flashserve", required=True)
    ap.add_argument("--hf", default=None)
    ap.add_argument("--compare", default=None)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    hf = read_jsonl(a.hf)
    merged = merge(read_jsonl(a.flashserve), hf)
    with open(a.out, "w") as f:
        for r in merged:
            f.write(json.dumps(r) + "\n")
    print(summary(merged, hf, read_jsonl(a.compare)))


if __name__ == "__main__":
    main()

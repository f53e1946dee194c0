#!/usr/bin/env python3
"""flashserve's CUDA backend against transformers on random mixture-of-experts models (GPU machine).

Runs tools/hf_compare.py on layer-reduced random-weight models of the Qwen3-30B-A3B,
Mixtral-8x7B and Qwen1.5-MoE-A2.7B shapes (tools/hf_models.py: qwen3-30b-a3b-4l,
mixtral-8x7b-2l, qwen1.5-moe-a2.7b-4l; every layer of the published shape, experts saved one
tensor each by hf_models.save_model), prompts prefilled whole and in chunks of 256, and reads
back its records: per shape, flashserve's logits NMSE against transformers fp32 beside
transformers' own bf16-against-fp32 NMSE (the yardstick), and greedy agreement of both against
fp32. Exits 1 when flashserve is worse on any shape: an NMSE above --max-nmse-ratio times the
yardstick's (and above hf_compare's floor), greedy agreement more than --greedy-slack below the
yardstick's, or a shape that did not run.

  TARGETS=flashserve-logits bench/gpu.sh build && python3 tests/model/hf_moe_compare.py
      [--fs-logits build/gpu/bench/flashserve-logits] [--shapes qwen3-30b-a3b-4l,...]
      [--out out/gpu/hf_moe_compare.jsonl] [--workdir /tmp/fs_models]
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import hf_compare  # noqa: E402  (its pass floor)

SHAPES = "qwen3-30b-a3b-4l,mixtral-8x7b-2l,qwen1.5-moe-a2.7b-4l"


def verdicts(records, shape, max_ratio, slack):
    """(lines to print, passed) for one shape's hf_compare records."""
    mine = [r for r in records if r.get("model") == shape]
    yard = next((r for r in mine if r.get("candidate") == "hf_bf16"), None)
    runs = [r for r in mine if r.get("candidate") == "flashserve" and r.get("reference") == "hf_fp32"]
    errors = [r["error"] for r in mine if "error" in r]
    if yard is None or not runs or errors:
        return [f"{shape}: did not run: {errors or 'no records'}"], False
    lines = [f"{shape}: transformers bf16 vs fp32: NMSE {yard['nmse_mean']:.3e}, greedy "
             f"agreement {yard['greedy_overall_agreement']:.3f}"]
    ok = True
    for r in runs:
        ratio = r["nmse_mean"] / max(yard["nmse_mean"], 1e-30)
        nmse_ok = ratio <= max_ratio or r["nmse_mean"] <= hf_compare.NMSE_FLOOR
        greedy_ok = r["greedy_overall_agreement"] >= yard["greedy_overall_agreement"] - slack
        ok = ok and nmse_ok and greedy_ok
        lines.append(f"  flashserve ({r['config']}) vs fp32: NMSE {r['nmse_mean']:.3e} "
                     f"({ratio:.2f}x transformers bf16: {'ok' if nmse_ok else 'WORSE'}), greedy "
                     f"agreement {r['greedy_overall_agreement']:.3f} "
                     f"({'ok' if greedy_ok else 'WORSE'}), teacher-forced "
                     f"{r['teacher_forced_agreement']:.3f}, top-1 {r['top1_agreement']:.2f}")
    return lines, ok


def report(records, shapes, max_ratio, slack):
    """Prints every shape's verdicts and PASS or FAIL; True when every shape passed."""
    passed = True
    for shape in shapes:
        lines, ok = verdicts(records, shape, max_ratio, slack)
        print("\n".join(lines))
        passed = passed and ok
    print("PASS" if passed else "FAIL: flashserve is worse than transformers bf16 on some shape")
    return passed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fs-logits", default=os.path.join(ROOT, "build/gpu/bench/flashserve-logits"))
    models = os.path.join(ROOT, ".carry/models")  # as bench/gpu.sh finds them
    if not os.path.isdir(models):
        models = os.path.join(ROOT, "../shared/models")
    ap.add_argument("--tokenizer", default=os.path.join(models, "llama2-tokenizer/tokenizer.model"),
                    help="copied beside each saved model (optional: prompts are token ids)")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--out", default=os.path.join(ROOT, "out/gpu/hf_moe_compare.jsonl"))
    ap.add_argument("--workdir", default="/tmp/fs_models")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--max-nmse-ratio", type=float, default=1.0,
                    help="flashserve's NMSE vs fp32 over transformers bf16's (the issue's bar: 1)")
    ap.add_argument("--greedy-slack", type=float, default=0.05,
                    help="how far flashserve's greedy agreement may fall below transformers bf16's")
    a = ap.parse_args()
    if not os.path.exists(a.fs_logits):
        sys.exit(f"{a.fs_logits} not found: build it first (TARGETS=flashserve-logits bench/gpu.sh build)")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    start = os.path.getsize(a.out) if os.path.exists(a.out) else 0  # records appended by this run
    cmd = [sys.executable, os.path.join(ROOT, "tools/hf_compare.py"), "--fs-logits", a.fs_logits,
           "--tokenizer", a.tokenizer, "--workdir", a.workdir, "--out", a.out,
           "--shapes", a.shapes, "--steps", str(a.steps), "--prefill-chunk", "256",
           "--prompt-lens", "1,7,16,33,100,200,700"]
    print(" ".join(cmd), flush=True)
    rc = subprocess.run(cmd).returncode
    with open(a.out) as f:
        f.seek(start)
        records = [json.loads(line) for line in f if line.strip()]
    print(f"\nflashserve vs transformers on mixtures of experts ({a.out}):")
    passed = report(records, a.shapes.split(","), a.max_nmse_ratio, a.greedy_slack) and rc == 0
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())

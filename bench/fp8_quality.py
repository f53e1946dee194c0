#!/usr/bin/env python3
"""FP8 weights against the same model in bf16 (docs/FP8.md): reads two flashserve-logits runs
over the same prompts (--out-all-logits: every prompt position's logits, teacher-forced; and the
JSON with the greedy continuations) and prints one JSON line: normalised error of the logits
(mean over positions of |fp8 - bf16|^2 / |bf16|^2), top-1 agreement over positions, and the
greedy continuations' agreement (identical prefix and same-position share). numpy only.

  fp8_quality.py --bf16 A.npy A.json --fp8 B.npy B.json [--label NAME]
"""
import argparse
import json

import numpy as np


def greedy_agreement(a, b):
    prefix, same, total = [], 0, 0
    for x, y in zip(a, b):
        n = 0
        while n < min(len(x), len(y)) and x[n] == y[n]:
            n += 1
        prefix.append(n / max(len(x), 1))
        same += sum(int(p == q) for p, q in zip(x, y))
        total += len(x)
    return float(np.mean(prefix)), same / max(total, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bf16", nargs=2, required=True, metavar=("NPY", "JSON"))
    ap.add_argument("--fp8", nargs=2, required=True, metavar=("NPY", "JSON"))
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    ref, got = np.load(a.bf16[0]).astype(np.float64), np.load(a.fp8[0]).astype(np.float64)
    assert ref.shape == got.shape, (ref.shape, got.shape)
    nmse = ((got - ref) ** 2).sum(1) / (ref ** 2).sum(1)
    top1 = float((got.argmax(1) == ref.argmax(1)).mean())
    jr, jg = json.load(open(a.bf16[1])), json.load(open(a.fp8[1]))
    prefix, same = greedy_agreement(jr["continuations"], jg["continuations"])
    print(json.dumps({"bench": "fp8_quality", "model": a.label, "positions": int(ref.shape[0]),
                      "vocab_size": int(ref.shape[1]), "backend": jg.get("backend"),
                      "nmse_mean": float(nmse.mean()), "nmse_max": float(nmse.max()),
                      "top1_agreement": top1,
                      "greedy_steps": len(jr["continuations"][0]) if jr["continuations"] else 0,
                      "greedy_prefix_agreement": prefix, "greedy_same_position": same}))


if __name__ == "__main__":
    main()

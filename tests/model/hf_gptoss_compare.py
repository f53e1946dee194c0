#!/usr/bin/env python3
"""flashserve's CUDA backend against transformers' GptOssForCausalLM on random gpt-oss models (GPU machine).

flashserve-random-model writes each shape in the published checkpoint's layout (MXFP4 experts:
*_blocks and *_scales; quantization_config mxfp4): gpt-oss-20b with --layers (default 8: the
fp32 reference of all 24 layers would not fit one 80 GB GPU beside the bf16 one) and a
layer-reduced gpt-oss-120b (default 2 layers of 128 experts). transformers' GptOssForCausalLM is
built from the same config.json (eager attention, which honours the sinks) and given the same
tensors, its experts dequantized here from the same MXFP4 bytes (the OCP table times
2^(scale - 127), transposed to its [E, in, out] parameters), in bf16 and then fp32. flashserve
runs on the saved folder (flashserve-logits, prompts prefilled whole and in chunks of 256, long
enough to cross the 128-key window). The records (tools/hf_compare.py's metrics) give per shape
flashserve's logits NMSE against transformers fp32 beside transformers' own bf16-against-fp32
NMSE (the yardstick) and greedy agreement; exits 1 when flashserve is worse
(tests/model/hf_moe_compare.py's verdicts).

  TARGETS="flashserve-logits flashserve-random-model" bench/gpu.sh build &&
  python3 tests/model/hf_gptoss_compare.py [--bin build/gpu] [--shapes gpt-oss-20b,gpt-oss-120b]
      [--layers-20b 8] [--layers-120b 2] [--out out/gpu/hf_gptoss_compare.jsonl]
      [--workdir /tmp/fs_models]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_compare  # noqa: E402  (metrics, the transformers reference, the flashserve run)
import hf_models  # noqa: E402
from hf_moe_compare import report  # noqa: E402  (the verdicts)

FP4_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
              -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def dequantize(blocks, scales, dtype):
    """MXFP4 blocks [E, rows, G, 16] and scales [E, rows, G] (uint8) -> [E, rows, G * 32]."""
    import torch
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32, device=blocks.device)
    vals = torch.stack([lut[(blocks & 15).long()], lut[(blocks >> 4).long()]], dim=-1)
    vals = vals.reshape(*blocks.shape[:-1], 32)
    vals = torch.ldexp(vals, scales.to(torch.int32)[..., None] - 127)
    return vals.reshape(*blocks.shape[:-2], -1).to(dtype)


def load_state(folder):
    """Every tensor of the saved folder under transformers' bf16 parameter names."""
    import torch
    from safetensors.torch import load_file
    raw = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            raw.update(load_file(os.path.join(folder, name), device="cuda"))
    state = {}
    for name, t in raw.items():
        if name.endswith("_scales"):
            continue
        if name.endswith("_blocks"):  # [E, out, in] values -> transformers' [E, in, out]
            base = name[: -len("_blocks")]
            w = dequantize(t, raw[base + "_scales"], torch.bfloat16)
            state[base] = w.transpose(1, 2).contiguous()
            continue
        state[name] = t.to(torch.bfloat16)
    return state


def build_hf(folder):
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    cfg.pop("quantization_config", None)  # the experts arrive dequantized
    config = GptOssConfig.from_dict(cfg)
    config._attn_implementation = "eager"  # the path with the sinks
    with torch.device("cuda"):
        model = GptOssForCausalLM(config).to(torch.bfloat16)
    missing, unexpected = model.load_state_dict(load_state(folder), strict=False)
    if missing or unexpected:
        raise SystemExit(f"{folder}: transformers' parameters and the checkpoint differ: missing "
                         f"{missing[:5]}, unexpected {unexpected[:5]}")
    return model.eval()


def compare(a, shape, layers, out_f):
    import torch
    model_dir = os.path.join(a.workdir, f"{shape}-{layers}l")
    tag = os.path.basename(model_dir)
    shutil.rmtree(model_dir, ignore_errors=True)
    subprocess.run([os.path.join(a.bin, "weights/flashserve-random-model"), "--preset", shape,
                    "--layers", str(layers), "--out", model_dir, "--seed", str(a.seed),
                    "--shards", "4"], check=True)
    with open(os.path.join(model_dir, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    prompts = hf_compare.make_prompts(vocab, [int(n) for n in a.prompt_lens.split(",")], a.seed + 1)
    prompts_file = os.path.join(a.workdir, f"{tag}_prompts.json")
    with open(prompts_file, "w") as f:
        json.dump({"prompts": prompts}, f)
    runs = []
    for chunk in (0, 256):  # flashserve first: the GPU is all its own
        fs, cmd, err = hf_compare.run_flashserve(a, model_dir, prompts_file,
                                                 f"{tag}_chunk{chunk}", a.workdir, chunk)
        runs.append(("as_saved" if chunk == 0 else "prefill_chunk_256", fs, cmd, err))
    t0 = time.time()
    model = build_hf(model_dir)
    hf_compare.log(f"{tag}: transformers model built in {time.time() - t0:.1f} s")
    refs = {"hf_bf16": hf_compare.hf_reference(model, prompts, a.steps)}
    model.float()
    torch.backends.cuda.matmul.allow_tf32 = False
    refs["hf_fp32"] = hf_compare.hf_reference(model, prompts, a.steps)
    tf = {kind: hf_compare.teacher_forced(model, prompts, fs["continuations"])
          for kind, fs, _, _ in runs if fs is not None}
    del model
    torch.cuda.empty_cache()
    import transformers
    common = dict(bench="hf_compare", model=shape, layers=layers, weights="mxfp4",
                  architecture="GptOssForCausalLM", gpu=hf_models.gpu_name(),
                  num_prompts=len(prompts), prompt_lens=[len(p) for p in prompts], steps=a.steps,
                  seed=a.seed, versions=dict(torch=torch.__version__,
                                             transformers=transformers.__version__))
    rows = [dict(common, candidate="hf_bf16", reference="hf_fp32",
                 command="transformers bf16 vs fp32 (same dequantized MXFP4 weights)",
                 **hf_compare.logits_metrics(refs["hf_bf16"][0], refs["hf_fp32"][0]),
                 **hf_compare.greedy_metrics(refs["hf_bf16"][1], refs["hf_fp32"][1],
                                             [[[0, m, 0, 0] for m in ms] for ms in refs["hf_bf16"][2]],
                                             refs["hf_fp32"][2]))]
    for kind, fs, cmd, err in runs:
        rec = dict(common, candidate="flashserve", reference="hf_fp32", config=kind, command=cmd)
        if fs is None:
            rec["error"] = err
        else:
            logits, conts, margins = refs["hf_fp32"]
            rec.update(hf_compare.logits_metrics(fs["logits"], logits))
            rec.update(hf_compare.greedy_metrics(fs["continuations"], conts, fs["top2"], margins))
            rec["teacher_forced_agreement"] = tf[kind][0]
            rec.update(load_s=fs["load_s"], prefill_s=fs["prefill_s"], decode_s=fs["decode_s"])
        rows.append(rec)
    for r in rows:
        out_f.write(json.dumps(r) + "\n")
    out_f.flush()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/gpu"),
                    help="build tree holding bench/flashserve-logits and weights/flashserve-random-model")
    ap.add_argument("--shapes", default="gpt-oss-20b,gpt-oss-120b")
    ap.add_argument("--layers-20b", type=int, default=8)
    ap.add_argument("--layers-120b", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "out/gpu/hf_gptoss_compare.jsonl"))
    ap.add_argument("--workdir", default="/tmp/fs_models")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--prompt-lens", default="1,7,33,129,300,700",
                    help="the longer ones cross the 128-key window of the sliding layers")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fs-timeout", type=int, default=900)
    ap.add_argument("--max-nmse-ratio", type=float, default=1.0,
                    help="flashserve's NMSE vs fp32 over transformers bf16's (the issue's bar: 1)")
    ap.add_argument("--greedy-slack", type=float, default=0.05)
    a = ap.parse_args()
    a.fs_logits = os.path.join(a.bin, "bench/flashserve-logits")
    a.backend, a.quantize = "cuda", "none"
    if not os.path.exists(a.fs_logits):
        sys.exit(f"{a.fs_logits} not found: build it first "
                 "(TARGETS=\"flashserve-logits flashserve-random-model\" bench/gpu.sh build)")
    os.makedirs(a.workdir, exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    records = []
    with open(a.out, "a") as out_f:
        for shape in a.shapes.split(","):
            layers = a.layers_120b if shape == "gpt-oss-120b" else a.layers_20b
            try:
                records += compare(a, shape, layers, out_f)
            except Exception as e:  # one shape failing must not stop the other
                import traceback
                traceback.print_exc()
                rec = dict(bench="hf_compare", model=shape, candidate="flashserve", reference="-",
                           error=f"{type(e).__name__}: {e}")
                out_f.write(json.dumps(rec) + "\n")
                records.append(rec)
    print(f"\nflashserve vs transformers on gpt-oss ({a.out}):")
    return 0 if report(records, a.shapes.split(","), a.max_nmse_ratio, a.greedy_slack) else 1


if __name__ == "__main__":
    sys.exit(main())

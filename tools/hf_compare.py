#!/usr/bin/env python3
"""flashserve against Hugging Face transformers on random-weight Llama-family models (GPU machine).

For each shape: build a seeded random-weight model in bf16 (tools/hf_models.py: LlamaForCausalLM,
MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, GraniteForCausalLM,
Olmo2ForCausalLM, SmolLM3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, or the mixtures of
experts Qwen3MoeForCausalLM, MixtralForCausalLM and Qwen2MoeForCausalLM, by the shape's
architecture),
save_pretrained it (safetensors) with the Llama 2 tokenizer.model beside it, run flashserve's
`flashserve-logits` on the saved folder, and compare with transformers run in bf16 and in fp32
(the same bf16 weights upcast: the closest thing to exact):
  - last-position logits of a batch of prompts: NMSE, max |error|, top-1 agreement;
  - greedy continuations (EOS ignored): agreement up to the first divergence and over all
    positions; at each first divergence, the top-1/top-2 logit margin of both sides (a near tie
    explains a flip); and teacher-forced agreement (transformers' argmax along flashserve's own
    tokens), which counts flips without their knock-on effect.
The yardstick for "bf16 tolerance" is transformers' own bf16 run against its fp32 run.
Prints a table; writes one JSON line per (shape, reference) to --out, with the shape in "model"
and its transformers class in "architecture".

  hf_compare.py --fs-logits build/bench/flashserve-logits --tokenizer TOKENIZER.model \
      --workdir /tmp/fs_models --out results.jsonl [--shapes tinyllama-1.1b,llama2-7b,llama3.2-1b]
      (other architectures: --shapes llama3.2-1b,qwen2.5-0.5b,qwen3-0.6b,mistral-7b,
       phi-4-mini,granite-3-2b,olmo-2-1b,smollm3-3b,qwen2.5-7b-yarn)
      [--config-dir DIR (DIR/<shape>/config.json from flashserve-random-model --config-only)]
      [--prompt-lens 1,7,...,1500 (sliding windows: add one of at least twice the window, e.g.
       gemma-3-1b 1200, gemma-2-2b and mistral-7b-v0.1 8200)]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models  # noqa: E402

# Pass thresholds, in one place. flashserve accumulates in fp32 like transformers' bf16 path;
# its logits may differ from fp32 transformers by at most this many times transformers' own
# bf16 NMSE (a different but equally good bf16 rounding order lands near 1x).
NMSE_FACTOR_VS_HF_BF16 = 4.0
NMSE_FLOOR = 1e-6  # always acceptable: far below bf16 rounding noise (~1e-5 and up for logits)
GREEDY_MIN_AGREEMENT = 0.95  # greedy continuations agree on >= 95% of positions
# BOS-only, odd, block-aligned, longer than one attention tile, and one long prompt: below ~1000
# positions the llama3 scaling of RoPE's low frequencies moves angles by only a few 0.01 rad,
# too little to tell a missing scaling from bf16 noise; at 1500 it is up to a radian.
PROMPT_LENS = [1, 7, 16, 33, 64, 100, 128, 200, 1500]


def log(*a):
    print(f"[hf_compare {time.strftime('%H:%M:%S')}]", *a, flush=True)


def make_prompts(vocab, lens, seed):
    rng = np.random.default_rng(seed)
    return [[1] + [int(t) for t in rng.integers(3, vocab, n - 1)] for n in lens]


# ---- metrics (numpy, float64) ---------------------------------------------------------------
def logits_metrics(cand, ref):
    """cand, ref: [num_prompts, vocab] last-position logits."""
    cand, ref = cand.astype(np.float64), ref.astype(np.float64)
    nmse = ((cand - ref) ** 2).sum(1) / (ref ** 2).sum(1)
    return dict(nmse_mean=float(nmse.mean()), nmse_max=float(nmse.max()),
                max_abs_err=float(np.abs(cand - ref).max()),
                ref_logit_std=float(ref.std()),
                top1_agreement=float((cand.argmax(1) == ref.argmax(1)).mean()))


def greedy_metrics(cand, ref, cand_top2, ref_margins):
    """cand, ref: [num_prompts][steps] token ids; cand_top2: per step [id1, v1, id2, v2];
    ref_margins: per step top-1 minus top-2 logit of the reference."""
    prefix, overall, divergences = [], [], []
    for p, (c, r) in enumerate(zip(cand, ref)):
        c, r = np.array(c), np.array(r)
        same = c == r
        d = int(np.argmin(same)) if not same.all() else len(c)
        prefix.append(d / len(c))
        overall.append(float(same.mean()))
        if d < len(c):
            t = cand_top2[p][d]
            divergences.append(dict(prompt=p, step=d, ref_token=int(r[d]), fs_token=int(c[d]),
                                    ref_margin=float(ref_margins[p][d]),
                                    fs_margin=float(t[1] - t[3])))
    return dict(greedy_prefix_agreement=float(np.mean(prefix)),
                greedy_overall_agreement=float(np.mean(overall)),
                greedy_prompts_identical=int(sum(x == 1.0 for x in prefix)),
                divergences=divergences)


# ---- transformers side ----------------------------------------------------------------------
def hf_reference(model, prompts, steps):
    """Last-position logits [n, vocab] (f32), greedy continuations and their top-2 margins."""
    import torch
    last, conts, margins = [], [], []
    with torch.no_grad():
        for p in prompts:
            out = model(input_ids=torch.tensor([p], device="cuda"), use_cache=True)
            logits = out.logits[0, -1].float()
            last.append(logits.cpu().numpy())
            toks, marg = [], []
            for s in range(steps):
                top = torch.topk(logits, 2).values
                nxt = int(torch.argmax(logits))
                toks.append(nxt)
                marg.append(float(top[0] - top[1]))
                if s + 1 == steps:
                    break
                out = model(input_ids=torch.tensor([[nxt]], device="cuda"),
                            past_key_values=out.past_key_values, use_cache=True)
                logits = out.logits[0, -1].float()
            conts.append(toks)
            margins.append(marg)
    return np.stack(last), conts, margins


def teacher_forced(model, prompts, conts):
    """transformers' greedy choice at every step given flashserve's own previous tokens:
    (agreement fraction, margins of the reference where they disagree)."""
    import torch
    agree, total, flip_margins = 0, 0, []
    with torch.no_grad():
        for p, c in zip(prompts, conts):
            ids = torch.tensor([p + c[:-1]], device="cuda")
            logits = model(input_ids=ids).logits[0, len(p) - 1:].float()
            top = torch.topk(logits, 2, dim=-1).values
            pred = logits.argmax(-1).cpu().numpy()
            m = (top[:, 0] - top[:, 1]).cpu().numpy()
            same = pred == np.array(c)
            agree += int(same.sum())
            total += len(c)
            flip_margins += [float(x) for x in m[~same]]
    return agree / max(total, 1), flip_margins


# ---- flashserve side ------------------------------------------------------------------------
def run_flashserve(a, model_dir, prompts_file, tag, logdir, prefill_chunk=0):
    npy = os.path.join(a.workdir, f"{tag}_logits.npy")
    js = os.path.join(a.workdir, f"{tag}_fs.json")
    cmd = [a.fs_logits, "--model", model_dir, "--prompts", prompts_file, "--backend", a.backend,
           "--steps", str(a.steps), "--out-logits", npy, "--out-json", js]
    if prefill_chunk:
        cmd += ["--prefill-chunk", str(prefill_chunk)]
    if a.quantize != "none":  # docs/FP8.md: FP8 weights against transformers' bf16 and fp32
        cmd += ["--quantize", a.quantize]
    log("run:", " ".join(cmd))
    t0 = time.time()
    with open(os.path.join(logdir, f"flashserve_logits_{tag}.log"), "w") as f:
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT,
                                timeout=a.fs_timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        except OSError as e:  # e.g. the binary was not built
            rc = f"not run: {e}"
    log(f"flashserve-logits rc={rc} in {time.time() - t0:.1f} s")
    if rc != 0:
        return None, " ".join(cmd), f"flashserve-logits rc={rc} (see flashserve_logits_{tag}.log)"
    with open(js) as f:
        out = json.load(f)
    out["logits"] = np.load(npy)
    return out, " ".join(cmd), None


def legacy_rope_keys(model_dir):
    """transformers >= 5 saves RoPE settings as "rope_parameters"; flashserve's loader reads the
    classic "rope_theta"/"rope_scaling". Returns the config patched with the classic keys added,
    or None when the saved config already has them or its RoPE is flashserve's default anyway."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    rp = cfg.get("rope_parameters")
    if "rope_theta" in cfg or not isinstance(rp, dict):
        return None
    if rp.get("rope_theta", 10000.0) == 10000.0 and rp.get("rope_type", "default") == "default":
        return None  # flashserve's defaults already match: no second run needed
    cfg["rope_theta"] = rp.get("rope_theta", 10000.0)
    if rp.get("rope_type", "default") != "default":
        cfg["rope_scaling"] = {k: v for k, v in rp.items() if k != "rope_theta"}
    return cfg


def compare_shape(a, shape, prompts, out_f, logdir):
    import torch
    t_shape = time.time()
    model_dir = os.path.join(a.workdir, shape)
    cfg_json = os.path.join(a.config_dir, shape, "config.json") if a.config_dir else None
    if cfg_json and not os.path.exists(cfg_json):
        log(f"{cfg_json} missing: using the built-in shape table")
        cfg_json = None
    t0 = time.time()
    model = hf_models.build_random_llama(shape, seed=a.seed, config_json=cfg_json)
    torch.cuda.synchronize()
    log(f"{shape}: built in {time.time() - t0:.1f} s "
        f"({sum(p.numel() for p in model.parameters()) / 1e9:.3f} B parameters)")
    t0 = time.time()
    shutil.rmtree(model_dir, ignore_errors=True)
    hf_models.save_model(model, model_dir)  # save_pretrained; experts one tensor each
    if a.tokenizer and os.path.exists(a.tokenizer):  # token ids only here; the server needs it
        shutil.copy(a.tokenizer, os.path.join(model_dir, "tokenizer.model"))
    else:
        log(f"no tokenizer at '{a.tokenizer}': the model folder gets none")
    saved = sorted(os.listdir(model_dir))
    log(f"{shape}: saved in {time.time() - t0:.1f} s: {saved}")
    shutil.copy(os.path.join(model_dir, "config.json"), os.path.join(logdir, f"config_{shape}.json"))

    prompts_file = os.path.join(a.workdir, f"{shape}_prompts.json")
    with open(prompts_file, "w") as f:
        json.dump({"prompts": prompts}, f)

    # flashserve runs while the HF model waits in host memory, so the GPU is all flashserve's.
    model.to("cpu")
    torch.cuda.empty_cache()
    runs = []
    fs, cmd, err = run_flashserve(a, model_dir, prompts_file, shape, logdir)
    runs.append(("as_saved", fs, cmd, err))
    patched = legacy_rope_keys(model_dir)
    if patched is not None:
        log(f"{shape}: config.json has rope_parameters but no rope_theta (transformers >= 5); "
            "running flashserve again on a copy with the classic keys added")
        pdir = model_dir + "_legacy_rope"
        shutil.rmtree(pdir, ignore_errors=True)
        os.makedirs(pdir)
        for name in os.listdir(model_dir):
            if name != "config.json":
                os.symlink(os.path.join(model_dir, name), os.path.join(pdir, name))
        with open(os.path.join(pdir, "config.json"), "w") as f:
            json.dump(patched, f, indent=2)
        fs2, cmd2, err2 = run_flashserve(a, pdir, prompts_file, shape + "_legacy_rope", logdir)
        runs.append(("legacy_rope_keys_added", fs2, cmd2, err2))
    if a.prefill_chunk:
        # Chunked prefill: the long prompt spans several steps that mix with the short ones'
        # last chunks, the paged-attention path a whole-prompt step never takes.
        fs3, cmd3, err3 = run_flashserve(a, pdir if patched is not None else model_dir,
                                         prompts_file, f"{shape}_chunk{a.prefill_chunk}", logdir,
                                         a.prefill_chunk)
        runs.append((f"prefill_chunk_{a.prefill_chunk}", fs3, cmd3, err3))
    model.to("cuda")

    refs = {}
    t0 = time.time()
    refs["hf_bf16"] = hf_reference(model, prompts, a.steps)
    log(f"{shape}: transformers bf16 reference in {time.time() - t0:.1f} s")
    tf = {}
    for config_kind, fs, _, _ in runs:
        if fs is not None:
            tf[("hf_bf16", config_kind)] = teacher_forced(model, prompts, fs["continuations"])
    t0 = time.time()
    model.float()
    torch.backends.cuda.matmul.allow_tf32 = False
    refs["hf_fp32"] = hf_reference(model, prompts, a.steps)
    for config_kind, fs, _, _ in runs:
        if fs is not None:
            tf[("hf_fp32", config_kind)] = teacher_forced(model, prompts, fs["continuations"])
    log(f"{shape}: transformers fp32 reference in {time.time() - t0:.1f} s")
    del model
    torch.cuda.empty_cache()

    common = dict(bench="hf_compare", model=shape, weights="bf16",  # random bf16 checkpoints
                  architecture=hf_models.architecture(shape, cfg_json), gpu=hf_models.gpu_name(),
                  num_prompts=len(prompts), prompt_lens=[len(p) for p in prompts],
                  steps=a.steps, seed=a.seed, saved_files=saved)
    import transformers
    common["versions"] = dict(torch=torch.__version__, transformers=transformers.__version__)
    # The yardstick: transformers bf16 against transformers fp32.
    yard = dict(common, candidate="hf_bf16", reference="hf_fp32",
                command="transformers bf16 vs fp32 (same weights)",
                **logits_metrics(refs["hf_bf16"][0], refs["hf_fp32"][0]),
                **greedy_metrics(refs["hf_bf16"][1], refs["hf_fp32"][1],
                                 [[[0, m, 0, 0] for m in ms] for ms in refs["hf_bf16"][2]],
                                 refs["hf_fp32"][2]))
    out_f.write(json.dumps(yard) + "\n")
    rows = [yard]
    for config_kind, fs, cmd, err in runs:
        for ref_name in ("hf_bf16", "hf_fp32"):
            rec = dict(common, candidate="flashserve", reference=ref_name, config=config_kind,
                       command=cmd, quantize=a.quantize)
            if fs is None:
                rec["error"] = err
            else:
                ref_logits, ref_conts, ref_margins = refs[ref_name]
                rec.update(flashserve_backend=fs["backend"], load_s=fs["load_s"],
                           prefill_s=fs["prefill_s"], decode_s=fs["decode_s"])
                rec.update(logits_metrics(fs["logits"], ref_logits))
                rec.update(greedy_metrics(fs["continuations"], ref_conts, fs["top2"], ref_margins))
                agree, flips = tf[(ref_name, config_kind)]
                rec["teacher_forced_agreement"] = agree
                rec["teacher_forced_flip_margins"] = flips
                rec["greedy_pass"] = rec["greedy_overall_agreement"] >= GREEDY_MIN_AGREEMENT
                if ref_name == "hf_fp32":
                    rec["nmse_ratio_to_hf_bf16"] = rec["nmse_mean"] / max(yard["nmse_mean"], 1e-30)
                    rec["logits_pass"] = (rec["nmse_ratio_to_hf_bf16"] <= NMSE_FACTOR_VS_HF_BF16
                                          or rec["nmse_mean"] <= NMSE_FLOOR)
            out_f.write(json.dumps(rec) + "\n")
            rows.append(rec)
    out_f.flush()
    log(f"{shape}: done in {time.time() - t_shape:.1f} s")
    return rows


def print_table(rows):
    hdr = (f"{'model':<15} {'candidate':<10} {'reference':<8} {'config':<17} {'NMSE':>9} "
           f"{'max|err|':>9} {'top1':>5} {'greedy_pre':>10} {'greedy_all':>10} {'forced':>6} "
           f"{'pass':>5}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        if "error" in r:
            print(f"{r['model']:<15} {r['candidate']:<10} {r['reference']:<8} ERROR {r['error']}")
            continue
        ok = [r[k] for k in ("logits_pass", "greedy_pass") if k in r]
        print(f"{r['model']:<15} {r['candidate']:<10} {r['reference']:<8} "
              f"{r.get('config', '-')[:17]:<17} {r['nmse_mean']:9.2e} {r['max_abs_err']:9.3f} "
              f"{r['top1_agreement']:5.2f} {r['greedy_prefix_agreement']:10.3f} "
              f"{r['greedy_overall_agreement']:10.3f} "
              f"{r.get('teacher_forced_agreement', float('nan')):6.3f} "
              f"{('yes' if all(ok) else 'NO') if ok else '-':>5}")
        for d in r.get("divergences", [])[:4]:
            print(f"{'':17}first divergence: prompt {d['prompt']} step {d['step']}: "
                  f"ref margin {d['ref_margin']:.4f}, candidate margin {d['fs_margin']:.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fs-logits", required=True, help="path to flashserve-logits")
    ap.add_argument("--tokenizer", default="", help="the Llama 2 tokenizer.model, copied beside "
                    "each saved model")
    ap.add_argument("--workdir", default="/tmp/fs_models", help="models and scratch files")
    ap.add_argument("--logdir", default=None, help="logs and saved configs (default workdir)")
    ap.add_argument("--out", required=True, help="JSON lines, appended")
    ap.add_argument("--shapes", default="tinyllama-1.1b,llama3.2-1b,llama2-7b",
                    help="comma-separated names of tools/hf_models.py SHAPES")
    ap.add_argument("--config-dir", default=None)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--quantize", default="none", choices=["none", "fp8"],
                    help="flashserve-logits --quantize (fp8: its records carry quantize fp8; the "
                         "pass thresholds are bf16's and do not apply)")
    ap.add_argument("--prefill-chunk", type=int, default=0,
                    help="also run flashserve with prompts prefilled in chunks of this many tokens")
    ap.add_argument("--prompt-lens", default=",".join(map(str, PROMPT_LENS)),
                    help="comma-separated prompt lengths (the last-position logits of each)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fs-timeout", type=int, default=300)
    a = ap.parse_args()
    unknown = [s for s in a.shapes.split(",") if s not in hf_models.SHAPES]
    if unknown:
        ap.error(f"unknown shapes {unknown} (known: {', '.join(hf_models.SHAPES)})")
    a.logdir = a.logdir or a.workdir
    os.makedirs(a.workdir, exist_ok=True)
    os.makedirs(a.logdir, exist_ok=True)
    import torch
    log(f"torch {torch.__version__} on {hf_models.gpu_name()}")
    rows = []
    with open(a.out, "a") as out_f:
        for shape in a.shapes.split(","):
            try:
                prompts = make_prompts(hf_models.config_fields(shape)["vocab_size"],
                                       [int(n) for n in a.prompt_lens.split(",")], a.seed + 1)
                rows += compare_shape(a, shape, prompts, out_f, a.logdir)
            except Exception as e:  # one shape failing must not stop the others
                import traceback
                traceback.print_exc()
                rec = dict(bench="hf_compare", model=shape,
                           architecture=hf_models.SHAPES[shape].get("architecture",
                                                                     "LlamaForCausalLM"),
                           candidate="flashserve",
                           reference="-", error=f"{type(e).__name__}: {e}")
                out_f.write(json.dumps(rec) + "\n")
                out_f.flush()
                rows.append(rec)
                torch.cuda.empty_cache()
    print_table(rows)


if __name__ == "__main__":
    main()

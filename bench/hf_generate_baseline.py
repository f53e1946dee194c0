#!/usr/bin/env python3
"""Hugging Face transformers `generate` baselines for the end-to-end benchmarks (GPU machine).

Random-weight bf16 Llama models of the benchmark shapes (tools/hf_models.py, built in memory:
tokens/s does not depend on the weights' values), greedy, every run forced to its full length
(min_new_tokens = max_new_tokens). Two implementations:
  hf_eager           model.generate with the default dynamic KV cache
  hf_static_compile  cache_implementation="static" under torch.compile (transformers compiles
                     the decode forward itself when it can; otherwise we compile model.forward)
Per case (batch size x prompt length x new tokens) it reports:
  decode_tokens_per_s  batch * (steps - 1) / time between the first and last decode step, taken
                       by a logits processor that synchronizes the GPU (prefill excluded, like
                       bench_e2e's batch-1 decode figure)
  output_tokens_per_s  batch * new tokens / wall time of the whole generate call (like bench_e2e's
                       offline figure)
One JSON line per case to --out, written as soon as it is measured.

  hf_generate_baseline.py --out hf.jsonl --shapes tinyllama-1.1b --cases 1x128x256,16x128x256 \
      [--compile-cases 1x128x256] [--budget-s 240] [--config-dir DIR]
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import hf_models  # noqa: E402


def log(*a):
    print(f"[hf_baseline {time.strftime('%H:%M:%S')}]", *a, flush=True)


def parse_cases(text):
    """'1x128x256,16x128x256' -> [(batch, prompt_len, new_tokens), ...]"""
    return [tuple(int(x) for x in c.split("x")) for c in text.split(",") if c]


def measure(model, batch, prompt_len, new_tokens, **gen_kwargs):
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    class StepClock(LogitsProcessor):
        """Called once per generated token, right after that step's forward."""
        def __init__(self):
            self.times = []

        def __call__(self, input_ids, scores):
            torch.cuda.synchronize()
            self.times.append(time.perf_counter())
            return scores

    g = torch.Generator().manual_seed(batch * 1000 + prompt_len)
    ids = torch.randint(259, 459, (batch, prompt_len), generator=g)
    ids[:, 0] = 1  # BOS
    ids = ids.cuda()
    clock = StepClock()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             do_sample=False, pad_token_id=0,
                             logits_processor=LogitsProcessorList([clock]), **gen_kwargs)
    torch.cuda.synchronize()
    total = time.perf_counter() - t0
    generated = out.shape[1] - prompt_len
    assert generated == new_tokens, f"generated {generated} tokens, wanted {new_tokens}"
    decode = clock.times[-1] - clock.times[0]
    return dict(total_s=total, ttft_s=clock.times[0] - t0,
                decode_tokens_per_s=batch * (new_tokens - 1) / decode if decode > 0 else None,
                output_tokens_per_s=batch * new_tokens / total)


def static_compile_kwargs(model):
    """generate() kwargs for a static cache under torch.compile, and how it is compiled."""
    import torch
    gc = model.generation_config
    if hasattr(gc, "compile_config"):  # transformers compiles the decode forward itself
        return dict(cache_implementation="static"), "generate_auto_compile"
    model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    return dict(cache_implementation="static"), "manual_forward_compile"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="JSON lines, appended")
    ap.add_argument("--shapes", default="tinyllama-1.1b")
    ap.add_argument("--cases", default="1x128x256,16x128x256")
    ap.add_argument("--compile-cases", default="", help="cases also run with static cache + "
                    "torch.compile (each batch size compiles anew: slow)")
    ap.add_argument("--budget-s", type=float, default=1e9, help="skip cases that would start "
                    "after this many seconds")
    ap.add_argument("--config-dir", default=None)
    ap.add_argument("--command", default=None, help="recorded in the output (default argv)")
    a = ap.parse_args()
    import torch
    import transformers
    t_start = time.time()
    gpu = hf_models.gpu_name()
    command = a.command or " ".join([os.path.basename(sys.executable)] + sys.argv)
    versions = dict(torch=torch.__version__, transformers=transformers.__version__)
    log(f"{gpu}, torch {versions['torch']}, transformers {versions['transformers']}")
    with open(a.out, "a") as out:
        def emit(rec):
            out.write(json.dumps(rec) + "\n")
            out.flush()
            log(json.dumps(rec))

        for shape in a.shapes.split(","):
            cfg = os.path.join(a.config_dir, shape, "config.json") if a.config_dir else None
            cfg = cfg if cfg and os.path.exists(cfg) else None
            try:
                model = hf_models.build_random_llama(shape, seed=0, config_json=cfg)
            except Exception as e:
                emit(dict(bench="hf_generate", model=shape, gpu=gpu, command=command,
                          error=f"{type(e).__name__}: {e}"))
                continue
            plans = [("hf_eager", c) for c in parse_cases(a.cases)]
            plans += [("hf_static_compile", c) for c in parse_cases(a.compile_cases)]
            compiled_how = None
            for impl, (batch, prompt_len, new_tokens) in plans:
                rec = dict(bench="hf_generate", impl=impl, model=shape, gpu=gpu, command=command,
                           batch_size=batch, prompt_len=prompt_len, output_len=new_tokens,
                           dtype="bf16", versions=versions)
                if time.time() - t_start > a.budget_s:
                    emit(dict(rec, skipped=f"over the {a.budget_s:.0f} s budget"))
                    continue
                try:
                    kwargs = {}
                    if impl == "hf_static_compile":
                        if compiled_how is None:
                            _, compiled_how = static_compile_kwargs(model)
                        kwargs = dict(cache_implementation="static")
                        rec["compile"] = compiled_how
                    t0 = time.time()
                    # Warm-up of the same shapes (for compile: compiles and captures graphs).
                    measure(model, batch, prompt_len, min(new_tokens, 8 if impl == "hf_eager"
                                                          else new_tokens), **kwargs)
                    rec["warmup_s"] = time.time() - t0
                    rec.update(measure(model, batch, prompt_len, new_tokens, **kwargs))
                except Exception as e:
                    rec["error"] = f"{type(e).__name__}: {e}"
                emit(rec)
            del model
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

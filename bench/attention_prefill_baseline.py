#!/usr/bin/env python3
"""Baselines for bench_attention_prefill: torch scaled_dot_product_attention with the flash
backend and the cuDNN backend on contiguous bf16 [B, H, L, D] tensors, the same shapes and the
same FLOP count (4*H*D*visible pairs), plus a large bf16 matmul as the tensor-core ceiling.
Prints one JSON line per (shape, impl) on stdout.

Chunked case (q 512 over kv 8192, causal aligned to the end): flash uses
torch.nn.attention.bias.causal_lower_right, which torch dispatches to the flash kernel with
is_causal=True (flash-attn's causal mask is bottom-right aligned); cuDNN gets an explicit
boolean mask and, if torch refuses it, the same CausalBias. The 'mask' field says which ran,
and 'max_abs_diff_vs_math' checks each result against the math backend with an explicit mask.
Timing: CUDA events, warm-up, L2 flushed (a 2x-L2 buffer zeroed) before every timed run,
median of `--iters` runs.
"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [  # name, B, H, Lq, Lk, D, causal  (same list as bench_attention_prefill.cu)
    ("b1_h32_l4096_d128_causal", 1, 32, 4096, 4096, 128, True),
    ("b4_h32_l4096_d128_causal", 4, 32, 4096, 4096, 128, True),
    ("b1_h32_l16384_d128_causal", 1, 32, 16384, 16384, 128, True),
    ("b16_h16_l1024_d64_causal", 16, 16, 1024, 1024, 64, True),
    ("b1_h8_l8192_d128_noncausal", 1, 8, 8192, 8192, 128, False),
    ("b4_h32_l4096_d64_causal", 4, 32, 4096, 4096, 64, True),
    ("chunked_b1_h32_q512_kv8192_d128_causal", 1, 32, 512, 8192, 128, True),
    ("b1_h8_l8192_d256_causal", 1, 8, 8192, 8192, 256, True),
    ("b4_h4_l4096_d256_causal", 4, 4, 4096, 4096, 256, True),
    ("chunked_b1_h8_q512_kv8192_d256_causal", 1, 8, 512, 8192, 256, True),
]

_flush_buf = None


def flush_l2():
    global _flush_buf
    if _flush_buf is None:
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
        _flush_buf = torch.empty(max(2 * l2, 64 << 20), dtype=torch.uint8, device="cuda")
    _flush_buf.zero_()


def time_us(fn, iters, warmup=5):
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        flush_l2()
        starts[i].record()
        fn()
        stops[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, stops))
    pct = lambda p: times[min(len(times) - 1, round(p * (len(times) - 1)))]
    return statistics.median(times), pct(0.1), pct(0.9)


def visible_pairs(b, lq, lk, causal):
    if not causal:
        return b * lq * lk
    off = lk - lq
    return b * sum(min(lk, max(0, i + off + 1)) for i in range(lq))


def bottom_right_mask(lq, lk, device):
    i = torch.arange(lq, device=device)[:, None]
    j = torch.arange(lk, device=device)[None, :]
    return j <= i + (lk - lq)  # True = attend


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--filter", default="")
    args = ap.parse_args()
    gpu = torch.cuda.get_device_name()
    torch.manual_seed(0)
    out = sys.stdout

    # Tensor-core ceiling: a large bf16 matmul in the same run.
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    p50, p10, p90 = time_us(lambda: torch.matmul(a, b), args.iters)
    print(json.dumps({"bench": "bf16_matmul", "impl": "torch_matmul", "m": n, "n": n, "k": n,
                      "time_us_p50": p50, "time_us_p10": p10, "time_us_p90": p90,
                      "tflops": 2 * n ** 3 / (p50 * 1e-6) / 1e12, "gpu": gpu,
                      "torch": torch.__version__}), file=out, flush=True)
    del a, b

    for name, B, H, Lq, Lk, D, causal in SHAPES:
        if args.filter and args.filter not in name:
            continue
        q = torch.randn(B, H, Lq, D, device="cuda", dtype=torch.bfloat16) + 0.25
        k = torch.randn(B, H, Lk, D, device="cuda", dtype=torch.bfloat16) + 0.5
        v = torch.randn(B, H, Lk, D, device="cuda", dtype=torch.bfloat16) + 0.5
        flop = 4.0 * H * D * visible_pairs(B, Lq, Lk, causal)
        chunked = Lq != Lk
        ref = None
        if chunked:  # math backend with an explicit mask, to check the baselines' masking
            with sdpa_kernel(SDPBackend.MATH):
                ref = F.scaled_dot_product_attention(q[:, :4].float(), k[:, :4].float(), v[:, :4].float(),
                                                     attn_mask=bottom_right_mask(Lq, Lk, q.device))
        for impl, backend in (("torch_flash", SDPBackend.FLASH_ATTENTION),
                              ("torch_cudnn", SDPBackend.CUDNN_ATTENTION)):
            rec = {"bench": "attention_prefill", "impl": impl, "shape": name, "dtype": "bf16",
                   "batch": B, "num_heads": H, "q_len": Lq, "kv_len": Lk, "head_dim": D,
                   "causal": causal, "gpu": gpu, "torch": torch.__version__, "flop": flop}
            candidates = []
            if not chunked:
                candidates.append(("is_causal" if causal else "none",
                                   lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)))
            else:
                from torch.nn.attention.bias import causal_lower_right
                bias = causal_lower_right(Lq, Lk)
                mask = bottom_right_mask(Lq, Lk, q.device)
                with_bias = ("causal_lower_right",
                             lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=bias))
                with_mask = ("explicit_bool_mask",
                             lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
                # flash takes no explicit mask; for cuDNN the explicit mask goes first because
                # torch may route a CausalBias to the flash kernel whatever backend is selected.
                candidates += [with_bias, with_mask] if impl == "torch_flash" else [with_mask, with_bias]
            done = False
            errors = []
            for mask_name, fn in candidates:
                try:
                    with sdpa_kernel(backend):
                        o = fn()
                        torch.cuda.synchronize()
                        if ref is not None:
                            rec["max_abs_diff_vs_math"] = (o[:, :4].float() - ref).abs().max().item()
                        p50, p10, p90 = time_us(fn, args.iters)
                    rec.update({"mask": mask_name, "time_us_p50": p50, "time_us_p10": p10,
                                "time_us_p90": p90, "tflops": flop / (p50 * 1e-6) / 1e12})
                    done = True
                    break
                except Exception as e:  # backend refused this form: try the next one
                    errors.append(f"{mask_name}: {type(e).__name__}: {str(e)[:200]}")
            if not done:
                rec["error"] = " | ".join(errors)
            elif errors:
                rec["fallback_errors"] = " | ".join(errors)
            print(json.dumps(rec), file=out, flush=True)
        del q, k, v


if __name__ == "__main__":
    main()

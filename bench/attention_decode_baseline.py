#!/usr/bin/env python3
"""PyTorch baseline for the decode-attention benchmark (bench/bench_attention_decode.cu).

One query token per sequence attends over a contiguous KV tensor [B, hkv, L, d] (bf16) with
torch.nn.functional.scaled_dot_product_attention, once per SDPA backend that accepts the shape
(flash, cuDNN, efficient, math; GQA through enable_gqa=True, else repeat_interleave done outside
the timed region). Timing: CUDA events around a CUDA-graph replay when capture works (eager
otherwise), median of >= 50 after warm-up. L2 as in the C++ bench: by default every timed run reads
the next of N copies of K/V (N * copy >= 3 x L2); --l2 flush zeroes a 2 x L2 buffer before each
run instead; --hold queues the timed runs behind a spin kernel (torch.cuda._sleep) so no timed
interval includes host launch gaps. Bytes counted as
in the C++ bench: K + V the batch needs + Q + output. Prints JSON lines, one per backend plus a
"torch_best" record per shape.
"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = [
    ("torch_flash", SDPBackend.FLASH_ATTENTION),
    ("torch_cudnn", SDPBackend.CUDNN_ATTENTION),
    ("torch_efficient", SDPBackend.EFFICIENT_ATTENTION),
    ("torch_math", SDPBackend.MATH),
]
MAX_KV_BYTES = 17.5e9          # same cap as the C++ bench
MAX_REPEATED_KV_BYTES = 8e9    # repeat_interleave fallback only while the copy fits comfortably
MAX_MATH_KV_BYTES = 1e9        # the math backend materialises scores and repeats K/V


def time_fn(fns, flush_buf, iters, warmup=5, hold=False):
    """fns: one callable per KV copy, called round-robin; flush_buf: zeroed before each run or None;
    hold: queue every timed run behind a spin kernel (as the C++ bench's --hold)."""
    for i in range(warmup):
        fns[i % len(fns)]()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    if hold:  # ~10 ms at 2 GHz: covers 50 Python-side enqueues of up to ~200 us (eager backends)
        torch.cuda._sleep(20_000_000)
    for i in range(iters):
        if flush_buf is not None:
            flush_buf.zero_()
        starts[i].record()
        fns[i % len(fns)]()
        stops[i].record()
    torch.cuda.synchronize()
    us = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, stops))
    return statistics.median(us), us[len(us) // 10], us[(9 * len(us)) // 10]


def make_runner(q, k, v, gqa, backend):
    """Returns (callable, used_graph) or raises if the backend rejects the shape."""
    def call():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa) if gqa else \
                F.scaled_dot_product_attention(q, k, v)
    call()  # raises when the backend does not accept the inputs
    torch.cuda.synchronize()
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                call()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            call()
        torch.cuda.synchronize()
        return g.replay, True
    except Exception:  # capture unsupported for this backend: time eager calls
        torch.cuda.synchronize()
        return call, False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--l2", choices=["rotate", "flush"], default="rotate")
    ap.add_argument("--hold", action="store_true", help="queue the timed runs behind a spin kernel")
    ap.add_argument("--head-dim", type=int, default=0, help="only this head_dim's families (0: all)")
    args = ap.parse_args()
    hold = args.hold and args.l2 == "rotate" and hasattr(torch.cuda, "_sleep")  # as the C++ bench
    iters = max(50, args.iters)
    command = " ".join(["python3"] + sys.argv)
    dev = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(dev)
    gpu = props.name
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    flush_buf = torch.empty(max(2 * l2, 64 << 20), dtype=torch.uint8, device="cuda") \
        if args.l2 == "flush" else None
    print(f"torch {torch.__version__}, cudnn {torch.backends.cudnn.version()}, {gpu}", file=sys.stderr)

    batches = [1, 32] if args.quick else [1, 8, 32, 128]
    lens = [2048] if args.quick else [512, 2048, 8192, 32768]
    # as the C++ bench: d128 GQA, d64, d128 MHA, Gemma 3 1B (4 : 1, d256), Gemma 2 2B (8 : 4, d256)
    families = [(32, 8, 128), (32, 8, 64), (32, 32, 128), (4, 1, 256), (8, 4, 256)]
    families = [f for f in families if args.head_dim in (0, f[2])]
    for hq, hkv, d in families:
        for B in batches:
            for L in lens:
                kv_bytes = 4.0 * B * L * hkv * d
                if kv_bytes > MAX_KV_BYTES:
                    continue
                torch.manual_seed(0)
                copies = 1 if args.l2 == "flush" else max(1, min(128, -(-3 * l2 // int(kv_bytes))))
                q = torch.randn(B, hq, 1, d, device="cuda", dtype=torch.bfloat16)
                ks = [torch.randn(B, hkv, L, d, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
                vs = [torch.randn(B, hkv, L, d, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
                nbytes = kv_bytes + 2.0 * B * hq * d * 2
                best = None
                for name, backend in BACKENDS:
                    if backend == SDPBackend.MATH and kv_bytes > MAX_MATH_KV_BYTES:
                        continue
                    variants = [("enable_gqa", hq != hkv, False)]
                    if hq != hkv and copies * kv_bytes * hq / hkv <= MAX_REPEATED_KV_BYTES:
                        variants.append(("repeat_interleave", False, True))
                    for gqa_mode, gqa, repeat in variants:
                        kk = vv = None
                        try:
                            if repeat:
                                kk = [k.repeat_interleave(hq // hkv, dim=1) for k in ks]
                                vv = [v.repeat_interleave(hq // hkv, dim=1) for v in vs]
                            else:
                                kk, vv = ks, vs
                            runners = [make_runner(q, kc, vc, gqa, backend) for kc, vc in zip(kk, vv)]
                            graphed = all(r[1] for r in runners)
                            p50, p10, p90 = time_fn([r[0] for r in runners], flush_buf, iters, hold=hold)
                        except Exception as e:  # backend rejects the shape / out of memory
                            print(f"{name} {gqa_mode} B={B} L={L} hq={hq} hkv={hkv} d={d}: "
                                  f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}",
                                  file=sys.stderr)
                            continue
                        finally:
                            kk = vv = runners = None
                            torch.cuda.empty_cache()
                        rec = dict(bench="attention_decode", impl=name, gqa_mode=gqa_mode, graph=graphed,
                                   l2=("memset_flush" if args.l2 == "flush" else f"rotate_x{copies}"),
                                   launch=("held" if hold else "stream"),
                                   B=B, kv_len=L, hq=hq, hkv=hkv, d=d, dtype="bf16", num_splits=None,
                                   time_us_p50=p50, time_us_p10=p10, time_us_p90=p90, iters=iters,
                                   bytes=nbytes, gb_s=nbytes / (p50 * 1e-6) / 1e9, gpu=gpu,
                                   torch=torch.__version__, command=command)
                        print(json.dumps(rec), flush=True)
                        print(f"{name:16s} {gqa_mode:17s} B={B:<4d} L={L:<6d} hq={hq} hkv={hkv} d={d} "
                              f"{p50:9.2f} us {rec['gb_s']:8.1f} GB/s graph={graphed}", file=sys.stderr)
                        if best is None or p50 < best["time_us_p50"]:
                            best = rec
                if best is not None:
                    rec = dict(best, impl="torch_best", best_of=best["impl"] + "/" + best["gqa_mode"])
                    print(json.dumps(rec), flush=True)
                del q, ks, vs
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

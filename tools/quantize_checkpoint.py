#!/usr/bin/env python3
"""Writes a quantized copy of a Hugging Face Llama-family folder (config.json and f32/f16/bf16
safetensors: one model.safetensors, or shards named by model.safetensors.index.json) in one of
the checkpoint formats flashserve loads (docs/QUANTIZATION.md): GPTQ, AWQ gemm,
compressed-tensors pack-quantized int4 or FP8, and block-wise FP8. Each layout is written from
the format's published description.

Weights are quantized by round-to-nearest per group (no calibration data, no GPTQ error
feedback): the files have each format's layout and metadata, not a calibrated model's quality.
Act-order (--act-order) orders the columns by falling norm, a stand-in for GPTQ's Hessian order,
and writes g_idx; projections that read the same input (q/k/v, gate/up) share one order, as
they share GPTQ's Hessian. Each layer's projections are quantized, mixture-of-experts experts
included; routers, norms, embeddings and lm_head never are (tools/quantize/modules.py).

The output folder is served as it is: the weights (sharded past --max-shard-size, with the
index), config.json with its quantization_config, and the source's tokenizer, chat-template and
generation files. Projections are quantized on every core (--jobs); the bytes written do not
depend on the number of processes.

Needs only the Python standard library and numpy.

  quantize_checkpoint.py --source DIR --format gptq --group-size 32 --act-order --out OUT
  quantize_checkpoint.py --tiny 7 --format awq --group-size 32 --out OUT --expected
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from quantize import formats, modules, output, parallel, safetensors, source  # noqa: E402
from quantize.errors import QuantizeError  # noqa: E402
from quantize.tiny import tiny_model  # noqa: E402


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--source", help="HF folder: config.json + model.safetensors or shards")
    src.add_argument("--tiny", type=int, metavar="SEED", help="a tiny random model instead")
    ap.add_argument("--format", required=True, choices=formats.FORMATS)
    ap.add_argument("--group-size", type=int, default=128, choices=[32, 64, 128, -1])
    ap.add_argument("--asym", dest="sym", action="store_false", help="stored zero points")
    ap.add_argument("--act-order", action="store_true", help="GPTQ desc_act / c-t actorder")
    ap.add_argument("--block-size", type=int, default=128, help="block-wise FP8 block edge")
    ap.add_argument("--ignore", action="append", default=[],
                    help="projection left unquantized (\"mlp.down_proj\" or a full module name)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-shard-size", default="5GB",
                    help="largest safetensors file (5GB = 5*10^9 bytes, 2GiB = 2^31); the "
                         "weights are split into model-0000i-of-0000n.safetensors past it")
    ap.add_argument("--jobs", type=int, default=parallel.cores(),
                    help="processes quantizing at once (default: every core)")
    ap.add_argument("--expected", action="store_true",
                    help="also write expected.safetensors: the quantized values, unpacked")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")
    if args.block_size < 1:
        ap.error("--block-size must be at least 1")
    return args


def quantize(args):
    max_bytes = output.parse_size(args.max_shard_size)
    if args.source:
        config = source.read_config(args.source)
        refs = source.read_tensors(args.source)
    else:
        config, refs = tiny_model(args.tiny)
    fused = modules.fused_experts(refs)
    if fused:
        raise QuantizeError(f"{fused[0]} {list(refs[fused[0]].shape)} holds every expert of its "
                            f"layer in one tensor ({len(fused)} such tensors); quantized formats "
                            f"store one projection per expert (mlp.experts.E.gate_proj.weight): "
                            f"save the checkpoint with per-expert tensors first")
    quantized = modules.projections(refs, args.ignore)
    if not quantized:
        raise QuantizeError(f"{args.source or 'tiny model'}: no projection to quantize "
                            f"(layers.N.self_attn.q_proj.weight, ...; see --ignore)")
    routers = modules.routers(refs)
    opts = {"group_size": args.group_size, "sym": args.sym, "act_order": args.act_order,
            "block_size": args.block_size, "expected": args.expected}
    for module, ref in quantized.items():  # before anything is written
        formats.check_shape(args.format, module, ref.shape, opts)
    units = modules.work_units(refs, quantized)
    tasks = [(args.format, opts, [(m, quantized[m]) for m in members])
             for kind, members in units if kind == "quantize"]

    output.prepare(args.out, args.source)
    writer = output.ShardWriter(args.out, max_bytes)
    expected = {}
    results = parallel.run(tasks, args.jobs)
    start, done = time.monotonic(), 0
    try:
        for kind, what in units:
            if kind == "copy":
                ref = refs[what]
                writer.add(what, ref.dtype, ref.load())
                continue
            out, exp = next(results)
            for name in sorted(out):
                writer.add(name, *out[name])
            if args.expected:
                expected.update(exp)
            done += 1
            if not args.quiet and (done % 64 == 0 or done == len(tasks)):
                print(f"quantized {done}/{len(tasks)} input groups, "
                      f"{time.monotonic() - start:.1f} s", file=sys.stderr)
    except QuantizeError:
        writer.abandon()
        raise
    files = writer.finish()

    config["quantization_config"] = formats.quantization_config(
        args.format, opts, args.ignore, modules.block_modules(quantized), routers)
    output.write_config(args.out, config)
    side = output.copy_side_files(args.source, args.out) if args.source else []
    if args.expected:
        safetensors.write(os.path.join(args.out, "expected.safetensors"), expected)
    if not args.quiet:
        print(f"wrote {args.out}: {len(files)} safetensors file(s), {len(quantized)} projections "
              f"quantized, {len(routers)} routers kept; copied {', '.join(side) or 'no other files'}",
              file=sys.stderr)


def main(argv=None):
    args = parse_args(argv)
    try:
        quantize(args)
    except QuantizeError as e:
        print(f"quantize_checkpoint.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

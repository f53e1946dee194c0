#!/usr/bin/env python3
"""Writes a quantized copy of a Hugging Face Llama-family folder (config.json + one
model.safetensors in f32/f16/bf16) in one of the checkpoint formats flashserve loads
(docs/QUANTIZATION.md): GPTQ, AWQ gemm, compressed-tensors pack-quantized int4 or FP8, and
block-wise FP8. Each layout is written from the format's published description.

Weights are quantized by round-to-nearest per group (no calibration data, no GPTQ error
feedback): the files have each format's layout and metadata, not a calibrated model's quality.
Act-order (--act-order) orders the columns by falling norm, a stand-in for GPTQ's Hessian order,
and writes g_idx; projections that read the same input (q/k/v, gate/up) share one order, as
they share GPTQ's Hessian. Only the seven projections of each layer are quantized, and a mixture
of experts' expert and shared-expert projections (never its router or the shared expert's gate);
lm_head never is.

Needs only the Python standard library and numpy (runs where torch is installed too).

  quantize_checkpoint.py --source DIR --format gptq --group-size 32 --act-order --out OUT
  quantize_checkpoint.py --tiny 7 --format awq --group-size 32 --out OUT --expected
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
# A mixture of experts' projections: "mlp.experts.3.up_proj", "mlp.shared_expert.up_proj"
# (Qwen2-MoE, Qwen3-MoE), "block_sparse_moe.experts.3.w3" (Mixtral: w1 gate, w3 up, w2 down).
EXPERT_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")
MIXTRAL_PROJECTIONS = ("w1", "w2", "w3")
AWQ_NIBBLE = (0, 4, 1, 5, 2, 6, 3, 7)  # output column 8c + j sits in nibble AWQ_NIBBLE[j]

# ---- safetensors -------------------------------------------------------------------------------

_NP = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "U8": np.uint8,
       "I8": np.int8, "F8_E4M3": np.uint8, "BF16": np.uint16}


def read_safetensors(path):
    """{name: (dtype string, numpy array of the stored bits or values)}"""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        arr = np.frombuffer(data[8 + n + b:8 + n + e], dtype=_NP[info["dtype"]])
        out[name] = (info["dtype"], arr.reshape(info["shape"]))
    return out


def write_safetensors(path, tensors):
    """tensors: {name: (dtype string, numpy array)}; laid out by falling element size (then
    name), so every tensor is aligned to its element size with no gaps between them."""
    header, blobs, offset = {}, [], 0
    order = sorted(tensors, key=lambda n: (-np.dtype(_NP[tensors[n][0]]).itemsize, n))
    for name in order:
        dtype, arr = tensors[name]
        raw = np.ascontiguousarray(arr.astype(_NP[dtype], copy=False)).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((-len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def to_f32(dtype, arr):
    if dtype == "BF16":
        return (arr.astype(np.uint32) << 16).view(np.float32)
    return arr.astype(np.float32)


def bf16_bits(x):
    """f32 -> bf16 bits, rounded to nearest even."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


# ---- FP8 E4M3 ----------------------------------------------------------------------------------

def _e4m3_table():
    c = np.arange(127)  # 0x00..0x7E: the non-negative finite codes, increasing in value
    e, m = c >> 3, c & 7
    return np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))


E4M3 = _e4m3_table()


def e4m3_encode(x):
    """Nearest E4M3 code (ties to the even code), saturating at +-448."""
    a = np.minimum(np.abs(x.astype(np.float64)), 448.0)
    hi = np.clip(np.searchsorted(E4M3, a), 1, 126)
    lo = hi - 1
    dl, dh = a - E4M3[lo], E4M3[hi] - a
    code = np.where(dl < dh, lo, np.where(dh < dl, hi, np.where(lo % 2 == 0, lo, hi)))
    return (code | np.where(x < 0, 0x80, 0)).astype(np.uint8)


def e4m3_decode(c):
    v = E4M3[c & 0x7F]
    return np.where(c & 0x80, -v, v).astype(np.float32)


# ---- int4 --------------------------------------------------------------------------------------

def quantize_int4(w, g_idx, groups, sym, scale_dtype, min_zero=0):
    """Round-to-nearest per (row, group). Returns codes [out, in] uint8 (0..15, input order),
    scales [out, groups] f32 (values exactly representable in scale_dtype), zeros [out, groups].
    sym: scale = amax / 7.5, zero 8; else scale = (max - min) / 15 over a range holding 0,
    zero = round(-min / scale) (at least min_zero: GPTQ's classic files cannot store 0)."""
    out, _ = w.shape
    codes = np.zeros(w.shape, np.uint8)
    scales = np.zeros((out, groups), np.float32)
    zeros = np.zeros((out, groups), np.uint8)
    for g in range(groups):
        cols = np.where(g_idx == g)[0]
        wg = w[:, cols].astype(np.float64)
        lo, hi = np.minimum(wg.min(1), 0), np.maximum(wg.max(1), 0)
        if sym:
            s = np.maximum(np.abs(lo), hi) / 7.5
            z = np.full(out, 8.0)
        else:
            s = (hi - lo) / 15.0
        s = np.where(s > 0, s, 1.0)
        # the scale as stored (bf16 or f16), so the codes are computed with the stored value
        s = to_f32("BF16", bf16_bits(s)) if scale_dtype == "BF16" else s.astype(np.float16)
        s = s.astype(np.float64)
        if not sym:
            z = np.clip(np.round(-lo / s), min_zero, 15)
        q = np.clip(np.round(wg / s[:, None]) + z[:, None], 0, 15)
        codes[:, cols] = q.astype(np.uint8)
        scales[:, g] = s
        zeros[:, g] = z.astype(np.uint8)
    return codes, scales, zeros


def pack_nibbles(codes, axis, positions=tuple(range(8))):
    """Packs eight 4-bit values along `axis` into int32: value j of each eight in nibble
    positions[j] (bits 4 * positions[j])."""
    c = np.moveaxis(codes.astype(np.uint32), axis, -1)
    c = c.reshape(c.shape[:-1] + (c.shape[-1] // 8, 8))
    shifts = np.array([4 * p for p in positions], np.uint32)
    packed = np.bitwise_or.reduce(c << shifts, axis=-1).astype(np.uint32).view(np.int32)
    return np.moveaxis(packed, -1, axis)


def scale_store(dtype, s):
    return (dtype, bf16_bits(s) if dtype == "BF16" else s.astype(np.float16))


def group_index(w, group_size, col_norm):
    """g_idx of weight w [out, in]: columns in order (col_norm None), or by falling col_norm."""
    in_features = w.shape[1]
    gs = in_features if group_size == -1 else group_size
    perm = np.arange(in_features)
    if col_norm is not None:  # falling column norm, stable
        perm = np.argsort(-col_norm, kind="stable")
    g_idx = np.empty(in_features, np.int32)
    g_idx[perm] = np.arange(in_features) // gs
    return g_idx, in_features // gs


def is_projection(module):
    if any(module.endswith("." + p) for p in PROJECTIONS):
        return True
    if ".mlp.experts." in module or ".mlp.shared_expert." in module:
        return any(module.endswith("." + p) for p in EXPERT_PROJECTIONS)
    return ".block_sparse_moe.experts." in module and \
        any(module.endswith("." + p) for p in MIXTRAL_PROJECTIONS)


def input_group(module):
    """The name shared by the projections that read `module`'s input (q/k/v, gate/up)."""
    for members, group in ((("q_proj", "k_proj", "v_proj"), "qkv"), (("gate_proj", "up_proj"), "gate_up"),
                           (("w1", "w3"), "w1_w3")):
        for m in members:
            if module.endswith("." + m):
                return module[:-len(m)] + group
    return module


def quantize_module(fmt, module, w, args, out, expected, col_norm=None):
    """Adds the quantized tensors of `module` (weight w [out, in], f32) to `out`; col_norm [in]:
    the act-order column norms of its input group."""
    rows, cols = w.shape
    if fmt in ("block-fp8", "ct-fp8"):
        if fmt == "ct-fp8":  # one scale per output channel
            s = np.maximum(np.abs(w).max(1), 1e-12).astype(np.float32) / 448.0
            out[module + ".weight"] = ("F8_E4M3", e4m3_encode(w / s[:, None]))
            out[module + ".weight_scale"] = ("F32", s[:, None])
            return
        b = args.block_size
        br, bc = -(-rows // b), -(-cols // b)
        s = np.zeros((br, bc), np.float32)
        codes = np.zeros(w.shape, np.uint8)
        for i in range(br):
            for j in range(bc):
                blk = w[i * b:(i + 1) * b, j * b:(j + 1) * b]
                s[i, j] = max(float(np.abs(blk).max()), 1e-12) / 448.0
                codes[i * b:(i + 1) * b, j * b:(j + 1) * b] = e4m3_encode(blk / s[i, j])
        out[module + ".weight"] = ("F8_E4M3", codes)
        out[module + ".weight_scale_inv"] = ("F32", s)
        if expected is not None:
            full = np.repeat(np.repeat(s, b, 0), b, 1)[:rows, :cols]
            expected[module + ".dequantized"] = ("F32", e4m3_decode(codes) * full)
        return
    act_order = args.act_order and fmt != "awq"
    g_idx, groups = group_index(w, args.group_size, col_norm if act_order else None)
    sym = args.sym and fmt != "awq"
    if fmt == "gptq":
        codes, scales, zeros = quantize_int4(w, g_idx, groups, sym, "F16", min_zero=1)
        out[module + ".qweight"] = ("I32", pack_nibbles(codes.T, 0))
        out[module + ".qzeros"] = ("I32", pack_nibbles(((zeros.astype(np.int32) - 1) & 0xF).T, 1))
        out[module + ".scales"] = scale_store("F16", scales.T)
        out[module + ".g_idx"] = ("I32", g_idx)
    elif fmt == "awq":
        codes, scales, zeros = quantize_int4(w, g_idx, groups, False, "F16")
        out[module + ".qweight"] = ("I32", pack_nibbles(codes.T, 1, AWQ_NIBBLE))
        out[module + ".qzeros"] = ("I32", pack_nibbles(zeros.T, 1, AWQ_NIBBLE))
        out[module + ".scales"] = scale_store("F16", scales.T)
    else:  # compressed-tensors pack-quantized: codes are the signed values + 8
        codes, scales, zeros = quantize_int4(w, g_idx, groups, sym, "BF16")
        out[module + ".weight_packed"] = ("I32", pack_nibbles(codes, 1))
        out[module + ".weight_scale"] = scale_store("BF16", scales)
        out[module + ".weight_shape"] = ("I64", np.array([rows, cols], np.int64))
        if not sym:
            padded = np.zeros((-(-rows // 8) * 8, groups), np.uint8)
            padded[:rows] = zeros
            out[module + ".weight_zero_point"] = ("I32", pack_nibbles(padded, 0))
        if args.act_order:
            out[module + ".weight_g_idx"] = ("I32", g_idx)
    if expected is not None:
        expected[module + ".codes"] = ("U8", codes)
        expected[module + ".zeros"] = ("U8", zeros)
        expected[module + ".scales"] = ("F32", scales)
        expected[module + ".g_idx"] = ("I32", g_idx)


def is_ignored(module, ignore):
    return any(module == e or module.endswith("." + e) for e in ignore)


def quantization_config(args, ignore):
    gs = args.group_size
    if args.format == "gptq":
        q = {"quant_method": "gptq", "bits": 4, "group_size": gs, "desc_act": args.act_order,
             "sym": args.sym, "checkpoint_format": "gptq"}
        if ignore:  # the projections of each block that are quantized
            q["modules_in_block_to_quantize"] = [[p for p in PROJECTIONS if not is_ignored(p, ignore)]]
        return q
    if args.format == "awq":
        return {"quant_method": "awq", "bits": 4, "group_size": gs, "zero_point": True,
                "version": "gemm", "modules_to_not_convert": ignore or None}
    if args.format == "block-fp8":
        return {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                "weight_block_size": [args.block_size, args.block_size],
                "modules_to_not_convert": ["lm_head"] + ignore}
    if args.format == "ct-fp8":
        weights = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel",
                   "dynamic": False}
        acts = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "token",
                "dynamic": True}
        fmt = "float-quantized"
    else:
        weights = {"num_bits": 4, "type": "int", "symmetric": args.sym, "dynamic": False,
                   "strategy": "channel" if gs == -1 else "group",
                   "group_size": None if gs == -1 else gs,
                   "actorder": "group" if args.act_order else None}
        acts, fmt = None, "pack-quantized"
    return {"quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": acts, "output_activations": None,
                                          "format": fmt}},
            "ignore": ["lm_head"] + ["re:.*" + e.replace(".", r"\.") + "$" for e in ignore]}


def tiny_model(seed):
    """A one-layer Llama (hidden 32, intermediate 64, 2 heads of 16, one KV head, vocab 16) with
    weights not centred on zero, stored as f16."""
    rng = np.random.default_rng(seed)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
              "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
              "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
              "vocab_size": 16, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
              "rope_theta": 10000.0, "tie_word_embeddings": False, "bos_token_id": 1,
              "eos_token_id": 2}
    shapes = {"model.embed_tokens.weight": (16, 32), "lm_head.weight": (16, 32),
              "model.norm.weight": (32,), "model.layers.0.input_layernorm.weight": (32,),
              "model.layers.0.post_attention_layernorm.weight": (32,),
              "model.layers.0.self_attn.q_proj.weight": (32, 32),
              "model.layers.0.self_attn.k_proj.weight": (16, 32),
              "model.layers.0.self_attn.v_proj.weight": (16, 32),
              "model.layers.0.self_attn.o_proj.weight": (32, 32),
              "model.layers.0.mlp.gate_proj.weight": (64, 32),
              "model.layers.0.mlp.up_proj.weight": (64, 32),
              "model.layers.0.mlp.down_proj.weight": (32, 64)}
    tensors = {}
    for name, shape in shapes.items():
        if len(shape) == 1:
            v = 1 + 0.1 * rng.standard_normal(shape)
        else:  # per-column offsets, so groups have different ranges and zero points
            v = 0.2 * rng.standard_normal(shape) + rng.uniform(-0.15, 0.25, shape[1])
        tensors[name] = ("F16", v.astype(np.float16))
    return config, tensors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--source", help="HF folder: config.json + model.safetensors")
    src.add_argument("--tiny", type=int, metavar="SEED", help="a tiny random model instead")
    ap.add_argument("--format", required=True,
                    choices=["gptq", "awq", "ct", "ct-fp8", "block-fp8"])
    ap.add_argument("--group-size", type=int, default=128, choices=[32, 64, 128, -1])
    ap.add_argument("--asym", dest="sym", action="store_false", help="stored zero points")
    ap.add_argument("--act-order", action="store_true", help="GPTQ desc_act / c-t actorder")
    ap.add_argument("--block-size", type=int, default=128, help="block-wise FP8 block edge")
    ap.add_argument("--ignore", action="append", default=[],
                    help="projection left unquantized (\"mlp.down_proj\" or a full module name)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--expected", action="store_true",
                    help="also write expected.safetensors: the quantized values, unpacked")
    args = ap.parse_args()
    if args.source:
        with open(os.path.join(args.source, "config.json")) as f:
            config = json.load(f)
        tensors = read_safetensors(os.path.join(args.source, "model.safetensors"))
    else:
        config, tensors = tiny_model(args.tiny)
    out, expected = {}, ({} if args.expected else None)
    quantized = {name[:-len(".weight")]: (dtype, arr) for name, (dtype, arr) in tensors.items()
                 if is_projection(name[:-len(".weight")]) and not is_ignored(name[:-len(".weight")], args.ignore)}
    # Column norms over each input group's rows (sum of squares, then the root).
    sq = {}
    for module, (dtype, arr) in quantized.items():
        w = to_f32(dtype, arr)
        sq[input_group(module)] = sq.get(input_group(module), 0) + (w * w).sum(axis=0)
    for name, (dtype, arr) in tensors.items():
        module = name[:-len(".weight")]
        if module not in quantized:
            out[name] = (dtype, arr)
            continue
        quantize_module(args.format, module, to_f32(dtype, arr), args, out, expected,
                        np.sqrt(sq[input_group(module)]))
    config["quantization_config"] = quantization_config(args, args.ignore)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
        f.write("\n")
    write_safetensors(os.path.join(args.out, "model.safetensors"), out)
    if expected is not None:
        write_safetensors(os.path.join(args.out, "expected.safetensors"), expected)
    return 0


if __name__ == "__main__":
    sys.exit(main())

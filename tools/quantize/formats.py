"""The checkpoint formats flashserve loads (docs/QUANTIZATION.md), each written from its
published description: a projection's quantized tensors, and config.json's quantization_config.

  gptq       qweight [in / 8, out] (8 codes along in), qzeros [groups, out / 8] (zero - 1),
             scales [groups, out] f16, g_idx [in]
  awq        qweight [in, out / 8] and qzeros [groups, out / 8] in AWQ's nibble order,
             scales [groups, out] f16
  ct         compressed-tensors pack-quantized: weight_packed [out, in / 8] (codes = signed
             value + 8), weight_scale [out, groups] bf16, weight_shape, weight_zero_point
             [ceil(out / 8), groups] (asymmetric), weight_g_idx (act-order)
  ct-fp8     compressed-tensors float-quantized: weight [out, in] E4M3, weight_scale [out, 1]
  block-fp8  weight [out, in] E4M3, weight_scale_inv [ceil(out / b), ceil(in / b)] f32
"""
import numpy as np

from . import fp8
from .errors import QuantizeError
from .int4 import group_index, pack_nibbles, quantize_int4
from .numbers import bf16_bits, e4m3_decode

FORMATS = ("gptq", "awq", "ct", "ct-fp8", "block-fp8")
AWQ_NIBBLE = (0, 4, 1, 5, 2, 6, 3, 7)  # output column 8c + j sits in nibble AWQ_NIBBLE[j]


def _scale_store(dtype, s):
    return (dtype, bf16_bits(s) if dtype == "BF16" else s.astype(np.float16))


def check_shape(fmt, module, shape, opts):
    """Raises QuantizeError where the format cannot pack a [out, in] weight."""
    rows, cols = shape
    if fmt in ("ct-fp8", "block-fp8"):
        return
    gs = cols if opts["group_size"] == -1 else opts["group_size"]
    why = None
    if cols % 8 or cols % gs:
        why = f"{cols} input columns are not a multiple of 8 and of the group size {gs}"
    elif fmt in ("gptq", "awq") and rows % 8:
        why = f"{rows} output rows are not a multiple of 8 ({fmt} packs 8 outputs to a word)"
    if why:
        raise QuantizeError(f"{module} [{rows}, {cols}]: {why}; leave it unquantized with "
                            f"--ignore {module.rsplit('.', 1)[-1]} or a longer name")


def quantize_module(fmt, module, w, opts, col_norm=None):
    """The quantized tensors of `module`: weight w [out, in] f32; col_norm [in]: the act-order
    column norms of its input group. Returns ({name: (dtype, array)} for the checkpoint,
    {name: (dtype, array)} of the unpacked values for tests' expected.safetensors, empty unless
    opts["expected"])."""
    rows, cols = w.shape
    out, expected = {}, {}
    if fmt == "ct-fp8":  # one scale per output channel
        codes, s = fp8.quantize_channel(w)
        out[module + ".weight"] = ("F8_E4M3", codes)
        out[module + ".weight_scale"] = ("F32", s)
        return out, expected
    if fmt == "block-fp8":
        b = opts["block_size"]
        codes, s = fp8.quantize_blocks(w, b)
        out[module + ".weight"] = ("F8_E4M3", codes)
        out[module + ".weight_scale_inv"] = ("F32", s)
        if opts["expected"]:
            expected[module + ".dequantized"] = ("F32", e4m3_decode(codes) * fp8.block_scales_full(
                s, b, w.shape))
        return out, expected
    act_order = opts["act_order"] and fmt != "awq"
    g_idx, groups = group_index(w, opts["group_size"], col_norm if act_order else None)
    sym = opts["sym"] and fmt != "awq"
    if fmt == "gptq":
        codes, scales, zeros = quantize_int4(w, g_idx, groups, sym, "F16", min_zero=1)
        out[module + ".qweight"] = ("I32", pack_nibbles(codes.T, 0))
        out[module + ".qzeros"] = ("I32", pack_nibbles(((zeros.astype(np.int32) - 1) & 0xF).T, 1))
        out[module + ".scales"] = _scale_store("F16", scales.T)
        out[module + ".g_idx"] = ("I32", g_idx)
    elif fmt == "awq":
        codes, scales, zeros = quantize_int4(w, g_idx, groups, False, "F16")
        out[module + ".qweight"] = ("I32", pack_nibbles(codes.T, 1, AWQ_NIBBLE))
        out[module + ".qzeros"] = ("I32", pack_nibbles(zeros.T, 1, AWQ_NIBBLE))
        out[module + ".scales"] = _scale_store("F16", scales.T)
    else:  # compressed-tensors pack-quantized: codes are the signed values + 8
        codes, scales, zeros = quantize_int4(w, g_idx, groups, sym, "BF16")
        out[module + ".weight_packed"] = ("I32", pack_nibbles(codes, 1))
        out[module + ".weight_scale"] = _scale_store("BF16", scales)
        out[module + ".weight_shape"] = ("I64", np.array([rows, cols], np.int64))
        if not sym:
            padded = np.zeros((-(-rows // 8) * 8, groups), np.uint8)
            padded[:rows] = zeros
            out[module + ".weight_zero_point"] = ("I32", pack_nibbles(padded, 0))
        if opts["act_order"]:
            out[module + ".weight_g_idx"] = ("I32", g_idx)
    if opts["expected"]:
        expected[module + ".codes"] = ("U8", codes)
        expected[module + ".zeros"] = ("U8", zeros)
        expected[module + ".scales"] = ("F32", scales)
        expected[module + ".g_idx"] = ("I32", g_idx)
    return out, expected


def quantization_config(fmt, opts, ignore, block_modules, kept):
    """config.json's quantization_config. ignore: the --ignore entries (suffixes); block_modules:
    the projections quantized in a layer, relative to it (GPTQ's modules_in_block_to_quantize);
    kept: the full names of layers' linear modules left unquantized whatever --ignore says (MoE
    routers), listed as the format's uploads list them."""
    gs = opts["group_size"]
    if fmt == "gptq":
        q = {"quant_method": "gptq", "bits": 4, "group_size": gs, "desc_act": opts["act_order"],
             "sym": opts["sym"], "checkpoint_format": "gptq"}
        if ignore:  # the projections of each block that are quantized
            q["modules_in_block_to_quantize"] = [block_modules]
        return q
    # AWQ and HF FP8 skip any module whose name contains an entry: routers by full name (a
    # bare "gate" would also hit gate_proj).
    if fmt == "awq":
        return {"quant_method": "awq", "bits": 4, "group_size": gs, "zero_point": True,
                "version": "gemm", "modules_to_not_convert": (ignore + kept) or None}
    if fmt == "block-fp8":
        b = opts["block_size"]
        return {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                "weight_block_size": [b, b], "modules_to_not_convert": ["lm_head"] + ignore + kept}
    if fmt == "ct-fp8":
        weights = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel",
                   "dynamic": False}
        acts = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "token",
                "dynamic": True}
        form = "float-quantized"
    else:
        weights = {"num_bits": 4, "type": "int", "symmetric": opts["sym"], "dynamic": False,
                   "strategy": "channel" if gs == -1 else "group",
                   "group_size": None if gs == -1 else gs,
                   "actorder": "group" if opts["act_order"] else None}
        acts, form = None, "pack-quantized"
    patterns = sorted({"re:.*" + k.split(".layers.", 1)[-1].split(".", 1)[-1].replace(".", r"\.")
                       + "$" for k in kept})  # one pattern per kind of router, as llm-compressor
    return {"quant_method": "compressed-tensors", "format": form, "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": acts, "output_activations": None,
                                          "format": form}},
            "ignore": ["lm_head"] + ["re:.*" + e.replace(".", r"\.") + "$" for e in ignore]
            + patterns}

#!/usr/bin/env python3
"""Independent float64 numpy Llama-family forward, the oracle for the C++ CPU backend's tests.

Reads a llama2.c checkpoint (.bin, rotating interleaved RoPE pairs (2i, 2i+1) as llama2.c does,
no row permutation) or an HF folder (config.json + model.safetensors or shards with
model.safetensors.index.json; the safetensors header is parsed here, rotate-half RoPE) of
LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (q/k/v projections with biases),
Qwen3ForCausalLM (RMSNorm over each q and k head before RoPE), Phi3ForCausalLM (fused qkv_proj
and gate_up_proj, partial rotary), GraniteForCausalLM (embedding, residual, attention and logits
multipliers), Olmo2ForCausalLM (norms on the blocks' outputs, q/k norms over the whole
projection), SmolLM3ForCausalLM (layers without RoPE), Gemma2ForCausalLM or Gemma3ForCausalLM
(norms before and after each block scaling by 1 + w, GeGLU with tanh GELU, embeddings times
sqrt(hidden), query_pre_attn_scalar, attention and final logit soft-caps, Gemma 3's per-head q/k
norms and local RoPE base on its sliding layers), and the mixtures of experts Qwen2MoeForCausalLM,
Qwen3MoeForCausalLM and MixtralForCausalLM (moe() below), GptOssForCausalLM (q/k/v and o
biases, a learned sink logit per head in each softmax, MXFP4 experts dequantized here with their
biases, top-k of the router logits then softmax, clamped SwiGLU on interleaved gate/up:
gpt_oss_moe()), the differences as transformers' modelling code writes them; sliding windows (a query sees itself and the window - 1 keys before it) on the
layers transformers' config classes name: layer_types, else Mistral's and Phi3's every layer,
Qwen's from max_window_layers on with use_sliding_window, Gemma 2's even layers, Gemma 3's all but
every sliding_window_pattern-th; the lm_head is the embedding table exactly when config.json says
tie_word_embeddings. RoPE scalings: llama3, linear, dynamic NTK, YaRN and LongRoPE, with YaRN's
and LongRoPE's attention factor on cos and sin of the rotated dims; LongRoPE takes its long
factors when the forward's length exceeds the original context, as transformers does.
No KV cache: every step recomputes the whole sequence, the simplest thing that is right.

  llama_reference.py --model PATH --prompt-ids 1,403,407 --generate 64   # greedy ids, one line
  llama_reference.py --model PATH --prompt-ids 1,403,407 --dump-logits F # f64 [num_tokens, vocab]
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np


# ---- loading ------------------------------------------------------------------------------
def load_llama2c(path):
    raw = open(path, "rb").read()
    dim, hidden, layers, heads, kv_heads, vocab, seq_len = struct.unpack("<7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    f = np.frombuffer(raw, dtype="<f4", offset=28).astype(np.float64)
    hd = dim // heads
    kv_dim = kv_heads * hd
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        out = f[pos:pos + n].reshape(shape)
        pos += n
        return out

    w = {"embed": take(vocab, dim), "ln1": take(layers, dim), "wq": take(layers, dim, dim),
         "wk": take(layers, kv_dim, dim), "wv": take(layers, kv_dim, dim),
         "wo": take(layers, dim, dim), "ln2": take(layers, dim),
         "w1": take(layers, hidden, dim), "w2": take(layers, dim, hidden),
         "w3": take(layers, hidden, dim), "norm": take(dim)}
    pos += seq_len * hd  # two legacy RoPE tables of seq_len * head_dim / 2 floats each
    w["head"] = w["embed"] if shared else take(vocab, dim)
    cfg = {"dim": dim, "layers": layers, "heads": heads, "kv_heads": kv_heads, "head_dim": hd,
           "eps": 1e-5, "theta": 10000.0, "scaling": None, "interleaved": True,
           "qkv_bias": False, "qk_norm": False}
    layer_w = [{k: w[k][i] for k in ("ln1", "wq", "wk", "wv", "wo", "ln2", "w1", "w2", "w3")}
               for i in range(layers)]
    return cfg, w["embed"], layer_w, w["norm"], w["head"]


def read_safetensors(path, out):
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
        data = fh.read()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        buf = data[b:e]
        dt = info["dtype"]
        if dt == "F32":
            a = np.frombuffer(buf, dtype="<f4")
        elif dt == "F16":
            a = np.frombuffer(buf, dtype="<f2")
        elif dt == "BF16":
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif dt == "U8":  # MXFP4 blocks and scales: kept as bytes
            out[name] = np.frombuffer(buf, dtype=np.uint8).reshape(info["shape"])
            continue
        else:
            raise SystemExit(f"{path}: tensor {name} has unsupported dtype {dt}")
        out[name] = a.astype(np.float64).reshape(info["shape"])


def load_hf(folder):
    c = json.load(open(os.path.join(folder, "config.json")))
    t = {}
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        for shard in sorted(set(json.load(open(index))["weight_map"].values())):
            read_safetensors(os.path.join(folder, shard), t)
    else:
        read_safetensors(os.path.join(folder, "model.safetensors"), t)
    heads = c["num_attention_heads"]
    arch = (c.get("architectures") or ["LlamaForCausalLM"])[0]
    # name -> (q/k/v biases, per-head q/k norm, whole-projection q/k norm, post-norms, fused)
    families = {"LlamaForCausalLM": (0, 0, 0, 0, 0), "MistralForCausalLM": (0, 0, 0, 0, 0),
                "Qwen2ForCausalLM": (1, 0, 0, 0, 0), "Qwen3ForCausalLM": (0, 1, 0, 0, 0),
                "Phi3ForCausalLM": (0, 0, 0, 0, 1), "GraniteForCausalLM": (0, 0, 0, 0, 0),
                "Olmo2ForCausalLM": (0, 0, 1, 1, 0), "SmolLM3ForCausalLM": (0, 0, 0, 0, 0),
                "Gemma2ForCausalLM": (0, 0, 0, 0, 0), "Gemma3ForCausalLM": (0, 1, 0, 0, 0),
                "Qwen2MoeForCausalLM": (1, 0, 0, 0, 0), "Qwen3MoeForCausalLM": (0, 1, 0, 0, 0),
                "MixtralForCausalLM": (0, 0, 0, 0, 0), "GptOssForCausalLM": (1, 0, 0, 0, 0)}
    if arch not in families:
        raise SystemExit(f"{folder}: architecture {arch} is not one this reference knows")
    qkv_bias, qk_norm, qk_norm_full, post_norms, fused = families[arch]
    layers = c["num_hidden_layers"]
    granite = arch == "GraniteForCausalLM"
    gemma = arch in ("Gemma2ForCausalLM", "Gemma3ForCausalLM")
    if arch == "SmolLM3ForCausalLM":
        every = c.get("no_rope_layer_interval", 4)
        uses_rope = c.get("no_rope_layers") or [int((i + 1) % every != 0) for i in range(layers)]
    else:
        uses_rope = [1] * layers
    sliding = sliding_layers(c, arch, layers)
    window = c.get("sliding_window",
                   None if arch in ("Phi3ForCausalLM", "MixtralForCausalLM") else 4096)
    if arch in QWEN_WINDOWS and not c.get("use_sliding_window", False):
        window = None
    gemma2 = arch == "Gemma2ForCausalLM"
    gpt_oss = arch == "GptOssForCausalLM"
    if gpt_oss:
        window = c.get("sliding_window", 128)
    cfg = {"dim": c["hidden_size"], "layers": layers, "heads": heads,
           "kv_heads": c.get("num_key_value_heads", heads),
           "head_dim": c.get("head_dim") or c["hidden_size"] // heads,
           "eps": c.get("rms_norm_eps", 1e-6), "theta": c.get("rope_theta", 10000.0),
           "scaling": c.get("rope_scaling"), "interleaved": False,
           "max_pos": c.get("max_position_embeddings", 2048),
           "original_max_pos": c.get("original_max_position_embeddings"),
           "partial": c.get("partial_rotary_factor", 1.0), "uses_rope": uses_rope,
           "qkv_bias": qkv_bias, "qk_norm": qk_norm, "qk_norm_full": qk_norm_full,
           "post_norms": post_norms,
           "attention_multiplier": c.get("attention_multiplier", 1.0) if granite else None,
           "embedding_multiplier": c.get("embedding_multiplier", 1.0) if granite else 1.0,
           "residual_multiplier": c.get("residual_multiplier", 1.0) if granite else 1.0,
           "logits_scaling": c.get("logits_scaling", 1.0) if granite else 1.0,
           "windows": [window if s and window else None for s in sliding],
           "gemma": gemma,
           "local_theta": c.get("rope_local_base_freq", 10000.0)
                          if arch == "Gemma3ForCausalLM" else None,
           "local_layers": sliding,
           "query_pre_attn_scalar": c.get("query_pre_attn_scalar", 256) if gemma else None,
           "attn_softcap": c.get("attn_logit_softcapping", 50.0 if gemma2 else None)
                           if gemma else None,
           "final_softcap": c.get("final_logit_softcapping", 30.0 if gemma2 else None)
                            if gemma else None,
           "o_bias": gpt_oss and c.get("attention_bias", True), "sinks": gpt_oss}
    q_rows = heads * cfg["head_dim"]
    kv_rows = cfg["kv_heads"] * cfg["head_dim"]
    inter = c["intermediate_size"]
    cfg["moe"] = moe_config(c, arch)
    if gpt_oss:
        cfg["qkv_bias"] = cfg["o_bias"]
    layer_w = []
    for i in range(cfg["layers"]):
        p = f"model.layers.{i}."
        sparse = cfg["moe"] and cfg["moe"]["sparse"][i]
        names = {"wo": "self_attn.o_proj", "ln2": "post_attention_layernorm"}
        if not sparse:
            names["w2"] = "mlp.down_proj"
        if not post_norms:
            names["ln1"] = "input_layernorm"
        if post_norms or gemma:
            names["ln3"] = "post_feedforward_layernorm"
        if gemma:
            names["ln_pre_ff"] = "pre_feedforward_layernorm"
        if not fused:
            names.update(wq="self_attn.q_proj", wk="self_attn.k_proj", wv="self_attn.v_proj")
        if not fused and not sparse:
            names.update(w1="mlp.gate_proj", w3="mlp.up_proj")
        lw = {k: t[p + n + ".weight"] for k, n in names.items()}
        if sparse:
            lw["moe"] = moe_weights(t, p, cfg["moe"], arch)
        if fused:  # Phi3: q, k, v stacked by rows in qkv_proj; gate then up in gate_up_proj
            qkv, gu = t[p + "self_attn.qkv_proj.weight"], t[p + "mlp.gate_up_proj.weight"]
            lw.update(wq=qkv[:q_rows], wk=qkv[q_rows:q_rows + kv_rows],
                      wv=qkv[q_rows + kv_rows:], w1=gu[:inter], w3=gu[inter:])
        if qkv_bias and (not gpt_oss or cfg["o_bias"]):
            lw.update(bq=t[p + "self_attn.q_proj.bias"], bk=t[p + "self_attn.k_proj.bias"],
                      bv=t[p + "self_attn.v_proj.bias"])
        if cfg["o_bias"]:
            lw["bo"] = t[p + "self_attn.o_proj.bias"]
        if gpt_oss:
            lw["sinks"] = t[p + "self_attn.sinks"]
        if qk_norm or qk_norm_full:
            lw.update(qn=t[p + "self_attn.q_norm.weight"], kn=t[p + "self_attn.k_norm.weight"])
        if gemma:  # Gemma's norms scale by 1 + weight
            for k in ("ln1", "ln2", "ln3", "ln_pre_ff", "qn", "kn"):
                if k in lw:
                    lw[k] = 1.0 + lw[k]
        layer_w.append(lw)
    embed = t["model.embed_tokens.weight"]
    head = embed if c.get("tie_word_embeddings", gemma) else t["lm_head.weight"]
    norm = t["model.norm.weight"] + (1.0 if gemma else 0.0)
    return cfg, embed, layer_w, norm, head


QWEN_WINDOWS = ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "SmolLM3ForCausalLM",
                "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM")


def moe_config(c, arch):
    """The experts' settings with transformers' config defaults; None for a dense model."""
    if arch == "GptOssForCausalLM":
        return {"experts": c.get("num_local_experts", 128), "top_k": c.get("num_experts_per_tok", 4),
                "limit": c.get("swiglu_limit", 7.0), "gpt_oss": True,
                "sparse": [True] * c["num_hidden_layers"]}
    mixtral = arch == "MixtralForCausalLM"
    qwen2 = arch == "Qwen2MoeForCausalLM"
    if not mixtral and arch != "Qwen3MoeForCausalLM" and not qwen2:
        return None
    experts = c.get("num_local_experts" if mixtral else "num_experts") or \
        (8 if mixtral else 60 if qwen2 else 128)
    if mixtral:
        sparse = [True] * c["num_hidden_layers"]
    else:
        step = c.get("decoder_sparse_step", 1)
        dense = c.get("mlp_only_layers") or []
        sparse = [i not in dense and (i + 1) % step == 0 for i in range(c["num_hidden_layers"])]
    return {"experts": experts,
            "top_k": c.get("num_experts_per_tok", 2 if mixtral else 4 if qwen2 else 8),
            "renormalize": mixtral or c.get("norm_topk_prob", False),
            "shared": qwen2 and c.get("shared_expert_intermediate_size", 5632) > 0,
            "sparse": sparse}


FP4_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def dequantize_mxfp4(blocks, scales):
    """blocks [..., G, 16] bytes (two E2M1 codes each, the low nibble first), scales [..., G]
    E8M0 -> float64 [..., G * 32]: each block of 32 values times 2^(scale - 127)."""
    if (scales == 255).any():
        raise SystemExit("MXFP4 scale 255 (NaN)")
    vals = np.stack([FP4_VALUES[blocks & 15], FP4_VALUES[blocks >> 4]], axis=-1)  # [..., G, 16, 2]
    vals = vals.reshape(*blocks.shape[:-1], 32) * np.exp2(scales.astype(np.float64) - 127)[..., None]
    return vals.reshape(*blocks.shape[:-2], -1)


def moe_weights(t, p, m, arch):
    """Layer p's router, experts [(gate, up, down)] and Qwen2-MoE's shared expert and gate."""
    if m.get("gpt_oss"):  # [E, 2I, H] (rows interleaved gate/up) and [E, H, I], with biases
        b = p + "mlp."
        gu, dn = b + "experts.gate_up_proj", b + "experts.down_proj"
        return {"router": t[b + "router.weight"], "router_bias": t[b + "router.bias"],
                "gate_up": dequantize_mxfp4(t[gu + "_blocks"], t[gu + "_scales"]),
                "gate_up_bias": t[gu + "_bias"],
                "down": dequantize_mxfp4(t[dn + "_blocks"], t[dn + "_scales"]),
                "down_bias": t[dn + "_bias"]}
    if arch == "MixtralForCausalLM":
        b = p + "block_sparse_moe."
        experts = [tuple(t[f"{b}experts.{e}.{w}.weight"] for w in ("w1", "w3", "w2"))
                   for e in range(m["experts"])]
        return {"router": t[b + "gate.weight"], "experts": experts}
    b = p + "mlp."
    out = {"router": t[b + "gate.weight"],
           "experts": [tuple(t[f"{b}experts.{e}.{w}_proj.weight"] for w in ("gate", "up", "down"))
                       for e in range(m["experts"])]}
    if m["shared"]:
        out["shared"] = tuple(t[f"{b}shared_expert.{w}_proj.weight"] for w in ("gate", "up", "down"))
        out["shared_gate"] = t[b + "shared_expert_gate.weight"]
    return out


def sliding_layers(c, arch, layers):
    """Which layers transformers' config classes mark "sliding_attention"."""
    if c.get("layer_types"):
        return [t == "sliding_attention" for t in c["layer_types"]]
    if arch in ("MistralForCausalLM", "Phi3ForCausalLM", "MixtralForCausalLM"):
        return [True] * layers
    if arch in QWEN_WINDOWS:
        return [i >= c.get("max_window_layers", 28) for i in range(layers)]
    if arch == "Gemma2ForCausalLM":
        return [(i + 1) % 2 != 0 for i in range(layers)]
    if arch == "Gemma3ForCausalLM":
        every = c.get("sliding_window_pattern", 6)
        return [(i + 1) % every != 0 for i in range(layers)]
    return [False] * layers


# ---- forward ------------------------------------------------------------------------------
def rotated_dims(cfg):
    return int(cfg["head_dim"] * cfg.get("partial", 1.0))


def inv_freqs(cfg, T):
    """Inverse frequencies of the rotated pairs and the factor on cos/sin, for a T-token forward."""
    dim = rotated_dims(cfg)
    theta = cfg["theta"]
    f = theta ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    s = cfg["scaling"] or {}
    kind = s.get("rope_type") or s.get("type") or "default"
    if kind == "llama3":
        old = s["original_max_position_embeddings"]
        lo, hi, factor = s["low_freq_factor"], s["high_freq_factor"], s["factor"]
        out = []
        for fr in f:
            wl = 2 * math.pi / fr
            if wl < old / hi:
                out.append(fr)
            elif wl > old / lo:
                out.append(fr / factor)
            else:
                sm = (old / wl - lo) / (hi - lo)
                out.append((1 - sm) * fr / factor + sm * fr)
        return np.array(out), 1.0
    if kind == "linear":
        return f / s["factor"], 1.0
    if kind == "dynamic":  # the base grows only past the configured context
        if T > cfg["max_pos"]:
            grown = theta * ((s["factor"] * T / cfg["max_pos"]) - (s["factor"] - 1)) ** (dim / (dim - 2))
            f = grown ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
        return f, 1.0
    if kind == "yarn":
        factor = s["factor"]
        orig = s.get("original_max_position_embeddings") or cfg["max_pos"]

        def m(scale, k=1.0):
            return 1.0 if scale <= 1 else 0.1 * k * math.log(scale) + 1.0
        att = s.get("attention_factor")
        if att is None:
            ms, ms_all = s.get("mscale"), s.get("mscale_all_dim")
            att = m(factor, ms) / m(factor, ms_all) if ms and ms_all else m(factor)

        def dim_at(turns):  # the dim whose pair turns `turns` times over the original context
            return dim * math.log(orig / (turns * 2 * math.pi)) / (2 * math.log(theta))
        lo, hi = dim_at(s.get("beta_fast") or 32), dim_at(s.get("beta_slow") or 1)
        if s.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((np.arange(dim // 2) - lo) / (hi - lo), 0, 1)  # 1: interpolate fully
        return f / factor * ramp + f * (1 - ramp), att
    if kind in ("longrope", "su"):
        orig = (s.get("original_max_position_embeddings") or cfg["original_max_pos"]
                or cfg["max_pos"])
        factor = s.get("factor") or cfg["max_pos"] / orig
        att = s.get("attention_factor")
        if att is None:
            att = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(orig))
        ext = np.array(s["long_factor"] if T > orig else s["short_factor"], dtype=np.float64)
        return f / ext, att
    if kind != "default":
        raise SystemExit(f"rope scaling {kind} is not one this reference knows")
    return f, 1.0


def rope(x, cfg):  # x [T, heads, head_dim]
    T, _, hd = x.shape
    freqs, att = inv_freqs(cfg, T)
    ang = np.arange(T)[:, None] * freqs[None, :]  # [T, rotated / 2]
    c, s = att * np.cos(ang)[:, None, :], att * np.sin(ang)[:, None, :]
    y = x.copy()
    if cfg["interleaved"]:
        a, b = x[..., 0::2], x[..., 1::2]
        y[..., 0::2], y[..., 1::2] = a * c - b * s, a * s + b * c
    else:  # rotate-half within the first `rot` dims; the rest pass through
        rot = rotated_dims(cfg)
        a, b = x[..., :rot // 2], x[..., rot // 2:rot]
        y[..., :rot // 2], y[..., rot // 2:rot] = a * c - b * s, b * c + a * s
    return y


def rmsnorm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1 + np.exp(-x))


def swiglu_mlp(h, gate, up, down):
    return (silu(h @ gate.T) * (h @ up.T)) @ down.T


def moe(h, W, m):
    """A mixture-of-experts block on its normed input h [T, hidden], as transformers' Qwen2-MoE,
    Qwen3-MoE and Mixtral blocks compute it: softmax over the router logits, the top_k experts
    by probability (ties to the lower expert id: a stable sort, as torch.topk on the CPU),
    weights renormalised to sum 1 with norm_topk_prob (Mixtral: always), the experts' SwiGLU
    outputs summed by those weights; Qwen2-MoE adds sigmoid(h . shared_gate) * shared(h)."""
    logits = h @ W["router"].T  # [T, experts]
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    top = np.argsort(-p, axis=-1, kind="stable")[:, :m["top_k"]]
    w = np.take_along_axis(p, top, -1)
    if m["renormalize"]:
        w = w / w.sum(-1, keepdims=True)
    out = np.zeros_like(h)
    for e, (gate, up, down) in enumerate(W["experts"]):
        rows, slot = np.nonzero(top == e)
        if len(rows):
            out[rows] += w[rows, slot][:, None] * swiglu_mlp(h[rows], gate, up, down)
    if "shared" in W:
        g = h @ W["shared_gate"].T  # [T, 1]
        out += 1 / (1 + np.exp(-g)) * swiglu_mlp(h, *W["shared"])
    return out


def gpt_oss_moe(h, W, m):
    """gpt-oss's experts as transformers' GptOssMLP computes them: router logits with a bias,
    the top_k by logit (stable: ties to the lower id), softmax over those k; each expert
    gate_up = h . W + b, gate = even columns, up = odd, gate clamped above and up on both sides at
    swiglu_limit, (up + 1) * gate * sigmoid(1.702 gate), then down . that + b."""
    logits = h @ W["router"].T + W["router_bias"]
    top = np.argsort(-logits, axis=-1, kind="stable")[:, :m["top_k"]]
    w = np.take_along_axis(logits, top, -1)
    w = np.exp(w - w.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    out = np.zeros_like(h)
    limit = m["limit"]
    for e in range(m["experts"]):
        rows, slot = np.nonzero(top == e)
        if not len(rows):
            continue
        gu = h[rows] @ W["gate_up"][e].T + W["gate_up_bias"][e]
        gate = np.minimum(gu[:, 0::2], limit)
        up = np.clip(gu[:, 1::2], -limit, limit)
        act = (up + 1) * gate / (1 + np.exp(-1.702 * gate))
        out[rows] += w[rows, slot][:, None] * (act @ W["down"][e].T + W["down_bias"][e])
    return out


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def softcap(x, cap):
    return cap * np.tanh(x / cap) if cap else x


def attention_mask(T, window):
    """Causal; with a window, query t sees keys t - window + 1 .. t."""
    m = np.triu(np.full((T, T), -np.inf), 1)
    if window:
        m += np.tril(np.full((T, T), -np.inf), -window)
    return m


def gemma_layer(x, L, i, cfg):
    """Gemma 2/3: norms before and after attention and MLP, GeGLU."""
    eps = cfg["eps"]
    x = x + rmsnorm(attention(rmsnorm(x, L["ln1"], eps), L, i, cfg), L["ln2"], eps)
    h = rmsnorm(x, L["ln_pre_ff"], eps)
    mlp = (gelu_tanh(h @ L["w1"].T) * (h @ L["w3"].T)) @ L["w2"].T
    return x + rmsnorm(mlp, L["ln3"], eps)


def attention(h, L, i, cfg):
    """Layer i's attention block on its normed input h: [T, hidden] -> [T, hidden]."""
    T, H, KV, hd = len(h), cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    q, k, v = h @ L["wq"].T, h @ L["wk"].T, h @ L["wv"].T
    if cfg["qkv_bias"]:
        q, k, v = q + L["bq"], k + L["bk"], v + L["bv"]
    if cfg.get("qk_norm_full"):  # over all heads of a token at once
        q, k = rmsnorm(q, L["qn"], cfg["eps"]), rmsnorm(k, L["kn"], cfg["eps"])
    q, k, v = q.reshape(T, H, hd), k.reshape(T, KV, hd), v.reshape(T, KV, hd)
    if cfg["qk_norm"]:  # over the last axis: each head of each token on its own
        q, k = rmsnorm(q, L["qn"], cfg["eps"]), rmsnorm(k, L["kn"], cfg["eps"])
    if cfg.get("uses_rope", [1] * (i + 1))[i]:
        rc = cfg
        if cfg.get("local_theta") and cfg["local_layers"][i]:  # Gemma 3's local RoPE
            rc = dict(cfg, theta=cfg["local_theta"], scaling=None)
        q, k = rope(q, rc), rope(k, rc)
    k = np.repeat(k, H // KV, axis=1)
    v = np.repeat(v, H // KV, axis=1)
    if cfg.get("query_pre_attn_scalar"):
        scale = cfg["query_pre_attn_scalar"] ** -0.5
    else:
        scale = cfg.get("attention_multiplier") or 1 / math.sqrt(hd)
    s = softcap(np.einsum("thd,uhd->htu", q, k) * scale, cfg.get("attn_softcap"))
    s = s + attention_mask(T, (cfg.get("windows") or [None] * (i + 1))[i])
    if cfg.get("sinks"):  # gpt-oss: one more logit per head in the denominator, with no value
        s = np.concatenate([s, np.broadcast_to(L["sinks"][:, None, None], (H, T, 1))], -1)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = np.einsum("htu,uhd->thd", p[..., :T], v).reshape(T, H * hd) @ L["wo"].T
    return o + L["bo"] if cfg.get("o_bias") else o


def forward(model, ids):
    cfg, embed, layers, norm, head = model
    x = embed[np.array(ids)] * cfg.get("embedding_multiplier", 1.0)
    if cfg.get("gemma"):
        x = x * math.sqrt(cfg["dim"])
    rm = cfg.get("residual_multiplier", 1.0)
    for i, L in enumerate(layers):
        if cfg.get("gemma"):
            x = gemma_layer(x, L, i, cfg)
            continue
        h = x if cfg.get("post_norms") else rmsnorm(x, L["ln1"], cfg["eps"])
        o = attention(h, L, i, cfg)
        if cfg.get("post_norms"):
            x = x + rmsnorm(o, L["ln2"], cfg["eps"])
            g = x @ L["w1"].T
            x = x + rmsnorm(((g / (1 + np.exp(-g))) * (x @ L["w3"].T)) @ L["w2"].T, L["ln3"],
                            cfg["eps"])
            continue
        x = x + o * rm
        h = rmsnorm(x, L["ln2"], cfg["eps"])
        if "moe" in L:
            x = x + (gpt_oss_moe if cfg["moe"].get("gpt_oss") else moe)(h, L["moe"], cfg["moe"])
            continue
        g = h @ L["w1"].T
        x = x + ((g / (1 + np.exp(-g))) * (h @ L["w3"].T)) @ L["w2"].T * rm
    logits = rmsnorm(x, norm, cfg["eps"]) @ head.T  # [T, vocab]
    return softcap(logits / cfg.get("logits_scaling", 1.0), cfg.get("final_softcap"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="llama2.c .bin or HF folder")
    ap.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    ap.add_argument("--generate", type=int, default=0, help="greedy tokens to generate")
    ap.add_argument("--dump-logits", help="write float64 logits [num_tokens, vocab] here")
    a = ap.parse_args()
    ids = [int(t) for t in a.prompt_ids.split(",") if t]
    model = load_hf(a.model) if os.path.isdir(a.model) else load_llama2c(a.model)
    if a.dump_logits:
        forward(model, ids).astype("<f8").tofile(a.dump_logits)
    out = []
    for _ in range(a.generate):
        nxt = int(np.argmax(forward(model, ids + out)[-1]))
        out.append(nxt)
    if a.generate:
        print(" ".join(map(str, out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

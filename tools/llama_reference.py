#!/usr/bin/env python3
"""Independent float64 numpy Llama-family forward, the oracle for the C++ CPU backend's tests.

Reads a llama2.c checkpoint (.bin, rotating interleaved RoPE pairs (2i, 2i+1) as llama2.c does,
no row permutation) or an HF folder (config.json + model.safetensors or shards with
model.safetensors.index.json; the safetensors header is parsed here, rotate-half RoPE) of
LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (q/k/v projections with biases) or
Qwen3ForCausalLM (RMSNorm over each q and k head before RoPE), the differences as transformers'
modeling_qwen2.py / modeling_qwen3.py write them; the lm_head is the embedding table exactly
when config.json says tie_word_embeddings.
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
    families = {"LlamaForCausalLM": (False, False), "MistralForCausalLM": (False, False),
                "Qwen2ForCausalLM": (True, False), "Qwen3ForCausalLM": (False, True)}
    if arch not in families:
        raise SystemExit(f"{folder}: architecture {arch} is not one this reference knows")
    qkv_bias, qk_norm = families[arch]
    cfg = {"dim": c["hidden_size"], "layers": c["num_hidden_layers"], "heads": heads,
           "kv_heads": c.get("num_key_value_heads", heads),
           "head_dim": c.get("head_dim") or c["hidden_size"] // heads,
           "eps": c.get("rms_norm_eps", 1e-6), "theta": c.get("rope_theta", 10000.0),
           "scaling": c.get("rope_scaling"), "interleaved": False,
           "qkv_bias": qkv_bias, "qk_norm": qk_norm}
    layer_w = []
    for i in range(cfg["layers"]):
        p = f"model.layers.{i}."
        names = {"ln1": "input_layernorm", "wq": "self_attn.q_proj", "wk": "self_attn.k_proj",
                 "wv": "self_attn.v_proj", "wo": "self_attn.o_proj",
                 "ln2": "post_attention_layernorm", "w1": "mlp.gate_proj",
                 "w2": "mlp.down_proj", "w3": "mlp.up_proj"}
        lw = {k: t[p + n + ".weight"] for k, n in names.items()}
        if qkv_bias:
            lw.update(bq=t[p + "self_attn.q_proj.bias"], bk=t[p + "self_attn.k_proj.bias"],
                      bv=t[p + "self_attn.v_proj.bias"])
        if qk_norm:
            lw.update(qn=t[p + "self_attn.q_norm.weight"], kn=t[p + "self_attn.k_norm.weight"])
        layer_w.append(lw)
    embed = t["model.embed_tokens.weight"]
    head = embed if c.get("tie_word_embeddings", False) else t["lm_head.weight"]
    return cfg, embed, layer_w, t["model.norm.weight"], head


# ---- forward ------------------------------------------------------------------------------
def inv_freqs(cfg):
    hd = cfg["head_dim"]
    f = cfg["theta"] ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    s = cfg["scaling"]
    if s and (s.get("rope_type") or s.get("type")) == "llama3":
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
        f = np.array(out)
    return f


def rope(x, cfg):  # x [T, heads, head_dim]
    T, _, hd = x.shape
    ang = np.arange(T)[:, None] * inv_freqs(cfg)[None, :]  # [T, hd/2]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    y = np.empty_like(x)
    if cfg["interleaved"]:
        a, b = x[..., 0::2], x[..., 1::2]
        y[..., 0::2], y[..., 1::2] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., :hd // 2], x[..., hd // 2:]
        y[..., :hd // 2], y[..., hd // 2:] = a * c - b * s, b * c + a * s
    return y


def rmsnorm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def forward(model, ids):
    cfg, embed, layers, norm, head = model
    T, H, KV, hd = len(ids), cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    x = embed[np.array(ids)]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for L in layers:
        h = rmsnorm(x, L["ln1"], cfg["eps"])
        q, k, v = h @ L["wq"].T, h @ L["wk"].T, h @ L["wv"].T
        if cfg["qkv_bias"]:
            q, k, v = q + L["bq"], k + L["bk"], v + L["bv"]
        q, k, v = q.reshape(T, H, hd), k.reshape(T, KV, hd), v.reshape(T, KV, hd)
        if cfg["qk_norm"]:  # over the last axis: each head of each token on its own
            q, k = rmsnorm(q, L["qn"], cfg["eps"]), rmsnorm(k, L["kn"], cfg["eps"])
        q, k = rope(q, cfg), rope(k, cfg)
        k = np.repeat(k, H // KV, axis=1)
        v = np.repeat(v, H // KV, axis=1)
        s = np.einsum("thd,uhd->htu", q, k) / math.sqrt(hd) + mask
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        o = np.einsum("htu,uhd->thd", p, v).reshape(T, H * hd)
        x = x + o @ L["wo"].T
        h = rmsnorm(x, L["ln2"], cfg["eps"])
        g = h @ L["w1"].T
        x = x + ((g / (1 + np.exp(-g))) * (h @ L["w3"].T)) @ L["w2"].T
    return rmsnorm(x, norm, cfg["eps"]) @ head.T  # [T, vocab]


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

"""Random-weight Hugging Face models of the Llama family (LlamaForCausalLM, MistralForCausalLM,
Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, GraniteForCausalLM, Olmo2ForCausalLM,
SmolLM3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, and the mixtures of experts
Qwen3MoeForCausalLM, MixtralForCausalLM, Qwen2MoeForCausalLM) of named real shapes, shared by
tools/hf_compare.py and bench/hf_generate_baseline.py (GPU machine: torch + transformers; no model
files needed).

The shapes mirror flashserve-random-model's presets (weights/random_model_main.cpp); pass the
config.json that `flashserve-random-model --config-only 1 --preset NAME` writes to use exactly
flashserve's numbers. Weights are drawn here on the GPU from a seeded generator: every matrix
normal(0, std) (std 0.02: logits spread ~1 so greedy choices are not coin flips), every norm
weight 1 + uniform(-0.1, 0.1) (not all ones, so a missing or misplaced norm would show: this
includes Qwen3's per-head q_norm/k_norm and Olmo2's post-norms), every bias (Qwen2's q/k/v)
normal(0, BIAS_STD) (larger than the matrices' std: a bias that flashserve dropped or misplaced
moves the logits clearly). Gemma's norms scale by 1 + weight, so theirs act as about 2.

Attention runs in transformers' eager implementation for Gemma (the SDPA path drops the
attention soft-cap) and for windowed shapes (versions whose SDPA path ignored the window).

LongRoPE (Phi3): transformers picks the long or short factors at each forward by its length
against original_max_position_embeddings; flashserve picks once, by the served context
(model/rope_tables.h, docs/MODELS.md). pin_long_rope makes transformers use the long factors at
every length, as flashserve does when its context is longer than the original one.
"""
import json

BIAS_STD = 0.5

# transformers' config and model classes per architecture (imported by name on the GPU machine).
CLASSES = {"LlamaForCausalLM": "LlamaConfig", "MistralForCausalLM": "MistralConfig",
           "Qwen2ForCausalLM": "Qwen2Config", "Qwen3ForCausalLM": "Qwen3Config",
           "Phi3ForCausalLM": "Phi3Config", "GraniteForCausalLM": "GraniteConfig",
           "Olmo2ForCausalLM": "Olmo2Config", "SmolLM3ForCausalLM": "SmolLM3Config",
           "Gemma2ForCausalLM": "Gemma2Config", "Gemma3ForCausalLM": "Gemma3TextConfig",
           "Qwen3MoeForCausalLM": "Qwen3MoeConfig", "MixtralForCausalLM": "MixtralConfig",
           "Qwen2MoeForCausalLM": "Qwen2MoeConfig"}

# name -> config fields (rms_norm_eps 1e-5 and rope_theta 10000 unless given; architecture
# LlamaForCausalLM unless given). Vocabularies are 32000 (the Llama 2 tokenizer's) and contexts
# 8192, as in flashserve-random-model's presets, except where a shape says otherwise (Gemma's
# real vocabularies; contexts of at least twice the sliding window).
SHAPES = {
    "tiny": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=32000,
                 max_position_embeddings=2048),
    "tinyllama-1.1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                           num_attention_heads=32, num_key_value_heads=4, head_dim=64,
                           vocab_size=32000, max_position_embeddings=2048),
    "llama2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=32, head_dim=128,
                      vocab_size=32000, max_position_embeddings=4096),
    # Llama-3.2-1B with the Llama 2 vocabulary (32000): see the preset's comment.
    "llama3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                        num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                        vocab_size=32000, max_position_embeddings=8192, rope_theta=500000.0,
                        rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                          high_freq_factor=4.0,
                                          original_max_position_embeddings=8192),
                        tie_word_embeddings=True),
    # Qwen2.5-0.5B: q/k/v biases, tied head.
    "qwen2.5-0.5b": dict(architecture="Qwen2ForCausalLM", hidden_size=896, intermediate_size=4864,
                         num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                         vocab_size=32000, max_position_embeddings=8192, rope_theta=1000000.0,
                         rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False),
    # Qwen3-0.6B: q/k norms, head_dim 128 != 1024 / 16, tied head.
    "qwen3-0.6b": dict(architecture="Qwen3ForCausalLM", hidden_size=1024, intermediate_size=3072,
                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                       head_dim=128, vocab_size=32000, max_position_embeddings=8192,
                       rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                       use_sliding_window=False, attention_bias=False),
    # Mistral-7B-v0.3 (MistralConfig's default sliding_window is 4096: null as v0.3 has it).
    "mistral-7b": dict(architecture="MistralForCausalLM", hidden_size=4096,
                       intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                       num_key_value_heads=8, head_dim=128, vocab_size=32000,
                       max_position_embeddings=8192, rope_theta=1000000.0, sliding_window=None),
    # Mistral-7B-v0.1: a 4096-token window on every layer.
    "mistral-7b-v0.1": dict(architecture="MistralForCausalLM", hidden_size=4096,
                            intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                            num_key_value_heads=8, head_dim=128, vocab_size=32000,
                            max_position_embeddings=16384, sliding_window=4096),
    # Gemma-2-2B: even layers windowed by 4096, soft-caps 50/30, GeGLU, sandwich norms, tied.
    "gemma-2-2b": dict(architecture="Gemma2ForCausalLM", hidden_size=2304, intermediate_size=9216,
                       num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4,
                       head_dim=256, vocab_size=256000, max_position_embeddings=16384,
                       rms_norm_eps=1e-6, query_pre_attn_scalar=256, sliding_window=4096,
                       attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                       hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                       bos_token_id=2, eos_token_id=1, pad_token_id=0),
    # Gemma-3-1B: five of six layers windowed by 512 with the local RoPE base, q/k norms, tied.
    "gemma-3-1b": dict(architecture="Gemma3ForCausalLM", hidden_size=1152, intermediate_size=6912,
                       num_hidden_layers=26, num_attention_heads=4, num_key_value_heads=1,
                       head_dim=256, vocab_size=262144, max_position_embeddings=8192,
                       rms_norm_eps=1e-6, rope_theta=1000000.0, rope_local_base_freq=10000.0,
                       query_pre_attn_scalar=256, sliding_window=512, sliding_window_pattern=6,
                       attn_logit_softcapping=None, final_logit_softcapping=None,
                       hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                       bos_token_id=2, eos_token_id=1, pad_token_id=0),
    # Phi-4-mini: fused projections, 96 of 128 dims rotated, LongRoPE (stand-in factor lists)
    # over an original 4096 positions, tied head.
    "phi-4-mini": dict(architecture="Phi3ForCausalLM", hidden_size=3072, intermediate_size=8192,
                       num_hidden_layers=32, num_attention_heads=24, num_key_value_heads=8,
                       head_dim=128, vocab_size=32000, max_position_embeddings=8192,
                       original_max_position_embeddings=4096, partial_rotary_factor=0.75,
                       rope_scaling=dict(type="longrope",
                                         short_factor=[1 + 0.01 * i for i in range(48)],
                                         long_factor=[1 + 0.25 * i for i in range(48)]),
                       tie_word_embeddings=True, sliding_window=None),
    # Granite-3.0-2B: embedding, residual, attention and logits multipliers, tied head.
    "granite-3-2b": dict(architecture="GraniteForCausalLM", hidden_size=2048,
                         intermediate_size=8192, num_hidden_layers=40, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=64, vocab_size=32000,
                         max_position_embeddings=4096, embedding_multiplier=12.0,
                         residual_multiplier=0.22, attention_multiplier=0.015625,
                         logits_scaling=8.0, tie_word_embeddings=True),
    # OLMo-2-0425-1B: post-norms, q/k norms over the whole projections.
    "olmo-2-1b": dict(architecture="Olmo2ForCausalLM", hidden_size=2048, intermediate_size=8192,
                      num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=16,
                      head_dim=128, vocab_size=32000, max_position_embeddings=4096,
                      rope_theta=500000.0, rms_norm_eps=1e-6),
    # SmolLM3-3B: every fourth layer without RoPE, tied head.
    "smollm3-3b": dict(architecture="SmolLM3ForCausalLM", hidden_size=2048,
                       intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                       num_key_value_heads=4, head_dim=128, vocab_size=32000,
                       max_position_embeddings=8192, rope_theta=5000000.0, rms_norm_eps=1e-6,
                       no_rope_layers=[int((i + 1) % 4 != 0) for i in range(36)],
                       use_sliding_window=False, tie_word_embeddings=True),
    # Qwen2.5-7B with YaRN factor 4 over an original 2048 positions (max = 4 x 2048, where
    # transformers' versions that derive the factor from the two lengths agree).
    "qwen2.5-7b-yarn": dict(architecture="Qwen2ForCausalLM", hidden_size=3584,
                            intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                            num_key_value_heads=4, vocab_size=32000, max_position_embeddings=8192,
                            rope_theta=1000000.0, rms_norm_eps=1e-6, use_sliding_window=False,
                            rope_scaling=dict(rope_type="yarn", factor=4.0,
                                              original_max_position_embeddings=2048)),
    # Mixtures of experts, layer-reduced (every layer has the published shape; "-4l": 4 layers).
    # Qwen3-30B-A3B: 128 experts of 768 columns, top 8 renormalised, q/k norms.
    "qwen3-30b-a3b-4l": dict(architecture="Qwen3MoeForCausalLM", hidden_size=2048,
                             intermediate_size=6144, num_hidden_layers=4, num_attention_heads=32,
                             num_key_value_heads=4, head_dim=128, vocab_size=32000,
                             max_position_embeddings=8192, rope_theta=1000000.0,
                             rms_norm_eps=1e-6, num_experts=128, num_experts_per_tok=8,
                             moe_intermediate_size=768, norm_topk_prob=True,
                             decoder_sparse_step=1, mlp_only_layers=[], use_sliding_window=False,
                             attention_bias=False),
    # Mixtral-8x7B: 8 experts of 14336 columns, top 2, no sliding window.
    "mixtral-8x7b-2l": dict(architecture="MixtralForCausalLM", hidden_size=4096,
                            intermediate_size=14336, num_hidden_layers=2, num_attention_heads=32,
                            num_key_value_heads=8, head_dim=128, vocab_size=32000,
                            max_position_embeddings=8192, rope_theta=1000000.0,
                            num_local_experts=8, num_experts_per_tok=2, sliding_window=None,
                            router_jitter_noise=0.0),
    # Qwen1.5-MoE-A2.7B: 60 experts of 1408 columns, top 4 not renormalised, a shared expert of
    # 5632 with its sigmoid gate, q/k/v biases.
    "qwen1.5-moe-a2.7b-4l": dict(architecture="Qwen2MoeForCausalLM", hidden_size=2048,
                                 intermediate_size=5632, num_hidden_layers=4,
                                 num_attention_heads=16, num_key_value_heads=16, vocab_size=32000,
                                 max_position_embeddings=8192, rope_theta=1000000.0,
                                 rms_norm_eps=1e-6, num_experts=60, num_experts_per_tok=4,
                                 moe_intermediate_size=1408, shared_expert_intermediate_size=5632,
                                 norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[],
                                 use_sliding_window=False),
}

MOE_ARCHITECTURES = ("Qwen3MoeForCausalLM", "MixtralForCausalLM", "Qwen2MoeForCausalLM")


def architecture(name, config_json=None):
    """The transformers class name (config.json "architectures") of shape `name`."""
    if config_json:
        with open(config_json) as f:
            return (json.load(f).get("architectures") or ["LlamaForCausalLM"])[0]
    return SHAPES[name].get("architecture", "LlamaForCausalLM")


def config_fields(name, config_json=None):
    """The config fields for shape `name`, or those of a flashserve-written config.json."""
    if config_json:
        with open(config_json) as f:
            fields = json.load(f)
        for k in ("architectures", "model_type"):
            fields.pop(k, None)
        return fields
    fields = dict(rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                  bos_token_id=1, eos_token_id=2)
    fields.update(SHAPES[name])
    fields.pop("architecture", None)
    return fields


def build_random_llama(name, seed=0, std=0.02, config_json=None, device="cuda"):
    """A seeded random-weight model of shape `name` (any architecture of CLASSES, despite the
    function's old name) in bf16 on `device` (eval mode)."""
    import torch
    import transformers

    arch = architecture(name, config_json)
    if arch not in CLASSES:
        raise ValueError(f"{name}: architecture {arch} is not one of {sorted(CLASSES)}")
    config_class = getattr(transformers, CLASSES[arch])
    model_class = getattr(transformers, arch)
    fields = config_fields(name, config_json)
    fields.setdefault("pad_token_id", None)  # Phi3's and SmolLM3's defaults lie past 32000 rows
    if arch.startswith("Gemma") or fields.get("sliding_window"):  # see the module docstring
        fields["attn_implementation"] = "eager"
    config = config_class(**fields, initializer_range=std)
    # Build straight in bf16 (default dtype) so a 7B model never exists in fp32; the rotary
    # inv_freq buffer is computed in fp32 explicitly by transformers and stays fp32.
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = model_class(config)
    finally:
        torch.set_default_dtype(old)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    with torch.no_grad():
        for pname, p in model.named_parameters():  # a tied head is one parameter, seen once
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * (2 * torch.rand(p.shape, generator=gen, device=device) - 1))
            elif pname.endswith(".bias"):
                p.normal_(0.0, BIAS_STD, generator=gen)
            else:
                p.normal_(0.0, std, generator=gen)
        if config.tie_word_embeddings:  # one tensor for both, as save_pretrained will store it
            model.tie_weights()
            assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), \
                "tie_word_embeddings is set but lm_head is not the embedding table"
    pin_long_rope(model)
    model.eval()
    return model


def pin_long_rope(model):
    """LongRoPE models whose context is longer than the original: transformers' long factors at
    every forward length (see the module docstring). The long inverse frequencies are computed
    here as transformers' LongRoPE initialisation defines them (1 / (long_factor[i] *
    base^(2i / rotary_dim))), and set as both the rotary module's original and long tables, so
    that its per-forward choice between them (transformers 4.48 to 5.x) always gives them."""
    import torch
    config = model.config
    scaling = (getattr(config, "rope_scaling", None) or getattr(config, "rope_parameters", None)
               or {})
    if (scaling.get("rope_type") or scaling.get("type")) not in ("longrope", "su"):
        return
    original = (scaling.get("original_max_position_embeddings")
                or getattr(config, "original_max_position_embeddings", None))
    if not original or config.max_position_embeddings <= original:
        return
    base = getattr(config, "rope_theta", None) or scaling.get("rope_theta")
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dim = int(head_dim * (getattr(config, "partial_rotary_factor", None) or 1.0))
    rotary = model.model.rotary_emb
    device = rotary.inv_freq.device
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).float().to(device) / dim
    factors = torch.tensor(scaling["long_factor"], dtype=torch.float32, device=device)
    long_inv_freq = 1.0 / (factors * base ** exponents)
    rotary.long_inv_freq = long_inv_freq
    rotary.original_inv_freq = long_inv_freq
    rotary.register_buffer("inv_freq", long_inv_freq, persistent=False)


def save_model(model, folder):
    """save_pretrained, except for mixtures of experts: their config by save_pretrained and their
    weights written here, one tensor per expert under the names flashserve reads
    (experts.{e}.gate_proj/up_proj/down_proj; Mixtral's block_sparse_moe.experts.{e}.w1/w3/w2),
    whatever layout this transformers version keeps them in (versions 5 and later hold each
    layer's experts fused: gate_up_proj [experts, 2 * inter, hidden], down_proj [experts,
    hidden, inter], and may name Mixtral's block mlp)."""
    import os
    import re

    from safetensors.torch import save_file

    arch = model.config.architectures[0] if model.config.architectures else type(model).__name__
    if arch not in MOE_ARCHITECTURES:
        model.save_pretrained(folder)
        return
    os.makedirs(folder, exist_ok=True)
    model.config.save_pretrained(folder)
    mixtral = arch == "MixtralForCausalLM"
    block = "block_sparse_moe" if mixtral else "mlp"
    names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
    hidden = model.config.hidden_size
    out = {}
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        m = re.match(r"(model\.layers\.\d+)\.(?:mlp|block_sparse_moe)\.(.+)$", name)
        if not m:
            out[name] = t
            continue
        layer, rest = m.groups()
        base = f"{layer}.{block}."
        fused = re.match(r"experts\.(gate_up_proj|gate_proj|up_proj|down_proj|w1|w2|w3)$", rest)
        if not fused:  # per-expert tensors, the router, the shared expert and its gate
            out[base + rest] = t
            continue
        kind = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}.get(fused.group(1),
                                                                           fused.group(1))
        for e in range(t.shape[0]):
            w = t[e]
            down = kind == "down_proj"
            if (w.shape[0] != hidden) if down else (w.shape[1] != hidden):  # stored transposed
                w = w.t()
            parts = ([("gate_proj", w[:w.shape[0] // 2]), ("up_proj", w[w.shape[0] // 2:])]
                     if kind == "gate_up_proj" else [(kind, w)])
            for k, v in parts:
                out[f"{base}experts.{e}.{names[('gate_proj', 'up_proj', 'down_proj').index(k)]}"
                    ".weight"] = v
    save_file({k: v.detach().contiguous() for k, v in out.items()},
              os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})


def gpu_name():
    import torch
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"

"""Random-weight Hugging Face models of the Llama family (LlamaForCausalLM, MistralForCausalLM,
Qwen2ForCausalLM, Qwen3ForCausalLM) of named real shapes, shared by tools/hf_compare.py and
bench/hf_generate_baseline.py (GPU machine: torch + transformers; no model files needed).

The shapes mirror flashserve-random-model's presets (weights/random_model_main.cpp); pass the
config.json that `flashserve-random-model --config-only 1 --preset NAME` writes to use exactly
flashserve's numbers. Weights are drawn here on the GPU from a seeded generator: every matrix
normal(0, std) (std 0.02: logits spread ~1 so greedy choices are not coin flips), every norm
weight 1 + uniform(-0.1, 0.1) (not all ones, so a missing or misplaced norm would show: this
includes Qwen3's per-head q_norm/k_norm), every bias (Qwen2's q/k/v) normal(0, BIAS_STD) (larger
than the matrices' std: a bias that flashserve dropped or misplaced moves the logits clearly).
"""
import json

BIAS_STD = 0.5

# transformers' config and model classes per architecture (imported by name on the GPU machine).
CLASSES = {"LlamaForCausalLM": "LlamaConfig", "MistralForCausalLM": "MistralConfig",
           "Qwen2ForCausalLM": "Qwen2Config", "Qwen3ForCausalLM": "Qwen3Config"}

# name -> config fields (rms_norm_eps 1e-5 and rope_theta 10000 unless given; architecture
# LlamaForCausalLM unless given). Vocabularies are 32000 (the Llama 2 tokenizer's) everywhere and
# contexts 8192, as in flashserve-random-model's presets.
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
}


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
    config = config_class(**config_fields(name, config_json), initializer_range=std)
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
    model.eval()
    return model


def gpu_name():
    import torch
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"

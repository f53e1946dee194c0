"""A tiny random Llama for the committed test checkpoints (tests/weights/data/quantized/)."""
import numpy as np


class ArrayRef:
    """An in-memory tensor standing in for a TensorRef (same fields the quantizer reads)."""

    def __init__(self, name, dtype, arr):
        self.name, self.dtype, self.arr, self.shape = name, dtype, arr, arr.shape

    @property
    def nbytes(self):
        return self.arr.nbytes

    def load(self):
        return self.arr


def tiny_model(seed):
    """A one-layer Llama (hidden 32, intermediate 64, 2 heads of 16, one KV head, vocab 16) with
    weights not centred on zero, stored as f16: (config, {name: ArrayRef})."""
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
        tensors[name] = ArrayRef(name, "F16", v.astype(np.float16))
    return config, tensors

// Small mixture-of-experts configs of the three architectures, for the MoE tests (model, weights,
// engine, tensor parallelism): Qwen3-MoE with a dense layer between sparse ones and renormalised
// top-k, Mixtral with a sliding window shorter than the tests' prompts, Qwen2-MoE with its gated
// shared expert, a dense first layer and top-k weights not renormalised. Every size divides by 2
// (tensor parallelism) and by 32 (int4 groups and FP8 blocks of the quantized formats' tests).
#pragma once

#include <string>
#include <vector>

#include "weights/attention_config.h"
#include "weights/hf_config.h"
#include "weights/loaded_model.h"

namespace flashserve::test {

inline ModelConfig moe_base(const char* arch, int layers) {
  ModelConfig c;
  set_architecture(c, arch);
  c.hidden_size = 64;
  c.intermediate_size = 128;  // the dense layers' MLP (Mixtral: each expert's)
  c.num_layers = layers;
  c.num_q_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.vocab_size = 320;
  c.max_model_len = 256;
  c.rms_norm_eps = 1e-6f;
  c.rope_theta = 10000.f;
  return c;
}

inline ModelConfig qwen3_moe_config() {
  ModelConfig c = moe_base("Qwen3MoeForCausalLM", 3);
  c.moe = {.num_experts = 8, .top_k = 3, .intermediate = 64, .renormalize = true,
           .shared_intermediate = 0, .sparse_layers = {1, 0, 1}};
  return c;
}

inline ModelConfig mixtral_config() {
  ModelConfig c = moe_base("MixtralForCausalLM", 2);
  c.intermediate_size = 96;
  c.moe = {.num_experts = 4, .top_k = 2, .intermediate = 96, .renormalize = true,
           .shared_intermediate = 0, .sparse_layers = {1, 1}};
  set_sliding_layers(c, 12, 0);  // every layer, 12 keys
  return c;
}

inline ModelConfig qwen2_moe_config() {
  ModelConfig c = moe_base("Qwen2MoeForCausalLM", 2);
  c.tie_word_embeddings = true;
  c.moe = {.num_experts = 6, .top_k = 2, .intermediate = 32, .renormalize = false,
           .shared_intermediate = 96, .sparse_layers = {0, 1}};
  return c;
}

struct MoeCase {
  const char* name;
  ModelConfig (*config)();
};
inline const std::vector<MoeCase>& moe_cases() {
  static const std::vector<MoeCase> cases = {{"qwen3_moe", qwen3_moe_config},
                                             {"mixtral", mixtral_config},
                                             {"qwen2_moe", qwen2_moe_config}};
  return cases;
}

}  // namespace flashserve::test

// A small gpt-oss config for the model, weights and backend tests: MXFP4 experts (sizes in
// blocks of 32), q/k/v/o biases, attention sinks, layers alternating a window of 8 keys (shorter
// than the tests' prompts) with full attention, YaRN over a 64-position original context
// (truncate false, as the published config), 4 experts top 2.
#pragma once

#include <vector>

#include "weights/attention_config.h"
#include "weights/hf_config.h"
#include "weights/loaded_model.h"

namespace flashserve::test {

// head_dim 16 for the CPU tests; the CUDA tests take gpt-oss's own 64.
inline ModelConfig gpt_oss_config(int layers = 3, int head_dim = 16) {
  ModelConfig c;
  set_architecture(c, "GptOssForCausalLM");
  c.hidden_size = 64;
  c.intermediate_size = 32;
  c.num_layers = layers;
  c.num_q_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = head_dim;
  c.vocab_size = 320;
  c.max_model_len = 256;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 150000.f;
  c.rope_scaling.type = "yarn";
  c.rope_scaling.factor = 4.f;
  c.rope_scaling.original_max_position_embeddings = 64;
  c.rope_scaling.truncate = false;
  c.moe = {.num_experts = 4, .top_k = 2, .intermediate = 32, .renormalize = true,
           .shared_intermediate = 0, .swiglu_limit = 7.f,
           .sparse_layers = std::vector<int>(size_t(layers), 1)};
  set_sliding_layers(c, 8, 2);  // layers 0, 2, ..: 8 keys; 1, 3, ..: every key
  return c;
}

}  // namespace flashserve::test

// Gemma's and the sliding windows' config.json settings (weights/attention_config.h): the
// published Gemma 2 and Gemma 3 configs (tests/weights/data/configs) parse to their windows,
// soft-caps, local RoPE layers and family flags; transformers 5's per-layer-type RoPE is read;
// each family's rule picks its windowed layers; malformed or unsupported settings are errors
// that name them. (Round trips through hf_config_json: test_model_families.cpp.)
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "tests/weights/config_test_util.h"
#include "tests/weights/weights_test_util.h"
#include "weights/hf_config.h"

namespace flashserve {
namespace {

using nlohmann::json;

using test::config_error;
using test::kConfigs;
using test::published;

// Gemma 2: even layers windowed, soft-caps, GeGLU and sandwich norms, tied by default.
// Gemma 3 1B: every sixth layer global, the others windowed and turned by the local RoPE base.
TEST(AttentionConfig, PublishedGemmaConfigsParse) {
  ModelConfig c = read_hf_config(kConfigs + "gemma-2-2b.json");
  EXPECT_EQ(c.architecture, "Gemma2ForCausalLM");
  EXPECT_TRUE(c.sandwich_norms && c.norm_weight_plus_one && c.gelu_mlp && c.scale_embeddings);
  EXPECT_FALSE(c.qk_norm || c.qkv_bias || c.post_norms);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_FLOAT_EQ(c.query_pre_attn_scalar, 256.f);
  EXPECT_FLOAT_EQ(c.attn_logit_softcapping, 50.f);
  EXPECT_FLOAT_EQ(c.final_logit_softcapping, 30.f);
  ASSERT_EQ(c.layer_windows.size(), 26u);
  EXPECT_EQ(c.layer_windows[0], 4096);
  EXPECT_EQ(c.layer_windows[1], 0);
  EXPECT_EQ(c.layer_windows[24], 4096);
  EXPECT_TRUE(c.rope_layers.empty());
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{1, 107}));

  c = read_hf_config(kConfigs + "gemma-3-1b-it.json");
  EXPECT_EQ(c.architecture, "Gemma3ForCausalLM");
  EXPECT_TRUE(c.sandwich_norms && c.qk_norm && c.tie_word_embeddings);
  EXPECT_FLOAT_EQ(c.attn_logit_softcapping, 0.f);
  EXPECT_FLOAT_EQ(c.final_logit_softcapping, 0.f);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c.rope_local_theta, 1e4f);
  ASSERT_EQ(c.layer_windows.size(), 26u);
  ASSERT_EQ(c.rope_layers.size(), 26u);
  for (int i = 0; i < 26; ++i) {
    const bool global = (i + 1) % 6 == 0;
    EXPECT_EQ(c.layer_windows[i], global ? 0 : 512) << i;
    EXPECT_EQ(c.rope_layers[i], global ? 1 : 2) << i;
  }
  // Gemma 3 4B and up: linear scaling on the global layers only; transformers 5 writes the two
  // RoPEs per layer type.
  json j = published("gemma-3-1b-it");
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  const std::string dir = test::fresh_dir("gemma");
  test::write_text(dir + "/config.json", j.dump());
  c = read_hf_config(dir + "/config.json");
  EXPECT_EQ(c.rope_scaling.type, "linear");
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j.erase("rope_local_base_freq");
  j["rope_parameters"] = {
      {"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1e6}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 20000.0}}}};
  test::write_text(dir + "/config.json", j.dump());
  c = read_hf_config(dir + "/config.json");
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.f);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c.rope_local_theta, 2e4f);
  // Only the tanh GELU is implemented; bidirectional (embedding) Gemma is refused.
  j = published("gemma-2-2b");
  j["hidden_activation"] = "gelu";
  EXPECT_MSG(config_error(j), ": hidden_activation \"gelu\" is not supported for "
                              "Gemma2ForCausalLM (only \"gelu_pytorch_tanh\")");
  j = published("gemma-3-1b-it");
  j["use_bidirectional_attention"] = true;
  EXPECT_MSG(config_error(j), "use_bidirectional_attention true is not supported");
  // A window covering the context is full attention; null soft-caps are off.
  j = published("gemma-2-2b");
  j["sliding_window"] = 8192;
  j["attn_logit_softcapping"] = nullptr;
  test::write_text(dir + "/config.json", j.dump());
  c = read_hf_config(dir + "/config.json");
  EXPECT_TRUE(c.layer_windows.empty());
  EXPECT_FLOAT_EQ(c.attn_logit_softcapping, 0.f);
}

// Which layers get a window, by family: a window covering the context is full attention.
TEST(AttentionConfig, SlidingWindowLayers) {
  // Mistral 7B v0.1: a 4096-token window over a 32768-token context, every layer.
  ModelConfig c = read_hf_config(kConfigs + "mistral-7b-v0.1.json");
  EXPECT_EQ(c.layer_windows, std::vector<int>(32, 4096));
  json j = published("mistral-7b-v0.1");
  j["max_position_embeddings"] = 4096;
  const std::string dir = test::fresh_dir("win");
  test::write_text(dir + "/config.json", j.dump());
  EXPECT_TRUE(read_hf_config(dir + "/config.json").layer_windows.empty());
  // Phi-3-mini-4k: a 2047-token window over a 4096-token context.
  j = published("phi-4-mini-instruct");
  j["sliding_window"] = 2047;
  j["max_position_embeddings"] = 4096;
  j["rope_scaling"] = nullptr;
  test::write_text(dir + "/config.json", j.dump());
  EXPECT_EQ(read_hf_config(dir + "/config.json").layer_windows, std::vector<int>(32, 2047));
  // Qwen2: only with use_sliding_window, on the layers from max_window_layers on.
  j = published("qwen2.5-0.5b-instruct");
  j["sliding_window"] = 4096;
  j["max_window_layers"] = 20;
  test::write_text(dir + "/config.json", j.dump());
  EXPECT_TRUE(read_hf_config(dir + "/config.json").layer_windows.empty());
  // Without the switch the window is never read: configs that transformers saves carry any value.
  for (json w : {json(0), json(nullptr), json(-1)}) {
    j["sliding_window"] = w;
    test::write_text(dir + "/config.json", j.dump());
    EXPECT_TRUE(read_hf_config(dir + "/config.json").layer_windows.empty()) << w;
  }
  j["sliding_window"] = 4096;
  j["use_sliding_window"] = true;
  test::write_text(dir + "/config.json", j.dump());
  std::vector<int> want(24, 0);
  for (int i = 20; i < 24; ++i) want[i] = 4096;
  EXPECT_EQ(read_hf_config(dir + "/config.json").layer_windows, want);
  // layer_types, where given, name the layers.
  std::vector<std::string> types(24, "full_attention");
  types[3] = "sliding_attention";
  j["layer_types"] = types;
  test::write_text(dir + "/config.json", j.dump());
  want.assign(24, 0);
  want[3] = 4096;
  EXPECT_EQ(read_hf_config(dir + "/config.json").layer_windows, want);
  types[3] = "chunked_attention";
  j["layer_types"] = types;
  EXPECT_MSG(config_error(j), ": layer_types entry \"chunked_attention\" is not supported");
  j["layer_types"] = {"full_attention"};
  EXPECT_MSG(config_error(j), ": \"layer_types\" must be a list of one entry per layer (24)");
  // Llama has no windowed layers.
  j = published("llama3.2-1b-instruct");
  j["layer_types"] = std::vector<std::string>(16, "sliding_attention");
  j["sliding_window"] = 1024;
  EXPECT_MSG(config_error(j), ": sliding-window layers (layer_types) are not supported for "
                              "LlamaForCausalLM");
}

}  // namespace
}  // namespace flashserve

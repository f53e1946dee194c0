// Mixture-of-experts configs and checkpoints: the published configs of Qwen3-30B-A3B,
// Mixtral-8x7B and Qwen1.5-MoE-A2.7B (tests/weights/data/configs) parse to their experts and
// sparse layers; decoder_sparse_step and mlp_only_layers pick the dense layers as transformers
// does; each small MoE config written by hf_config_json reads back; routing settings of other
// MoE families are start-up errors naming them; and a checkpoint whose experts disagree with its
// config (count, shapes, dense layers, fused experts, biases) is an error naming the tensor.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/model/moe_test_util.h"
#include "tests/weights/config_test_util.h"
#include "weights/fp8_weights.h"
#include "weights/llama_tensors.h"
#include "weights/random_model.h"
#include "weights/safetensors_writer.h"

namespace flashserve {
namespace {

using nlohmann::json;
using test::config_error;
using test::kConfigs;
using test::published;

TEST(MoeConfig, PublishedConfigsParse) {
  ModelConfig c = read_hf_config(kConfigs + "qwen3-30b-a3b.json");
  EXPECT_EQ(c.architecture, "Qwen3MoeForCausalLM");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.moe.num_experts, 128);
  EXPECT_EQ(c.moe.top_k, 8);
  EXPECT_EQ(c.moe.intermediate, 768);
  EXPECT_TRUE(c.moe.renormalize);
  EXPECT_EQ(c.moe.shared_intermediate, 0);
  EXPECT_EQ(c.moe.sparse_layers, std::vector<int>(48, 1));
  EXPECT_TRUE(c.layer_windows.empty());

  c = read_hf_config(kConfigs + "mixtral-8x7b-v0.1.json");
  EXPECT_EQ(c.architecture, "MixtralForCausalLM");
  EXPECT_FALSE(c.qkv_bias || c.qk_norm);
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_EQ(c.moe.top_k, 2);
  EXPECT_EQ(c.moe.intermediate, 14336);  // intermediate_size: each expert's
  EXPECT_TRUE(c.moe.renormalize);        // Mixtral always renormalises
  EXPECT_EQ(c.moe.sparse_layers, std::vector<int>(32, 1));
  EXPECT_TRUE(c.layer_windows.empty());  // sliding_window null

  c = read_hf_config(kConfigs + "qwen1.5-moe-a2.7b.json");
  EXPECT_EQ(c.architecture, "Qwen2MoeForCausalLM");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_EQ(c.moe.num_experts, 60);
  EXPECT_EQ(c.moe.top_k, 4);
  EXPECT_EQ(c.moe.intermediate, 1408);
  EXPECT_FALSE(c.moe.renormalize);
  EXPECT_EQ(c.moe.shared_intermediate, 5632);
  EXPECT_TRUE(c.layer_windows.empty());  // use_sliding_window false
}

TEST(MoeConfig, SparseLayersAndWindows) {
  json j = published("qwen3-30b-a3b");
  j["num_hidden_layers"] = 6;
  j["decoder_sparse_step"] = 2;  // layers 1, 3, 5 ...
  j["mlp_only_layers"] = {3};    // ... but not 3
  const std::string dir = test::fresh_dir("sparse");
  test::write_text(dir + "/config.json", j.dump());
  ModelConfig c = read_hf_config(dir + "/config.json");
  EXPECT_EQ(c.moe.sparse_layers, (std::vector<int>{0, 1, 0, 0, 0, 1}));
  // Mixtral's window is on every layer; Qwen-MoE's from max_window_layers with the switch.
  j = published("mixtral-8x7b-v0.1");
  j["sliding_window"] = 4096;
  test::write_text(dir + "/config.json", j.dump());
  EXPECT_EQ(read_hf_config(dir + "/config.json").layer_windows, std::vector<int>(32, 4096));
  j = published("qwen1.5-moe-a2.7b");
  j["use_sliding_window"] = true;
  j["sliding_window"] = 4096;
  test::write_text(dir + "/config.json", j.dump());
  c = read_hf_config(dir + "/config.json");
  ASSERT_EQ(c.layer_windows.size(), 24u);
  EXPECT_EQ(c.layer_windows[20], 0);
  EXPECT_EQ(c.layer_windows[21], 4096);
}

TEST(MoeConfig, WrittenConfigsReadBack) {
  for (const test::MoeCase& k : test::moe_cases()) {
    SCOPED_TRACE(k.name);
    const ModelConfig want = k.config();
    const std::string dir = test::fresh_dir(k.name);
    test::write_text(dir + "/config.json", hf_config_json(want));
    const ModelConfig got = read_hf_config(dir + "/config.json");
    EXPECT_EQ(got.architecture, want.architecture);
    EXPECT_EQ(got.moe.num_experts, want.moe.num_experts);
    EXPECT_EQ(got.moe.top_k, want.moe.top_k);
    EXPECT_EQ(got.moe.intermediate, want.moe.intermediate);
    EXPECT_EQ(got.moe.renormalize, want.moe.renormalize);
    EXPECT_EQ(got.moe.shared_intermediate, want.moe.shared_intermediate);
    EXPECT_EQ(got.moe.sparse_layers, want.moe.sparse_layers);
    EXPECT_EQ(got.layer_windows, want.layer_windows);
  }
}

TEST(MoeConfig, UnsupportedRoutingIsNamed) {
  struct Bad {
    const char* base;
    const char* key;
    json value;
    const char* message;
  };
  for (const Bad& b : {
           Bad{"mixtral-8x7b-v0.1", "router_jitter_noise", 0.1,
               ": router_jitter_noise 0.1 is not supported (router jitter"},
           Bad{"qwen3-30b-a3b", "n_group", 8, ": n_group 8 is not supported (DeepSeek's grouped"},
           Bad{"qwen3-30b-a3b", "topk_group", 4, ": topk_group 4 is not supported"},
           Bad{"qwen3-30b-a3b", "topk_method", "noaux_tc", ": topk_method \"noaux_tc\""},
           Bad{"qwen3-30b-a3b", "scoring_func", "sigmoid", ": scoring_func \"sigmoid\""},
           Bad{"qwen3-30b-a3b", "routed_scaling_factor", 2.5, ": routed_scaling_factor 2.5"},
           Bad{"qwen3-30b-a3b", "kv_lora_rank", 512, "multi-head latent attention (MLA)"},
           Bad{"qwen3-30b-a3b", "router_bias", true, ": router_bias true is not supported (a bias"},
           Bad{"qwen3-30b-a3b", "shared_expert_intermediate_size", 1024,
               "only Qwen2MoeForCausalLM has a shared expert"},
           Bad{"qwen3-30b-a3b", "num_experts_per_tok", 129,
               ": num_experts_per_tok 129 must be in 1..num_experts (128)"},
           Bad{"qwen3-30b-a3b", "num_experts_per_tok", 0, ": num_experts_per_tok 0 must be"},
           Bad{"qwen1.5-moe-a2.7b", "moe_intermediate_size", -1, ": moe_intermediate_size -1"},
           Bad{"qwen3-30b-a3b", "decoder_sparse_step", 0, ": \"decoder_sparse_step\" must be >= 1"},
           Bad{"qwen3-30b-a3b", "mlp_only_layers", json::array({48}),
               ": \"mlp_only_layers\" entries must be layer numbers 0..47, got 48"},
           Bad{"qwen3-30b-a3b", "num_experts", 100000, ": num_experts 100000 must be in 1..4096"},
       }) {
    SCOPED_TRACE(b.key);
    json j = published(b.base);
    j[b.key] = b.value;
    EXPECT_MSG(config_error(j), b.message);
  }
  // Off values of those settings are accepted.
  json j = published("mixtral-8x7b-v0.1");
  j["router_jitter_noise"] = 0.0;
  j["n_group"] = 1;
  j["topk_method"] = "greedy";
  j["scoring_func"] = "softmax";
  EXPECT_EQ(config_error(j), "");
}

// A random Qwen3-MoE checkpoint in two shards, config.json edited by `edit`, extra tensors in
// a third file: the loader's error ("" when it loads).
std::string checkpoint_error(const std::function<void(json&)>& edit,
                             const std::vector<WriterTensor>& extra = {}) {
  const std::string dir = test::fresh_dir("moe_ckpt");
  write_random_hf_model(dir, test::qwen3_moe_config(), 3, DType::kF32, 2);
  json config = json::parse(test::read_bytes(dir + "/config.json"));
  edit(config);
  test::write_text(dir + "/config.json", config.dump());
  if (!extra.empty()) {
    write_safetensors(dir + "/extra.safetensors", extra);
    json index = json::parse(test::read_bytes(dir + "/model.safetensors.index.json"));
    for (const WriterTensor& t : extra) index["weight_map"][t.spec.name] = "extra.safetensors";
    test::write_text(dir + "/model.safetensors.index.json", index.dump());
  }
  return test::error_of([&] { load_model(dir); }, "");
}

WriterTensor zeros(const std::string& name, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return {TensorSpec{name, DType::kF32, shape}, std::vector<uint8_t>(size_t(n) * 4)};
}

TEST(MoeCheckpoint, DisagreementsNameTheTensor) {
  EXPECT_EQ(checkpoint_error([](json&) {}), "");
  // More experts in the config than in the checkpoint: the first missing one.
  EXPECT_MSG(checkpoint_error([](json& j) { j["num_experts"] = 9; }),
             ": missing tensor 'model.layers.0.mlp.experts.8.gate_proj.weight'");
  // Fewer: the checkpoint's extra expert.
  EXPECT_MSG(checkpoint_error([](json& j) { j["num_experts"] = 7; }),
             "tensor 'model.layers.0.mlp.experts.7.down_proj.weight' is expert 7 but config.json "
             "has 7 experts (num_experts)");
  // Expert sizes: the first expert projection of another shape.
  EXPECT_MSG(checkpoint_error([](json& j) { j["moe_intermediate_size"] = 32; }),
             ": tensor 'model.layers.0.mlp.experts.0.gate_proj.weight' has shape [64, 64] but the "
             "config needs [32, 64]");
  // A sparse layer the config makes dense.
  EXPECT_MSG(checkpoint_error([](json& j) { j["mlp_only_layers"] = {0, 1}; }),
             "layer 0 holds experts but config.json makes it a dense MLP layer");
  // Router and expert biases, experts stored fused (transformers 5's layout).
  EXPECT_MSG(checkpoint_error([](json&) {}, {zeros("model.layers.0.mlp.gate.bias", {8})}),
             "tensor 'model.layers.0.mlp.gate.bias': a router bias");
  EXPECT_MSG(checkpoint_error([](json&) {},
                              {zeros("model.layers.2.mlp.gate.e_score_correction_bias", {8})}),
             "e_score_correction_bias': a router bias (expert score correction) is not supported");
  EXPECT_MSG(checkpoint_error([](json&) {},
                              {zeros("model.layers.0.mlp.experts.gate_up_proj", {8, 128, 64})}),
             "tensor 'model.layers.0.mlp.experts.gate_up_proj': experts stored fused");
  EXPECT_MSG(checkpoint_error([](json&) {},
                              {zeros("model.layers.0.mlp.experts.1.up_proj.bias", {64})}),
             "experts.1.up_proj.bias': expert biases are not supported");
}

TEST(MoeCheckpoint, WrongRouterShapeIsNamed) {
  // Every tensor present, the router one row short of the config's experts.
  const std::string dir = test::fresh_dir("router");
  ModelConfig c = test::qwen3_moe_config();
  write_random_hf_model(dir, c, 3, DType::kF32, 1);
  // Rewrite the checkpoint with layer 2's router cut to 7 rows.
  auto model = load_model(dir);
  std::vector<WriterTensor> tensors;
  for (const auto& [name, shape] : llama_tensor_shapes(c)) {
    std::vector<float> v = weight_values(model->tensor(name));
    std::vector<int64_t> s = shape;
    if (name == "model.layers.2.mlp.gate.weight") s[0] = 7, v.resize(size_t(7 * shape[1]));
    tensors.push_back({TensorSpec{name, DType::kF32, s}, encode_values(v, DType::kF32)});
  }
  model.reset();
  write_safetensors(dir + "/model.safetensors", tensors);
  EXPECT_MSG(test::error_of([&] { load_model(dir); }, ""),
             ": tensor 'model.layers.2.mlp.gate.weight' has shape [7, 64] but the config needs "
             "[8, 64]");
}

}  // namespace
}  // namespace flashserve

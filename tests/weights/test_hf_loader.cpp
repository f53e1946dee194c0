// Random HF models through write_random_hf_model and load_model: configs (GQA, tied/untied,
// head_dim 64/128, llama3 rope_scaling, eos lists) and every tensor's bytes come back exactly, for
// one file and for shards, in f32, f16 and bf16.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "tests/weights/weights_test_util.h"
#include "weights/hf_config.h"
#include "weights/llama_tensors.h"
#include "weights/loaded_model.h"
#include "weights/random_model.h"
#include "weights/safetensors.h"
#include "weights/safetensors_writer.h"

namespace flashserve {
namespace {

ModelConfig gqa_tied_config() {  // head_dim 64, 4 q heads over 2 kv heads
  return test::small_config({256, 96, 2, 4, 2, 64, 40, 128, true});
}

ModelConfig untied_llama3_config() {  // head_dim 128 given explicitly (!= hidden/heads)
  ModelConfig c = test::small_config({64, 80, 3, 2, 1, 128, 33, 256, false});
  c.rms_norm_eps = 1e-6f;
  c.rope_theta = 500000.f;
  c.rope_scaling = {"llama3", 8.f, 1.f, 4.f, 64};
  c.bos_token_id = 7;
  c.eos_token_ids = {3, 9};
  return c;
}

void expect_same_config(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_q_heads, b.num_q_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_model_len, b.max_model_len);
  EXPECT_FLOAT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_FLOAT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type);
  EXPECT_FLOAT_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
  EXPECT_FLOAT_EQ(a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor);
  EXPECT_FLOAT_EQ(a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor);
  EXPECT_EQ(a.rope_scaling.original_max_position_embeddings,
            b.rope_scaling.original_max_position_embeddings);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
}

struct RoundTripCase {
  const char* name;
  ModelConfig config;
  DType dtype;
  int num_shards;
};

TEST(HfLoader, RandomModelsRoundTripExactly) {
  const uint64_t seed = 1234;
  const std::vector<RoundTripCase> cases = {
      {"tied_f32", gqa_tied_config(), DType::kF32, 1},
      {"tied_bf16_sharded", gqa_tied_config(), DType::kBF16, 3},
      {"untied_f16", untied_llama3_config(), DType::kF16, 1},
      {"untied_f32_sharded", untied_llama3_config(), DType::kF32, 4},
      {"untied_bf16", untied_llama3_config(), DType::kBF16, 2},
  };
  for (const auto& tc : cases) {
    SCOPED_TRACE(tc.name);
    const std::string dir = test::fresh_dir(tc.name);
    write_random_hf_model(dir, tc.config, seed, tc.dtype, tc.num_shards);
    EXPECT_EQ(test::fs::exists(dir + "/model.safetensors.index.json"), tc.num_shards > 1);
    auto model = load_model(dir);
    expect_same_config(model->config(), tc.config);
    EXPECT_EQ(model->has_tensor("lm_head.weight"), !tc.config.tie_word_embeddings);
    for (const auto& [name, shape] : llama_tensor_shapes(tc.config)) {
      const TensorView& t = model->tensor(name);
      ASSERT_EQ(t.shape, shape) << name;
      ASSERT_EQ(t.dtype, tc.dtype) << name;
      const auto want = encode_values(random_tensor_values(name, shape, seed), tc.dtype);
      ASSERT_EQ(std::memcmp(t.data, want.data(), want.size()), 0) << name;
    }
    // Spot checks that values are what the header promises: norms near 1, matrices small.
    const auto norm = random_tensor_values("model.norm.weight", {tc.config.hidden_size}, seed);
    for (float v : norm) ASSERT_TRUE(v > 0.89f && v < 1.11f) << v;
    const auto& e = model->tensor("model.embed_tokens.weight");
    EXPECT_EQ(e.dtype, tc.dtype);
    if (tc.num_shards == 1) {
      EXPECT_TRUE(test::is_mapped_from(e.data, dir + "/model.safetensors"));
    }
  }
}

TEST(HfLoader, RandomValuesAreDeterministicAndSeeded) {
  const auto a = random_tensor_values("model.layers.0.mlp.up_proj.weight", {8, 16}, 5);
  const auto b = random_tensor_values("model.layers.0.mlp.up_proj.weight", {8, 16}, 5);
  const auto c = random_tensor_values("model.layers.0.mlp.up_proj.weight", {8, 16}, 6);
  const auto d = random_tensor_values("model.layers.1.mlp.up_proj.weight", {8, 16}, 5);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  double sum2 = 0;
  const auto big = random_tensor_values("x.weight", {100000}, 1, 0.5f);
  for (float v : big) sum2 += double(v) * v;
  EXPECT_NEAR(std::sqrt(sum2 / big.size()), 0.5, 0.01);  // std == scale
}

TEST(HfLoader, WriterAlignsMixedDtypes) {
  // An odd-sized f16 tensor written first must not misalign the f32 one after it.
  const std::string path = test::fresh_dir("mixed") + "/mixed.safetensors";
  write_safetensors(path, {{{"a", DType::kF16, {3}}, encode_values({1.f, 2.f, 3.f}, DType::kF16)},
                           {{"b", DType::kF32, {2, 1}}, encode_values({4.f, -5.f}, DType::kF32)}});
  MappedFile file(path);
  const auto entries = parse_safetensors(file);
  ASSERT_EQ(entries.size(), 2u);
  const TensorView a = safetensors_view(entries.at("a"), "a", path);
  const TensorView b = safetensors_view(entries.at("b"), "b", path);
  EXPECT_EQ(b.shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(static_cast<const float*>(b.data)[1], -5.f);
  EXPECT_EQ(f16_bits_to_float(static_cast<const uint16_t*>(a.data)[2]), 3.f);
  EXPECT_EQ((file.size() - 8 - 8 - 6) % 8, 0u) << "header padded to a multiple of 8";
}

TEST(HfLoader, ConfigDefaultsAndVariants) {
  const std::string dir = test::fresh_dir("cfg");
  // Minimal config: defaults for kv heads, head_dim, eps, theta, bos/eos, no rope_scaling.
  test::write_text(dir + "/config.json", R"({"model_type": "llama", "hidden_size": 32,
      "intermediate_size": 40, "num_hidden_layers": 1, "num_attention_heads": 4,
      "vocab_size": 50, "eos_token_id": [2, 5], "rope_scaling": {"type": "default"},
      "head_dim": null})");
  ModelConfig c = read_hf_config(dir + "/config.json");
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.f);
  EXPECT_EQ(c.max_model_len, 2048);
  EXPECT_EQ(c.rope_scaling.type, "none");
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{2, 5}));
  test::write_text(dir + "/config.json", R"({"architectures": ["LlamaForCausalLM"],
      "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 1,
      "num_attention_heads": 4, "num_key_value_heads": 1, "vocab_size": 50, "eos_token_id": 128001,
      "rope_scaling": {"type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})");
  c = read_hf_config(dir + "/config.json");
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{128001});
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 32.f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
}

// transformers >= 5 writes RoPE as "rope_parameters" and may leave out rope_theta/rope_scaling
// (Llama-3.2 configs saved by transformers 5 have only this form; reading them as the defaults
// gives logits far from transformers').
TEST(HfLoader, Transformers5RopeParameters) {
  const std::string dir = test::fresh_dir("cfg5");
  const std::string sizes = R"("model_type": "llama", "hidden_size": 32, "intermediate_size": 40,
      "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 50, )";
  test::write_text(dir + "/config.json", "{" + sizes + R"("rope_parameters": {
      "rope_theta": 500000.0, "rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})");
  ModelConfig c = read_hf_config(dir + "/config.json");
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.f);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 32.f);
  EXPECT_FLOAT_EQ(c.rope_scaling.high_freq_factor, 4.f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  // The default type with only a theta; it wins over a stale top-level key.
  test::write_text(dir + "/config.json", "{" + sizes + R"("rope_theta": 10000.0,
      "rope_parameters": {"rope_theta": 250000.0, "rope_type": "default"}})");
  c = read_hf_config(dir + "/config.json");
  EXPECT_FLOAT_EQ(c.rope_theta, 250000.f);
  EXPECT_EQ(c.rope_scaling.type, "none");
  // Bad forms are clear errors naming the file.
  test::write_text(dir + "/config.json", "{" + sizes + R"("rope_parameters": 3})");
  EXPECT_THROW(read_hf_config(dir + "/config.json"), Error);
  test::write_text(dir + "/config.json", "{" + sizes + R"("rope_parameters": {"rope_type": "yarn"}})");
  EXPECT_THROW(read_hf_config(dir + "/config.json"), Error);
}

TEST(HfLoader, TokenizerBesideAndExtraTensorsIgnored) {
  const std::string dir = test::fresh_dir("tok");
  ModelConfig c = gqa_tied_config();
  write_random_hf_model(dir, c, 1, DType::kF32);
  EXPECT_EQ(load_model(dir)->tokenizer_path(), "");
  test::write_text(dir + "/tokenizer.model", "x");
  EXPECT_EQ(load_model(dir)->tokenizer_path(), dir + "/tokenizer.model");
  // A file with an extra (even non-float) tensor still loads; the extra one is not exposed.
  std::vector<WriterTensor> tensors;
  for (const auto& [name, shape] : llama_tensor_shapes(c)) {
    std::vector<float> v = random_tensor_values(name, shape, 1);
    tensors.push_back({{name, DType::kF32, shape}, encode_values(v, DType::kF32)});
  }
  tensors.push_back({{"model.layers.0.self_attn.rotary_emb.inv_freq", DType::kI32, {3}},
                     std::vector<uint8_t>(12, 0)});
  write_safetensors(dir + "/model.safetensors", tensors);
  auto model = load_model(dir);
  EXPECT_FALSE(model->has_tensor("model.layers.0.self_attn.rotary_emb.inv_freq"));
  EXPECT_TRUE(model->has_tensor("model.layers.1.mlp.up_proj.weight"));
}

}  // namespace
}  // namespace flashserve

// The Llama family's architectures in config.json: each as published on the Hub
// (tests/weights/data/configs, trimmed to the fields that matter) parses to the right sizes and
// family flags; unsupported architectures and settings are start-up errors that name them; and a
// random-weight model of each family is written, read back with its extra tensors, and refused
// when one of them is missing.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "core/error.h"
#include "tests/weights/weights_test_util.h"
#include "weights/hf_config.h"
#include "weights/loaded_model.h"
#include "weights/random_model.h"

namespace flashserve {
namespace {

using nlohmann::json;

const std::string kConfigs = std::string(FS_SOURCE_DIR) + "/tests/weights/data/configs/";

json published(const std::string& name) {
  return json::parse(test::read_bytes(kConfigs + name + ".json"));
}

// The error read_hf_config throws for `j` ("" when it accepts it).
std::string config_error(const json& j) {
  const std::string dir = test::fresh_dir("err");
  test::write_text(dir + "/config.json", j.dump());
  try {
    read_hf_config(dir + "/config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_MSG(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

TEST(ModelFamilies, PublishedConfigsParse) {
  ModelConfig c = read_hf_config(kConfigs + "llama3.2-1b-instruct.json");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_FALSE(c.qkv_bias || c.qk_norm);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.f);

  c = read_hf_config(kConfigs + "mistral-7b-instruct-v0.3.json");
  EXPECT_EQ(c.architecture, "MistralForCausalLM");
  EXPECT_FALSE(c.qkv_bias || c.qk_norm || c.tie_word_embeddings);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.vocab_size, 32768);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);

  // use_sliding_window false: its sliding_window (the whole context here) is not used.
  c = read_hf_config(kConfigs + "qwen2.5-0.5b-instruct.json");
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 64);  // 896 / 14
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);

  // head_dim 128 while hidden / heads = 64; rope_theta written as an integer.
  c = read_hf_config(kConfigs + "qwen3-0.6b.json");
  EXPECT_EQ(c.architecture, "Qwen3ForCausalLM");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_q_heads * c.head_dim, 2048);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.rope_scaling.type, "none");
}

TEST(ModelFamilies, ModelTypeAloneAndDefaults) {
  json j = published("qwen3-0.6b");
  j.erase("architectures");
  j.erase("head_dim");  // Qwen3Config's default head_dim is 128, not hidden / heads
  const std::string dir = test::fresh_dir("mt");
  test::write_text(dir + "/config.json", j.dump());
  const ModelConfig c = read_hf_config(dir + "/config.json");
  EXPECT_EQ(c.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c.head_dim, 128);
  // The first supported name in the list wins (lists of more than one are rare but legal).
  j["architectures"] = {"SomethingElse", "Qwen3ForCausalLM"};
  EXPECT_EQ(config_error(j), "");
}

TEST(ModelFamilies, UnsupportedArchitecturesAreNamed) {
  json j = published("qwen2.5-0.5b-instruct");
  j["architectures"] = {"Qwen2MoeForCausalLM"};
  EXPECT_MSG(config_error(j), ": unsupported architecture [\"Qwen2MoeForCausalLM\"] (supported: "
                              "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                              "Qwen3ForCausalLM)");
  j.erase("architectures");
  j["model_type"] = "gemma";
  EXPECT_MSG(config_error(j), "model_type \"gemma\" is none of the supported ones");
}

TEST(ModelFamilies, UnsupportedSettingsAreErrors) {
  // Mistral 7B v0.1: a 4096-token window over a 32768-token context.
  EXPECT_MSG(config_error(published("mistral-7b-v0.1")),
             ": sliding_window 4096 is smaller than max_position_embeddings 32768: "
             "sliding-window attention is not supported");
  // The same window over a context it covers is full attention: accepted.
  json j = published("mistral-7b-v0.1");
  j["max_position_embeddings"] = 4096;
  EXPECT_EQ(config_error(j), "");
  // Qwen2 with its window switched on, or named through layer_types.
  j = published("qwen2.5-0.5b-instruct");
  j["use_sliding_window"] = true;
  j["sliding_window"] = 4096;
  EXPECT_MSG(config_error(j), "sliding_window 4096 is smaller than max_position_embeddings");
  j["use_sliding_window"] = false;
  EXPECT_EQ(config_error(j), "");  // off: the window is ignored, as transformers does
  j["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_MSG(config_error(j), "sliding-window attention is not supported");
  // Qwen2.5's long-context YaRN setting.
  j = published("qwen2.5-0.5b-instruct");
  j["rope_scaling"] = {{"factor", 4.0}, {"original_max_position_embeddings", 32768},
                       {"type", "yarn"}};
  EXPECT_MSG(config_error(j),
             ": unsupported rope_scaling type \"yarn\" (supported: default, llama3)");
  // Biases where the architecture has none, another activation, quantized weights.
  j = published("llama3.2-1b-instruct");
  j["attention_bias"] = true;
  EXPECT_MSG(config_error(j), ": attention_bias true (biases on the attention projections) is not "
                              "supported for LlamaForCausalLM");
  j = published("qwen3-0.6b");
  j["attention_bias"] = true;
  EXPECT_MSG(config_error(j), "is not supported for Qwen3ForCausalLM");
  j = published("llama3.2-1b-instruct");
  j["mlp_bias"] = true;
  EXPECT_MSG(config_error(j), ": mlp_bias true");
  j = published("mistral-7b-instruct-v0.3");
  j["hidden_act"] = "gelu";
  EXPECT_MSG(config_error(j), ": hidden_act \"gelu\" is not supported (only \"silu\")");
  j = published("qwen3-0.6b");
  j["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}};
  EXPECT_MSG(config_error(j), ": quantization_config quant_method \"awq\" is not supported (only "
                              "\"fp8\"");
  // FP8 (docs/FP8.md): per-tensor and per-channel scales load; block-wise scales, another
  // element format or activation scheme do not.
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  EXPECT_MSG(config_error(j), ": quantization_config weight_block_size [128,128] (block-wise FP8 "
                              "scales, weight_scale_inv) is not supported yet");
  j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e5m2"}};
  EXPECT_MSG(config_error(j), ": quantization_config fmt \"e5m2\" is not supported (only e4m3)");
  j["quantization_config"] = {{"quant_method", "fp8"}, {"activation_scheme", "per_token"}};
  EXPECT_MSG(config_error(j), ": quantization_config activation_scheme \"per_token\"");
  j["quantization_config"] = {{"activation_scheme", "static"}};
  EXPECT_MSG(config_error(j), ": quantization_config quant_method (missing) is not supported");
}

ModelConfig tiny(const std::string& architecture) {
  // head_dim 16 != hidden 32 / 4 heads, as Qwen3 has it.
  ModelConfig c = test::small_config({32, 48, 2, 4, 2, 16, 64, 128, false});
  set_architecture(c, architecture);
  return c;
}

TEST(ModelFamilies, RandomModelsOfEachFamilyRoundTrip) {
  for (const char* arch :
       {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}) {
    SCOPED_TRACE(arch);
    const ModelConfig c = tiny(arch);
    const std::string dir = test::fresh_dir(arch);
    write_random_hf_model(dir, c, 3, DType::kBF16, 2);
    auto m = load_model(dir);
    EXPECT_EQ(m->config().architecture, arch);
    EXPECT_EQ(m->config().qkv_bias, c.qkv_bias);
    EXPECT_EQ(m->config().qk_norm, c.qk_norm);
    const std::string p = "model.layers.1.self_attn.";
    EXPECT_EQ(m->has_tensor(p + "q_proj.bias"), c.qkv_bias);
    EXPECT_EQ(m->has_tensor(p + "q_norm.weight"), c.qk_norm);
    if (c.qkv_bias) {
      EXPECT_EQ(m->tensor(p + "q_proj.bias").shape, std::vector<int64_t>{64});
      EXPECT_EQ(m->tensor(p + "v_proj.bias").shape, std::vector<int64_t>{32});
    }
    if (c.qk_norm) EXPECT_EQ(m->tensor(p + "k_norm.weight").shape, std::vector<int64_t>{16});
  }
  ModelConfig other;
  EXPECT_THROW(set_architecture(other, "GPT2LMHeadModel"), Error);
}

TEST(ModelFamilies, MissingFamilyTensorIsNamed) {
  // Llama weights under a Qwen2 config: the biases are missing.
  const std::string dir = test::fresh_dir("missing");
  write_random_hf_model(dir, tiny("LlamaForCausalLM"), 3, DType::kF32);
  test::write_text(dir + "/config.json", hf_config_json(tiny("Qwen2ForCausalLM")));
  try {
    load_model(dir);
    ADD_FAILURE() << "loaded Llama weights as Qwen2";
  } catch (const Error& e) {
    EXPECT_MSG(std::string(e.what()), "missing tensor 'model.layers.0.self_attn.");
    EXPECT_MSG(std::string(e.what()), "_proj.bias'");
  }
  // A Qwen3 q_norm of the wrong size.
  const std::string dir3 = test::fresh_dir("shape");
  ModelConfig c = tiny("Qwen3ForCausalLM");
  write_random_hf_model(dir3, c, 3, DType::kF32);
  c.head_dim = 8;
  c.num_q_heads = 8;
  c.num_kv_heads = 4;  // same projection sizes, other head_dim
  test::write_text(dir3 + "/config.json", hf_config_json(c));
  try {
    load_model(dir3);
    ADD_FAILURE() << "loaded q_norm [16] for head_dim 8";
  } catch (const Error& e) {
    EXPECT_MSG(std::string(e.what()), "q_norm.weight");
  }
}

}  // namespace
}  // namespace flashserve

// The Llama family's architectures in config.json: each as published on the Hub
// (tests/weights/data/configs, trimmed to the fields that matter) parses to the right sizes,
// family flags and RoPE settings (Gemma's and the sliding windows: test_attention_config.cpp);
// each variant's config written by hf_config_json reads back;
// unsupported architectures and settings are start-up errors that name them; and a random-weight
// model of each family is written, read back with its extra (or fused) tensors, and refused when
// one of them is missing.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "core/error.h"
#include "tests/weights/config_test_util.h"
#include "tests/weights/weights_test_util.h"
#include "weights/attention_config.h"
#include "weights/hf_config.h"
#include "weights/loaded_model.h"
#include "weights/random_model.h"

namespace flashserve {
namespace {

using nlohmann::json;

using test::config_error;
using test::kConfigs;
using test::published;

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

TEST(ModelFamilies, PublishedConfigsOfTheFoldedFamiliesParse) {
  // Phi-4-mini (its factor lists are stand-ins of the right length): fused projections, 96 of 128
  // dims rotated, LongRoPE over an original 4096-token context with the top-level key.
  ModelConfig c = read_hf_config(kConfigs + "phi-4-mini-instruct.json");
  EXPECT_EQ(c.architecture, "Phi3ForCausalLM");
  EXPECT_TRUE(c.fused_projections);
  EXPECT_FALSE(c.qkv_bias || c.qk_norm || c.qk_norm_full || c.post_norms);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_FLOAT_EQ(c.partial_rotary_factor, 0.75f);
  EXPECT_EQ(c.rope_scaling.type, "longrope");
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 32.f);  // 131072 / 4096
  EXPECT_EQ(c.rope_scaling.long_factor.size(), 48u);
  EXPECT_FLOAT_EQ(c.rope_scaling.long_factor[2], 2.f);
  EXPECT_EQ(c.max_model_len, 131072);
  EXPECT_TRUE(c.tie_word_embeddings);

  c = read_hf_config(kConfigs + "granite-3.0-2b-instruct.json");
  EXPECT_EQ(c.architecture, "GraniteForCausalLM");
  EXPECT_FLOAT_EQ(c.embedding_multiplier, 12.f);
  EXPECT_FLOAT_EQ(c.residual_multiplier, 0.22f);
  EXPECT_FLOAT_EQ(c.attention_multiplier, 0.015625f);
  EXPECT_FLOAT_EQ(c.logits_scaling, 8.f);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{0});

  c = read_hf_config(kConfigs + "olmo-2-0425-1b.json");
  EXPECT_EQ(c.architecture, "Olmo2ForCausalLM");
  EXPECT_TRUE(c.post_norms && c.qk_norm_full);
  EXPECT_FALSE(c.qk_norm || c.fused_projections || c.tie_word_embeddings);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.f);
  EXPECT_FLOAT_EQ(c.attention_multiplier, 0.f);  // 1/sqrt(head_dim): not Granite

  // SmolLM3: every fourth layer without RoPE; bos_token_id null takes the default.
  c = read_hf_config(kConfigs + "smollm3-3b.json");
  EXPECT_EQ(c.architecture, "SmolLM3ForCausalLM");
  ASSERT_EQ(c.rope_layers.size(), 36u);
  EXPECT_EQ(c.rope_layers[2], 1);
  EXPECT_EQ(c.rope_layers[3], 0);
  EXPECT_EQ(c.rope_layers[35], 0);
  json j = published("smollm3-3b");
  j.erase("no_rope_layers");  // then from no_rope_layer_interval
  j["no_rope_layer_interval"] = 3;
  const std::string dir = test::fresh_dir("smol");
  test::write_text(dir + "/config.json", j.dump());
  c = read_hf_config(dir + "/config.json");
  EXPECT_EQ(c.rope_layers[1], 1);
  EXPECT_EQ(c.rope_layers[2], 0);
  EXPECT_EQ(c.rope_layers[5], 0);

  // Qwen2.5 with YaRN as its model card sets it: the context grows to factor x the original.
  j = published("qwen2.5-0.5b-instruct");
  j["rope_scaling"] = {{"factor", 4.0}, {"original_max_position_embeddings", 32768},
                       {"type", "yarn"}};
  test::write_text(dir + "/config.json", j.dump());
  c = read_hf_config(dir + "/config.json");
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 4.f);
  EXPECT_FLOAT_EQ(c.rope_scaling.beta_fast, 32.f);
  EXPECT_EQ(c.max_model_len, 131072);
  // Linear and dynamic scaling; dynamic is plain RoPE within the configured context.
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(config_error(j), "");
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  EXPECT_EQ(config_error(j), "");
}

// Each new variant's config.json comes back as written (the random models' configs).
TEST(ModelFamilies, VariantConfigsRoundTrip) {
  ModelConfig c = test::small_config({32, 48, 2, 4, 2, 16, 64, 128, false});
  set_architecture(c, "Phi3ForCausalLM");
  c.partial_rotary_factor = 0.5f;
  c.rope_scaling.type = "longrope";
  c.rope_scaling.original_max_position_embeddings = 32;
  c.rope_scaling.short_factor = {1.f, 1.5f, 2.f, 2.5f};
  c.rope_scaling.long_factor = {3.f, 4.f, 5.f, 6.f};
  const std::string dir = test::fresh_dir("rt");
  test::write_text(dir + "/config.json", hf_config_json(c));
  ModelConfig d = read_hf_config(dir + "/config.json");
  EXPECT_EQ(d.rope_scaling.long_factor, c.rope_scaling.long_factor);
  EXPECT_EQ(d.rope_scaling.short_factor, c.rope_scaling.short_factor);
  EXPECT_EQ(d.rope_scaling.original_max_position_embeddings, 32);
  EXPECT_FLOAT_EQ(d.rope_scaling.factor, 4.f);  // 128 / 32
  EXPECT_FLOAT_EQ(d.partial_rotary_factor, 0.5f);

  set_architecture(c, "Qwen3ForCausalLM");
  c.partial_rotary_factor = 1.f;
  c.rope_scaling = {};
  c.rope_scaling.type = "yarn";
  c.rope_scaling.factor = 8.f;
  c.rope_scaling.original_max_position_embeddings = 64;
  c.rope_scaling.mscale = 0.7f;
  c.rope_scaling.mscale_all_dim = 0.5f;
  c.rope_scaling.truncate = false;
  test::write_text(dir + "/config.json", hf_config_json(c));
  d = read_hf_config(dir + "/config.json");
  EXPECT_FLOAT_EQ(d.rope_scaling.mscale, 0.7f);
  EXPECT_FLOAT_EQ(d.rope_scaling.mscale_all_dim, 0.5f);
  EXPECT_FALSE(d.rope_scaling.truncate);
  EXPECT_EQ(d.max_model_len, 512);  // 8 x 64

  set_architecture(c, "GraniteForCausalLM");
  c.rope_scaling = {};
  c.embedding_multiplier = 3.f, c.residual_multiplier = 0.5f, c.attention_multiplier = 0.2f;
  c.logits_scaling = 4.f;
  test::write_text(dir + "/config.json", hf_config_json(c));
  d = read_hf_config(dir + "/config.json");
  EXPECT_FLOAT_EQ(d.embedding_multiplier, 3.f);
  EXPECT_FLOAT_EQ(d.residual_multiplier, 0.5f);
  EXPECT_FLOAT_EQ(d.attention_multiplier, 0.2f);
  EXPECT_FLOAT_EQ(d.logits_scaling, 4.f);

  c = test::small_config({32, 48, 2, 4, 2, 16, 64, 128, false});
  set_architecture(c, "SmolLM3ForCausalLM");
  c.rope_layers = {0, 1};
  test::write_text(dir + "/config.json", hf_config_json(c));
  EXPECT_EQ(read_hf_config(dir + "/config.json").rope_layers, c.rope_layers);

  // Windows and Gemma's settings: four layers, so the patterns show.
  c.num_layers = 4;
  c.rope_layers.clear();
  for (const char* arch : {"MistralForCausalLM", "Qwen2ForCausalLM", "Gemma2ForCausalLM",
                           "Gemma3ForCausalLM"}) {
    SCOPED_TRACE(arch);
    set_architecture(c, arch);
    const bool gemma3 = c.architecture == "Gemma3ForCausalLM";
    c.rope_local_theta = gemma3 ? 500.f : 0.f;
    c.rope_layers.clear();
    if (c.architecture == "Qwen2ForCausalLM") c.layer_windows = {0, 0, 16, 16};
    else set_sliding_layers(c, 16, c.architecture == "MistralForCausalLM" ? 0 : gemma3 ? 3 : 2);
    c.query_pre_attn_scalar = c.sandwich_norms ? 24.f : 0.f;
    c.attn_logit_softcapping = gemma3 ? 0.f : c.sandwich_norms ? 20.f : 0.f;
    c.final_logit_softcapping = c.sandwich_norms ? 15.f : 0.f;
    test::write_text(dir + "/config.json", hf_config_json(c));
    d = read_hf_config(dir + "/config.json");
    EXPECT_EQ(d.layer_windows, c.layer_windows);
    EXPECT_EQ(d.rope_layers, c.rope_layers);
    EXPECT_FLOAT_EQ(d.rope_local_theta, c.rope_local_theta);
    EXPECT_FLOAT_EQ(d.query_pre_attn_scalar, c.query_pre_attn_scalar);
    EXPECT_FLOAT_EQ(d.attn_logit_softcapping, c.attn_logit_softcapping);
    EXPECT_FLOAT_EQ(d.final_logit_softcapping, c.final_logit_softcapping);
    EXPECT_EQ(d.gelu_mlp, c.sandwich_norms);
  }
  EXPECT_EQ(c.layer_windows, (std::vector<int>{16, 16, 0, 16}));  // Gemma 3, every third global
  EXPECT_EQ(c.rope_layers, (std::vector<int>{2, 2, 1, 2}));
}

TEST(ModelFamilies, VariantSettingsThatCannotBeServedAreErrors) {
  // Factor lists of the wrong length for the rotated dims.
  json j = published("phi-4-mini-instruct");
  j["partial_rotary_factor"] = 0.5;
  EXPECT_MSG(config_error(j), ": longrope short_factor and long_factor need 32 entries each");
  j["partial_rotary_factor"] = 0.01;
  EXPECT_MSG(config_error(j), "does not give an even number of rotated dims");
  j = published("phi-4-mini-instruct");
  j["rope_scaling"].erase("long_factor");
  EXPECT_MSG(config_error(j), ": longrope needs \"long_factor\"");
  // Partial rotary where transformers' model rotates every dim.
  j = published("llama3.2-1b-instruct");
  j["partial_rotary_factor"] = 0.5;
  EXPECT_MSG(config_error(j), ": partial_rotary_factor 0.5 is not supported for LlamaForCausalLM");
  // Dynamic NTK that would change the base within the served context.
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}, {"original_max_position_embeddings", 8192}};
  j.erase("partial_rotary_factor");
  EXPECT_MSG(config_error(j), "changes RoPE's base with the sequence length, which is not supported");
  j["rope_scaling"] = {{"type", "yarn"}};
  EXPECT_MSG(config_error(j), ": yarn scaling needs \"factor\"");
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"beta_fast", -1}};
  EXPECT_MSG(config_error(j), ": bad yarn scaling");
  // Granite's multipliers must be positive; SmolLM3's NoPE list must cover every layer.
  j = published("granite-3.0-2b-instruct");
  j["logits_scaling"] = 0;
  EXPECT_MSG(config_error(j), "must be positive");
  j = published("smollm3-3b");
  j["no_rope_layers"] = {1, 0};
  EXPECT_MSG(config_error(j), ": no_rope_layers has 2 entries for 36 layers");
  j["no_rope_layers"] = {2};
  EXPECT_MSG(config_error(j), ": \"no_rope_layers\" entries must be 0 or 1");
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
  j["architectures"] = {"DbrxForCausalLM"};
  EXPECT_MSG(config_error(j), ": unsupported architecture [\"DbrxForCausalLM\"] (supported: "
                              "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                              "Qwen3ForCausalLM, Phi3ForCausalLM, GraniteForCausalLM, "
                              "Olmo2ForCausalLM, SmolLM3ForCausalLM, Gemma2ForCausalLM, "
                              "Gemma3ForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, "
                              "MixtralForCausalLM, GptOssForCausalLM)");
  // Mixtures of experts whose routing or attention the forward pass lacks: the error says which.
  j["architectures"] = {"DeepseekV3ForCausalLM"};
  EXPECT_MSG(config_error(j), ": architecture DeepseekV3ForCausalLM is not supported: DeepSeek's "
                              "grouped top-k routing (n_group, topk_group), its expert "
                              "score-correction bias and multi-head latent attention");
  j["architectures"] = {"DeepseekV2ForCausalLM"};
  EXPECT_MSG(config_error(j), "multi-head latent attention (MLA, kv_lora_rank)");
  j.erase("architectures");
  j["model_type"] = "gemma";
  EXPECT_MSG(config_error(j), "model_type \"gemma\" is none of the supported ones");
}

TEST(ModelFamilies, UnsupportedSettingsAreErrors) {
  // Qwen2-VL's multimodal RoPE.
  json j = published("qwen2.5-0.5b-instruct");
  j["rope_scaling"] = {{"mrope_section", {16, 24, 24}}, {"type", "mrope"}};
  EXPECT_MSG(config_error(j), ": unsupported rope_scaling type \"mrope\" (supported: default, "
                              "llama3, linear, dynamic, yarn, longrope)");
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
  EXPECT_MSG(config_error(j), ": hidden_act \"gelu\" is not supported for MistralForCausalLM "
                              "(only \"silu\")");
  j = published("qwen3-0.6b");
  j["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"bits", 4}};
  EXPECT_MSG(config_error(j), ": quantization_config quant_method \"bitsandbytes\" is not "
                              "supported (only \"fp8\"");
  // FP8 (docs/FP8.md, docs/QUANTIZATION.md): a malformed block size, another element format or
  // activation scheme do not load.
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 0}}};
  EXPECT_MSG(config_error(j), ": quantization_config weight_block_size [128,0] is not supported");
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
       {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
        "Phi3ForCausalLM", "GraniteForCausalLM", "Olmo2ForCausalLM", "SmolLM3ForCausalLM",
        "Gemma2ForCausalLM", "Gemma3ForCausalLM"}) {
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
    EXPECT_EQ(m->has_tensor(p + "q_norm.weight"), c.qk_norm || c.qk_norm_full);
    if (c.qkv_bias) {
      EXPECT_EQ(m->tensor(p + "q_proj.bias").shape, std::vector<int64_t>{64});
      EXPECT_EQ(m->tensor(p + "v_proj.bias").shape, std::vector<int64_t>{32});
    }
    if (c.qk_norm) EXPECT_EQ(m->tensor(p + "k_norm.weight").shape, std::vector<int64_t>{16});
    // Olmo2: q/k norms over the whole projections, a norm after the MLP, none before attention.
    EXPECT_EQ(m->has_tensor("model.layers.1.post_feedforward_layernorm.weight"),
              c.post_norms || c.sandwich_norms);
    EXPECT_EQ(m->has_tensor("model.layers.1.pre_feedforward_layernorm.weight"), c.sandwich_norms);
    EXPECT_EQ(m->has_tensor("model.layers.1.input_layernorm.weight"), !c.post_norms);
    if (c.qk_norm_full) EXPECT_EQ(m->tensor(p + "k_norm.weight").shape, std::vector<int64_t>{32});
    // Phi3: the fused tensors are in the file; q/k/v and gate/up are row ranges of them.
    EXPECT_EQ(m->has_tensor(p + "qkv_proj.weight"), c.fused_projections);
    EXPECT_EQ(m->tensor(p + "v_proj.weight").shape, (std::vector<int64_t>{32, 32}));
    EXPECT_EQ(m->tensor("model.layers.1.mlp.up_proj.weight").shape, (std::vector<int64_t>{48, 32}));
    if (c.fused_projections) {
      const TensorView& qkv = m->tensor(p + "qkv_proj.weight");
      const TensorView& v = m->tensor(p + "v_proj.weight");
      EXPECT_EQ(qkv.shape, (std::vector<int64_t>{128, 32}));
      EXPECT_EQ(static_cast<const char*>(v.data),
                static_cast<const char*>(qkv.data) + 96 * 32 * dtype_size(qkv.dtype));
    }
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

// Random-weight HF models written by write_random_hf_model (GQA and MHA, tied and untied heads,
// head_dim 64 and 128, f32/f16/bf16, single file and sharded; each architecture of the family:
// Llama, Mistral, Qwen2's q/k/v biases, Qwen3's per-head q/k norms with a head_dim other than
// hidden / heads, Phi3's fused projections and partial rotary, Granite's multipliers, Olmo2's
// post-norms and whole-projection q/k norms, SmolLM3's NoPE layers, Gemma 2's and Gemma 3's
// sandwich norms, GeGLU, soft-caps and local RoPE, sliding windows of Gemma, Mistral and Qwen2's
// max_window_layers, shorter than the prompt; RoPE plain, llama3, linear, dynamic, YaRN (with and
// without mscale) and LongRoPE (long and short factors)) load and give, at every prompt position,
// the logits of the independent float64 numpy forward in tools/llama_reference.py (run through
// /usr/bin/python3; skipped when numpy is missing). The folded families' and the windowed models'
// decode path gives numpy's greedy continuation (block size 4: 21 tokens span several blocks and
// outgrow the windows). stories260K (llama2.c layout, interleaved RoPE in the reference) is checked
// the same way.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "model/model_runner.h"
#include "tests/model/model_test_util.h"
#include "tests/model/numpy_reference.h"
#include "weights/attention_config.h"
#include "weights/hf_config.h"

namespace flashserve::test {
namespace {

// C++ runs fp32 (dot products of up to 384 terms, 2 layers) against numpy's float64: observed
// errors are ~1e-6 of the largest logit; 2e-5 leaves room while catching any real mistake
// (a wrong RoPE pairing or scaling band moves logits by > 1e-2 relative).
constexpr double kTol = 2e-5;

struct Case {
  RandomModelShape model;
  int shards;                          // weight files
  void (*variant)(ModelConfig&) = nullptr;  // RoPE scaling and family settings
};

// Each variant is chosen so that 20 positions exercise it: the scalings' bands, ramps and factor
// switches fall inside the first 20 positions, and the multipliers are far from 1.
void llama3(ModelConfig& c) {  // bands crossed by positions 0..19 (wavelengths 6 .. 6e4)
  c.rope_scaling.type = "llama3";
  c.rope_scaling.factor = 8.f;
  c.rope_scaling.original_max_position_embeddings = 64;
}
void linear(ModelConfig& c) {
  c.rope_scaling.type = "linear";
  c.rope_scaling.factor = 4.f;
}
void dynamic(ModelConfig& c) {  // within max_position_embeddings: plain RoPE
  c.rope_scaling.type = "dynamic";
  c.rope_scaling.factor = 2.f;
  c.rope_scaling.original_max_position_embeddings = c.max_model_len;
}
void yarn(ModelConfig& c) {  // attention factor 1 + 0.1 ln 4 from the default
  c.rope_scaling.type = "yarn";
  c.rope_scaling.factor = 4.f;
  c.rope_scaling.original_max_position_embeddings = 16;
}
void yarn_mscale(ModelConfig& c) {  // mscale / mscale_all_dim, unrounded ramp ends
  yarn(c);
  c.rope_scaling.factor = 8.f;
  c.rope_scaling.mscale = 0.8f;
  c.rope_scaling.mscale_all_dim = 0.5f;
  c.rope_scaling.beta_fast = 16.f;
  c.rope_scaling.truncate = false;
}
void phi3_short(ModelConfig& c) {  // original context = the served one: short factors
  c.partial_rotary_factor = 0.5f;
  longrope_factors(c, c.max_model_len);
}
// granite, smollm3: tests/model/model_test_util.h.
// Gemma's and Mistral's windows and soft-caps: gemma2_windowed, gemma3_windowed and
// every_layer_windowed (tests/model/model_test_util.h).
void qwen2_window(ModelConfig& c) {  // max_window_layers 1 of 3
  c.num_layers = 3;
  c.layer_windows = {0, 7, 7};
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.model.name; }

// Writes the case's random model (weights uniform with std 0.08) into a fresh folder: its path.
std::string write_case_model(const Case& k, uint64_t seed) {
  ModelConfig c = k.model.config();
  if (k.variant) k.variant(c);
  const std::string dir = fresh_dir(k.model.name);
  write_random_hf_model(dir, c, seed, k.model.file_dtype, k.shards, 0.08f);
  return dir;
}

class RandomHf : public ::testing::TestWithParam<Case> {};

TEST_P(RandomHf, LogitsMatchNumpy) {
  if (!have_numpy()) GTEST_SKIP() << "/usr/bin/python3 with numpy not available";
  const std::string dir = write_case_model(GetParam(), 1234);
  auto model = load_model(dir);
  const ModelConfig& c = model->config();
  const auto ids = random_tokens(20, c.vocab_size, 7);
  const auto want = numpy_logits(dir, ids, dir + "/ref_logits.f64");
  const auto got = prefill_logits(*model, ids);
  ASSERT_EQ(got.size(), size_t(20) * c.vocab_size);
  ASSERT_EQ(want.size(), got.size());
  const double err = max_rel_diff(got, want);
  EXPECT_LT(err, kTol);
  std::printf("%s: max |diff| / max |logit| = %.3g\n", GetParam().model.name, err);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Models, RandomHf,
    ::testing::Values(
        Case{{"gqa_tied_d64_f32_llama3", 256, 8, 2, 64, true, DType::kF32}, 1, llama3},
        Case{{"gqa_untied_d128_bf16_3shards", 256, 4, 2, 128, false, DType::kBF16}, 3},
        Case{{"mha_untied_d64_f16_2shards", 256, 4, 4, 64, false, DType::kF16}, 2},
        Case{{"gqa8_tied_d128_bf16", 512, 8, 1, 128, true, DType::kBF16}, 1},
        Case{{"gqa_untied_d64_f32_linear", 256, 4, 2, 64, false, DType::kF32}, 1, linear},
        Case{{"mha_tied_d64_f32_dynamic", 256, 4, 4, 64, true, DType::kF32}, 1, dynamic},
        Case{{"mistral_gqa_untied_d64_f16", 256, 4, 2, 64, false, DType::kF16, "MistralForCausalLM"},
             1},
        Case{{"qwen2_gqa_tied_d64_bf16_2shards", 256, 4, 2, 64, true, DType::kBF16, "Qwen2ForCausalLM"},
             2},
        Case{{"qwen2_mha_untied_d128_f32_llama3", 256, 2, 2, 128, false, DType::kF32, "Qwen2ForCausalLM"},
             1, llama3},
        Case{{"qwen2_gqa_untied_d64_f32_yarn", 256, 4, 2, 64, false, DType::kF32, "Qwen2ForCausalLM"},
             1, yarn},
        Case{{"qwen3_gqa_tied_d128_bf16", 256, 4, 2, 128, true, DType::kBF16, "Qwen3ForCausalLM"},
             1},
        Case{{"qwen3_gqa_untied_d64_f32", 512, 4, 1, 64, false, DType::kF32, "Qwen3ForCausalLM"},
             1},
        Case{{"qwen3_gqa_tied_d64_f32_yarn_mscale", 256, 4, 2, 64, true, DType::kF32,
              "Qwen3ForCausalLM"}, 1, yarn_mscale},
        Case{{"phi3_gqa_untied_d64_f32_longrope_partial", 256, 4, 2, 64, false, DType::kF32,
              "Phi3ForCausalLM"}, 1, phi3_long},
        Case{{"phi3_mha_tied_d128_bf16_short_partial", 256, 2, 2, 128, true, DType::kBF16,
              "Phi3ForCausalLM"}, 2, phi3_short},
        Case{{"granite_gqa_tied_d64_f32", 256, 4, 2, 64, true, DType::kF32, "GraniteForCausalLM"},
             1, granite},
        Case{{"granite_gqa_untied_d64_bf16", 256, 4, 2, 64, false, DType::kBF16,
              "GraniteForCausalLM"}, 1, granite},
        Case{{"olmo2_gqa_untied_d64_f32", 256, 4, 2, 64, false, DType::kF32, "Olmo2ForCausalLM"}, 1},
        Case{{"olmo2_mha_tied_d128_bf16", 256, 2, 2, 128, true, DType::kBF16, "Olmo2ForCausalLM"},
             2},
        Case{{"smollm3_gqa_tied_d64_f32_nope", 256, 4, 2, 64, true, DType::kF32,
              "SmolLM3ForCausalLM"}, 1, smollm3},
        Case{{"gemma2_gqa_tied_d64_f32_window_softcap", 256, 4, 2, 64, true, DType::kF32,
              "Gemma2ForCausalLM"}, 1, gemma2_windowed},
        Case{{"gemma2_mha_untied_d128_bf16_window_softcap", 256, 2, 2, 128, false, DType::kBF16,
              "Gemma2ForCausalLM"}, 2, gemma2_windowed},
        Case{{"gemma3_gqa4_tied_d64_f32_local_rope", 256, 4, 1, 64, true, DType::kF32,
              "Gemma3ForCausalLM"}, 1, gemma3_windowed},
        Case{{"mistral_gqa_untied_d64_f32_window", 256, 4, 2, 64, false, DType::kF32,
              "MistralForCausalLM"}, 1, every_layer_windowed},
        Case{{"qwen2_gqa_tied_d64_f32_max_window_layers", 256, 4, 2, 64, true, DType::kF32,
              "Qwen2ForCausalLM"}, 1, qwen2_window}),
    [](const auto& info) { return std::string(info.param.model.name); });

// The decode path (one token per step against the paged cache; Olmo2's separate rope and K/V
// write) of each folded family gives numpy's greedy continuation of a prompt.
TEST(FoldedFamilies, TokenByTokenGreedyMatchesNumpy) {
  if (!have_numpy()) GTEST_SKIP() << "/usr/bin/python3 with numpy not available";
  const Case cases[] = {
      // The 5-token prompt outgrows the original context, so transformers' choice of factors
      // by length (numpy's) is the long factors at every step, as flashserve's.
      {{"phi3", 256, 4, 2, 64, false, DType::kF32, "Phi3ForCausalLM"}, 1,
       [](ModelConfig& c) {
         c.partial_rotary_factor = 0.75f;
         longrope_factors(c, 4);
       }},
      {{"granite", 256, 4, 2, 64, true, DType::kF32, "GraniteForCausalLM"}, 1, granite},
      {{"olmo2", 256, 4, 2, 64, false, DType::kF32, "Olmo2ForCausalLM"}, 1},
      {{"smollm3", 256, 4, 2, 64, true, DType::kF32, "SmolLM3ForCausalLM"}, 1, smollm3},
      {{"qwen3_yarn", 256, 4, 2, 64, true, DType::kF32, "Qwen3ForCausalLM"}, 1, yarn_mscale},
      {{"gemma2", 256, 4, 2, 64, true, DType::kF32, "Gemma2ForCausalLM"}, 1, gemma2_windowed},
      {{"gemma3", 256, 4, 1, 64, true, DType::kF32, "Gemma3ForCausalLM"}, 1, gemma3_windowed},
      {{"mistral_window", 256, 4, 2, 64, false, DType::kF32, "MistralForCausalLM"}, 1,
       every_layer_windowed}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.model.name);
    const std::string dir = write_case_model(k, 99);
    auto model = load_model(dir);
    const auto prompt = random_tokens(5, model->config().vocab_size, 5);
    const std::string cmd =
        reference_command(dir, prompt) + " --generate 16 > '" + dir + "/greedy.txt'";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream in(dir + "/greedy.txt");
    std::vector<int32_t> want;
    for (int32_t t; in >> t;) want.push_back(t);
    EXPECT_EQ(greedy_tokens(*model, prompt, 16, 4, 1, /*token_by_token=*/true), want);
    fs::remove_all(dir);
  }
}

TEST(Stories260K, LogitsMatchNumpy) {
  const std::string bin = std::string(FS_MODELS_DIR) + "/stories260K/stories260K.bin";
  if (!fs::exists(bin)) GTEST_SKIP() << "model not found: " << bin;
  if (!have_numpy()) GTEST_SKIP() << "/usr/bin/python3 with numpy not available";
  auto model = load_model(bin);
  const std::vector<int32_t> ids = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};
  const std::string dir = fresh_dir("stories");
  const auto want = numpy_logits(bin, ids, dir + "/ref_logits.f64");
  const auto got = prefill_logits(*model, ids);
  const double err = max_rel_diff(got, want);
  EXPECT_LT(err, kTol);
  std::printf("stories260K: max |diff| / max |logit| = %.3g\n", err);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace flashserve::test

// Random-weight HF models written by write_random_hf_model (GQA and MHA, tied and untied heads,
// head_dim 64 and 128, f32/f16/bf16, single file and sharded, plain and llama3 RoPE; each
// architecture of the family: Llama, Mistral, Qwen2's q/k/v biases, Qwen3's per-head q/k norms
// with a head_dim other than hidden / heads) load and
// give, at every prompt position, the logits of the independent float64 numpy forward in
// tools/llama_reference.py (run through /usr/bin/python3; skipped when numpy is missing).
// stories260K (llama2.c layout, interleaved RoPE in the reference) is checked the same way.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "model/model_runner.h"
#include "tests/model/model_test_util.h"
#include "weights/hf_config.h"

namespace flashserve::test {
namespace {

// C++ runs fp32 (dot products of up to 384 terms, 2 layers) against numpy's float64: observed
// errors are ~1e-6 of the largest logit; 2e-5 leaves room while catching any real mistake
// (a wrong RoPE pairing or scaling band moves logits by > 1e-2 relative).
constexpr double kTol = 2e-5;

bool have_numpy() {
  return std::system("/usr/bin/python3 -c 'import numpy' > /dev/null 2>&1") == 0;
}

// Logits [num_tokens, vocab] from the numpy reference, or empty on failure.
std::vector<float> numpy_logits(const std::string& model, const std::vector<int32_t>& ids,
                                const std::string& out_file) {
  std::string list;
  for (int32_t t : ids) {
    if (!list.empty()) list += ',';
    list += std::to_string(t);
  }
  const std::string cmd = "/usr/bin/python3 " + std::string(FS_SOURCE_DIR) +
                          "/tools/llama_reference.py --model '" + model + "' --prompt-ids " + list +
                          " --dump-logits '" + out_file + "'";
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << "reference failed: " << cmd;
    return {};
  }
  std::ifstream in(out_file, std::ios::binary);
  std::vector<double> d;
  for (double x; in.read(reinterpret_cast<char*>(&x), sizeof x);) d.push_back(x);
  return std::vector<float>(d.begin(), d.end());
}

struct Case {
  RandomModelShape model;
  int shards;   // weight files
  bool llama3;  // llama3 rope scaling
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.model.name; }

class RandomHf : public ::testing::TestWithParam<Case> {};

TEST_P(RandomHf, LogitsMatchNumpy) {
  if (!have_numpy()) GTEST_SKIP() << "/usr/bin/python3 with numpy not available";
  const Case& k = GetParam();
  ModelConfig c = k.model.config();
  if (k.llama3) {  // bands chosen so positions 0..19 cross all three (wavelengths 6 .. 6e4)
    c.rope_scaling.type = "llama3";
    c.rope_scaling.factor = 8.f;
    c.rope_scaling.original_max_position_embeddings = 64;
  }
  const std::string dir = fresh_dir(k.model.name);
  write_random_hf_model(dir, c, 1234, k.model.file_dtype, k.shards, 0.08f);
  auto model = load_model(dir);
  const auto ids = random_tokens(20, c.vocab_size, 7);
  const auto want = numpy_logits(dir, ids, dir + "/ref_logits.f64");
  const auto got = prefill_logits(*model, ids);
  ASSERT_EQ(got.size(), size_t(20) * c.vocab_size);
  ASSERT_EQ(want.size(), got.size());
  const double err = max_rel_diff(got, want);
  EXPECT_LT(err, kTol);
  std::printf("%s: max |diff| / max |logit| = %.3g\n", k.model.name, err);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Models, RandomHf,
    ::testing::Values(
        Case{{"gqa_tied_d64_f32_llama3", 256, 8, 2, 64, true, DType::kF32}, 1, true},
        Case{{"gqa_untied_d128_bf16_3shards", 256, 4, 2, 128, false, DType::kBF16}, 3, false},
        Case{{"mha_untied_d64_f16_2shards", 256, 4, 4, 64, false, DType::kF16}, 2, false},
        Case{{"gqa8_tied_d128_bf16", 512, 8, 1, 128, true, DType::kBF16}, 1, false},
        Case{{"mistral_gqa_untied_d64_f16", 256, 4, 2, 64, false, DType::kF16, "MistralForCausalLM"},
             1, false},
        Case{{"qwen2_gqa_tied_d64_bf16_2shards", 256, 4, 2, 64, true, DType::kBF16, "Qwen2ForCausalLM"},
             2, false},
        Case{{"qwen2_mha_untied_d128_f32_llama3", 256, 2, 2, 128, false, DType::kF32, "Qwen2ForCausalLM"},
             1, true},
        Case{{"qwen3_gqa_tied_d128_bf16", 256, 4, 2, 128, true, DType::kBF16, "Qwen3ForCausalLM"},
             1, false},
        Case{{"qwen3_gqa_untied_d64_f32", 512, 4, 1, 64, false, DType::kF32, "Qwen3ForCausalLM"},
             1, false}),
    [](const auto& info) { return std::string(info.param.model.name); });

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

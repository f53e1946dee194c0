// Mixture-of-experts models (tests/model/moe_test_util.h: Qwen3-MoE with a dense layer between
// sparse ones, Mixtral with a sliding window, Qwen2-MoE with its gated shared expert;
// tests/model/gptoss_test_util.h: gpt-oss with MXFP4 experts, biases, sinks, alternating windows
// and YaRN), written by write_random_hf_model in f32 and bf16 (gpt-oss: its plain tensors; the
// experts MXFP4 as published), load and give at every prompt position the logits of the
// independent float64 numpy forward (tools/llama_reference.py's moe() and gpt_oss_moe(), which
// dequantizes the MXFP4 bytes itself), and, decoding token by token through the paged KV cache,
// numpy's greedy continuation. Skipped without numpy.
#include <gtest/gtest.h>

#include "tests/model/gptoss_test_util.h"
#include "tests/model/model_test_util.h"
#include "tests/model/moe_test_util.h"
#include "tests/model/numpy_reference.h"

namespace flashserve::test {
namespace {

// fp32 against float64 as in test_llama_vs_numpy.cpp: observed ~1e-6 of the largest logit. A
// wrong expert, weight or renormalisation moves logits by > 1e-2 relative (gpt-oss without its
// sinks, its o bias, or with gate and up swapped: by 0.85 to 0.9).
constexpr double kTol = 2e-5;

const MoeCase kGptOss{"gpt_oss", [] { return gpt_oss_config(); }};

struct Case {
  MoeCase moe;
  DType file_dtype;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.moe.name << "_" << dtype_name(c.file_dtype); }

class MoeVsNumpy : public ::testing::TestWithParam<Case> {};

TEST_P(MoeVsNumpy, LogitsAndGreedyMatchNumpy) {
  if (!have_numpy()) GTEST_SKIP() << "/usr/bin/python3 with numpy not available";
  const Case& k = GetParam();
  const std::string dir = fresh_dir(k.moe.name);
  // Weights of std 0.08: router logits spread enough that no two experts' probabilities are
  // within float rounding of each other (which would make the choice of expert arbitrary).
  write_random_hf_model(dir, k.moe.config(), 4321, k.file_dtype, 2, 0.08f);
  auto model = load_model(dir);
  const ModelConfig& c = model->config();
  ASSERT_GT(c.moe.num_experts, 0);
  const auto ids = random_tokens(24, c.vocab_size, 5);
  const auto want = numpy_logits(dir, ids, dir + "/ref_logits.f64");
  const auto got = prefill_logits(*model, ids);
  ASSERT_EQ(got.size(), size_t(24) * c.vocab_size);
  ASSERT_EQ(want.size(), got.size());
  const double err = max_rel_diff(got, want);
  EXPECT_LT(err, kTol);
  std::printf("%s %s: max |diff| / max |logit| = %.3g\n", k.moe.name, dtype_name(k.file_dtype), err);

  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 6);
  const std::vector<int32_t> want_greedy = numpy_greedy(dir, prompt, 10, dir + "/greedy.txt");
  ASSERT_EQ(want_greedy.size(), 10u);
  EXPECT_EQ(greedy_tokens(*model, prompt, 10, 4, 2, /*token_by_token=*/true), want_greedy);
}

INSTANTIATE_TEST_SUITE_P(Moe, MoeVsNumpy,
                         ::testing::Values(Case{moe_cases()[0], DType::kF32},
                                           Case{moe_cases()[0], DType::kBF16},
                                           Case{moe_cases()[1], DType::kF32},
                                           Case{moe_cases()[1], DType::kBF16},
                                           Case{moe_cases()[2], DType::kF32},
                                           Case{moe_cases()[2], DType::kBF16},
                                           Case{kGptOss, DType::kF32},
                                           Case{kGptOss, DType::kBF16}),
                         [](const auto& info) {
                           return std::string(info.param.moe.name) + "_" +
                                  dtype_name(info.param.file_dtype);
                         });

}  // namespace
}  // namespace flashserve::test

// gpt-oss (tests/model/gptoss_test_util.h: MXFP4 experts, biases, sinks, alternating windows,
// YaRN), written by write_random_hf_model in the checkpoint's layout with f32 and bf16 plain
// tensors, loads and gives at every prompt position the logits of the independent float64 numpy
// forward (tools/llama_reference.py's gpt_oss_moe() and sinks, which dequantizes the MXFP4 bytes
// itself) and, decoding token by token through the paged KV cache, numpy's greedy continuation.
// Skipped without numpy.
#include <gtest/gtest.h>

#include "tests/model/gptoss_test_util.h"
#include "tests/model/model_test_util.h"
#include "tests/model/numpy_reference.h"

namespace flashserve::test {
namespace {

// fp32 against float64, as test_moe_vs_numpy.cpp. A missing sink, bias, clamp or the gate/up
// columns swapped each move logits by > 1e-2 relative.
constexpr double kTol = 2e-5;

class GptOssVsNumpy : public ::testing::TestWithParam<DType> {};

TEST_P(GptOssVsNumpy, LogitsAndGreedyMatchNumpy) {
  if (!have_numpy()) GTEST_SKIP() << "/usr/bin/python3 with numpy not available";
  const DType dtype = GetParam();
  const std::string dir = fresh_dir(std::string("gptoss_") + dtype_name(dtype));
  // std 0.08 as the MoE tests: router logits apart enough that the top-k is not a rounding tie.
  write_random_hf_model(dir, gpt_oss_config(), 4321, dtype, 2, 0.08f);
  auto model = load_model(dir);
  const ModelConfig& c = model->config();
  ASSERT_EQ(c.architecture, "GptOssForCausalLM");
  ASSERT_EQ(c.quant_method, "mxfp4");
  const auto ids = random_tokens(24, c.vocab_size, 5);
  const auto want = numpy_logits(dir, ids, dir + "/ref_logits.f64");
  const auto got = prefill_logits(*model, ids);
  ASSERT_EQ(got.size(), size_t(24) * c.vocab_size);
  ASSERT_EQ(want.size(), got.size());
  const double err = max_rel_diff(got, want);
  EXPECT_LT(err, kTol);
  std::printf("gpt-oss %s: max |diff| / max |logit| = %.3g\n", dtype_name(dtype), err);

  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 6);
  const std::vector<int32_t> want_greedy = numpy_greedy(dir, prompt, 12, dir + "/greedy.txt");
  ASSERT_EQ(want_greedy.size(), 12u);
  EXPECT_EQ(greedy_tokens(*model, prompt, 12, 4, 2, /*token_by_token=*/true), want_greedy);
}

INSTANTIATE_TEST_SUITE_P(GptOss, GptOssVsNumpy, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace flashserve::test

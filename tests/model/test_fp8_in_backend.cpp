// --quantize fp8 left to the backend (LoadOptions::fp8_in_backend: the projections stay as
// stored, marked TensorView::to_fp8): the CPU backend quantizes them as it loads them, on every
// path a weight takes (q/k/v and gate/up stacked, Phi-3's fused projections cut into rows and
// reordered by partial rotary with LongRoPE's factor, Granite's factors on the FP8 rows' scales),
// and the logits are bitwise those of the model load_model quantized. The marked views' values
// are the FP8 ones too; tensor parallelism, which cuts columns, refuses them.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/model_runner.h"
#include "tests/model/model_test_util.h"

namespace flashserve::test {
namespace {

const std::string kStories = std::string(FS_MODELS_DIR) + "/stories260K";
const std::string kQ = "model.layers.0.self_attn.q_proj.weight";

void expect_as_quantized_at_open(const std::string& dir, uint32_t seed) {
  auto host = load_model(dir, LoadOptions{.quantize = Quantize::kFp8});
  auto marked = load_model(dir, LoadOptions{.quantize = Quantize::kFp8, .fp8_in_backend = true});
  ASSERT_TRUE(marked->tensor(kQ).to_fp8) << dir;
  ASSERT_NE(marked->tensor(kQ).dtype, DType::kF8E4M3) << dir;
  EXPECT_EQ(marked->config().quant_method, "fp8");
  EXPECT_EQ(weight_values(marked->tensor(kQ)), weight_values(host->tensor(kQ))) << dir;
  const std::vector<int32_t> ids = random_tokens(20, host->config().vocab_size, seed);
  EXPECT_EQ(all_logits(*marked, ids), all_logits(*host, ids)) << dir;
}

TEST(Fp8InBackend, Stories260K) {
  if (!fs::exists(kStories)) GTEST_SKIP() << "model not found: " << kStories;
  expect_as_quantized_at_open(kStories, 5);
}

TEST(Fp8InBackend, EveryFamilyAndWeightDtype) {
  uint32_t seed = 40;
  for (const RandomModelShape& shape : cuda_model_shapes()) {
    const std::string dir = fresh_dir(shape.name);
    write_random_hf_model(dir, shape.config(), seed, shape.file_dtype, 1, 0.05f);
    expect_as_quantized_at_open(dir, ++seed);
  }
}

TEST(Fp8InBackend, TensorParallelismRefusesMarkedViews) {
  const std::string dir = fresh_dir("tp");
  write_random_hf_model(dir, small_config(64, 4, 2, 16, false), 7, DType::kBF16);
  auto marked = load_model(dir, LoadOptions{.quantize = Quantize::kFp8, .fp8_in_backend = true});
  const std::vector<int32_t> ids = random_tokens(8, marked->config().vocab_size, 8);
  try {
    all_logits(*marked, ids, 2);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot cut the columns of a weight marked to_fp8"),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flashserve::test

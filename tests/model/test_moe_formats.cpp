// Mixture-of-experts models in every weight format the loader knows, through the CPU forward
// pass, whose quantized weights are their dequantized values (docs/FP8.md,
// docs/QUANTIZATION.md): each format must give bit for bit the logits of an f32 model holding
// the dequantized weights, which checks that every expert's (and the shared expert's) codes,
// scales, zero points and act-order find their expert through the stacking of gate and up.
// Formats: --quantize fp8 (on the host and left to the backend), FP8 checkpoints with per-channel
// and per-tensor scales (write_random_hf_model), and what tools/quantize_checkpoint.py writes:
// GPTQ (asymmetric, act-order), AWQ, compressed-tensors int4 and FP8, block-wise FP8. Each is
// also run at tensor parallelism 2 (the CPU stand-in communicator): the experts' columns split
// across the ranks and summed by one all-reduce per layer, which changes the order of the sums
// but not the logits beyond float rounding.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/model/model_test_util.h"
#include "tests/model/moe_test_util.h"
#include "tests/model/numpy_reference.h"
#include "weights/llama_tensors.h"

namespace flashserve::test {
namespace {

// Tensor parallelism reorders float sums of a few hundred terms: ~1e-7 of the largest logit.
constexpr double kTpTol = 1e-5;

int first_sparse_layer(const ModelConfig& c) {
  int layer = 0;
  while (!c.moe.sparse(layer)) ++layer;
  return layer;
}

// The first expert's gate projection of the first sparse layer, as loaded.
const TensorView& first_expert(const LoadedModel& m) {
  const ModelConfig& c = m.config();
  return m.tensor(moe_expert_name(c, first_sparse_layer(c), 0, ExpertProj::kGate));
}

// `q`'s logits equal those of its dequantized copy, and stay within rounding at TP 2.
void expect_dequantized_logits(const LoadedModel& q, const std::string& name) {
  const std::vector<int32_t> ids = random_tokens(20, q.config().vocab_size, 6);
  const std::vector<float> want = all_logits(*load_model(dequantized_copy(q, name + "_dq")), ids);
  EXPECT_EQ(all_logits(q, ids), want) << name;
  EXPECT_LT(max_rel_diff(all_logits(q, ids, 2), want), kTpTol) << name;
}

class MoeFormats : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeFormats, Fp8RunsAsItsDequantizedWeights) {
  const ModelConfig c = GetParam().config();
  const std::string f32 = fresh_dir("f32"), channel = fresh_dir("channel"),
                    tensor = fresh_dir("tensor");
  write_random_hf_model(f32, c, 11, DType::kF32, 1, 0.08f);
  write_random_hf_model(channel, c, 11, DType::kF32, 2, 0.08f, Fp8Layout::kPerChannel);
  write_random_hf_model(tensor, c, 11, DType::kF32, 1, 0.08f, Fp8Layout::kPerTensor);
  auto at_load = load_model(f32, LoadOptions{.quantize = Quantize::kFp8});
  EXPECT_EQ(first_expert(*at_load).dtype, DType::kF8E4M3);
  EXPECT_NE(at_load->tensor(moe_router_name(c, first_sparse_layer(c))).dtype, DType::kF8E4M3);  // routers stay
  expect_dequantized_logits(*at_load, "at_load");
  // In the backend: the same codes and scales, quantized as the backend loads each expert.
  auto in_backend =
      load_model(f32, LoadOptions{.quantize = Quantize::kFp8, .fp8_in_backend = true});
  EXPECT_TRUE(first_expert(*in_backend).to_fp8);
  const std::vector<int32_t> ids = random_tokens(20, c.vocab_size, 7);
  const std::vector<float> want = all_logits(*at_load, ids);
  EXPECT_EQ(all_logits(*in_backend, ids), want);
  // Per-channel checkpoints hold what --quantize fp8 computes from the same values.
  auto per_channel = load_model(channel);
  EXPECT_EQ(first_expert(*per_channel).dtype, DType::kF8E4M3);
  EXPECT_EQ(all_logits(*per_channel, ids), want);
  expect_dequantized_logits(*load_model(tensor), "per_tensor");
}

TEST_P(MoeFormats, QuantizedCheckpointsRunAsTheirDequantizedWeights) {
  if (!have_numpy()) GTEST_SKIP() << "no python3 with numpy for tools/quantize_checkpoint.py";
  const std::string src = fresh_dir("src");
  write_random_hf_model(src, GetParam().config(), 12, DType::kF32, 1, 0.08f);
  struct Format {
    const char* name;
    const char* args;
    bool int4;
  };
  for (const Format& f : {Format{"gptq", "--format gptq --group-size 32 --asym --act-order", true},
                          Format{"awq", "--format awq --group-size 32", true},
                          Format{"ct", "--format ct --group-size 32", true},
                          Format{"ct_fp8", "--format ct-fp8", false},
                          Format{"block_fp8", "--format block-fp8 --block-size 32", false}}) {
    SCOPED_TRACE(f.name);
    const std::string out = fresh_dir(f.name);
    const std::string cmd = "/usr/bin/python3 " + std::string(FS_SOURCE_DIR) +
                            "/tools/quantize_checkpoint.py --source " + src + " --out " + out +
                            " " + f.args;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    auto q = load_model(out);
    const TensorView& e = first_expert(*q);
    if (f.int4) EXPECT_TRUE(e.int4 != nullptr);
    else if (std::string(f.name) == "block_fp8") EXPECT_TRUE(e.block_fp8 != nullptr);
    else EXPECT_EQ(e.dtype, DType::kF8E4M3);
    expect_dequantized_logits(*q, f.name);
  }
}

INSTANTIATE_TEST_SUITE_P(Moe, MoeFormats, ::testing::ValuesIn(moe_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace flashserve::test

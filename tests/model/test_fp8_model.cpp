// FP8 weights through the forward pass on the CPU backend, whose FP8 weights are the dequantized
// values decode(q) * scale (docs/FP8.md): so a model quantized at load, or an FP8 checkpoint,
// must give bit for bit the logits of an f32 model holding those dequantized values. That
// checks the per-row scales through every path the weights take (q/k/v and gate/up stacked,
// tensor-parallel row and column slices). Also measured and printed, not asserted beyond a
// loose floor: how close FP8 stories260K stays to fp32 (teacher-forced logit NMSE and top-1
// agreement, and greedy agreement over 200 tokens).
#include <gtest/gtest.h>

#include <cstdio>

#include "model/model_runner.h"
#include "tests/model/model_test_util.h"

namespace flashserve::test {
namespace {

const std::string kStories = std::string(FS_MODELS_DIR) + "/stories260K";

TEST(Fp8Model, Stories260KQuantizedAtLoadEqualsItsDequantizedWeights) {
  if (!fs::exists(kStories)) GTEST_SKIP() << "model not found: " << kStories;
  auto fp8 = load_model(kStories, LoadOptions{.quantize = Quantize::kFp8});
  ASSERT_EQ(fp8->tensor("model.layers.0.self_attn.q_proj.weight").dtype, DType::kF8E4M3);
  ASSERT_NE(fp8->tensor("model.embed_tokens.weight").dtype, DType::kF8E4M3);  // stays as stored
  auto ref = load_model(dequantized_copy(*fp8, "dequantized"));
  const std::vector<int32_t> ids = random_tokens(40, fp8->config().vocab_size, 3);
  EXPECT_EQ(all_logits(*fp8, ids), all_logits(*ref, ids));
}

TEST(Fp8Model, HfCheckpointsEqualTheirDequantizedWeightsAndQuantizeAtLoad) {
  const ModelConfig c = small_config(64, 4, 2, 16, false);
  const std::vector<int32_t> ids = random_tokens(24, c.vocab_size, 4);
  const std::string f32 = fresh_dir("f32"), channel = fresh_dir("channel"),
                    tensor = fresh_dir("tensor");
  write_random_hf_model(f32, c, 9, DType::kF32, 1, 0.05f);
  write_random_hf_model(channel, c, 9, DType::kF32, 2, 0.05f, Fp8Layout::kPerChannel);
  write_random_hf_model(tensor, c, 9, DType::kF32, 3, 0.05f, Fp8Layout::kPerTensor);
  auto at_load = load_model(f32, LoadOptions{.quantize = Quantize::kFp8});
  auto per_channel = load_model(channel);
  auto per_tensor = load_model(tensor);
  const std::vector<float> want = all_logits(*at_load, ids);
  // Per-channel scales are what --quantize fp8 computes from the same f32 values.
  EXPECT_EQ(all_logits(*per_channel, ids), want);
  EXPECT_EQ(all_logits(*load_model(dequantized_copy(*per_channel, "dq_channel")), ids), want);
  // Per-tensor scales differ, but the checkpoint is still exactly its dequantized weights.
  const std::vector<float> tensor_logits = all_logits(*per_tensor, ids);
  EXPECT_EQ(all_logits(*load_model(dequantized_copy(*per_tensor, "dq_tensor")), ids), tensor_logits);
  EXPECT_NE(tensor_logits, want);
  // Tensor parallelism slices the FP8 rows with their scales (CPU TP is bitwise, shard_plan.h).
  EXPECT_EQ(all_logits(*per_channel, ids, 2), want);
}

TEST(Fp8Model, Stories260KQualityAgainstFp32) {
  if (!fs::exists(kStories)) GTEST_SKIP() << "model not found: " << kStories;
  auto f32 = load_model(kStories);
  auto fp8 = load_model(kStories, LoadOptions{.quantize = Quantize::kFp8});
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};  // BOS + "Once upon a time"
  constexpr int kTokens = 200;
  const std::vector<int32_t> g32 = greedy_tokens(*f32, prompt, kTokens, 16, 2),
                             g8 = greedy_tokens(*fp8, prompt, kTokens, 16, 2);
  int prefix = 0, same = 0;
  while (prefix < kTokens && g32[prefix] == g8[prefix]) ++prefix;
  for (int i = 0; i < kTokens; ++i) same += g32[i] == g8[i];
  // Teacher-forced along fp32's own continuation (the corpus both models read).
  std::vector<int32_t> corpus = prompt;
  corpus.insert(corpus.end(), g32.begin(), g32.end() - 1);
  const int vocab = f32->config().vocab_size;
  const Quality q = logit_quality(all_logits(*fp8, corpus), all_logits(*f32, corpus), vocab);
  std::printf("stories260K fp8 vs fp32: teacher-forced over %zu positions: nmse %.3g, top-1 "
              "agreement %.4f; greedy over %d tokens: identical prefix %d, same token at %d "
              "positions (%.3f)\n",
              corpus.size(), q.nmse, q.top1, kTokens, prefix, same, same / double(kTokens));
  RecordProperty("nmse", std::to_string(q.nmse));
  RecordProperty("top1_agreement", std::to_string(q.top1));
  RecordProperty("greedy_prefix", prefix);
  // Loose floors, only to catch a broken path (a wrong scale gives NMSE ~1 and top-1 near chance).
  EXPECT_LT(q.nmse, 0.05);
  EXPECT_GT(q.top1, 0.8);
}

}  // namespace
}  // namespace flashserve::test

// The benchmarks' byte/FLOP model against published parameter counts and hand-computed steps,
// and the decode roofline against the offline bound it must agree with.
#include <cmath>

#include <gtest/gtest.h>

#include "bench/e2e_cost.h"
#include "core/error.h"

namespace flashserve::bench {
namespace {

ModelConfig shape(int h, int i, int l, int q, int kv, int hd, int v, bool tied) {
  ModelConfig c;
  c.hidden_size = h, c.intermediate_size = i, c.num_layers = l, c.num_q_heads = q;
  c.num_kv_heads = kv, c.head_dim = hd, c.vocab_size = v, c.max_model_len = 4096;
  c.tie_word_embeddings = tied;
  return c;
}

// Every parameter: what a step reads as weights, plus the embedding table when it is separate.
int64_t total_params(const ModelConfig& c) {
  const int64_t embed = c.tie_word_embeddings ? 0 : int64_t(c.vocab_size) * c.hidden_size;
  return int64_t(weight_bytes(c, 2) / 2) + embed;
}

TEST(E2eCost, ParameterCountsMatchThePublishedModels) {
  // Parameter counts as published on the models' cards / reported by transformers.
  EXPECT_EQ(total_params(shape(2048, 5632, 22, 32, 4, 64, 32000, false)),
            1100048384);  // TinyLlama-1.1B
  EXPECT_EQ(total_params(shape(4096, 11008, 32, 32, 32, 128, 32000, false)),
            6738415616);  // Llama-2-7B
  EXPECT_EQ(total_params(shape(2048, 8192, 16, 32, 8, 64, 128256, true)),
            1235814400);  // Llama-3.2-1B
}

// A mixture-of-experts shape: every layer sparse.
ModelConfig moe_shape(ModelConfig c, int experts, int top_k, int expert_inter) {
  c.moe.num_experts = experts, c.moe.top_k = top_k, c.moe.intermediate = expert_inter;
  c.moe.sparse_layers.assign(size_t(c.num_layers), 1);
  return c;
}

TEST(E2eCost, MixtureOfExpertsCountsTheExpertsAStepReads) {
  // Qwen3-30B-A3B: 30.5B parameters, 3.3B active per token (its model card).
  ModelConfig q = shape(2048, 6144, 48, 32, 4, 128, 151936, false);
  q = moe_shape(q, 128, 8, 768);
  const double embed = double(q.vocab_size) * q.hidden_size;
  EXPECT_NEAR((resident_weight_bytes(q) / 2 + embed) / 1e9, 30.5, 0.05);
  EXPECT_NEAR(weight_bytes(q, 2, 1 << 20), resident_weight_bytes(q), 1.0);
  EXPECT_NEAR((weight_bytes(q, 2, 1) / 2 + embed) / 1e9, 3.3, 0.06);
  EXPECT_DOUBLE_EQ(experts_read(q, 1), 8);
  EXPECT_NEAR(experts_read(q, 64), 128 * (1 - std::pow(1 - 8.0 / 128, 64)), 1e-9);
  EXPECT_GT(experts_read(q, 64), 125);  // 64 tokens already touch almost every expert
  // Mixtral-8x7B: 46.7B parameters, 12.9B active.
  ModelConfig m = moe_shape(shape(4096, 14336, 32, 32, 8, 128, 32000, false), 8, 2, 14336);
  const double membed = double(m.vocab_size) * m.hidden_size;
  EXPECT_NEAR((resident_weight_bytes(m) / 2 + membed) / 1e9, 46.7, 0.05);
  EXPECT_NEAR((weight_bytes(m, 2, 1) / 2 + membed) / 1e9, 12.9, 0.05);
  // FLOPs follow the active parameters: a step of one token multiplies top_k experts.
  EXPECT_EQ(layer_linear_params(m) / m.num_layers,
            int64_t(2 * 4096 * 4096 + 2 * 4096 * 1024 + 8 * 4096 + 2 * 3 * 4096 * 14336));
}

TEST(E2eCost, Fp8WeightBytes) {
  // FP8 projections: a byte per weight, a 4-byte scale per output row; norms and head stay bf16.
  ModelConfig c = shape(8, 16, 1, 2, 1, 4, 10, false);
  c.quant_method = "fp8";
  const double rows = (2 + 2 * 1) * 4 /*q, k, v*/ + 2 * 8 /*o, down*/ + 2 * 16 /*gate, up*/;
  EXPECT_DOUBLE_EQ(weight_bytes(c), 576 + 4 * rows + (3 * 8 + 80) * 2.0);
  // TinyLlama batch-1: the weights a step reads fall from 2.07 GB to 1.10 GB (docs/FP8.md).
  ModelConfig t = shape(2048, 5632, 22, 32, 4, 64, 32000, false);
  const double bf16 = weight_bytes(t);
  t.quant_method = "fp8";
  EXPECT_NEAR(bf16 / 1e9, 2.069, 0.001);
  EXPECT_NEAR(weight_bytes(t) / 1e9, 1.102, 0.001);
}

TEST(E2eCost, WeightsFormatNamesTheCheckpointsFormat) {
  ModelConfig c = shape(8, 16, 1, 2, 1, 4, 10, false);
  EXPECT_EQ(weights_format(c, true), "bf16");
  EXPECT_EQ(weights_format(c, false), "f32");
  c.quant_method = "fp8";  // --quantize fp8
  EXPECT_EQ(weights_format(c, true), "fp8");
  const std::pair<QuantFormat, const char*> named[] = {
      {QuantFormat::kFp8, "fp8"}, {QuantFormat::kBlockFp8, "block-fp8"},
      {QuantFormat::kGptq, "int4-gptq"}, {QuantFormat::kAwq, "int4-awq"},
      {QuantFormat::kPackedInt4, "int4-compressed-tensors"}, {QuantFormat::kMxfp4, "mxfp4"}};
  for (const auto& [format, name] : named) {
    c.quant.format = format;
    EXPECT_EQ(weights_format(c, true), name);
    EXPECT_EQ(weights_format(c, false), name);
  }
}

TEST(E2eCost, KvBytesPerToken) {
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(shape(2048, 5632, 22, 32, 4, 64, 32000, false)),
                   2.0 * 22 * 4 * 64 * 2);
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(shape(4096, 11008, 32, 32, 32, 128, 32000, false), 4),
                   2.0 * 32 * 32 * 128 * 4);
}

TEST(E2eCost, StepCostByHand) {
  // hidden 8, intermediate 16, 1 layer, 2 q heads, 1 kv head, head_dim 4, vocab 10.
  const ModelConfig c = shape(8, 16, 1, 2, 1, 4, 10, false);
  EXPECT_EQ(layer_linear_params(c), 64 + 2 * 32 + 64 + 3 * 128);  // q, k+v, o, mlp = 576
  // 3 new tokens after 2 cached: keys attended 3+4+5 = 12.
  const StepCost s = step_cost(c, {SeqWork{3, 2, true}});
  EXPECT_DOUBLE_EQ(s.flops, 2.0 * 576 * 3 + 4.0 * 12 * 2 * 4 + 2.0 * 10 * 8);  // 4000
  const double weights = (576 + 3 * 8 + 80) * 2.0;                             // 1360
  EXPECT_DOUBLE_EQ(s.bytes, weights + 5 * 16 + 3 * 16 + 3 * 8 * 2 + 10 * 4);   // 1576
  // No logits: no head FLOPs and no logits row, weights still read whole.
  const StepCost n = step_cost(c, {SeqWork{3, 2, false}});
  EXPECT_DOUBLE_EQ(s.flops - n.flops, 160);
  EXPECT_DOUBLE_EQ(s.bytes - n.bytes, 40);
  // Two sequences share one read of the weights.
  const StepCost two = step_cost(c, {SeqWork{3, 2, true}, SeqWork{3, 2, true}});
  EXPECT_DOUBLE_EQ(two.bytes, 2 * s.bytes - weights);
  EXPECT_DOUBLE_EQ(two.flops, 2 * s.flops);
}

TEST(E2eCost, StepBoundIsTheSlowerUnit) {
  const StepCost s{1e12, 1e9};
  EXPECT_DOUBLE_EQ(step_time_lower_bound(s, 1e15, 1e12), 1e-3);  // compute-bound
  EXPECT_DOUBLE_EQ(step_time_lower_bound(s, 1e15, 1e11), 1e-2);  // memory-bound
}

TEST(E2eCost, DecodeRooflineTinyLlamaOnAnH200) {
  // 4274 GB/s is the copy bandwidth measured on an H200 (docs/DECODE_ATTENTION.md, Performance).
  // A rough "75% is about 1,450 tokens/s" counts all 2.2 GB of parameters; a decode step reads
  // one embedding row, not the table, so the roofline here is ~6% higher.
  const ModelConfig c = shape(2048, 5632, 22, 32, 4, 64, 32000, false);
  const double tps = decode_roofline_tokens_per_s(c, 128, 256, 4273.77e9);
  EXPECT_NEAR(tps, 4273.77e9 / (weight_bytes(c) + 256 * kv_bytes_per_token(c)), 2.0);
  EXPECT_GT(0.75 * tps, 1450);
  EXPECT_LT(0.75 * tps, 1450 * 1.1);
}

TEST(E2eCost, OfflineBoundOfOneRequestIsPrefillPlusDecodeRoofline) {
  const ModelConfig c = shape(2048, 5632, 22, 32, 4, 64, 32000, false);
  const double bw = 3e12, flops = 1e30;  // compute free: every step memory-bound
  const OfflineBound b = offline_lower_bound(c, 1, 128, 64, flops, bw);
  const double prefill = step_cost(c, {SeqWork{128, 0, true}}).bytes / bw;
  EXPECT_NEAR(b.ideal_schedule_s, prefill + 63 / decode_roofline_tokens_per_s(c, 128, 64, bw),
              1e-9);
  EXPECT_DOUBLE_EQ(b.decode_steps, 63);
}

TEST(E2eCost, OfflineIdealScheduleLiesBetweenMaxAndSumOfTotals) {
  const ModelConfig c = shape(4096, 11008, 32, 32, 32, 128, 32000, false);
  const OfflineBound b = offline_lower_bound(c, 256, 512, 256, 700e12, 3.3e12);
  EXPECT_GE(b.ideal_schedule_s, std::max(b.flops_s, b.bytes_s));
  EXPECT_LE(b.ideal_schedule_s, b.flops_s + b.bytes_s);
  // 256 x 768 tokens of a 6.5 G-linear-parameter model: at least 2 * params * tokens FLOPs.
  EXPECT_GT(b.flops_s * 700e12, 2.0 * layer_linear_params(c) * 256 * 768);
}

TEST(E2eCost, RejectsBadInput) {
  const ModelConfig c = shape(8, 16, 1, 2, 1, 4, 10, false);
  EXPECT_THROW(step_cost(c, {}), Error);
  EXPECT_THROW(step_cost(c, {SeqWork{0, 0, true}}), Error);
  EXPECT_THROW(decode_roofline_tokens_per_s(c, 16, 1, 1e12), Error);
  EXPECT_THROW(step_time_lower_bound(StepCost{}, 0, 1), Error);
}

}  // namespace
}  // namespace flashserve::bench

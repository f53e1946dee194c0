// The shard plan: each rank's ranges over stories260K's and a GQA model's sizes (KV heads split,
// and replicated when there are fewer than ranks), the start-up errors for sizes that do not
// divide, how each weight is cut (rows stay views into the file; columns are copied), and the
// reduction order that makes rank-local sums compose with the all-reduce.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "core/error.h"
#include "parallel/reduction_order.h"
#include "parallel/shard_plan.h"

namespace flashserve {
namespace {

ModelConfig config(int hidden, int inter, int hq, int hkv, int d, int vocab) {
  ModelConfig c;
  c.hidden_size = hidden, c.intermediate_size = inter, c.num_layers = 2;
  c.num_q_heads = hq, c.num_kv_heads = hkv, c.head_dim = d, c.vocab_size = vocab;
  return c;
}
const ModelConfig kStories = config(64, 172, 8, 4, 8, 512);  // stories260K.bin's header

std::string error_of(const ModelConfig& c, int size) {
  try {
    check_tensor_parallel(c, size);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ShardPlan, RanksCoverEveryHeadColumnAndRowOnce) {
  for (int size : {1, 2, 4}) {
    int q = 0, kv = 0;
    int64_t inter = 0, vocab = 0;
    for (int r = 0; r < size; ++r) {
      const ShardPlan p = make_shard_plan(kStories, size, r);
      EXPECT_EQ(p.q_head0, q) << size;
      EXPECT_EQ(p.kv_head0, kv) << size;
      EXPECT_EQ(p.inter0, inter);
      EXPECT_EQ(p.vocab0, vocab);
      q += p.q_heads, kv += p.kv_heads, inter += p.inter, vocab += p.vocab;
      // Each rank's query heads use only its own KV heads (group size 2).
      EXPECT_EQ(p.q_head0 / 2, p.kv_head0);
      EXPECT_EQ(p.q_heads / p.kv_heads, 2);
      // 4 k-slices in all: o's k 64 and down's k 172 both divide by 4.
      EXPECT_EQ(p.k_slices * size, kRowParallelSlices);
    }
    EXPECT_EQ(q, 8);
    EXPECT_EQ(kv, 4);
    EXPECT_EQ(inter, 172);
    EXPECT_EQ(vocab, 512);
  }
}

TEST(ShardPlan, FewerKvHeadsThanRanksReplicates) {
  const ModelConfig c = config(256, 688, 8, 2, 32, 1024);  // 2 KV heads over 4 ranks
  for (int r = 0; r < 4; ++r) {
    const ShardPlan p = make_shard_plan(c, 4, r);
    EXPECT_EQ(p.kv_heads, 1);
    EXPECT_EQ(p.kv_head0, r / 2) << "ranks 0,1 hold KV head 0; ranks 2,3 KV head 1";
    EXPECT_EQ(p.q_heads, 2);
    EXPECT_EQ(p.q_head0 / 4, p.kv_head0) << "group size 4: the rank's q heads are in its group";
  }
}

TEST(ShardPlan, SizesThatDoNotDivideAreClearErrors) {
  EXPECT_EQ(error_of(kStories, 4), "");
  EXPECT_NE(error_of(kStories, 3).find("does not divide the model's num_attention_heads 8"),
            std::string::npos) << error_of(kStories, 3);
  EXPECT_NE(error_of(kStories, 8).find("intermediate_size 172"), std::string::npos)
      << error_of(kStories, 8);
  EXPECT_NE(error_of(config(64, 128, 8, 4, 8, 500), 8).find("vocab_size 500"), std::string::npos);
  // 6 KV heads over 4 ranks: neither divides the other.
  EXPECT_NE(error_of(config(64, 128, 12, 6, 8, 512), 4).find("num_key_value_heads 6"),
            std::string::npos);
  EXPECT_NE(error_of(kStories, 0).find("must be >= 1"), std::string::npos);
  EXPECT_THROW(make_shard_plan(kStories, 3, 0), Error);
}

TEST(ShardPlan, RowParallelSlicesFallBackToTheRankCount) {
  EXPECT_EQ(row_parallel_slices(kStories, 1), 4);
  EXPECT_EQ(row_parallel_slices(kStories, 2), 4);
  EXPECT_EQ(row_parallel_slices(kStories, 8), 8);  // 8 does not divide 4
  EXPECT_EQ(row_parallel_slices(config(64, 170, 8, 4, 8, 512), 2), 2);  // 170 % 4 != 0
  EXPECT_EQ(row_parallel_slices(config(64, 170, 8, 4, 8, 512), 1), 1);
}

TEST(ShardPlan, WeightSplitsByName) {
  using K = WeightSplit::Kind;
  const ShardPlan p = make_shard_plan(kStories, 2, 1);  // q heads 4..7, KV 2..3, inter 86..171
  auto is = [](WeightSplit s, K kind, int64_t begin, int64_t count) {
    return s.kind == kind && s.begin == begin && s.count == count;
  };
  const std::string l = "model.layers.3.";
  EXPECT_TRUE(is(weight_split(p, kStories, l + "self_attn.q_proj.weight"), K::kRows, 32, 32));
  EXPECT_TRUE(is(weight_split(p, kStories, l + "self_attn.q_proj.bias"), K::kRows, 32, 32));
  EXPECT_TRUE(is(weight_split(p, kStories, l + "self_attn.k_proj.weight"), K::kRows, 16, 16));
  EXPECT_TRUE(is(weight_split(p, kStories, l + "self_attn.v_proj.bias"), K::kRows, 16, 16));
  EXPECT_TRUE(is(weight_split(p, kStories, l + "self_attn.o_proj.weight"), K::kColumns, 32, 32));
  EXPECT_TRUE(is(weight_split(p, kStories, l + "mlp.gate_proj.weight"), K::kRows, 86, 86));
  EXPECT_TRUE(is(weight_split(p, kStories, l + "mlp.up_proj.weight"), K::kRows, 86, 86));
  EXPECT_TRUE(is(weight_split(p, kStories, l + "mlp.down_proj.weight"), K::kColumns, 86, 86));
  EXPECT_TRUE(is(weight_split(p, kStories, "lm_head.weight"), K::kRows, 256, 256));
  for (const std::string& whole : {std::string("model.embed_tokens.weight"), std::string("model.norm.weight"),
                                   l + "input_layernorm.weight", l + "self_attn.q_norm.weight"})
    EXPECT_EQ(weight_split(p, kStories, whole).kind, K::kWhole) << whole;
}

TEST(ShardPlan, SliceWeightRowsAreViewsColumnsAreCopies) {
  std::vector<uint16_t> w(6 * 10);  // [6, 10] bf16 bits, value = row * 100 + column
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 10; ++c) w[size_t(r * 10 + c)] = uint16_t(r * 100 + c);
  TensorView full{DType::kBF16, {6, 10}, w.data()};
  std::vector<char> storage;
  const TensorView rows = slice_weight(full, {WeightSplit::Kind::kRows, 2, 3}, storage);
  EXPECT_EQ(rows.shape, (std::vector<int64_t>{3, 10}));
  EXPECT_EQ(rows.data, w.data() + 20) << "a view into the same memory";
  EXPECT_TRUE(storage.empty());
  const TensorView cols = slice_weight(full, {WeightSplit::Kind::kColumns, 4, 5}, storage);
  EXPECT_EQ(cols.shape, (std::vector<int64_t>{6, 5}));
  const uint16_t* c = static_cast<const uint16_t*>(cols.data);
  for (int r = 0; r < 6; ++r)
    for (int k = 0; k < 5; ++k) EXPECT_EQ(c[r * 5 + k], r * 100 + 4 + k);
  EXPECT_THROW(slice_weight(full, {WeightSplit::Kind::kColumns, 8, 3}, storage), Error);
  TensorView vec{DType::kF32, {12}, w.data()};
  EXPECT_THROW(slice_weight(vec, {WeightSplit::Kind::kColumns, 0, 1}, storage), Error);
}

// (t0 + t1) + (t2 + t3): what two ranks give when each adds its own pair and the all-reduce adds
// the two results, for any floats (here ones where the linear order rounds differently).
TEST(ReductionOrder, PairwiseComposesWithRankLocalSums) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1e3f, 1e3f);
  int linear_differs = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    float t[8];
    for (float& x : t) x = u(rng) * (trial % 3 == 0 ? 1e-4f : 1.f);
    auto term = [&](int i) { return t[i]; };
    const float all = pairwise_sum<float>(0, 8, term);
    for (int ranks : {1, 2, 4, 8}) {
      const int per = 8 / ranks;
      float local[8];
      for (int r = 0; r < ranks; ++r) local[r] = pairwise_sum<float>(r * per, (r + 1) * per, term);
      const float joined = pairwise_sum<float>(0, ranks, [&](int r) { return local[r]; });
      ASSERT_EQ(joined, all) << "trial " << trial << " ranks " << ranks;
    }
    EXPECT_EQ(pairwise_sum<float>(0, 4, term), (t[0] + t[1]) + (t[2] + t[3]));
    float lin = 0;
    for (float x : t) lin += x;
    linear_differs += lin != all;
  }
  EXPECT_GT(linear_differs, 0) << "the inputs should tell the orders apart";
}

// A mixture of experts: every expert's gate/up rows and down columns of the rank's slice of
// moe_intermediate_size (the shared expert's of its own size); routers and the shared expert's
// gate whole; sizes that do not divide are start-up errors naming them.
TEST(ShardPlan, ExpertsSplitTheirIntermediateColumns) {
  ModelConfig c = config(64, 128, 4, 2, 16, 256);
  c.architecture = "Qwen2MoeForCausalLM";
  c.moe = {.num_experts = 4, .top_k = 2, .intermediate = 96, .renormalize = false,
           .shared_intermediate = 64, .sparse_layers = {1, 1}};
  const ShardPlan p = make_shard_plan(c, 2, 1);
  using K = WeightSplit::Kind;
  auto expect = [&](const std::string& name, K kind, int64_t begin, int64_t count) {
    const WeightSplit s = weight_split(p, c, name);
    EXPECT_EQ(int(s.kind), int(kind)) << name;
    EXPECT_EQ(s.begin, begin) << name;
    EXPECT_EQ(s.count, count) << name;
  };
  expect("model.layers.1.mlp.experts.3.gate_proj.weight", K::kRows, 48, 48);
  expect("model.layers.1.mlp.experts.3.up_proj.weight", K::kRows, 48, 48);
  expect("model.layers.1.mlp.experts.0.down_proj.weight", K::kColumns, 48, 48);
  expect("model.layers.0.mlp.shared_expert.up_proj.weight", K::kRows, 32, 32);
  expect("model.layers.0.mlp.shared_expert.down_proj.weight", K::kColumns, 32, 32);
  expect("model.layers.0.mlp.gate.weight", K::kWhole, 0, 0);
  expect("model.layers.0.mlp.shared_expert_gate.weight", K::kWhole, 0, 0);
  expect("model.layers.0.block_sparse_moe.experts.2.w1.weight", K::kRows, 48, 48);
  expect("model.layers.0.block_sparse_moe.experts.2.w3.weight", K::kRows, 48, 48);
  expect("model.layers.0.block_sparse_moe.experts.2.w2.weight", K::kColumns, 48, 48);
  EXPECT_EQ(error_of(c, 4), "");
  c.moe.intermediate = 90;
  EXPECT_NE(error_of(c, 4).find("does not divide the model's moe_intermediate_size 90"),
            std::string::npos) << error_of(c, 4);
  c.moe.intermediate = 96;
  c.moe.shared_intermediate = 42;
  EXPECT_NE(error_of(c, 4).find("shared_expert_intermediate_size 42"), std::string::npos)
      << error_of(c, 4);
}

}  // namespace
}  // namespace flashserve

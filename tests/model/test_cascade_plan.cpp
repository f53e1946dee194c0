// CascadePlan: which sequences of a decode step form groups and the arrays it lays out for them;
// and the CPU twin of cascade attention (kernels/cpu/cascade_attention_ref) over those arrays
// against the plain reference attention, in double precision: the same keys, so the same result
// (the merge weights come from fp32 LSEs, hence ~1e-7 rather than 1e-15).
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/cascade_attention_ref.h"
#include "kernels/cpu/paged_attention_ref.h"
#include "model/cascade_plan.h"
#include "tests/model/cascade_test_util.h"

namespace flashserve::test {
namespace {

// Counting one byte of K/V per token, so that min_saved_bytes counts keys.
CascadeConfig config(int64_t min_saved_keys = 1, int part_blocks = 4, int row_multiple = 1) {
  CascadeConfig c;
  c.enabled = true;
  c.kv_bytes_per_token = 1;
  c.min_saved_bytes = min_saved_keys;
  c.part_blocks = part_blocks;
  c.row_multiple = row_multiple;
  return c;
}

// A step from explicit tables (block ids) and kv lengths.
StepPlan step_of(const std::vector<std::vector<int32_t>>& tables, const std::vector<int32_t>& kv) {
  StepPlan s;
  s.num_seqs = int(tables.size());
  s.max_q_len = 1;
  s.tokens.assign(tables.size(), 0);
  s.kv_lens = kv;
  for (const auto& t : tables) s.max_blocks_per_seq = std::max(s.max_blocks_per_seq, int(t.size()));
  s.block_table.assign(tables.size() * size_t(s.max_blocks_per_seq), -1);
  for (size_t b = 0; b < tables.size(); ++b)
    std::copy(tables[b].begin(), tables[b].end(), s.block_table.begin() + ptrdiff_t(b * size_t(s.max_blocks_per_seq)));
  return s;
}

TEST(CascadePlan, GroupsSequencesByTheirSharedLeadingBlocks) {
  // 0, 1 and 3 share blocks 10 11 12 13 14; 2 shares nothing. Block size 4.
  const StepPlan s = step_of({{10, 11, 12, 13, 14, 20}, {10, 11, 12, 13, 14, 21, 22}, {30, 31},
                              {10, 11, 12, 13, 14, 15, 40}},
                             {22, 27, 5, 25});
  CascadePlan p;
  p.build(s, 4, config(/*min_saved_keys=*/1, /*part_blocks=*/2, /*row_multiple=*/4));
  ASSERT_TRUE(p.active());
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.groups[0].members, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(p.groups[0].shared_blocks, 5) << "block 15 is 3's alone";
  // 5 shared blocks in parts of 2: 2 + 2 + 1; each part has the 3 members' rows padded to 4.
  EXPECT_EQ(p.num_parts, 3);
  EXPECT_EQ(p.part_cu_rows, (std::vector<int32_t>{0, 4, 8, 12}));
  EXPECT_EQ(p.part_kv_lens, (std::vector<int32_t>{8, 8, 4}));
  EXPECT_EQ(p.part_block_table, (std::vector<int32_t>{10, 11, 12, 13, 14, -1}));
  EXPECT_EQ(p.prefix_q_rows, (std::vector<int32_t>{0, 1, 3, 0, 0, 1, 3, 0, 0, 1, 3, 0}));
  EXPECT_EQ(p.merge_stride, 3);
  EXPECT_EQ(p.merge_rows, (std::vector<int32_t>{0, 4, 8, 1, 5, 9, -1, -1, -1, 2, 6, 10}));
  EXPECT_EQ(p.suffix_kv_lens, (std::vector<int32_t>{2, 7, 5, 5}));
  EXPECT_EQ(p.suffix_stride, 7);
  EXPECT_EQ(std::vector<int32_t>(p.suffix_block_table.begin(), p.suffix_block_table.begin() + 7),
            (std::vector<int32_t>{20, -1, -1, -1, -1, -1, -1}));
  EXPECT_EQ(std::vector<int32_t>(p.suffix_block_table.begin() + 7, p.suffix_block_table.begin() + 14),
            (std::vector<int32_t>{21, 22, -1, -1, -1, -1, -1}));
  EXPECT_EQ(std::vector<int32_t>(p.suffix_block_table.begin() + 14, p.suffix_block_table.begin() + 21),
            (std::vector<int32_t>{30, 31, -1, -1, -1, -1, -1}));
  EXPECT_EQ(std::vector<int32_t>(p.suffix_block_table.begin() + 21, p.suffix_block_table.end()),
            (std::vector<int32_t>{15, 40, -1, -1, -1, -1, -1}));
  EXPECT_NE(p.shape_key(), 0u);
}

TEST(CascadePlan, NeverSharesTheBlockHoldingALastKey) {
  // Identical tables: the block with each one's last key (written this step) stays its own.
  const StepPlan s = step_of({{1, 2, 3}, {1, 2, 3}}, {9, 12});
  CascadePlan p;
  p.build(s, 4, config());
  ASSERT_TRUE(p.active());
  EXPECT_EQ(p.groups[0].shared_blocks, 2);
  EXPECT_EQ(p.suffix_kv_lens, (std::vector<int32_t>{1, 4}));
}

TEST(CascadePlan, OnlyPureDecodeStepsWithGroupsThatPay) {
  const StepPlan s = step_of({{1, 2, 3, 4, 9}, {1, 2, 3, 4, 8}, {1, 2, 3, 4, 7}}, {20, 20, 20});
  CascadePlan p;
  p.build(s, 4, config(/*min_saved_keys=*/2 * 4 * 4));  // (3 - 1) members * 4 blocks * 4 tokens
  EXPECT_TRUE(p.active());
  p.build(s, 4, config(/*min_saved_keys=*/2 * 4 * 4 + 1));
  EXPECT_FALSE(p.active()) << "saves one key too few";
  CascadeConfig off = config();
  off.enabled = false;
  p.build(s, 4, off);
  EXPECT_FALSE(p.active());
  StepPlan prefill = s;
  prefill.max_q_len = 2;
  prefill.tokens.push_back(0);
  p.build(prefill, 4, config());
  EXPECT_FALSE(p.active()) << "a step with a prefill chunk runs plain attention";
  EXPECT_EQ(p.shape_key(), 0u);
  EXPECT_TRUE(p.suffix_kv_lens.empty()) << "nothing left of the previous plan";
}

TEST(CascadePlan, TheDefaultRulePaysForLargeKvOnly) {
  // The prefix-cache benchmark's decode: 64 sequences sharing 64 blocks of 16 tokens. At
  // TinyLlama's 1 KiB of K/V per token and layer that saves 63 MiB of reads per layer, below the
  // break-even measured on an H100; at Llama-2-7B's 16 KiB it saves 1 GiB.
  StepPlan s;
  make_shared_step(SharedStepSpec{{64}, {64}, 192, 16}, 1, &s);
  CascadeConfig c;
  c.enabled = true;
  c.kv_bytes_per_token = 2 * 4 * 64 * 2;  // TinyLlama: 4 kv heads of 64, bf16, K and V
  CascadePlan p;
  p.build(s, 16, c);
  EXPECT_FALSE(p.active());
  c.kv_bytes_per_token = 2 * 32 * 128 * 2;  // Llama-2-7B: 32 kv heads of 128
  p.build(s, 16, c);
  EXPECT_TRUE(p.active());
  EXPECT_EQ(p.groups.size(), 1u);
}

TEST(CascadePlan, ABucketTooShortToPaySplitsWhereItsMembersPart) {
  // All four share block 1 only; {0, 1} and {2, 3} then share 6 more blocks each. Sharing one
  // block among four saves 3 * 4 = 12 keys: too few at 20; each pair saves 1 * 7 * 4 = 28.
  const StepPlan s = step_of({{1, 2, 3, 4, 5, 6, 7, 50}, {1, 2, 3, 4, 5, 6, 7, 51},
                              {1, 8, 9, 10, 11, 12, 13, 52}, {1, 8, 9, 10, 11, 12, 13, 53},
                              {0, 0, 0, 0, 0, 0, 0, 0}},  // padding: kv_len 0
                             {30, 30, 30, 30, 0});
  CascadePlan p;
  p.build(s, 4, config(/*min_saved_keys=*/20));
  ASSERT_EQ(p.groups.size(), 2u);
  EXPECT_EQ(p.groups[0].members, (std::vector<int>{0, 1}));
  EXPECT_EQ(p.groups[1].members, (std::vector<int>{2, 3}));
  EXPECT_EQ(p.groups[0].shared_blocks, 7);
  EXPECT_EQ(p.groups[1].shared_blocks, 7);
  EXPECT_EQ(p.suffix_kv_lens[4], 0) << "padding keeps kv_len 0";
}

// Cascade attention through the plan equals plain attention (double precision references).
TEST(CascadeAttentionRef, EqualsPlainAttention) {
  struct Case {
    SharedStepSpec spec;
    int hq, hkv, d, part_blocks, row_multiple;
  };
  const std::vector<Case> cases = {
      {{{3, 1, 2}, {5, 0, 3}, 40, 4}, 4, 2, 8, 2, 4},
      {{{8}, {6}, 30, 16}, 8, 2, 16, 4, 1},
      {{{2, 5, 1, 3}, {1, 9, 4, 2}, 70, 8}, 6, 3, 8, 3, 8},
      {{{1, 1}, {2, 2}, 20, 4}, 2, 1, 8, 2, 1},  // no group: the suffix pass alone
  };
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    SCOPED_TRACE(::testing::Message() << "case " << ci);
    StepPlan s;
    const int blocks = make_shared_step(c.spec, uint32_t(ci + 1), &s);
    CascadePlan plan;
    plan.build(s, c.spec.block_size, config(1, c.part_blocks, c.row_multiple));
    EXPECT_EQ(plan.active(), ci != 3);
    const size_t cache = size_t(blocks) * c.spec.block_size * c.hkv * c.d;
    const auto to_double = [](const std::vector<float>& f) { return std::vector<double>(f.begin(), f.end()); };
    const std::vector<double> k = to_double(random_values(cache, 10 + ci)),
                              v = to_double(random_values(cache, 20 + ci)),
                              q = to_double(random_values(size_t(s.num_seqs) * c.hq * c.d, 30 + ci));
    PagedAttentionArgs a{.num_seqs = s.num_seqs, .cu_q_lens = s.cu_q_lens.data(),
                         .kv_lens = s.kv_lens.data(), .block_table = s.block_table.data(),
                         .max_blocks_per_seq = s.max_blocks_per_seq, .block_size = c.spec.block_size,
                         .num_q_heads = c.hq, .num_kv_heads = c.hkv, .head_dim = c.d,
                         .scale = 1.f / std::sqrt(float(c.d)), .causal = true};
    std::vector<double> plain(q.size()), cascade(q.size(), std::nan(""));
    ref::paged_attention<double>(a, q.data(), k.data(), v.data(), plain.data(), nullptr);
    const CascadeAttentionArgs ca{.step = a, .num_parts = plan.num_parts,
                                  .num_prefix_rows = plan.num_prefix_rows,
                                  .part_cu_rows = plan.part_cu_rows.data(),
                                  .part_kv_lens = plan.part_kv_lens.data(),
                                  .part_block_table = plan.part_block_table.data(),
                                  .part_stride = plan.part_stride,
                                  .prefix_q_rows = plan.prefix_q_rows.data(),
                                  .suffix_kv_lens = plan.active() ? plan.suffix_kv_lens.data() : s.kv_lens.data(),
                                  .suffix_block_table = plan.active() ? plan.suffix_block_table.data() : s.block_table.data(),
                                  .suffix_stride = plan.active() ? plan.suffix_stride : s.max_blocks_per_seq,
                                  .merge_rows = plan.merge_rows.data(),
                                  .merge_stride = plan.merge_stride};
    ref::cascade_attention<double>(ca, q.data(), k.data(), v.data(), cascade.data());
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < q.size(); ++i) {
      max_diff = std::max(max_diff, std::abs(cascade[i] - plain[i]));
      max_ref = std::max(max_ref, std::abs(plain[i]));
    }
    EXPECT_LE(max_diff, 1e-6 * max_ref) << "max |cascade - plain| " << max_diff;
  }
}

}  // namespace
}  // namespace flashserve::test

// Split-K decode plan (kernels/decode_plan.h): a lone long sequence fills the GPU, a large batch
// is not split, chunks are whole blocks and tiles, every key is covered, fixed plans are exact, a
// sliding window plans window-sized work however long the context (also at head_dim 256's one
// block per SM).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/decode_plan.h"

namespace flashserve {
namespace {

DecodePlanConfig h100(int ctas_per_sm = 2) {
  DecodePlanConfig c;
  c.num_sms = 132;
  c.ctas_per_sm = ctas_per_sm;
  return c;
}

int64_t num_ctas(const std::vector<int32_t>& lens, int kv_heads, const DecodePlan& p) {
  int64_t n = 0;
  for (int32_t L : lens) n += std::max<int64_t>(1, (L + p.chunk_len - 1) / p.chunk_len);
  return n * kv_heads;
}

// Invariants every plan must satisfy.
void check_plan(const std::vector<int32_t>& lens, int kv_heads, int block_size, const DecodePlan& p,
                const DecodePlanConfig& c) {
  int max_len = 0;
  for (int32_t L : lens) max_len = std::max(max_len, int(L));
  ASSERT_GE(p.num_splits, 1);
  ASSERT_LE(p.num_splits, c.max_splits);
  ASSERT_GT(p.chunk_len, 0);
  EXPECT_EQ(p.chunk_len % block_size, 0) << "chunk not whole blocks";
  EXPECT_EQ(p.chunk_len % c.tile_len, 0) << "chunk not whole tiles";
  EXPECT_GE(int64_t(p.num_splits) * p.chunk_len, max_len) << "keys left uncovered";
  if (p.num_splits > 1) {
    EXPECT_LT(int64_t(p.num_splits - 1) * p.chunk_len, max_len) << "a split empty for every sequence";
    EXPECT_GE(p.chunk_len, c.min_chunk_len);
  }
}

TEST(DecodePlan, SingleLongSequenceFillsTheGpu) {
  for (int ctas_per_sm : {1, 2, 3}) {
    const DecodePlanConfig c = h100(ctas_per_sm);
    const std::vector<int32_t> lens = {32768};
    const DecodePlan p = plan_decode(lens.data(), 1, 8, 16, c);
    check_plan(lens, 8, 16, p, c);
    const double slots = double(c.num_sms) * c.ctas_per_sm;
    EXPECT_GE(num_ctas(lens, 8, p), 0.8 * slots) << "ctas_per_sm " << ctas_per_sm;
    EXPECT_LE(num_ctas(lens, 8, p), 2.0 * slots) << "needless splits, ctas_per_sm " << ctas_per_sm;
  }
}

TEST(DecodePlan, LargeBatchIsNotSplit) {
  const DecodePlanConfig c = h100();
  for (int B : {27, 32, 64, 128, 1000}) {  // 27 * 8 = 216 >= 0.8 * 264
    std::vector<int32_t> lens(B, 8192);
    const DecodePlan p = plan_decode(lens.data(), B, 8, 16, c);
    EXPECT_EQ(p.num_splits, 1) << "B " << B;
    check_plan(lens, 8, 16, p, c);
  }
}

// Powers of two: fewer splits as the batch grows. Near the no-split threshold (B = 26: 208 blocks
// on 264 slots, 79% wave efficiency) more splits can win back the last wave, so only bound them.
TEST(DecodePlan, SplitsShrinkAsTheBatchGrows) {
  const DecodePlanConfig c = h100();
  int prev = 1 << 30;
  for (int B : {1, 2, 4, 8, 16, 20, 26}) {
    std::vector<int32_t> lens(B, 8192);
    const DecodePlan p = plan_decode(lens.data(), B, 8, 16, c);
    check_plan(lens, 8, 16, p, c);
    if (B <= 16) {
      EXPECT_LE(p.num_splits, prev) << "B " << B;
    }
    EXPECT_GE(num_ctas(lens, 8, p), 0.8 * 264) << "B " << B << " leaves the GPU idle";
    EXPECT_LE(num_ctas(lens, 8, p), 4 * 264) << "B " << B << " split needlessly";
    prev = p.num_splits;
  }
}

TEST(DecodePlan, ShortSequencesAreNotSplitBelowMinChunk) {
  const DecodePlanConfig c = h100();
  const std::vector<int32_t> lens = {1, c.min_chunk_len / 2 + 1, c.min_chunk_len};
  const DecodePlan p = plan_decode(lens.data(), 3, 8, 16, c);
  EXPECT_EQ(p.num_splits, 1);
  EXPECT_EQ(p.chunk_len, c.min_chunk_len);
  const std::vector<int32_t> longer = {1000};
  const DecodePlan q = plan_decode(longer.data(), 1, 1, 16, c);
  EXPECT_LE(q.num_splits, (1000 + c.min_chunk_len - 1) / c.min_chunk_len);
  check_plan(longer, 1, 16, q, c);
}

// The v3 retune: one-tile chunks (64 keys) for a lone short sequence, where v2's 128-key minimum
// left half the GPU idle; the minimum is still honoured when a caller asks for 128 (the benchmark's
// v2 comparison), and a batch that fills the GPU on its own is left alone by both.
TEST(DecodePlan, MinChunkRetune) {
  const std::vector<int32_t> one = {2048};
  DecodePlanConfig v3 = h100();
  EXPECT_EQ(v3.min_chunk_len, 64);
  DecodePlan p = plan_decode(one.data(), 1, 8, 16, v3);
  EXPECT_EQ(p.num_splits, 32);  // 8 kv heads x 32 = 256 of 264 slots
  EXPECT_EQ(p.chunk_len, 64);
  check_plan(one, 8, 16, p, v3);
  DecodePlanConfig v2 = h100();
  v2.min_chunk_len = 128;
  p = plan_decode(one.data(), 1, 8, 16, v2);
  EXPECT_EQ(p.num_splits, 16);
  EXPECT_EQ(p.chunk_len, 128);
  check_plan(one, 8, 16, p, v2);
  const std::vector<int32_t> batch(8, 8192);  // 64 blocks unsplit: 4 splits fill 256 slots
  for (const DecodePlanConfig& c : {v2, v3}) {
    p = plan_decode(batch.data(), 8, 8, 16, c);
    EXPECT_EQ(p.num_splits, 4) << "min chunk " << c.min_chunk_len;
  }
  const std::vector<int32_t> tiny = {64};  // one tile: nothing to split
  EXPECT_EQ(plan_decode(tiny.data(), 1, 8, 16, v3).num_splits, 1);
}

TEST(DecodePlan, RaggedRandomBatchesKeepInvariants) {
  std::mt19937 rng(11);
  const int block_sizes[] = {8, 16, 32, 128};
  for (int it = 0; it < 500; ++it) {
    const int B = 1 + rng() % 40, kv_heads = 1 + rng() % 8, bs = block_sizes[rng() % 4];
    std::vector<int32_t> lens(B);
    for (auto& L : lens) L = (rng() % 4 == 0) ? int(rng() % 32769) : int(rng() % 600);
    DecodePlanConfig c = h100(1 + rng() % 3);
    c.num_sms = 16 + rng() % 150;
    const DecodePlan p = plan_decode(lens.data(), B, kv_heads, bs, c);
    check_plan(lens, kv_heads, bs, p, c);
    if (::testing::Test::HasFailure()) FAIL() << "iteration " << it;
  }
}

TEST(DecodePlan, EmptyBatchAndZeroLengths) {
  const DecodePlan p = plan_decode(nullptr, 0, 8, 16, h100());
  EXPECT_EQ(p.num_splits, 1);
  EXPECT_GT(p.chunk_len, 0);
  const std::vector<int32_t> zeros = {0, 0};
  const DecodePlan z = plan_decode(zeros.data(), 2, 8, 16, h100());
  EXPECT_EQ(z.num_splits, 1);
  EXPECT_EQ(z.chunk_len, 64);
}

TEST(DecodePlan, FixedPlans) {
  DecodePlan p = plan_decode_fixed(20, 7, 16);  // one real split, six empty
  EXPECT_EQ(p.num_splits, 7);
  EXPECT_EQ(p.chunk_len, 64);
  p = plan_decode_fixed(32768, 15, 16);
  EXPECT_EQ(p.num_splits, 15);
  EXPECT_EQ(p.chunk_len, 2240);  // ceil(32768 / 15) = 2185 -> whole 64-key tiles
  p = plan_decode_fixed(1000, 1, 32);
  EXPECT_EQ(p.num_splits, 1);
  EXPECT_GE(p.chunk_len, 1000);
  p = plan_decode_fixed(1000, 3, 128);
  EXPECT_EQ(p.chunk_len % 128, 0);
  EXPECT_THROW(plan_decode_fixed(10, 0, 16), Error);
}

// A windowed layer's plan is the plan of sequences as long as their decode_span: a 32k-context
// decode under a window of 512 plans as a 512-key one, and covers exactly the window's keys.
TEST(DecodePlan, SlidingWindowPlansTheWindow) {
  EXPECT_EQ(decode_span(32768, 512), 512);
  EXPECT_EQ(decode_span(300, 512), 300);
  EXPECT_EQ(decode_span(300, 0), 300);
  for (int window : {1, 100, 512, 4096}) {
    const std::vector<int32_t> lens = {32768, 20000, 300, 0, 1};
    std::vector<int32_t> spans;
    for (int32_t L : lens) spans.push_back(decode_span(L, window));
    for (int B : {1, 5}) {
      const DecodePlan w = plan_decode(lens.data(), B, 1, 16, h100(), window);
      const DecodePlan s = plan_decode(spans.data(), B, 1, 16, h100());
      EXPECT_EQ(w.num_splits, s.num_splits) << "window " << window;
      EXPECT_EQ(w.chunk_len, s.chunk_len) << "window " << window;
      check_plan(spans, 1, 16, w, h100());
    }
  }
  const std::vector<int32_t> one = {32768};
  EXPECT_LE(int64_t(plan_decode(one.data(), 1, 1, 16, h100(), 512).num_splits) * 64, 512 + 63);
  EXPECT_THROW(plan_decode(one.data(), 1, 1, 16, h100(), -1), Error);
}

// Gemma 3 1B at head_dim 256 (one kv head, one partial block per SM): a lone 32k full-attention
// sequence splits to fill the SMs, its 512-key windowed layers split only the window.
TEST(DecodePlan, HeadDim256OneBlockPerSm) {
  const DecodePlanConfig c = h100(/*ctas_per_sm=*/1);
  const std::vector<int32_t> lens = {32768};
  const DecodePlan full = plan_decode(lens.data(), 1, 1, 16, c);
  check_plan(lens, 1, 16, full, c);
  EXPECT_GE(num_ctas(lens, 1, full), int64_t(0.8 * c.num_sms));
  const DecodePlan win = plan_decode(lens.data(), 1, 1, 16, c, 512);
  const std::vector<int32_t> span = {512};
  check_plan(span, 1, 16, win, c);
  EXPECT_LE(int64_t(win.num_splits) * win.chunk_len, 512 + 63);
}

TEST(DecodePlan, RejectsBadInput) {
  const std::vector<int32_t> bad = {5, -1};
  EXPECT_THROW(plan_decode(bad.data(), 2, 8, 16, h100()), Error);
  const std::vector<int32_t> ok = {5};
  EXPECT_THROW(plan_decode(ok.data(), 1, 0, 16, h100()), Error);
  DecodePlanConfig c = h100();
  c.num_sms = 0;
  EXPECT_THROW(plan_decode(ok.data(), 1, 8, 16, c), Error);
}

}  // namespace
}  // namespace flashserve

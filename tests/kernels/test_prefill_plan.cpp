// The contiguous K/V choice (kernels/prefill_plan.h): fresh prompts of at least a tile take it,
// chunked continuations and short prompts do not, a mixed step takes it when most tokens are fresh.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/prefill_plan.h"

namespace flashserve {
namespace {

bool pays(const std::vector<int32_t>& q_lens, const std::vector<int32_t>& kv_lens) {
  std::vector<int32_t> cu = {0};
  for (int32_t q : q_lens) cu.push_back(cu.back() + q);
  return prefill_fresh_kv_pays(cu.data(), kv_lens.data(), int(q_lens.size()));
}

TEST(PrefillPlan, FreshPromptsOfATileOrMore) {
  EXPECT_TRUE(pays({4096}, {4096}));
  EXPECT_TRUE(pays({128}, {128}));
  EXPECT_TRUE(pays({1024, 1024, 1024}, {1024, 1024, 1024}));
}

TEST(PrefillPlan, NotForChunkedContinuationsShortPromptsOrNothing) {
  EXPECT_FALSE(pays({512}, {8192}));        // a chunk after a cached prefix
  EXPECT_FALSE(pays({127}, {127}));         // no full tile to copy
  EXPECT_FALSE(pays({64, 64, 64}, {64, 64, 64}));
  EXPECT_FALSE(pays({}, {}));
  EXPECT_FALSE(prefill_fresh_kv_pays(nullptr, nullptr, 0));
}

TEST(PrefillPlan, MixedStepsByTheFreshShareOfTokens) {
  EXPECT_TRUE(pays({512, 512}, {512, 4096}));   // half fresh: pays
  EXPECT_FALSE(pays({511 + 128, 1024}, {639, 8192}));  // 639 of 1663 fresh
  EXPECT_TRUE(pays({2048, 1, 1, 1}, {2048, 300, 301, 302}));  // decode rows beside a prompt
}

}  // namespace
}  // namespace flashserve

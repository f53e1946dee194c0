// The stop rules of a generation (engine/stop_rules.h), each checked once here; the engine tests
// check that the engine thread applies them.
#include "engine/stop_rules.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace flashserve {
namespace {

TEST(StopRules, PromptPlusMaxTokensMustFitTheContext) {
  EXPECT_TRUE(fits_context(10, 90, 100));
  EXPECT_FALSE(fits_context(10, 91, 100));
  EXPECT_TRUE(fits_context(100, 0, 100));   // a prompt filling the context, nothing to generate
  EXPECT_FALSE(fits_context(101, 0, 100));
  EXPECT_FALSE(fits_context(1, std::numeric_limits<int64_t>::max(), 100));  // no overflow
}

TEST(StopRules, BudgetIsMaxTokensCappedByTheContext) {
  EXPECT_EQ(generation_budget(10, 5, 100), 5);
  EXPECT_EQ(generation_budget(10, 500, 100), 90);  // prompt + generated <= max_model_len
  EXPECT_EQ(generation_budget(100, 5, 100), 0);    // a prompt filling the context
  EXPECT_EQ(generation_budget(10, 0, 100), 0);
}

TEST(StopRules, ZeroTokensNeedNoStepUnlessPromptLogprobsAreWanted) {
  EXPECT_TRUE(needs_no_step(0, false));
  EXPECT_FALSE(needs_no_step(0, true));  // echo + logprobs: the prompt still runs
  EXPECT_FALSE(needs_no_step(1, false));
}

TEST(StopRules, EosStopsBeforeTheBudgetAndIgnoreEosGoesOn) {
  const std::vector<int32_t> eos = {2, 7};
  EXPECT_TRUE(is_eos(7, eos));
  EXPECT_FALSE(is_eos(3, eos));
  EXPECT_FALSE(is_eos(2, {}));
  EXPECT_EQ(finish_after_token(2, 1, 10, eos, false), FinishReason::kStop);
  EXPECT_EQ(finish_after_token(2, 10, 10, eos, false), FinishReason::kStop);  // EOS wins
  EXPECT_EQ(finish_after_token(2, 1, 10, eos, true), FinishReason::kNone);
  EXPECT_EQ(finish_after_token(2, 10, 10, eos, true), FinishReason::kLength);
  EXPECT_EQ(finish_after_token(5, 9, 10, eos, false), FinishReason::kNone);
  EXPECT_EQ(finish_after_token(5, 10, 10, eos, false), FinishReason::kLength);
}

}  // namespace
}  // namespace flashserve

// stories260K (a real trained llama2.c checkpoint) generates greedily from BOS + "Once upon a
// time" exactly the 64 tokens that the independent numpy reference produced, stored in
// data/stories260K_greedy.txt by (from the repo root):
//   /usr/bin/python3 tools/llama_reference.py --model ../shared/models/stories260K/stories260K.bin
//       --prompt-ids 1,403,407,261,378 --generate 64
// (prompt ids: BOS=1 + `spm_encode --model=.../tok512.model --output_format=id` of the text).
// Run with several block sizes and thread counts, the prompt prefilled whole or token by token.
#include <gtest/gtest.h>

#include "model/model_runner.h"
#include "tests/model/model_test_util.h"

namespace flashserve::test {
namespace {

const std::string kModel = std::string(FS_MODELS_DIR) + "/stories260K";

std::vector<int32_t> greedy(const LoadedModel& model, int block_size, int threads,
                            bool token_by_token, int n) {
  return greedy_tokens(model, {1, 403, 407, 261, 378}, n, block_size, threads,  // BOS + "Once
                       token_by_token);                                          // upon a time"
}

TEST(Stories260K, GreedyMatchesNumpyReference) {
  if (!fs::exists(kModel)) GTEST_SKIP() << "model not found: " << kModel;
  auto model = load_model(kModel);
  const std::vector<int32_t> want = stories260k_greedy_ids();
  ASSERT_EQ(want.size(), 64u);
  EXPECT_EQ(greedy(*model, 16, 1, false, 64), want);
  EXPECT_EQ(greedy(*model, 1, 2, true, 64), want);
  EXPECT_EQ(greedy(*model, 32, 4, false, 64), want);
}

}  // namespace
}  // namespace flashserve::test

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
  ModelRunnerOptions o;
  o.block_size = block_size;
  o.threads = threads;
  auto runner = ModelRunner::create(model, o);
  BlockPool pool(runner->num_kv_blocks(), 3);
  TestSeq seq;
  seq.tokens = {1, 403, 407, 261, 378};  // BOS + "Once upon a time"
  const int vocab = model.config().vocab_size;
  std::vector<int32_t> out;
  std::vector<float> logits;
  while (int(out.size()) < n) {
    StepPlan b;
    const int pending = int(seq.tokens.size()) - seq.num_cached;
    b.chunks.push_back(
        seq.chunk(token_by_token ? 1 : pending, block_size, pool, LogitsWanted::kLast));
    logits.clear();
    runner->step(b, &logits);
    if (seq.num_cached < int(seq.tokens.size())) continue;  // still in the prompt
    const int32_t next =
        int32_t(std::max_element(logits.end() - vocab, logits.end()) - (logits.end() - vocab));
    out.push_back(next);
    seq.tokens.push_back(next);
  }
  return out;
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

// llama2.c checkpoints end a sequence at BOS as well as EOS (label unit): llama2.c's own sampler
// stops at BOS, the id that joins its training stories, so the server's stop ids hold both, and a
// tokenizer's EOS does not replace them. With flashserve-generate (built beside it): greedy
// stories260K ends its first story at BOS, and the text before that is the same whatever the
// token budget.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "weights/loaded_model.h"

namespace flashserve {
namespace {

const std::string kModel = std::string(FS_MODELS_DIR) + "/stories260K";

// flashserve-generate's text (stdout: the prompt, the generated text, a newline).
std::string generate(int max_tokens) {
  const std::string cmd = std::string(FS_BINARY_DIR) + "/tools/flashserve-generate --model '" +
                          kModel + "' --temperature 0 --threads 1 --max-tokens " +
                          std::to_string(max_tokens) + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; p && (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  if (p) {
    EXPECT_EQ(pclose(p), 0) << cmd;
  }
  return out;
}

TEST(Llama2cStopIds, BosAndEosEndASequence) {
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "model not found: " << kModel;
  auto model = load_model(kModel + "/stories260K.bin");
  EXPECT_EQ(model->config().eos_token_ids, (std::vector<int>{2, 1}));
  model->use_tokenizer_eos(2);
  EXPECT_EQ(model->config().eos_token_ids, (std::vector<int>{2, 1}));
}

TEST(Llama2cStopIds, GreedyStoryStopsAtBos) {
  const std::string bin = std::string(FS_BINARY_DIR) + "/tools/flashserve-generate";
  if (!std::filesystem::exists(kModel) || !std::filesystem::exists(bin))
    GTEST_SKIP() << "model or flashserve-generate not found";
  const std::string first64 = generate(64);  // the golden 64 tokens (tests/model): no BOS
  const std::string story = generate(450);
  // A budget past the story's end changes nothing: generation ended by itself, at BOS.
  EXPECT_EQ(generate(500), story);
  EXPECT_GT(story.size(), first64.size());
  ASSERT_GT(first64.size(), 1u);
  // The same greedy text up to the shorter budget (its trailing newline aside).
  EXPECT_EQ(story.rfind(first64.substr(0, first64.size() - 1), 0), 0u) << story;
}

}  // namespace
}  // namespace flashserve

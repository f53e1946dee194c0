// The real `flashserve` binary with --tensor-parallel-size: 2 and 4 ranks on the CPU answer the
// same completions as 1 (greedy, seeded sampling, logprobs, several choices at once), and a
// size that does not divide the model stops start-up (exit 1) with a message naming the sizes.
#include <gtest/gtest.h>

#include "tests/server/server_process.h"

namespace flashserve::testing {
namespace {

using nlohmann::json;

// Answers to a fixed set of requests, with the parts that differ between runs removed.
std::vector<json> answers(const std::vector<std::string>& extra) {
  ServerProcess server(extra);
  EXPECT_TRUE(server.started()) << server.log();
  if (!server.started()) return {};
  std::vector<json> out;
  const json bodies[] = {
      {{"prompt", "Once upon a time"}, {"max_tokens", 60}, {"temperature", 0}},
      {{"prompt", "The little dog"}, {"max_tokens", 40}, {"temperature", 0.9}, {"seed", 7},
       {"n", 3}},
      {{"prompt", "Lily liked"}, {"max_tokens", 20}, {"temperature", 0.7}, {"top_k", 20},
       {"seed", 3}, {"logprobs", 2}, {"echo", true}},
  };
  for (const json& body : bodies) {
    int status = 0;
    json r = complete(server.port(), body, &status);
    EXPECT_EQ(status, 200) << r.dump();
    out.push_back({{"choices", r.value("choices", json())}, {"usage", r.value("usage", json())}});
  }
  EXPECT_EQ(server.stop(), 0);
  return out;
}

TEST(TensorParallelServer, SameCompletionsAsWithout) {
  const auto want = answers({});
  ASSERT_EQ(want.size(), 3u);
  EXPECT_GT(want[0]["choices"][0]["text"].get<std::string>().size(), 20u);
  for (const char* tp : {"2", "4"}) {
    const auto got = answers({"--tensor-parallel-size", tp, "--threads", tp});
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "TP " << tp << " request " << i;
  }
}

TEST(TensorParallelServer, SizeThatDoesNotDivideStopsStartUp) {
  ServerProcess server({"--tensor-parallel-size", "3"});
  EXPECT_FALSE(server.started());
  EXPECT_EQ(server.stop(), 1);
  EXPECT_NE(server.log().find("tensor-parallel-size 3 does not divide the model's "
                              "num_attention_heads 8"),
            std::string::npos)
      << server.log();
}

}  // namespace
}  // namespace flashserve::testing

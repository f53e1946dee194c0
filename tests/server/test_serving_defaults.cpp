// The engine's batch limits sized at start-up (server/serving_defaults.h): on CUDA from the KV
// cache's size in tokens, clamped at both ends; on the CPU the reference's small batch; a value
// the command line gave is kept.
#include <gtest/gtest.h>

#include "server/serving_defaults.h"

namespace flashserve {
namespace {

TEST(ServingDefaults, SizedFromTheKvCacheOrAsGiven) {
  struct Case {
    const char* what;
    bool cuda;
    int64_t kv_tokens;
    int requested_seqs, requested_tokens;
    int seqs, tokens;
    const char* rule;  // a part of the rule the start-up line prints
  };
  const Case cases[] = {
      // A 7B (Llama-2 shape, 512 KiB of KV a token) on an 80 GB GPU: ~115k tokens of cache.
      {"7B on an H100", true, 115'000, 0, 0, 224, 7187, "kv_tokens/512"},
      {"small cache: the floor", true, 4'096, 0, 0, 64, 512, "kv_tokens/16"},
      {"huge cache: the ceiling", true, 10'000'000, 0, 0, 1024, 8192, "[64, 1024]"},
      {"cpu, small cache", false, 512, 0, 0, 64, 512, "CPU backend"},
      {"cpu, large cache", false, 1'000'000, 0, 0, 64, 512, "CPU backend"},
      {"one flag given", true, 115'000, 8, 0, 8, 7187, "one as given"},
      {"both flags given", false, 115'000, 3, 100, 3, 100, "as given"},
  };
  for (const Case& c : cases) {
    const ServingDefaults d =
        size_serving_defaults(c.cuda, c.kv_tokens, c.requested_seqs, c.requested_tokens);
    EXPECT_EQ(d.max_num_seqs, c.seqs) << c.what;
    EXPECT_EQ(d.max_num_batched_tokens, c.tokens) << c.what;
    EXPECT_NE(d.rule.find(c.rule), std::string::npos) << c.what << ": " << d.rule;
  }
}

}  // namespace
}  // namespace flashserve

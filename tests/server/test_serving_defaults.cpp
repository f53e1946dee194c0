// The engine's batch limits sized at start-up (server/serving_defaults.h): on CUDA from the KV
// cache's size in tokens, clamped at both ends; on the CPU the reference's small batch; a value
// the command line gave is kept.
#include <gtest/gtest.h>

#include "server/serving_defaults.h"

namespace flashserve {
namespace {

void expect_limits(const ServingDefaults& d, int seqs, int tokens) {
  EXPECT_EQ(d.max_num_seqs, seqs) << d.rule;
  EXPECT_EQ(d.max_num_batched_tokens, tokens) << d.rule;
}

TEST(ServingDefaults, CudaScalesWithTheKvCacheWithinItsBounds) {
  // A 7B (Llama-2 shape, 512 KiB of KV a token) on an 80 GB GPU: ~115k tokens of cache.
  ServingDefaults d = size_serving_defaults(true, 115'000, 0, 0);
  expect_limits(d, 224, 7187);
  EXPECT_NE(d.rule.find("kv_tokens/512"), std::string::npos) << d.rule;
  // A small cache keeps the floor; a huge one the ceiling.
  d = size_serving_defaults(true, 4'096, 0, 0);
  expect_limits(d, 64, 512);
  d = size_serving_defaults(true, 10'000'000, 0, 0);
  expect_limits(d, 1024, 8192);
}

TEST(ServingDefaults, CpuKeepsTheReferenceBatch) {
  for (int64_t kv : {int64_t{512}, int64_t{1'000'000}}) {
    const ServingDefaults d = size_serving_defaults(false, kv, 0, 0);
    expect_limits(d, 64, 512);
  }
}

TEST(ServingDefaults, FlagsWin) {
  ServingDefaults d = size_serving_defaults(true, 115'000, 8, 0);
  expect_limits(d, 8, 7187);
  EXPECT_NE(d.rule.find("one as given"), std::string::npos) << d.rule;
  d = size_serving_defaults(false, 115'000, 3, 100);
  expect_limits(d, 3, 100);
  EXPECT_EQ(d.rule, "as given");
}

}  // namespace
}  // namespace flashserve

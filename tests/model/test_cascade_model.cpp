// Cascade attention in the whole forward pass on the CPU backend: sequences that share a prompt
// prefix decode to the same logits whether the shared blocks are attended once per group
// (cascade) or once per sequence (plain). Not bitwise: the LSE merge rounds differently from
// one pass over all keys, so the bound is fp32 rounding (measured 8e-7 relative, allowed 1e-5).
#include <gtest/gtest.h>

#include <cstdio>

#include "model/model_runner.h"
#include "tests/model/cascade_test_util.h"
#include "tests/model/model_test_util.h"

namespace flashserve::test {
namespace {

TEST(CascadeModel, DecodeLogitsEqualPlainAttentionOnTheCpu) {
  auto [model, plain, cascade] = cascade_pair("cpu", 4096, /*threads=*/2);
  const auto want = run_shared_prefix(*plain, 5, 48, 9, 20, 3);
  const auto got = run_shared_prefix(*cascade, 5, 48, 9, 20, 3);
  EXPECT_EQ(plain->cascade_steps(), 0u);
  EXPECT_EQ(cascade->cascade_steps(), 20u) << "every decode step shares the 3 prompt blocks";
  const double diff = max_rel_diff(got, want);
  std::printf("cascade vs plain decode logits on the CPU: max rel diff %.3g\n", diff);
  EXPECT_LE(diff, 1e-5);
}

}  // namespace
}  // namespace flashserve::test

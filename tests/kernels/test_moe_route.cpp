// The MoE routing and permutation kernels (kernels/moe.h) against their twin ref::moe_route and
// against what a permutation must be. Routing: 1, 8, 60, 128 and 256 experts, top_k 1..16 and
// top_k = num_experts, batch 1, 7 and 256, with and without renormalisation, random logits and
// logits drawn from 3 values (ties everywhere: the lower expert id must win, in the twin's
// order); ids bitwise, weights within 1e-6 relative (f32 exp against the twin's double).
// Permutation: random routings, every token to one expert, most experts without tokens, top_k =
// num_experts, out-of-range ids; checked: offsets are the counts' prefix sums, every pair has one
// row, rows of an expert in (token, choice) order, row_token inverts pair_row. Outputs are poisoned first.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/moe_ref.h"
#include "kernels/moe.h"
#include "tests/kernels/device_test_util.h"

namespace flashserve {
namespace {

using test::Dev;

std::vector<float> random_logits(int n, int e, bool ties, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 2.f);
  std::uniform_int_distribution<int> pick(0, 2);
  std::vector<float> v(size_t(n) * e);
  for (float& x : v) x = ties ? float(pick(rng)) * 0.5f : nd(rng);
  return v;
}

TEST(MoeRoute, MatchesItsTwin) {
  std::mt19937 rng(43);
  struct Shape {
    int experts, top_k;
  };
  for (const Shape s : {Shape{1, 1}, {8, 2}, {8, 8}, {60, 4}, {128, 8}, {128, 16}, {256, 8},
                        {256, 16}, {16, 16}, {33, 5}})
    for (int n : {1, 7, 256})
      for (bool ties : {false, true})
        for (bool renorm : {false, true}) {
          SCOPED_TRACE(testing::Message() << s.experts << " experts top " << s.top_k << " n " << n
                                          << (ties ? " ties" : "") << (renorm ? " renorm" : ""));
          const std::vector<float> logits = random_logits(n, s.experts, ties, rng);
          std::vector<int32_t> want_ids(size_t(n) * s.top_k);
          std::vector<float> want_w(want_ids.size());
          ref::moe_route(want_ids.data(), want_w.data(), logits.data(), n, s.experts, s.top_k,
                         renorm);
          Dev<float> dl(logits);
          Dev<int32_t> ids(want_ids.size());
          Dev<float> w(want_w.size());
          ids.poison();
          w.poison();
          cuda::moe_route(ids.ptr, w.ptr, dl.ptr, n, s.experts, s.top_k, renorm, nullptr);
          ASSERT_EQ(ids.get(), want_ids);
          const std::vector<float> got = w.get();
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(got[i], want_w[i], 1e-6 * std::max(1.f, std::fabs(want_w[i]))) << i;
        }
}

TEST(MoeRoute, RejectsBadShapes) {
  Dev<float> l(4);
  Dev<int32_t> ids(4);
  Dev<float> w(4);
  EXPECT_THROW(cuda::moe_route(ids.ptr, w.ptr, l.ptr, 1, 4, 5, true, nullptr), Error);
  EXPECT_THROW(cuda::moe_route(ids.ptr, w.ptr, l.ptr, 1, 257, 2, true, nullptr), Error);
  EXPECT_THROW(cuda::moe_route(ids.ptr, w.ptr, l.ptr, 1, 64, 17, true, nullptr), Error);
}

// Runs moe_permute on `ids` and checks every property of the result.
void check_permutation(const std::vector<int32_t>& ids, int n, int top_k, int experts) {
  const int total = n * top_k;
  Dev<int32_t> d_ids(ids);
  Dev<int32_t> ws((cuda::moe_permutation_bytes(n, top_k, experts) + 3) / 4);
  ws.poison();
  const cuda::MoePermutation p = cuda::moe_permutation_in(ws.ptr, n, top_k, experts);
  cuda::moe_permute(p, d_ids.ptr, n, top_k, experts, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  auto get = [](const int32_t* d, size_t count) { return test::download<int32_t>(d, count); };
  const std::vector<int32_t> offsets = get(p.offsets, experts + 1);
  const std::vector<int32_t> row_token = get(p.row_token, total);
  const std::vector<int32_t> pair_row = get(p.pair_row, total);
  std::vector<int> count(experts, 0);
  for (int32_t e : ids)
    if (e >= 0 && e < experts) ++count[e];
  int rows = 0;
  for (int e = 0; e < experts; ++e) {
    ASSERT_EQ(offsets[e], rows) << "expert " << e;
    rows += count[e];
  }
  ASSERT_EQ(offsets[experts], rows);
  std::vector<int> next(offsets.begin(), offsets.end() - 1);  // stable: pairs in order
  for (int i = 0; i < total; ++i) {
    const int e = ids[i];
    if (e < 0 || e >= experts) {
      ASSERT_EQ(pair_row[i], -1) << "pair " << i;
      continue;
    }
    ASSERT_EQ(pair_row[i], next[e]++) << "pair " << i << " of expert " << e;
    ASSERT_EQ(row_token[pair_row[i]], i / top_k) << "pair " << i;
  }
}

TEST(MoePermute, GroupsPairsByExpertInOrder) {
  std::mt19937 rng(47);
  for (int experts : {1, 8, 60, 128, 256})
    for (int top_k : {1, 2, 8})
      for (int n : {1, 3, 16, 256, 1500}) {
        if (top_k > experts) continue;
        SCOPED_TRACE(testing::Message() << experts << " experts top " << top_k << " n " << n);
        std::vector<int32_t> ids(size_t(n) * top_k);
        for (int t = 0; t < n; ++t) {  // distinct experts per token, as moe_route gives
          std::vector<int32_t> all(experts);
          for (int e = 0; e < experts; ++e) all[e] = e;
          std::shuffle(all.begin(), all.end(), rng);
          std::copy_n(all.begin(), top_k, ids.begin() + size_t(t) * top_k);
        }
        check_permutation(ids, n, top_k, experts);
      }
}

TEST(MoePermute, EdgeRoutings) {
  std::mt19937 rng(53);
  {
    SCOPED_TRACE("every token to expert 5 of 128");
    check_permutation(std::vector<int32_t>(300, 5), 300, 1, 128);
  }
  {
    SCOPED_TRACE("top_k = num_experts = 8, 256 tokens");
    std::vector<int32_t> ids;
    for (int t = 0; t < 256; ++t)
      for (int e = 7; e >= 0; --e) ids.push_back(e);
    check_permutation(ids, 256, 8, 8);
  }
  {
    SCOPED_TRACE("two experts of 256 used");
    std::vector<int32_t> ids;
    for (int t = 0; t < 77; ++t) ids.insert(ids.end(), {255, 0});
    check_permutation(ids, 77, 2, 256);
  }
  {
    SCOPED_TRACE("out-of-range ids are dropped");
    check_permutation({3, -1, 9, 3, 2, 100}, 3, 2, 10);
  }
  {
    SCOPED_TRACE("no tokens");
    check_permutation({}, 0, 4, 16);
  }
}

}  // namespace
}  // namespace flashserve

// The grouped GEMM's CPU twin (ref::moe_grouped_gemm, kernels/cpu/moe_grouped_gemm_ref.h) on its
// own, with small integer inputs so that every output is exact: each routed row equals its
// expert's matmul (the expert found per row by a search over the offsets, not by the twin's loop
// over experts), rows outside every expert's range keep what they held, empty experts and E = 1 work, offsets
// that decrease or start below zero are refused. The CUDA kernels are held to this twin in
// tests/kernels/test_moe_grouped_gemm.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/moe_grouped_gemm_ref.h"

namespace flashserve {
namespace {

constexpr float kUntouched = -12345.f;

void check(const std::vector<int32_t>& offsets, int n, int k, int extra_rows, std::mt19937& rng) {
  const int num_experts = int(offsets.size()) - 1, rows = offsets.back() + extra_rows;
  std::uniform_int_distribution<int> small(-3, 3);
  std::vector<float> a(size_t(rows) * k), w(size_t(num_experts) * n * k);
  for (float& x : a) x = float(small(rng));
  for (float& x : w) x = float(small(rng));
  std::vector<float> out(size_t(rows) * n, kUntouched);
  ref::moe_grouped_gemm(out.data(), a.data(), offsets.data(), w.data(), num_experts, n, k);
  for (int r = 0; r < rows; ++r) {
    // The expert owning row r: the last e with offsets[e] <= r < offsets[e + 1].
    const auto it = std::upper_bound(offsets.begin(), offsets.end(), r);
    const int e = int(it - offsets.begin()) - 1;
    for (int j = 0; j < n; ++j) {
      const float got = out[size_t(r) * n + j];
      if (r < offsets.front() || r >= offsets.back()) {
        ASSERT_EQ(got, kUntouched) << "row " << r << ", outside every expert's range, was written";
        continue;
      }
      long long want = 0;
      for (int c = 0; c < k; ++c)
        want += (long long)a[size_t(r) * k + c] * (long long)w[(size_t(e) * n + j) * k + c];
      ASSERT_EQ(got, float(want)) << "row " << r << " (expert " << e << ") column " << j;
    }
  }
}

TEST(MoeGroupedGemmRef, EachRowIsItsExpertsMatmul) {
  std::mt19937 rng(11);
  check({0, 3, 3, 10, 11, 11}, 6, 9, 4, rng);  // empty experts 1 and 4
  check({0, 0, 0, 5}, 4, 16, 0, rng);          // only the last expert
  check({0, 7}, 5, 3, 2, rng);                 // E = 1
  check({2, 4, 9}, 3, 5, 1, rng);              // rows before offsets[0] are no expert's either
}

TEST(MoeGroupedGemmRef, RefusesBadOffsets) {
  std::vector<float> buf(1024, 0.f);
  const std::vector<int32_t> decreasing{0, 5, 3}, negative{-1, 2};
  EXPECT_THROW(ref::moe_grouped_gemm(buf.data(), buf.data(), decreasing.data(), buf.data(), 2, 4, 4), Error);
  EXPECT_THROW(ref::moe_grouped_gemm(buf.data(), buf.data(), negative.data(), buf.data(), 1, 4, 4), Error);
}

}  // namespace
}  // namespace flashserve

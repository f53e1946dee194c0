// The CPU twin of the activation quantizer (ref::quantize_rows_fp8, kernels/cpu/fp8_matmul_ref.h)
// on its own: every row's largest magnitude becomes +-448 exactly, every value comes back within
// half an E4M3 step (2^-4 relative for normal codes, 2^-10 of the scale in the subnormal range),
// rows of zeros or of values under kFp8MinRowAmax keep scale 1. The CUDA kernel is held to this
// twin bitwise in tests/kernels/test_fp8_matmul.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/fp8.h"
#include "kernels/cpu/fp8_matmul_ref.h"

namespace flashserve {
namespace {

TEST(Fp8QuantizeRef, RowsComeBackWithinHalfAStep) {
  std::mt19937 rng(7);
  std::lognormal_distribution<float> mag(0.f, 2.f);
  const int m = 5, k = 333;
  std::vector<float> x(size_t(m) * k);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 2 ? -1.f : 1.f) * mag(rng);
  std::fill(x.begin() + 2 * k, x.begin() + 3 * k, 0.f);       // row 2: zeros
  std::fill(x.begin() + 3 * k, x.begin() + 4 * k, 1e-33f);    // row 3: under kFp8MinRowAmax
  x[size_t(4) * k + 17] = -1e6f;                              // row 4: one outlier
  std::vector<uint8_t> q(x.size());
  std::vector<float> s(static_cast<size_t>(m));
  ref::quantize_rows_fp8(q.data(), s.data(), x.data(), m, k);
  for (int i = 0; i < m; ++i) {
    const float* row = x.data() + size_t(i) * k;
    float amax = 0.f;
    for (int c = 0; c < k; ++c) amax = std::max(amax, std::fabs(row[c]));
    if (i == 2 || i == 3) {
      EXPECT_EQ(s[i], 1.f) << "row " << i;
      for (int c = 0; c < k; ++c) EXPECT_EQ(fp8_e4m3_to_float(q[size_t(i) * k + c]), 0.f);
      continue;
    }
    EXPECT_EQ(s[i], amax / kFp8E4M3Max) << "row " << i;
    bool hit_max = false;
    for (int c = 0; c < k; ++c) {
      const float d = fp8_e4m3_to_float(q[size_t(i) * k + c]);
      hit_max |= std::fabs(d) == kFp8E4M3Max;
      const double back = double(d) * s[i];
      const double tol = std::max(std::ldexp(double(std::fabs(row[c])), -4), std::ldexp(double(s[i]), -10));
      ASSERT_LE(std::fabs(back - row[c]), tol * (1 + 1e-6)) << "row " << i << " col " << c;
    }
    EXPECT_TRUE(hit_max) << "row " << i << "'s largest value is not +-448";
  }
}

}  // namespace
}  // namespace flashserve

// The GPU argmax (kernels/argmax.h) against its CPU twin (kernels/cpu/argmax_ref.h), exactly:
// random rows from 1 to 128256 columns, a tie (the lower index wins, wherever the two values
// fall among the block's threads), a NaN row (-1), a row of -inf (index 0) and the maximum in
// the last column.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/argmax.h"
#include "kernels/cpu/argmax_ref.h"
#include "tests/kernels/device_test_util.h"

namespace flashserve::test {
namespace {

TEST(ArgmaxKernel, MatchesTwin) {
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> u(-5.f, 8.f);
  for (auto [rows, cols] : {std::pair{1, 1}, {1, 7}, {5, 32000}, {33, 1000}, {3, 128256}}) {
    std::vector<float> v(size_t(rows) * cols);
    for (float& x : v) x = u(rng);
    v[size_t(cols) - 1] = 9.f;  // row 0: a tie between the last column and column cols / 3
    v[size_t(cols) / 3] = 9.f;
    if (rows > 1) v[size_t(cols) + cols / 2] = std::nanf("");
    if (rows > 2)
      for (int c = 0; c < cols; ++c) v[size_t(2) * cols + c] = -std::numeric_limits<float>::infinity();
    if (rows > 3) v[size_t(4) * cols - 1] = 100.f;
    Dev<float> dl(v);
    Dev<int32_t> dids(static_cast<size_t>(rows));
    cuda::argmax_rows_f32(dids.ptr, dl.ptr, rows, cols, nullptr);
    std::vector<int32_t> want(static_cast<size_t>(rows));
    ref::argmax_rows(want.data(), v.data(), rows, cols);
    EXPECT_EQ(dids.get(), want) << rows << " x " << cols;
    EXPECT_EQ(want[0], cols / 3);
    if (rows > 1) EXPECT_EQ(want[1], -1);
    if (rows > 2) EXPECT_EQ(want[2], 0);
    if (rows > 3) EXPECT_EQ(want[3], cols - 1);
  }
}

}  // namespace
}  // namespace flashserve::test

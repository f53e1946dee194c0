// The int4 kernels (kernels/int4_gemv.h) against their CPU twin (kernels/cpu/int4_matmul_ref.h),
// through the CUDA layout int4_gpu_layout makes: int4_gemv for m = 1..16 (act-order weights
// through int4_gather_columns, as the CUDA backend runs them), group sizes 32, 64, 128 and one
// group per row, symmetric (zero 8) and asymmetric (zeros 0..16, 16 included) weights, a random
// act-order permutation; n not a multiple of the 16-row tile, k from 128 up, with and without a
// partial 128-column unit; n large enough that the persistent grid's blocks walk several tiles.
// Scales log-uniform in [1e-4, 1e2], row 0 all at its zero point, x not centred on zero; outputs
// poisoned with NaN first.
// Tolerance, per output: each 32-column run's fp32 sum of exact products (code - zero) * x, times
// its scale, may differ from the double twin by k ulps of B = sum |x| |w| (k 2^-23 B, one ulp per
// addition); a wrong code, zero, scale or column moves an output by a fraction of B. bf16 outputs
// add their rounding, 2^-8 of the value. The dequantized weight is exact: bitwise.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/int4_gemv.h"
#include "tests/kernels/device_test_util.h"
#include "tests/kernels/int4_test_util.h"

namespace flashserve {
namespace {

using test::Dev;
using test::DevInt4;
using test::Int4;
using test::random_int4;

// int4_gemv of m rows against the twin, f32 and bf16 outputs.
void check_gemv(const Int4& w, const DevInt4& d, int m, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "m " << m << " n " << w.n << " k " << w.k << " group "
                                  << w.group_size << (w.perm.empty() ? "" : " act-order"));
  const test::Int4Case c(w, d, m, rng);
  const std::vector<float>& want = c.want;
  const std::vector<double>& bound = c.bound;
  const void* xs = c.packed;
  for (bool out_f32 : {true, false}) {
    Dev<float> of(size_t(m) * w.n);
    Dev<uint16_t> ob(size_t(m) * w.n);
    of.poison();
    ob.poison();
    void* out = out_f32 ? static_cast<void*>(of.ptr) : static_cast<void*>(ob.ptr);
    ASSERT_TRUE(cuda::int4_gemv_supported(m, w.k, w.group_size, xs, out));
    cuda::int4_gemv(out, out_f32, xs, d.codes.ptr, d.scales.ptr, d.zeros.ptr, m, w.n, w.k,
                    w.group_size, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> got = out_f32 ? of.get() : test::from_bf16(ob.get());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << "output " << i << " not written";
      const double tol = double(w.k) * std::ldexp(1.0, -23) * bound[i] +
                         (out_f32 ? 0.0 : std::ldexp(1.0, -8) * std::fabs(want[i]));
      ASSERT_LE(std::fabs(double(got[i]) - want[i]), tol)
          << "output " << i << (out_f32 ? " f32" : " bf16") << ": got " << got[i] << " want "
          << want[i];
      if (i % size_t(w.n) == 0) {
        EXPECT_EQ(got[i], 0.f) << "row 0 of w is at its zero points";
      }
    }
  }
}

TEST(Int4Gemv, MatchesItsTwinForEveryRowCount) {
  std::mt19937 rng(41);
  struct Shape {
    int n, k;
  };
  for (const Shape s :
       {Shape{1, 128}, {7, 128}, {5, 160}, {33, 256}, {130, 384}, {24, 640}, {257, 2048}}) {
    for (int gs : {32, 64, 128, s.k}) {
      if (s.k % gs != 0) continue;
      for (bool asym : {false, true})
        for (bool act_order : {false, true}) {
          const Int4 w = random_int4(s.n, s.k, gs, asym, act_order, rng);
          const DevInt4 d(w);
          for (int m = 1; m <= cuda::kInt4GemvMaxRows; ++m) check_gemv(w, d, m, rng);
        }
    }
  }
}

// Decode-sized shapes (Llama-2-7B's o and down projections' k, a partial last unit) at a few m.
TEST(Int4Gemv, MatchesItsTwinOnLargeShapes) {
  std::mt19937 rng(42);
  for (const auto& [n, k, gs] : {std::tuple{100, 4096, 128}, {40, 11008, 128}, {50, 11008, -1},
                                 {72, 4160, 32}, {16, 4160, 64}}) {
    const Int4 w = random_int4(n, k, gs == -1 ? k : gs, true, gs == 32, rng);
    const DevInt4 d(w);
    for (int m : {1, 3, 8, 9, 16}) check_gemv(w, d, m, rng);
  }
}

// n past what one wave of the persistent grid covers (132 SMs x 2 blocks x 16 rows on H100 and
// H200, with room for more), so each block walks 2 to 4 tiles and each warp's ring of cp.async
// slots wraps across them; groups of 256 and 384 span several units (the group of a warp's first
// unit is not 0), one group per row, a partial last unit (k 2112) and warps without units.
TEST(Int4Gemv, MatchesItsTwinWhenBlocksWalkManyTiles) {
  std::mt19937 rng(44);
  for (const auto& [n, k, gs, act_order] :
       {std::tuple{13001, 2112, 64, true}, {12295, 2304, 256, false}, {13000, 1152, 384, false},
        {12290, 2304, 2304, true}}) {
    const Int4 w = random_int4(n, k, gs, true, act_order, rng);
    const DevInt4 d(w);
    for (int m : {1, 16}) check_gemv(w, d, m, rng);
  }
}

TEST(Int4Gemv, SupportedShapes) {
  Dev<uint16_t> x(4096), out(4096);
  EXPECT_TRUE(cuda::int4_gemv_supported(16, 128, 128, x.ptr, out.ptr));
  EXPECT_TRUE(cuda::int4_gemv_supported(1, 96, 96, x.ptr, out.ptr));  // one group per row
  EXPECT_TRUE(cuda::int4_gemv_supported(1, 256, 256, x.ptr, out.ptr));
  EXPECT_FALSE(cuda::int4_gemv_supported(0, 128, 128, x.ptr, out.ptr));
  EXPECT_FALSE(cuda::int4_gemv_supported(17, 128, 128, x.ptr, out.ptr));
  EXPECT_FALSE(cuda::int4_gemv_supported(1, 128, 16, x.ptr, out.ptr));   // group < 32
  EXPECT_FALSE(cuda::int4_gemv_supported(1, 192, 96, x.ptr, out.ptr));   // group 96 of 192
  EXPECT_FALSE(cuda::int4_gemv_supported(1, 128, 128, x.ptr + 4, out.ptr));
  Dev<uint8_t> codes(64);
  Dev<float> scales(1);
  EXPECT_THROW(cuda::int4_gemv(out.ptr, false, x.ptr, codes.ptr, scales.ptr, codes.ptr, 1, 1, 128,
                               16, nullptr),
               Error);
}

TEST(Int4Gemv, DequantizeIsExact) {
  std::mt19937 rng(43);
  for (const auto& [n, k, gs, act_order] : {std::tuple{1, 128, 32, false}, {7, 384, 128, true},
                                            {130, 640, 64, true}, {300, 4160, 4160, false}}) {
    const Int4 w = random_int4(n, k, gs, true, act_order, rng);
    const DevInt4 d(w);
    Dev<uint16_t> out(size_t(n) * k);
    out.poison();
    cuda::int4_dequantize_bf16(out.ptr, d.codes.ptr, d.scales.ptr, d.zeros.ptr,
                               act_order ? d.perm.ptr : nullptr, n, k, gs, nullptr);
    const std::vector<uint16_t> got = out.get();
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < k; ++c) {
        const int g = r * w.groups() + c / gs;
        const float v = float(w.code(r, c) - w.zeros[size_t(g)]) * w.scales[size_t(g)];
        const int col = act_order ? w.perm[size_t(c)] : c;
        ASSERT_EQ(got[size_t(r) * k + col], float_to_bf16_bits(v))
            << "n " << n << " k " << k << " row " << r << " packed column " << c;
      }
  }
}

}  // namespace
}  // namespace flashserve

// The int4 GEMM (kernels/int4_gemm.h) against the int4 twin (kernels/cpu/int4_matmul_ref.h),
// through the CUDA layout int4_gpu_layout makes: m from 17 to 512 (every tile shape, partial
// tiles of x), n a multiple of 4 but not of the 32-128-row tiles, k from 96 up with and without a
// partial 128-column unit, groups 32/64/128/one per row, symmetric and asymmetric zero points
// (16 included), random act-order permutations (x through int4_gather_columns, as the CUDA backend
// runs it), f32 and bf16 out; outputs poisoned with NaN first and a row past m left untouched.
// Tolerances, per output, B = sum |x| |w| (tests/kernels/int4_test_util.h):
//  - against the twin: the kernel's weight is (code - zero) times bf16(scale), rounded to bf16,
//    so within 2 bf16 roundings (2 * 2^-9) of the f32 weight; the products with bf16 x are exact
//    in fp32 and their fp32 sum is off by at most one ulp per addition (k 2^-23 of B). Bound:
//    (2^-8 + 2^-16 + k 2^-23) B. bf16 out adds its rounding, 2^-8 of the value;
//  - against the same sum over the kernel's own bf16 weights (kernel_weight): k 2^-23 B alone, so
//    a wrong code, zero, scale, group or column shows even where it moves less than 2^-8 B.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "kernels/int4_gemm.h"
#include "kernels/int4_gemv.h"
#include "tests/kernels/device_test_util.h"
#include "tests/kernels/int4_test_util.h"

namespace flashserve {
namespace {

using test::Dev;
using test::DevInt4;
using test::Int4;

// The kernel's bf16 weight of packed column c of row r.
float kernel_weight(const Int4& w, int r, int c) {
  const size_t g = size_t(r) * w.groups() + c / w.group_size;
  const float scale = round_to(DType::kBF16, w.scales[g]);
  return round_to(DType::kBF16, float(w.code(r, c) - w.zeros[g]) * scale);
}

// out[m, n] = x · (kernel weights)ᵀ in double, x gathered into packed column order.
std::vector<double> with_kernel_weights(const Int4& w, const std::vector<float>& x, int m) {
  std::vector<double> out(size_t(m) * w.n);
  std::vector<float> wr(size_t(w.k));
  for (int r = 0; r < w.n; ++r) {
    for (int c = 0; c < w.k; ++c) wr[size_t(c)] = kernel_weight(w, r, c);
    for (int i = 0; i < m; ++i) {
      double s = 0;
      for (int c = 0; c < w.k; ++c)
        s += double(x[size_t(i) * w.k + (w.perm.empty() ? c : w.perm[size_t(c)])]) * wr[size_t(c)];
      out[size_t(i) * w.n + r] = s;
    }
  }
  return out;
}

void check_gemm(const Int4& w, const DevInt4& d, int m, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "m " << m << " n " << w.n << " k " << w.k << " group "
                                  << w.group_size << (w.perm.empty() ? "" : " act-order"));
  const test::Int4Case c(w, d, m, rng);
  const std::vector<float>& want = c.want;
  const std::vector<double>& bound = c.bound;
  const std::vector<double> exact = with_kernel_weights(w, c.x, m);
  const void* xs = c.packed;
  const size_t count = size_t(m) * w.n;
  for (bool out_f32 : {true, false}) {
    Dev<float> of(count + w.n);  // one row more than m: it must stay poisoned
    Dev<uint16_t> ob(count + w.n);
    of.poison();
    ob.poison();
    void* out = out_f32 ? static_cast<void*>(of.ptr) : static_cast<void*>(ob.ptr);
    ASSERT_TRUE(cuda::int4_gemm_supported(m, w.n, w.k, w.group_size, xs, out));
    cuda::int4_gemm(out, out_f32, xs, d.codes.ptr, d.scales.ptr, d.zeros.ptr, m, w.n, w.k,
                    w.group_size, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> got = out_f32 ? of.get() : test::from_bf16(ob.get());
    const double k_ulps = double(w.k) * std::ldexp(1.0, -23);
    // bf16 out: the rounding of a value within tol of ref is at most 2^-8 (|ref| + tol).
    const double out_rel = out_f32 ? 0.0 : std::ldexp(1.0, -8);
    auto allowed = [&](double tol, double ref) {
      return tol * (1 + out_rel) + out_rel * std::fabs(ref);
    };
    for (size_t i = 0; i < count; ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << "output " << i << " not written";
      const double tol = (std::ldexp(1.0, -8) + std::ldexp(1.0, -16) + k_ulps) * bound[i];
      ASSERT_LE(std::fabs(double(got[i]) - want[i]), allowed(tol, want[i]))
          << "output " << i << (out_f32 ? " f32" : " bf16") << ": got " << got[i] << " want "
          << want[i];
      // B over the kernel's weights is at most (1 + 2^-8) B.
      ASSERT_LE(std::fabs(double(got[i]) - exact[i]), allowed(k_ulps * bound[i] * 1.01, exact[i]))
          << "output " << i << (out_f32 ? " f32" : " bf16") << " against the kernel's weights: got "
          << got[i] << " want " << exact[i];
      if (i % size_t(w.n) == 0) {
        ASSERT_EQ(got[i], 0.f) << "row 0 of w is at its zero points";
      }
    }
    for (size_t i = count; i < count + w.n; ++i)
      ASSERT_TRUE(std::isnan(got[i])) << "wrote past row m at " << i;
  }
}

TEST(Int4Gemm, MatchesItsTwinForEveryTileShape) {
  std::mt19937 rng(51);
  struct Shape {
    int n, k;
  };
  for (const Shape s : {Shape{36, 128}, {100, 160}, {260, 384}, {132, 640}, {4, 96}}) {
    std::vector<int> sizes{32, 64, 128};
    if (s.k != 32 && s.k != 64 && s.k != 128) sizes.push_back(s.k);  // one group per row
    for (int gs : sizes) {
      if (s.k % gs != 0) continue;
      for (const auto& [asym, act_order] : {std::pair{false, false}, {true, true}, {true, false}}) {
        const Int4 w = test::random_int4(s.n, s.k, gs, asym, act_order, rng);
        const DevInt4 d(w);
        for (int m : {17, 33, 48, 64, 100, 129, 300, 512}) check_gemm(w, d, m, rng);
      }
    }
  }
}

// Prefill-sized shapes: Llama-2-7B's k (4096, the down projection's 11008), a partial last unit
// (4160) with small groups and one group per row.
TEST(Int4Gemm, MatchesItsTwinOnLargeShapes) {
  std::mt19937 rng(52);
  for (const auto& [n, k, gs, m] :
       {std::tuple{100, 4096, 128, 512}, {40, 11008, 128, 64}, {72, 4160, 4160, 33},
        {72, 4160, 32, 100}, {36, 4160, 64, 17}}) {
    const Int4 w = test::random_int4(n, k, gs, true, gs == 32, rng);
    const DevInt4 d(w);
    check_gemm(w, d, m, rng);
  }
}

TEST(Int4Gemm, SupportedShapes) {
  Dev<uint16_t> x(4096), out(4096);
  EXPECT_TRUE(cuda::int4_gemm_supported(17, 36, 128, 128, x.ptr, out.ptr));
  EXPECT_TRUE(cuda::int4_gemm_supported(4096, 4, 96, 96, x.ptr, out.ptr));  // one group per row
  EXPECT_FALSE(cuda::int4_gemm_supported(0, 36, 128, 128, x.ptr, out.ptr));
  EXPECT_FALSE(cuda::int4_gemm_supported(17, 34, 128, 128, x.ptr, out.ptr));  // n % 4
  EXPECT_FALSE(cuda::int4_gemm_supported(17, 36, 128, 16, x.ptr, out.ptr));   // group < 32
  EXPECT_FALSE(cuda::int4_gemm_supported(17, 36, 192, 96, x.ptr, out.ptr));   // group 96 of 192
  EXPECT_FALSE(cuda::int4_gemm_supported(17, 36, 132, 132, x.ptr, out.ptr));  // k % 8
  EXPECT_FALSE(cuda::int4_gemm_supported(17, 36, 128, 128, x.ptr + 4, out.ptr));
  EXPECT_FALSE(cuda::int4_gemm_supported(17, 36, 128, 128, x.ptr, out.ptr + 4));
  Dev<uint8_t> codes(64 * 36);
  Dev<float> scales(36);
  EXPECT_THROW(cuda::int4_gemm(out.ptr, false, x.ptr, codes.ptr, scales.ptr, codes.ptr, 17, 34,
                               128, 128, nullptr),
               Error);
}

}  // namespace
}  // namespace flashserve

// The FP8 kernels (kernels/gemv.h, kernels/fp8_quantize.h: gemv_fp8 for m = 1..16, the warp
// kernel up to m = 2 and the tensor-core kernel above; dequantize_fp8_bf16; quantize_rows_fp8)
// against their CPU twins (kernels/cpu/fp8_matmul_ref.h). Weights: every non-NaN E4M3 code (subnormals, zeros, +-448),
// row scales from 1e-4 to 1e4, rows of zeros; x not centred on zero; shapes with n not a
// multiple of the 8- or 16-row tiles and k an odd multiple of 16 (the kernels' unit), with and
// without a partial 32-column unit. Outputs are poisoned with NaN first.
// Tolerance, per output: the fp32 dot product of exact products (bf16 x times a widened code)
// may differ from the double twin by k ulps of B = scale * sum |x| |w| (k * 2^-23 B: one ulp per
// addition, as a tensor core's truncating adder may lose); a wrong code, scale or column pairing
// moves an output by a fraction of B. bf16 outputs add their rounding, 2^-8 of the value. The
// dequantized weight, the quantized activations (codes and scales) and the scaled GEMM outputs
// are exact: bitwise.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/fp8.h"
#include "kernels/cpu/fp8_matmul_ref.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/fp8_quantize.h"
#include "kernels/gemv.h"
#include "tests/kernels/device_test_util.h"

namespace flashserve {
namespace {

using test::Dev;

struct Fp8Weight {
  std::vector<uint8_t> codes;  // [n, k]
  std::vector<float> scale;    // [n]
};

// Random non-NaN codes; row 0 all zeros (scale 1, as quantizing a zero row gives), the other
// rows' scales log-uniform in [1e-4, 1e4].
Fp8Weight random_weight(int n, int k, std::mt19937& rng) {
  Fp8Weight w{std::vector<uint8_t>(size_t(n) * k), std::vector<float>(size_t(n))};
  std::uniform_int_distribution<int> code(0, 255);
  std::uniform_real_distribution<float> log10_scale(-4.f, 4.f);
  for (int r = 0; r < n; ++r) {
    w.scale[r] = r == 0 ? 1.f : std::pow(10.f, log10_scale(rng));
    for (int c = 0; c < k; ++c) {
      int q = code(rng);
      while ((q & 0x7f) == 0x7f) q = code(rng);
      w.codes[size_t(r) * k + c] = r == 0 ? 0 : uint8_t(q);
    }
  }
  return w;
}

std::vector<float> random_x(int m, int k, std::mt19937& rng) {  // bf16 values in [-0.75, 1.25)
  std::uniform_real_distribution<float> u(-0.75f, 1.25f);
  std::vector<float> x(size_t(m) * k);
  for (float& v : x) v = round_to(DType::kBF16, u(rng));
  return x;
}

std::vector<uint16_t> bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = float_to_bf16_bits(v[i]);
  return b;
}

TEST(Fp8Matmul, MatchesItsTwinForEveryRowCount) {
  std::mt19937 rng(19);
  for (auto [n, k] : {std::tuple{1, 16}, {7, 48}, {33, 80}, {130, 592}, {257, 2048}, {64, 5632}}) {
    const Fp8Weight w = random_weight(n, k, rng);
    Dev<uint8_t> dw(w.codes);
    Dev<float> ds(w.scale);
    for (int m = 1; m <= cuda::kGemvMaxRows; ++m) {
      SCOPED_TRACE(testing::Message() << "m " << m << " n " << n << " k " << k);
      const std::vector<float> x = random_x(m, k, rng);
      Dev<uint16_t> dx(bf16_bits(x));
      std::vector<float> want(size_t(m) * n), bound(size_t(m) * n, 0.f);
      ref::matmul_fp8(want.data(), x.data(), w.codes.data(), w.scale.data(), m, n, k);
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double b = 0;
          for (int c = 0; c < k; ++c)
            b += std::fabs(x[size_t(i) * k + c] * fp8_e4m3_to_float(w.codes[size_t(j) * k + c]));
          bound[size_t(i) * n + j] = float(b * w.scale[j]);
        }
      for (bool out_f32 : {true, false}) {
        Dev<float> of(size_t(m) * n);
        Dev<uint16_t> ob(size_t(m) * n);
        void* out = out_f32 ? static_cast<void*>(of.ptr) : static_cast<void*>(ob.ptr);
        of.poison();
        ob.poison();
        ASSERT_TRUE(cuda::gemv_fp8_supported(m, k, dx.ptr, dw.ptr, ds.ptr, out));
        cuda::gemv_fp8(out, out_f32, dx.ptr, dw.ptr, ds.ptr, m, n, k, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<float> got(size_t(m) * n);
        if (out_f32) {
          got = of.get();
        } else {
          const std::vector<uint16_t> b = ob.get();
          for (size_t i = 0; i < b.size(); ++i) got[i] = bf16_bits_to_float(b[i]);
        }
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_TRUE(std::isfinite(got[i])) << "output " << i << " not written";
          const double tol = double(k) * std::ldexp(1.0, -23) * bound[i] +
                             (out_f32 ? 0.0 : std::ldexp(1.0, -8) * std::fabs(want[i]));
          ASSERT_LE(std::fabs(double(got[i]) - want[i]), tol)
              << "output " << i << (out_f32 ? " f32" : " bf16") << ": got " << got[i] << " want "
              << want[i];
          if (i % size_t(n) == 0) EXPECT_EQ(got[i], 0.f) << "row 0 of w is zeros";
        }
      }
    }
  }
}

TEST(Fp8Matmul, SupportedShapes) {
  Dev<uint8_t> w(4096);
  Dev<float> s(64);
  Dev<uint16_t> x(4096), out(4096);
  EXPECT_TRUE(cuda::gemv_fp8_supported(16, 64, x.ptr, w.ptr, s.ptr, out.ptr));
  EXPECT_FALSE(cuda::gemv_fp8_supported(0, 64, x.ptr, w.ptr, s.ptr, out.ptr));
  EXPECT_FALSE(cuda::gemv_fp8_supported(17, 64, x.ptr, w.ptr, s.ptr, out.ptr));
  EXPECT_FALSE(cuda::gemv_fp8_supported(1, 24, x.ptr, w.ptr, s.ptr, out.ptr));  // k % 16
  EXPECT_FALSE(cuda::gemv_fp8_supported(1, 64, x.ptr, w.ptr + 8, s.ptr, out.ptr));
  EXPECT_FALSE(cuda::gemv_fp8_supported(1, 64, x.ptr, w.ptr, nullptr, out.ptr));
  EXPECT_THROW(cuda::gemv_fp8(out.ptr, false, x.ptr, w.ptr, s.ptr, 1, 4, 24, nullptr), Error);
}

TEST(Fp8Matmul, DequantizeIsExact) {
  std::mt19937 rng(20);
  for (auto [n, k] : {std::tuple{1, 8}, {7, 48}, {130, 592}, {1000, 5632}}) {
    const Fp8Weight w = random_weight(n, k, rng);
    Dev<uint8_t> dw(w.codes);
    Dev<float> ds(w.scale);
    Dev<uint16_t> out(size_t(n) * k);
    out.poison();
    cuda::dequantize_fp8_bf16(out.ptr, dw.ptr, ds.ptr, n, k, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> want(size_t(n) * k);
    ref::dequantize_fp8(want.data(), w.codes.data(), w.scale.data(), n, k);
    const std::vector<uint16_t> got = out.get();
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], float_to_bf16_bits(want[i])) << "n " << n << " k " << k << " element " << i;
  }
}

// Rows of x with one scale each: random rows, a row of zeros, a row with one outlier (whose
// other values go subnormal or to zero), values as small as bf16 has (below kFp8MinRowAmax:
// scale 1, codes zero), rows at the 448 saturation edge; k with and without a full 256-thread
// sweep. Codes and scales bitwise the twin's.
TEST(Fp8Quantize, MatchesItsTwinBitwise) {
  std::mt19937 rng(21);
  for (auto [m, k] : {std::tuple{1, 8}, {6, 48}, {64, 592}, {300, 2048}, {17, 5632}}) {
    SCOPED_TRACE(testing::Message() << "m " << m << " k " << k);
    std::vector<float> x = random_x(m, k, rng);
    for (int c = 0; c < k; ++c) {
      x[c] = 0.f;                                                          // row 0: zeros
      if (m > 2) x[size_t(2) * k + c] = round_to(DType::kBF16, 1e-36f * float(c % 7 - 3));
      if (m > 3) x[size_t(3) * k + c] = float(c % 3 - 1) * 448.f;          // exactly 448
    }
    if (m > 1) x[size_t(1) * k + k / 2] = 3e4f;  // row 1: one outlier
    const std::vector<float> xr = [&] {  // what the GPU sees: bf16
      std::vector<float> r(x.size());
      for (size_t i = 0; i < x.size(); ++i) r[i] = round_to(DType::kBF16, x[i]);
      return r;
    }();
    std::vector<uint8_t> want_q(size_t(m) * k);
    std::vector<float> want_s(static_cast<size_t>(m));
    ref::quantize_rows_fp8(want_q.data(), want_s.data(), xr.data(), m, k);
    Dev<uint16_t> dx(bf16_bits(xr));
    Dev<uint8_t> q(size_t(m) * k);
    Dev<float> s(static_cast<size_t>(m));
    q.poison();
    s.poison();
    cuda::quantize_rows_fp8(q.ptr, s.ptr, dx.ptr, m, k, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint8_t> got_q = q.get();
    const std::vector<float> got_s = s.get();
    for (int i = 0; i < m; ++i) ASSERT_EQ(got_s[i], want_s[i]) << "scale of row " << i;
    for (size_t i = 0; i < got_q.size(); ++i)
      ASSERT_EQ(int(got_q[i]), int(want_q[i])) << "code " << i << " (row " << i / k << ")";
    EXPECT_EQ(want_s[0], 1.f);
    if (m > 2) EXPECT_EQ(want_s[2], 1.f) << "below kFp8MinRowAmax";
  }
  Dev<uint16_t> x(64);
  Dev<uint8_t> q(64);
  Dev<float> s(4);
  EXPECT_THROW(cuda::quantize_rows_fp8(q.ptr, s.ptr, x.ptr, 2, 12, nullptr), Error);  // k % 8
}

// The unscaled FP8 GEMM's output times its row and column scales, in place: bf16 outputs
// rounded once (the twin's fp32 result rounded to bf16), f32 ones exact.
TEST(Fp8ScaleRowsCols, MatchesItsTwinBitwise) {
  std::mt19937 rng(22);
  std::uniform_real_distribution<float> v(-3e5f, 3e5f), log10_scale(-6.f, 1.f);
  for (auto [m, n] : {std::tuple{1, 8}, {5, 48}, {64, 2048}, {300, 11264}}) {
    SCOPED_TRACE(testing::Message() << "m " << m << " n " << n);
    std::vector<float> out(size_t(m) * n), rs(static_cast<size_t>(m)), cs(static_cast<size_t>(n));
    for (float& x : out) x = round_to(DType::kBF16, v(rng));
    for (float& x : rs) x = std::pow(10.f, log10_scale(rng));
    for (float& x : cs) x = std::pow(10.f, log10_scale(rng));
    std::vector<float> want = out;
    ref::scale_rows_cols(want.data(), rs.data(), cs.data(), m, n);
    Dev<float> drs(rs), dcs(cs);
    Dev<uint16_t> ob(bf16_bits(out));
    Dev<float> of(out);
    cuda::scale_rows_cols_fp8(ob.ptr, false, drs.ptr, dcs.ptr, m, n, nullptr);
    cuda::scale_rows_cols_fp8(of.ptr, true, drs.ptr, dcs.ptr, m, n, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> got_b = ob.get();
    const std::vector<float> got_f = of.get();
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got_f[i], want[i]) << "f32 output " << i;
      ASSERT_EQ(got_b[i], float_to_bf16_bits(want[i])) << "bf16 output " << i;
    }
  }
  Dev<float> o(64), s(64);
  EXPECT_THROW(cuda::scale_rows_cols_fp8(o.ptr, true, s.ptr, s.ptr, 2, 12, nullptr), Error);  // n % 8
}

}  // namespace
}  // namespace flashserve

// The FP8 weight-only kernels (kernels/cuda_ops.h: gemv_fp8 for m = 1..16, the warp kernel up to
// m = 2 and the tensor-core kernel above; dequantize_fp8_bf16) against their CPU twins
// (kernels/cpu/fp8_matmul_ref.h). Weights: every non-NaN E4M3 code (subnormals, zeros, +-448),
// row scales from 1e-4 to 1e4, rows of zeros; x not centred on zero; shapes with n not a
// multiple of the 8- or 16-row tiles and k an odd multiple of 16 (the kernels' unit), with and
// without a partial 32-column unit. Outputs are poisoned with NaN first.
// Tolerance, per output: the fp32 dot product of exact products (bf16 x times a widened code)
// may differ from the double twin by k ulps of B = scale * sum |x| |w| (k * 2^-23 B: one ulp per
// addition, as a tensor core's truncating adder may lose); a wrong code, scale or column pairing
// moves an output by a fraction of B. bf16 outputs add their rounding, 2^-8 of the value. The
// dequantized weight is exact: bitwise.
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
#include "kernels/cuda_ops.h"

namespace flashserve {
namespace {

template <class T>
struct Dev {
  T* ptr = nullptr;
  size_t count;
  explicit Dev(size_t n) : count(n) { CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T))); }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) {
    CUDA_CHECK(cudaMemcpy(ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~Dev() { cudaFree(ptr); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  std::vector<T> get() const {
    std::vector<T> h(count);
    CUDA_CHECK(cudaMemcpy(h.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  void poison() { CUDA_CHECK(cudaMemset(ptr, 0xff, count * sizeof(T))); }  // NaN in f32 and bf16
};

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

}  // namespace
}  // namespace flashserve

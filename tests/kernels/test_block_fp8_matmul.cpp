// The block-wise FP8 kernels (kernels/block_fp8.h) against their CPU twins
// (kernels/cpu/block_fp8_matmul_ref.h), and the CUDA backend's block-FP8 matmul above the skinny
// kernel. Weights: every non-NaN E4M3 code, block scales log-uniform in [1e-4, 1e4], a row block
// of zeros; x not centred on zero; n and k not multiples of the blocks; block shapes 128x128,
// 16x16 and 32x64. Outputs are poisoned with NaN first.
// Tolerances, per output, with B = sum over c of |x[c]| |W[j, c]| (W the dequantized weight):
//  - the skinny kernels (the warp kernel up to 2 rows or for blocks of 16 columns, the
//    tensor-core one above) take fp32 dot products of exact products: k ulps of B (k * 2^-23 B)
//    against the double twin;
//  - the block-scaled GEMM multiplies x's FP8 codes (its twin quantizes x first with
//    ref::quantize_blocks_fp8, whose codes and scales the kernel matches bitwise), and Hopper's
//    FP8 tensor cores add a 128-column block's products with fewer than fp32's bits before the
//    block's scales apply in fp32: 2^-11 B;
//  - the dequantize + bf16 GEMM fallback rounds each weight to bf16 once: 2^-8 B;
//  - bf16 outputs add their rounding, 2^-8 of the value.
// A wrong code, scale, block index or scale layout moves an output by a fraction of B.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "backends/backend.h"
#include "core/fp8.h"
#include "kernels/block_fp8.h"
#include "kernels/cpu/block_fp8_matmul_ref.h"
#include "tests/kernels/device_test_util.h"
#include "weights/block_fp8_weights.h"
#include "weights/loaded_model.h"

namespace flashserve {
namespace {

using test::Dev;

// Random non-NaN codes and block scales; row block 0 of codes all zeros.
BlockFp8Weight random_weight(int n, int k, int bn, int bk, std::mt19937& rng) {
  BlockFp8Weight w;
  w.rows = n, w.cols = k, w.block_rows = bn, w.block_cols = bk;
  std::vector<uint8_t> codes(size_t(n) * k);
  std::uniform_int_distribution<int> code(0, 255);
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < k; ++c) {
      int q = code(rng);
      while ((q & 0x7f) == 0x7f) q = code(rng);
      codes[size_t(r) * k + c] = r < bn ? 0 : uint8_t(q);
    }
  w.own_codes(std::move(codes));
  std::uniform_real_distribution<float> log10_scale(-4.f, 4.f);
  w.scales.resize(size_t((n + bn - 1) / bn * w.scale_cols()));
  for (float& s : w.scales) s = std::pow(10.f, log10_scale(rng));
  return w;
}

// The scales as the kernels take them: each row block's k-blocks padded to a multiple of 4.
std::vector<float> padded_scales(const BlockFp8Weight& w, int* ld) {
  const int64_t bk = w.scale_cols(), blocks_n = int64_t(w.scales.size()) / bk;
  *ld = int((bk + 3) / 4 * 4);
  std::vector<float> s(size_t(blocks_n * *ld), -1.f);  // padding never read
  for (int64_t r = 0; r < blocks_n; ++r)
    for (int64_t c = 0; c < bk; ++c) s[size_t(r * *ld + c)] = w.scales[size_t(r * bk + c)];
  return s;
}

// B of every output: sum |x| |W|.
std::vector<double> bounds(const std::vector<float>& x, const std::vector<float>& wf, int m, int n,
                           int k) {
  std::vector<double> b(size_t(m) * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      for (int c = 0; c < k; ++c)
        b[size_t(i) * n + j] += std::fabs(double(x[size_t(i) * k + c]) * wf[size_t(j) * k + c]);
  return b;
}

// tol: each output's allowance before a bf16 output's rounding.
void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::vector<double>& tol_of, bool out_bf16) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << "output " << i << " not written";
    const double tol = tol_of[i] + (out_bf16 ? std::ldexp(1.0, -8) * std::fabs(want[i]) : 0.0);
    ASSERT_LE(std::fabs(double(got[i]) - want[i]), tol)
        << "output " << i << ": got " << got[i] << " want " << want[i];
  }
}

const std::tuple<int, int, int, int> kShapes[] = {  // n, k, block_n, block_k
    {1, 16, 128, 128}, {33, 80, 16, 16}, {130, 592, 128, 128}, {257, 2048, 128, 128},
    {64, 5632, 32, 64}, {300, 1008, 128, 128}};  // k: a multiple of 16 (16-byte rows)

TEST(BlockFp8Matmul, GemvMatchesItsTwinForEveryRowCount) {
  std::mt19937 rng(41);
  for (auto [n, k, bn, bk] : kShapes) {
    const BlockFp8Weight w = random_weight(n, k, bn, bk, rng);
    int ld = 0;
    const std::vector<float> scales = padded_scales(w, &ld);
    std::vector<float> wf(size_t(n) * k);
    ref::dequantize_block_fp8(wf.data(), w.codes, w.scales.data(), n, k, bn, bk);
    Dev<uint8_t> dw(*w.owned);
    Dev<float> ds(scales);
    for (int m = 1; m <= cuda::kBlockFp8GemvMaxRows; ++m) {
      SCOPED_TRACE(testing::Message() << "m " << m << " n " << n << " k " << k << " blocks " << bn
                                      << "x" << bk);
      const std::vector<float> x = test::random_bf16(size_t(m) * k, rng, -0.75f, 1.25f);
      Dev<uint16_t> dx(test::to_bf16(x));
      std::vector<float> want(size_t(m) * n);
      ref::matmul_block_fp8(want.data(), x.data(), w.codes, w.scales.data(), m, n, k, bn,
                            bk);
      std::vector<double> tol = bounds(x, wf, m, n, k);
      for (double& t : tol) t *= double(k) * std::ldexp(1.0, -23);
      for (bool out_f32 : {true, false}) {
        Dev<float> of(size_t(m) * n);
        Dev<uint16_t> ob(size_t(m) * n);
        of.poison();
        ob.poison();
        void* out = out_f32 ? static_cast<void*>(of.ptr) : static_cast<void*>(ob.ptr);
        ASSERT_TRUE(cuda::block_fp8_gemv_supported(m, k, bk, dx.ptr, dw.ptr, out));
        cuda::block_fp8_gemv(out, out_f32, dx.ptr, dw.ptr, ds.ptr, ld, m, n, k, bn, bk, nullptr);
        const std::vector<float> got = out_f32 ? of.get() : test::from_bf16(ob.get());
        expect_close(got, want, tol, !out_f32);
      }
    }
  }
}

TEST(BlockFp8Matmul, SupportedShapes) {
  Dev<uint8_t> w(4096);
  Dev<uint16_t> x(4096), out(4096);
  EXPECT_TRUE(cuda::block_fp8_gemv_supported(16, 64, 128, x.ptr, w.ptr, out.ptr));
  EXPECT_FALSE(cuda::block_fp8_gemv_supported(0, 64, 128, x.ptr, w.ptr, out.ptr));
  EXPECT_FALSE(cuda::block_fp8_gemv_supported(17, 64, 128, x.ptr, w.ptr, out.ptr));
  EXPECT_FALSE(cuda::block_fp8_gemv_supported(1, 24, 128, x.ptr, w.ptr, out.ptr));  // k % 16
  EXPECT_FALSE(cuda::block_fp8_gemv_supported(1, 64, 24, x.ptr, w.ptr, out.ptr));   // block_k % 16
  EXPECT_FALSE(cuda::block_fp8_gemv_supported(1, 64, 128, x.ptr, w.ptr + 8, out.ptr));
}

TEST(BlockFp8Matmul, DequantizeIsExactAndQuantizeMatchesItsTwin) {
  std::mt19937 rng(42);
  for (auto [n, k, bn, bk] : kShapes) {
    SCOPED_TRACE(testing::Message() << "n " << n << " k " << k);
    const BlockFp8Weight w = random_weight(n, k, bn, bk, rng);
    int ld = 0;
    Dev<uint8_t> dw(*w.owned);
    Dev<float> ds(padded_scales(w, &ld));
    Dev<uint16_t> out(size_t(n) * k);
    out.poison();
    cuda::block_fp8_dequantize_bf16(out.ptr, dw.ptr, ds.ptr, ld, n, k, bn, bk, nullptr);
    std::vector<float> wf(size_t(n) * k);
    ref::dequantize_block_fp8(wf.data(), w.codes, w.scales.data(), n, k, bn, bk);
    const std::vector<uint16_t> got = out.get();
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], float_to_bf16_bits(wf[i])) << "element " << i;
    // Activations: rows of n tokens, one of them zeros, k not a multiple of 128.
    const int m = std::min(n, 40);
    std::vector<float> x = test::random_bf16(size_t(m) * k, rng, -3.f, 5.f);
    std::fill(x.begin(), x.begin() + k, 0.f);
    const int blocks_k = (k + 127) / 128;
    std::vector<uint8_t> want_q(size_t(m) * k);
    std::vector<float> want_s(size_t(blocks_k) * m);
    ref::quantize_blocks_fp8(want_q.data(), want_s.data(), x.data(), m, k);
    Dev<uint16_t> dx(test::to_bf16(x));
    Dev<uint8_t> q(size_t(m) * k);
    Dev<float> s(size_t(blocks_k) * m);
    s.poison();
    cuda::quantize_blocks_fp8(q.ptr, s.ptr, dx.ptr, m, k, nullptr);
    EXPECT_EQ(q.get(), want_q);
    EXPECT_EQ(s.get(), want_s);
  }
}

// The backend above the skinny kernel: 128x128 blocks with n, k multiples of 128 take the
// block-scaled cuBLASLt GEMM on compute capability 9.x (the only GPUs it has algorithms for) for
// the rows in multiples of 4 and the skinny kernel for the rest; other shapes and GPUs the
// dequantize fallback. Rows 1 and 3 check the skinny kernels' hook.
TEST(BlockFp8Matmul, BackendMatchesItsTwin) {
  std::mt19937 rng(43);
  auto backend = make_cuda_backend(0);
  int major = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  for (auto [n, k, bn, bk] : {std::tuple{256, 384, 128, 128}, {512, 1024, 128, 128},
                              {300, 1000, 128, 128}, {96, 80, 16, 16}}) {
    auto w = std::make_shared<BlockFp8Weight>(random_weight(n, k, bn, bk, rng));
    std::vector<float> wf(size_t(n) * k);
    ref::dequantize_block_fp8(wf.data(), w->codes, w->scales.data(), n, k, bn, bk);
    TensorView view;  // as the loader makes it: the packed form, no values
    view.shape = {n, k};
    view.block_fp8 = w;
    const Buffer dw = backend->load_weight(view);
    ASSERT_NE(dw.tensor.block_scale, nullptr);
    const bool gemm = major == 9 && bn == 128 && bk == 128 && n % 128 == 0 && k % 128 == 0;
    for (int m : {1, 3, 17, 64, 202}) {
      SCOPED_TRACE(testing::Message() << "m " << m << " n " << n << " k " << k);
      const std::vector<float> x = test::random_bf16(size_t(m) * k, rng, -0.75f, 1.25f);
      // Rows of codes the skinny kernels can load 16 bytes at a time; k = 1000 is not, and its
      // steps of any size dequantize to bf16 (the GEMM's tolerance).
      const bool skinny = m <= cuda::kBlockFp8GemvMaxRows && k % 16 == 0 && bk % 16 == 0;
      // The GEMM's rows (a multiple of 4) multiply x through its FP8 codes; the rest run skinny.
      const int gemm_rows = gemm && !skinny ? m - m % 4 : 0;
      std::vector<float> xq = x;
      if (gemm_rows > 0) {
        std::vector<uint8_t> q(x.size());
        std::vector<float> s(size_t((k + 127) / 128) * m);
        ref::quantize_blocks_fp8(q.data(), s.data(), x.data(), m, k);
        for (int i = 0; i < gemm_rows; ++i)
          for (int c = 0; c < k; ++c)
            xq[size_t(i) * k + c] =
                fp8_e4m3_to_float(q[size_t(i) * k + c]) * s[size_t(c / 128) * m + i];
      }
      std::vector<float> want(size_t(m) * n);
      ref::matmul_block_fp8(want.data(), xq.data(), w->codes, w->scales.data(), m, n, k,
                            bn, bk);
      Buffer dx = backend->allocate(DType::kBF16, {m, k});
      backend->copy_from_host(dx.tensor, test::to_bf16(x).data());
      Buffer out = backend->allocate(DType::kBF16, {m, n});  // the projections' output dtype
      CUDA_CHECK(cudaMemset(out.tensor.data, 0xff, size_t(m) * n * 2));
      backend->matmul(out.tensor, dx.tensor, dw.tensor);
      std::vector<uint16_t> bits(size_t(m) * n);
      backend->copy_to_host(bits.data(), out.tensor);
      const std::vector<float> got = test::from_bf16(bits);
      std::vector<double> tol = bounds(xq, wf, m, n, k);
      for (size_t i = 0; i < tol.size(); ++i) {
        const bool in_gemm = int(i / size_t(n)) < gemm_rows;
        tol[i] *= skinny || (gemm && !in_gemm) ? double(k) * std::ldexp(1.0, -23)
                  : in_gemm                    ? std::ldexp(1.0, -11)
                                               : std::ldexp(1.0, -8);
      }
      expect_close(got, want, tol, true);
    }
  }
}

}  // namespace
}  // namespace flashserve

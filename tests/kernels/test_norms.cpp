// The RMSNorm kernels (kernels/norms.h) against their CPU twins (kernels/cpu/norms_ref.h) on
// random bf16 inputs not centred on zero: rows of 8 to 8200 columns (hidden % 8 == 0 up to
// 8192 takes the vectorised add + norm, 300 and 8200 the plain one), the residual add in place,
// into another buffer and with out aliasing delta, and the per-head q/k norm over head dims of
// the real models and odd ones (8, 96), the v heads left bit for bit. Outputs start as NaN.
#include <gtest/gtest.h>

#include <random>
#include <tuple>
#include <vector>

#include "kernels/cpu/norms_ref.h"
#include "kernels/norms.h"
#include "tests/kernels/device_test_util.h"

namespace flashserve::test {
namespace {

TEST(NormKernels, RmsNormAndAddRmsNormMatchTwins) {
  std::mt19937 rng(11);
  for (auto [n, hidden] : {std::pair{1, 8}, {7, 64}, {33, 300}, {5, 2048}, {2, 8192}, {3, 8200}}) {
    const size_t size = size_t(n) * hidden;
    const std::vector<float> x = random_bf16(size, rng, -2.f, 3.f), delta = random_bf16(size, rng);
    const std::vector<float> w = random_bf16(size_t(hidden), rng, 0.5f, 1.5f);
    Dev<uint16_t> dx(to_bf16(x)), dw(to_bf16(w)), dout(size);
    dout.poison();
    cuda::rms_norm_bf16(dout.ptr, dx.ptr, dw.ptr, n, hidden, 1e-5f, nullptr);
    std::vector<float> want(size);
    ref::rms_norm(want.data(), x.data(), w.data(), n, hidden, 1e-5f);
    expect_close(from_bf16(dout.get()), want, kBf16Tol, "rms_norm");

    // x_out = x + delta in a buffer of its own, then in place with out aliasing delta.
    std::vector<float> x_out(size), norm(size);
    ref::add_rms_norm(norm.data(), x_out.data(), x.data(), delta.data(), w.data(), n, hidden, 1e-5f);
    Dev<uint16_t> dd(to_bf16(delta)), dxo(size);
    dxo.poison();
    dout.poison();
    cuda::add_rms_norm_out_bf16(dout.ptr, dxo.ptr, dx.ptr, dd.ptr, dw.ptr, n, hidden, 1e-5f, nullptr);
    EXPECT_EQ(dxo.get(), to_bf16(x_out)) << "the sum, rounded once to bf16";
    expect_close(from_bf16(dout.get()), norm, kBf16Tol, "add_rms_norm_out");
    cuda::add_rms_norm_bf16(dd.ptr, dx.ptr, dd.ptr, dw.ptr, n, hidden, 1e-5f, nullptr);
    EXPECT_EQ(dx.get(), to_bf16(x_out)) << "the residual, updated in place";
    expect_close(from_bf16(dd.get()), norm, kBf16Tol, "add_rms_norm (out aliases delta)");
  }
  cuda::rms_norm_bf16(nullptr, nullptr, nullptr, 0, 64, 1e-5f, nullptr);  // no rows: no launch
}

TEST(NormKernels, QkNormMatchesTwinAndLeavesVHeads) {
  std::mt19937 rng(12);
  for (auto [n, hq, hkv, d] :
       {std::tuple{1, 4, 2, 64}, {37, 16, 8, 128}, {5, 14, 2, 64}, {3, 2, 1, 8}, {9, 6, 3, 96}}) {
    const int heads = hq + 2 * hkv;
    const size_t size = size_t(n) * heads * d;
    const std::vector<float> qkv = random_bf16(size, rng, -2.f, 3.f);
    const std::vector<float> qw = random_bf16(size_t(d), rng, 0.5f, 1.5f), kw = random_bf16(size_t(d), rng, 0.5f, 1.5f);
    Dev<uint16_t> dqkv(to_bf16(qkv)), dqw(to_bf16(qw)), dkw(to_bf16(kw));
    cuda::qk_norm_bf16(dqkv.ptr, dqw.ptr, dkw.ptr, n, hq, hkv, d, 1e-6f, nullptr);
    std::vector<float> want = qkv;
    ref::qk_norm(want.data(), qw.data(), kw.data(), n, hq, hkv, d, 1e-6f);
    const std::vector<float> got = from_bf16(dqkv.get());
    expect_close(got, want, kBf16Tol, "qk_norm");
    for (int t = 0; t < n; ++t)
      for (int i = (hq + hkv) * d; i < heads * d; ++i)
        ASSERT_EQ(got[size_t(t) * heads * d + i], qkv[size_t(t) * heads * d + i]) << "v head, token " << t;
    EXPECT_NE(want[0], qkv[0]);  // the twin did norm the first q head
  }
}

}  // namespace
}  // namespace flashserve::test

// The MXFP4 kernels (kernels/mxfp4.h) against their CPU twins (kernels/cpu/mxfp4_ref.h), and the
// CUDA backend's MXFP4 MoE op (backends/cuda/cuda_moe.cpp) against the twin of gpt-oss's experts:
//  - mxfp4_gemv: 1, 3 and 8 rows; weights of 1 to 2880 rows (odd counts: a half-used warp) and 32
//    to 2880 columns (one block, several per lane, a partial last lap); bf16 and f32 inputs, f32
//    and bf16 outputs, with and without biases; expert pairs with ids (one outside the experts:
//    zeros) and the fused clamped SwiGLU;
//  - mxfp4_gemm: 1 to 300 rows (partial tiles), 32 to 320 columns, weights of 1 to 257 rows,
//    dense and grouped by offsets (an empty group, a group of one row);
//  - swiglu_clamped_bf16; the MoE op at 1, 3 and 64 tokens (the GEMV path) and 65 and 200 (the
//    grouped GEMM path), 8 experts top 4 at gpt-oss-like columns (hidden 2880: 90 blocks).
// Every code appears, scales span 2^-12 .. 2^4 plus the subnormal 2^-127 (the SwiGLU and MoE
// cases: near 2^-7, with biases that cross the clamps). Outputs are poisoned.
// Tolerance: the GEMV sums exact products in f32 (k ulps of B = sum |w||x| + |bias|, one per
// addition), bf16 outputs add 2^-8 of the value; the GEMM multiplies bf16 operands exactly into
// f32 the same way; the MoE op rounds its intermediates to bf16 on the GEMM path (relative 2e-2
// of the largest output; a wrong expert, row or clamp gives O(1)).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "backends/backend.h"
#include "kernels/cpu/moe_ref.h"
#include "kernels/cpu/mxfp4_ref.h"
#include "kernels/mxfp4.h"
#include "tests/kernels/device_test_util.h"
#include "tests/kernels/mxfp4_test_util.h"
#include "weights/mxfp4_weights.h"

namespace flashserve {
namespace {

using test::Dev;

struct DevMxfp4 {
  Dev<uint8_t> blocks, scales;
  Dev<float> bias;
  explicit DevMxfp4(const test::Mxfp4Host& w) : blocks(w.blocks), scales(w.scales), bias(w.bias) {}
  cuda::Mxfp4Weights view(const test::Mxfp4Host& w, bool with_bias) const {
    return {blocks.ptr, scales.ptr, with_bias ? bias.ptr : nullptr, w.groups, w.rows, w.cols};
  }
};

// sum |w| |x| + |bias| of output (i, r) of group g: the scale of its rounding.
double bound(const std::vector<float>& dq, const float* x, int cols, double bias) {
  double b = std::fabs(bias);
  for (int c = 0; c < cols; ++c) b += std::fabs(double(dq[size_t(c)]) * x[c]);
  return b;
}

// Biases of 9 on every 5th gate row and of +-9 on every 7th up row: the clamps' cases.
void clamp_some_rows(test::Mxfp4Host& w) {
  for (size_t r = 0; r < w.bias.size(); ++r) {
    if (r % 2 == 0 && r % 5 == 0) w.bias[r] = 9.f;
    if (r % 2 == 1 && r % 7 == 0) w.bias[r] = r % 4 == 1 ? 9.f : -9.f;
  }
}

void check_gemv(int m, int rows, int cols, bool x_f32, bool out_f32, bool with_bias,
                std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "gemv m " << m << " rows " << rows << " cols " << cols
                                  << (x_f32 ? " x f32" : " x bf16") << (out_f32 ? " out f32" : " out bf16")
                                  << (with_bias ? " bias" : ""));
  const test::Mxfp4Host w = test::random_mxfp4(1, rows, cols, rng);
  const DevMxfp4 d(w);
  const std::vector<float> x = test::random_bf16(size_t(m) * cols, rng, -1.f, 1.5f);
  std::vector<float> want(size_t(m) * rows), dq(size_t(rows) * cols);
  ref::mxfp4_matmul(want.data(), x.data(), w.group(0), with_bias ? w.bias.data() : nullptr, m);
  ref::mxfp4_dequantize(dq.data(), w.group(0));
  Dev<float> xf(x);
  Dev<uint16_t> xb(test::to_bf16(x));
  Dev<float> of(want.size());
  Dev<uint16_t> ob(want.size());
  of.poison();
  ob.poison();
  cuda::mxfp4_gemv(out_f32 ? static_cast<void*>(of.ptr) : ob.ptr, out_f32,
                   x_f32 ? static_cast<const void*>(xf.ptr) : xb.ptr, x_f32, d.view(w, with_bias),
                   nullptr, m, 1, nullptr, nullptr);
  const std::vector<float> got = out_f32 ? of.get() : test::from_bf16(ob.get());
  for (int i = 0; i < m; ++i)
    for (int r = 0; r < rows; ++r) {
      const size_t k = size_t(i) * rows + r;
      const double b = bound(std::vector<float>(dq.begin() + size_t(r) * cols,
                                                dq.begin() + size_t(r + 1) * cols),
                             x.data() + size_t(i) * cols, cols, with_bias ? w.bias[size_t(r)] : 0);
      const double tol = (cols + 2) * std::ldexp(b, -23) + (out_f32 ? 0 : std::ldexp(std::fabs(want[k]), -8));
      ASSERT_LE(std::fabs(double(got[k]) - want[k]), tol) << "row " << i << " output " << r
                                                          << ": got " << got[k] << " want " << want[k];
    }
}

TEST(Mxfp4Gemv, MatchesItsTwin) {
  std::mt19937 rng(11);
  struct Shape {
    int rows, cols;
  };
  for (const Shape s : {Shape{1, 32}, {2, 64}, {7, 96}, {130, 1056}, {33, 2880}, {2880, 2880}})
    for (int m : {1, 3, 8})
      for (bool x_f32 : {false, true})
        for (bool out_f32 : {true, false}) check_gemv(m, s.rows, s.cols, x_f32, out_f32, m != 3, rng);
}

TEST(Mxfp4Gemv, ExpertPairsWithClampedSwiglu) {
  std::mt19937 rng(12);
  const int experts = 5, inter = 96, hidden = 160, n = 3, top_k = 2;
  // Weights near 2^-7 keep gate and up mostly inside the limit; biases of +-9 on some rows put
  // gate above it and up beyond it on either side.
  test::Mxfp4Host w = test::random_mxfp4(experts, 2 * inter, hidden, rng, 118, 122);
  clamp_some_rows(w);
  const DevMxfp4 d(w);
  const std::vector<float> x = test::random_bf16(size_t(n) * hidden, rng, -1.f, 1.5f);
  const std::vector<int32_t> ids = {4, 0, 2, 2, -1, 3};  // pair 4 is nobody's
  const cuda::SwigluClamp clamp{7.f, 1.702f};
  Dev<uint16_t> xb(test::to_bf16(x));
  Dev<int32_t> dids(ids);
  Dev<float> out(size_t(n) * top_k * inter);
  out.poison();
  cuda::mxfp4_gemv(out.ptr, true, xb.ptr, false, d.view(w, true), dids.ptr, n * top_k, top_k,
                   &clamp, nullptr);
  const std::vector<float> got = out.get();
  std::vector<float> gu(2 * inter), want(inter);
  for (int q = 0; q < n * top_k; ++q) {
    if (ids[size_t(q)] < 0) {
      for (int i = 0; i < inter; ++i) EXPECT_EQ(got[size_t(q) * inter + i], 0.f) << q;
      continue;
    }
    const int e = ids[size_t(q)];
    ref::mxfp4_matmul(gu.data(), x.data() + size_t(q / top_k) * hidden, w.group(e),
                      w.bias.data() + size_t(e) * 2 * inter, 1);
    ref::swiglu_clamped(want.data(), gu.data(), 1, inter, 7.f, 1.702f);
    double scale = 1e-3;
    for (float v : want) scale = std::max(scale, double(std::fabs(v)));
    for (int i = 0; i < inter; ++i)
      ASSERT_NEAR(got[size_t(q) * inter + i], want[size_t(i)], 2e-5 * scale) << "pair " << q << " " << i;
  }
}

void check_gemm(const std::vector<int>& group_rows, int rows, int cols, bool with_bias,
                std::mt19937& rng) {
  const int groups = int(group_rows.size());
  std::vector<int32_t> offsets = {0};
  for (int r : group_rows) offsets.push_back(offsets.back() + r);
  const int m = offsets.back();
  SCOPED_TRACE(testing::Message() << "gemm " << groups << " groups, m " << m << " rows " << rows
                                  << " cols " << cols);
  const test::Mxfp4Host w = test::random_mxfp4(groups, rows, cols, rng);
  const DevMxfp4 d(w);
  const std::vector<float> a = test::random_bf16(size_t(m) * cols, rng, -1.f, 1.5f);
  std::vector<float> want(size_t(m) * rows), dq(size_t(rows) * cols);
  std::vector<double> bnd(want.size());
  for (int g = 0; g < groups; ++g) {
    const int r0 = offsets[size_t(g)], n = group_rows[size_t(g)];
    if (n == 0) continue;
    ref::mxfp4_matmul(want.data() + size_t(r0) * rows, a.data() + size_t(r0) * cols, w.group(g),
                      with_bias ? w.bias.data() + size_t(g) * rows : nullptr, n);
    ref::mxfp4_dequantize(dq.data(), w.group(g));
    for (int i = r0; i < r0 + n; ++i)
      for (int r = 0; r < rows; ++r)
        bnd[size_t(i) * rows + r] = bound(std::vector<float>(dq.begin() + size_t(r) * cols,
                                                             dq.begin() + size_t(r + 1) * cols),
                                          a.data() + size_t(i) * cols, cols,
                                          with_bias ? w.bias[size_t(g) * rows + r] : 0);
  }
  Dev<uint16_t> da(test::to_bf16(a));
  Dev<int32_t> doff(offsets);
  Dev<uint16_t> out(want.size());
  out.poison();
  cuda::mxfp4_gemm(out.ptr, da.ptr, d.view(w, with_bias), groups > 1 ? doff.ptr : nullptr, m,
                   nullptr);
  const std::vector<float> got = test::from_bf16(out.get());
  for (size_t k = 0; k < got.size(); ++k) {
    const double tol = (cols + 2) * std::ldexp(bnd[k], -23) + std::ldexp(std::fabs(want[k]), -8);
    ASSERT_LE(std::fabs(double(got[k]) - want[k]), tol) << "output " << k << ": got " << got[k]
                                                        << " want " << want[k];
  }
}

TEST(Mxfp4Gemm, MatchesItsTwin) {
  std::mt19937 rng(13);
  for (int m : {1, 17, 64, 65, 300})
    for (const auto& [rows, cols] : std::vector<std::pair<int, int>>{{1, 32}, {64, 64}, {100, 96}, {257, 320}})
      check_gemm({m}, rows, cols, m % 2 == 1, rng);
  check_gemm({5, 0, 70, 1, 130}, 96, 160, true, rng);  // grouped: an empty group, a one-row group
}

TEST(Mxfp4Swiglu, MatchesItsTwin) {
  std::mt19937 rng(14);
  const int rows = 37, inter = 200;
  const std::vector<float> gu = test::random_bf16(size_t(rows) * 2 * inter, rng, -12.f, 12.f);
  std::vector<float> want(size_t(rows) * inter);
  ref::swiglu_clamped(want.data(), gu.data(), rows, inter, 7.f, 1.702f);
  Dev<uint16_t> dgu(test::to_bf16(gu)), out(want.size());
  out.poison();
  cuda::swiglu_clamped_bf16(out.ptr, dgu.ptr, rows, inter, {7.f, 1.702f}, nullptr);
  test::expect_close(test::from_bf16(out.get()), want, test::kBf16Tol, "swiglu_clamped");
}

// The CUDA backend's moe_experts on MXFP4 experts against ref::mxfp4_moe_experts.
TEST(Mxfp4Moe, BackendMatchesTheTwin) {
  std::mt19937 rng(15);
  const int experts = 8, top_k = 4, hidden = 2880, inter = 256;
  test::Mxfp4Host gu = test::random_mxfp4(experts, 2 * inter, hidden, rng, 118, 122);
  clamp_some_rows(gu);
  const test::Mxfp4Host dn = test::random_mxfp4(experts, hidden, inter, rng, 118, 122);
  Mxfp4Weight gw{experts, 2 * inter, hidden, gu.blocks.data(), gu.scales.data()};
  Mxfp4Weight dw{experts, hidden, inter, dn.blocks.data(), dn.scales.data()};
  TensorView gv, dv, gb{DType::kF32, {experts, 2 * inter}, gu.bias.data()},
      db{DType::kF32, {experts, hidden}, dn.bias.data()};
  gv.shape = {experts, 2 * inter, hidden};
  gv.mxfp4 = std::make_shared<const Mxfp4Weight>(gw);
  dv.shape = {experts, hidden, inter};
  dv.mxfp4 = std::make_shared<const Mxfp4Weight>(dw);
  std::unique_ptr<Backend> b = make_cuda_backend(0);
  const std::shared_ptr<MoeExperts> loaded = b->load_mxfp4_experts(gv, gb, dv, db, 7.f, 1.702f);
  const Mxfp4Experts twin{gu.blocks.data(), gu.scales.data(), gu.bias.data(), dn.blocks.data(),
                          dn.scales.data(), dn.bias.data(), experts, hidden, inter, 7.f, 1.702f};
  for (int n : {1, 3, 64, 65, 200}) {
    SCOPED_TRACE(testing::Message() << n << " tokens");
    const std::vector<float> x = test::random_bf16(size_t(n) * hidden, rng, -1.f, 1.f);
    std::vector<float> logits(size_t(n) * experts);
    std::normal_distribution<float> nd(0.f, 2.f);
    for (float& l : logits) l = nd(rng);
    std::vector<int32_t> ids(size_t(n) * top_k);
    std::vector<float> weights(ids.size());
    ref::moe_route(ids.data(), weights.data(), logits.data(), n, experts, top_k, true);
    std::vector<float> want(size_t(n) * hidden);
    ref::mxfp4_moe_experts(want.data(), x.data(), ids.data(), weights.data(), twin, n, top_k);
    Buffer dx = b->allocate(DType::kBF16, {n, hidden}), out = b->allocate(DType::kBF16, {n, hidden});
    Buffer dids = b->allocate(DType::kI32, {n, top_k}), dwt = b->allocate(DType::kF32, {n, top_k});
    b->copy_from_host(dx.tensor, test::to_bf16(x).data());
    b->copy_from_host(dids.tensor, ids.data());
    b->copy_from_host(dwt.tensor, weights.data());
    CUDA_CHECK(cudaMemset(out.tensor.data, 0xff, out.tensor.bytes()));
    b->moe_experts(out.tensor, dx.tensor, dids.tensor, dwt.tensor, *loaded);
    std::vector<uint16_t> h(size_t(n) * hidden);
    b->copy_to_host(h.data(), out.tensor);
    test::expect_close(test::from_bf16(h), want, n <= 64 ? test::kBf16Tol : 2e-2, "moe");
  }
}

}  // namespace
}  // namespace flashserve

// The elementwise kernels (kernels/elementwise.h) against their CPU twins
// (kernels/cpu/elementwise_ref.h): SwiGLU (out aliasing gate) and its fused form, Gemma's GeGLU,
// scaling and logit soft-capping, the add and the bias add over sizes from 1 element to a few
// blocks' worth plus a ragged tail, and the f32 -> bf16 conversion bit for bit (ties to even,
// infinities, subnormals; NaN stays NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/elementwise_ref.h"
#include "kernels/elementwise.h"
#include "tests/kernels/device_test_util.h"

namespace flashserve::test {
namespace {

TEST(ElementwiseKernels, SwigluAddAndBiasMatchTwins) {
  std::mt19937 rng(21);
  for (auto [n, width] : {std::pair{1, 1}, {3, 8}, {7, 300}, {5, 2048}, {2, 5633}}) {
    const size_t size = size_t(n) * width;
    const std::vector<float> a = random_bf16(size, rng, -4.f, 5.f), b = random_bf16(size, rng, -3.f, 2.f);
    std::vector<float> want(size);
    Dev<uint16_t> da(to_bf16(a)), db(to_bf16(b)), dout(size);
    ref::swiglu(want.data(), a.data(), b.data(), int64_t(size));
    cuda::swiglu_bf16(da.ptr, da.ptr, db.ptr, int64_t(size), nullptr);  // out aliases gate
    expect_close(from_bf16(da.get()), want, kBf16Tol, "swiglu");

    const std::vector<float> gate_up = random_bf16(2 * size, rng, -4.f, 5.f);
    Dev<uint16_t> dgu(to_bf16(gate_up));
    dout.poison();
    cuda::swiglu_fused_bf16(dout.ptr, dgu.ptr, n, width, nullptr);
    ref::swiglu_fused(want.data(), gate_up.data(), n, width);
    expect_close(from_bf16(dout.get()), want, kBf16Tol, "swiglu_fused");

    Dev<uint16_t> dc(to_bf16(a));
    cuda::add_bf16(dc.ptr, dc.ptr, db.ptr, int64_t(size), nullptr);
    ref::add(want.data(), a.data(), b.data(), int64_t(size));
    EXPECT_EQ(dc.get(), to_bf16(want)) << "add: one rounding of the fp32 sum";

    const std::vector<float> bias = random_bf16(size_t(width), rng, -2.f, 2.f);
    Dev<uint16_t> dx(to_bf16(a)), dbias(to_bf16(bias));
    cuda::add_bias_bf16(dx.ptr, dbias.ptr, n, width, nullptr);
    want = a;
    ref::add_bias(want.data(), bias.data(), n, width);
    EXPECT_EQ(dx.get(), to_bf16(want)) << "add_bias";
  }
}

// GeGLU over inputs reaching far into both tails of GELU (|x| up to 8), the embedding scale (one
// rounding of the fp32 product) and the soft-cap over logits from well inside the cap to far
// past it (tanh saturating), in place.
TEST(ElementwiseKernels, GegluScaleAndSoftcapMatchTwins) {
  std::mt19937 rng(23);
  for (auto [n, width] : {std::pair{1, 1}, {3, 8}, {7, 300}, {5, 2048}, {2, 6913}}) {
    const size_t size = size_t(n) * width;
    const std::vector<float> gate_up = random_bf16(2 * size, rng, -8.f, 6.f);
    std::vector<float> want(size);
    Dev<uint16_t> dgu(to_bf16(gate_up)), dout(size);
    dout.poison();
    cuda::geglu_fused_bf16(dout.ptr, dgu.ptr, n, width, nullptr);
    ref::geglu_fused(want.data(), gate_up.data(), n, width);
    expect_close(from_bf16(dout.get()), want, kBf16Tol, "geglu_fused");

    const std::vector<float> x = random_bf16(size, rng, -0.2f, 0.3f);
    Dev<uint16_t> dx(to_bf16(x));
    const float factor = 33.941125f;  // sqrt(1152), Gemma 3 1B's normalizer
    cuda::scale_bf16(dx.ptr, factor, int64_t(size), nullptr);
    want = x;
    ref::scale(want.data(), factor, int64_t(size));
    EXPECT_EQ(dx.get(), to_bf16(want)) << "scale: one rounding of the fp32 product";

    std::uniform_real_distribution<float> logit(-200.f, 150.f);
    std::vector<float> logits(size);
    for (float& v : logits) v = logit(rng);
    Dev<float> dl(logits);
    cuda::softcap_f32(dl.ptr, 30.f, int64_t(size), nullptr);
    want = logits;
    ref::softcap(want.data(), 30.f, int64_t(size));
    expect_close(dl.get(), want, 1e-6, "softcap");
  }
}

TEST(ElementwiseKernels, F32ToBf16BitForBit) {
  std::mt19937 rng(22);
  std::uniform_real_distribution<float> u(-1e4f, 1e4f);
  std::vector<float> src(1000);
  for (float& x : src) x = u(rng);
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {0.f, -0.f, inf, -inf, 1e-40f, -3e-39f, 1.00390625f /* a tie */, 1.01171875f, 3.4e38f})
    src.push_back(x);
  src.push_back(std::nanf(""));
  Dev<float> dsrc(src);
  Dev<uint16_t> ddst(src.size());
  ddst.poison();
  cuda::f32_to_bf16(ddst.ptr, dsrc.ptr, int64_t(src.size()), nullptr);
  std::vector<uint16_t> want(src.size());
  ref::f32_to_bf16(want.data(), src.data(), int64_t(src.size()));
  const std::vector<uint16_t> got = ddst.get();
  for (size_t i = 0; i + 1 < src.size(); ++i) ASSERT_EQ(got[i], want[i]) << "value " << src[i];
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(got.back())));
}

}  // namespace
}  // namespace flashserve::test

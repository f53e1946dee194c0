// The MXFP4 CPU twins (kernels/cpu/mxfp4_ref.h): hand-made blocks decode to the values of the OCP
// table (both nibbles, sign, scale exponent, the subnormal scale 2^-127), the product equals the
// dequantized weight's double product, and the clamped SwiGLU clamps gate above only and up on
// both sides, with the (up + 1) term.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/fp4.h"
#include "kernels/cpu/mxfp4_ref.h"
#include "tests/kernels/mxfp4_test_util.h"

namespace flashserve {
namespace {

TEST(Mxfp4Ref, DecodesTheOcpTable) {
  const float table[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  std::vector<uint8_t> blocks(32), scales(2);
  for (int i = 0; i < 16; ++i) blocks[size_t(i)] = uint8_t(i | ((15 - i) << 4));  // row 0: all codes
  for (int i = 16; i < 32; ++i) blocks[size_t(i)] = 0x71;                         // row 1: 0.5, 6
  scales[0] = 127 + 3;  // 8
  scales[1] = 0;        // 2^-127
  std::vector<float> out(64);
  ref::mxfp4_dequantize(out.data(), {blocks.data(), scales.data(), 2, 32});
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(out[size_t(2 * i)], table[i] * 8) << i;
    EXPECT_EQ(out[size_t(2 * i + 1)], table[15 - i] * 8) << i;
  }
  EXPECT_EQ(out[32], std::ldexp(0.5f, -127));
  EXPECT_EQ(out[33], std::ldexp(6.f, -127));
  EXPECT_EQ(e8m0_to_float(254), std::ldexp(1.f, 127));
}

TEST(Mxfp4Ref, MatmulIsTheDequantizedProduct) {
  std::mt19937 rng(3);
  const test::Mxfp4Host w = test::random_mxfp4(1, 7, 96, rng);
  std::vector<float> dq(7 * 96), x(3 * 96), out(3 * 7);
  ref::mxfp4_dequantize(dq.data(), w.group(0));
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : x) v = u(rng);
  ref::mxfp4_matmul(out.data(), x.data(), w.group(0), w.bias.data(), 3);
  for (int i = 0; i < 3; ++i)
    for (int r = 0; r < 7; ++r) {
      double s = w.bias[size_t(r)];
      for (int c = 0; c < 96; ++c) s += double(dq[size_t(r * 96 + c)]) * x[size_t(i * 96 + c)];
      EXPECT_NEAR(out[size_t(i * 7 + r)], s, 1e-6 * std::fabs(s) + 1e-30) << i << " " << r;
    }
}

TEST(Mxfp4Ref, ClampedSwigluClampsAndAddsOneToUp) {
  // gate, up pairs: inside the limit, gate above it, up below -limit and above +limit.
  const std::vector<float> gu = {1.f, 2.f, 9.f, 0.5f, -3.f, -10.f, 0.25f, 8.f};
  std::vector<float> out(4);
  ref::swiglu_clamped(out.data(), gu.data(), 1, 4, 7.f, 1.702f);
  auto glu = [](double g) { return g / (1 + std::exp(-1.702 * g)); };
  EXPECT_NEAR(out[0], (2 + 1) * glu(1), 1e-6);
  EXPECT_NEAR(out[1], (0.5 + 1) * glu(7), 1e-6);     // gate clamped to 7
  EXPECT_NEAR(out[2], (-7 + 1) * glu(-3), 1e-6);     // up clamped to -7; gate has no floor
  EXPECT_NEAR(out[3], (7 + 1) * glu(0.25), 1e-6);    // up clamped to 7
}

}  // namespace
}  // namespace flashserve

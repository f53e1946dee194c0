// FP8 E4M3 (core/fp8.h) checked exhaustively: every code's value from its bits, encode(decode(c))
// == c for every non-NaN code, and the encoding of random floats (and of every tie between two
// neighbouring codes) equal to a brute-force search for the nearest code, ties to the even one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "core/dtype.h"
#include "core/fp8.h"

namespace flashserve {
namespace {

bool is_nan_code(int c) { return (c & 0x7f) == 0x7f; }

// The value of code c written out from the definition (sign, 4-bit exponent with bias 7,
// 3-bit mantissa, exponent 0 subnormal), in double.
double value_from_bits(int c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  const double mag = e == 0 ? m / 8.0 * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -mag : mag;
}

// The nearest code of x's sign (so -0 stays -0), ties to the code with an even mantissa;
// values past 448 saturate.
uint8_t nearest_code(float x) {
  const int sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(double(x));
  int best = -1;
  double best_d = 0;
  for (int c = 0; c < 0x7f; ++c) {
    const double d = std::fabs(value_from_bits(c) - a);
    if (best < 0 || d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return uint8_t(sign | best);
}

TEST(Fp8E4M3, EveryCodeDecodesToTheValueOfItsBits) {
  for (int c = 0; c < 256; ++c) {
    const float v = fp8_e4m3_to_float(uint8_t(c));
    if (is_nan_code(c)) {
      EXPECT_TRUE(std::isnan(v)) << "code " << c;
      continue;
    }
    EXPECT_EQ(double(v), value_from_bits(c)) << "code " << c;
    EXPECT_EQ(std::signbit(v), c >= 0x80) << "code " << c;  // -0 keeps its sign
  }
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.f);
  EXPECT_EQ(fp8_e4m3_to_float(0xfe), -448.f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_float(0x08), std::ldexp(1.f, -6));  // smallest normal
  EXPECT_EQ(kFp8E4M3Max, 448.f);
}

TEST(Fp8E4M3, EncodeOfDecodeIsTheIdentity) {
  for (int c = 0; c < 256; ++c) {
    if (is_nan_code(c)) continue;
    EXPECT_EQ(int(float_to_fp8_e4m3(fp8_e4m3_to_float(uint8_t(c)))), c) << "code " << c;
  }
}

TEST(Fp8E4M3, NanInfinityAndSaturation) {
  EXPECT_TRUE(is_nan_code(float_to_fp8_e4m3(NAN)));
  EXPECT_TRUE(is_nan_code(float_to_fp8_e4m3(-NAN)));
  EXPECT_EQ(float_to_fp8_e4m3(INFINITY), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(float_to_fp8_e4m3(1e30f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(449.f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(-1000.f), 0xfe);
  EXPECT_EQ(float_to_fp8_e4m3(-0.f), 0x80);
  EXPECT_EQ(float_to_fp8_e4m3(1e-30f), 0x00);  // underflows to +0
  EXPECT_EQ(float_to_fp8_e4m3(-1e-30f), 0x80);
  EXPECT_EQ(round_to(DType::kF8E4M3, 300.f), 288.f);  // 256 * 1.125
  EXPECT_EQ(dtype_size(DType::kF8E4M3), 1u);
}

TEST(Fp8E4M3, TiesBetweenNeighboursGoToTheEvenCode) {
  int ties = 0;
  for (int c = 0; c + 1 < 0x7f; ++c) {
    const double lo = value_from_bits(c), hi = value_from_bits(c + 1);
    const float mid = float((lo + hi) / 2);  // exact in fp32: the codes have 3 mantissa bits
    ASSERT_EQ(double(mid), (lo + hi) / 2);
    const int even = (c & 1) == 0 ? c : c + 1;
    EXPECT_EQ(int(float_to_fp8_e4m3(mid)), even) << "between codes " << c << " and " << c + 1;
    EXPECT_EQ(int(float_to_fp8_e4m3(-mid)), 0x80 | even);
    // Just off the tie the nearest side wins.
    EXPECT_EQ(int(float_to_fp8_e4m3(std::nextafter(mid, 0.f))), c);
    EXPECT_EQ(int(float_to_fp8_e4m3(std::nextafter(mid, 1e9f))), c + 1);
    ++ties;
  }
  EXPECT_EQ(ties, 126);  // 127 finite non-negative codes
}

TEST(Fp8E4M3, RandomFloatsEncodeToTheNearestCode) {
  std::mt19937_64 rng(19);
  std::uniform_real_distribution<double> log2_mag(-14.0, 10.0);  // past both ends of the range
  std::uniform_int_distribution<int> coin(0, 1);
  for (int i = 0; i < 200000; ++i) {
    float x = float(std::exp2(log2_mag(rng)));
    if (coin(rng)) x = -x;
    ASSERT_EQ(int(float_to_fp8_e4m3(x)), int(nearest_code(x))) << "x = " << x;
  }
}

}  // namespace
}  // namespace flashserve

// FP8 E4M3 ("e4m3fn", the float8_e4m3fn of PyTorch and safetensors' F8_E4M3) on the host:
// 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; no infinities, 0x7f / 0xff are NaN,
// the largest finite value is 448, exponent 0 holds subnormals (m / 8 * 2^-6). Encoding rounds
// to nearest even and saturates to +-448 (NaN stays NaN), like the GPUs' satfinite conversion.
// C++17-clean. docs/FP8.md has the format and how the weights use it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace flashserve {

constexpr float kFp8E4M3Max = 448.f;
// Activations quantized per row (kernels/cpu/fp8_matmul_ref.h's quantize_rows_fp8 and its CUDA
// twin) scale a row by 448 / amax only from this amax up: below it the quotient could overflow,
// and the row keeps scale 1 (its codes round to zero).
constexpr float kFp8MinRowAmax = 1e-30f;

inline float fp8_e4m3_to_float(uint8_t c) {
  const int e = (c >> 3) & 0xf, m = c & 7;
  float v;
  if (e == 15 && m == 7) v = NAN;
  else if (e == 0) v = std::ldexp(float(m), -9);  // m / 8 * 2^-6
  else v = std::ldexp(float(8 + m), e - 10);      // (1 + m / 8) * 2^(e - 7)
  return (c & 0x80) ? -v : v;
}

inline uint8_t float_to_fp8_e4m3(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint8_t(sign | 0x7f);  // NaN
  const float a = std::fabs(f);
  if (a < 0.015625f) {  // below 2^-6: subnormal (or zero); x * 2^9 is exact, then round to even
    return uint8_t(sign | uint32_t(std::nearbyint(a * 512.f)));  // 8 = the smallest normal
  }
  if (a >= kFp8E4M3Max) return uint8_t(sign | 0x7e);  // saturate (infinity too)
  const uint32_t exp = (abs >> 23) - 127 + 7;          // 1..15
  const uint32_t man = abs & 0x7fffffu;
  uint32_t h = (exp << 3) | (man >> 20);
  const uint32_t rest = man & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (h & 1u))) h++;  // may carry into the exponent
  return uint8_t(sign | h);
}

}  // namespace flashserve

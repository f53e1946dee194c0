// MXFP4 (OCP microscaling, the format of gpt-oss's experts): blocks of 32 values sharing one
// E8M0 scale, each value an E2M1 nibble (sign, 2 exponent bits, 1 mantissa bit: 0, 0.5, 1, 1.5,
// 2, 3, 4, 6 and their negatives). Value = e2m1 * 2^(scale - 127); scale 255 is NaN.
// A weight [rows, cols] (cols a multiple of 32) is stored as
//   blocks [rows, cols / 2] bytes: byte j of a row holds columns 2j (low nibble) and 2j + 1
//                                  (high nibble);
//   scales [rows, cols / 32] bytes: the E8M0 exponent of columns 32g .. 32g + 31.
// Host decoding, shared by the loader (weights/) and the CPU kernels (kernels/cpu/). C++17-clean.
#pragma once

#include <cmath>
#include <cstdint>

namespace flashserve {

constexpr int kMxfp4Block = 32;  // values per scale
constexpr uint8_t kE8m0Nan = 255;

// The E2M1 code (low 4 bits of `nibble`) as a float.
inline float e2m1_to_float(uint8_t nibble) {
  constexpr float kValues[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float v = kValues[nibble & 7];
  return (nibble & 8) ? -v : v;
}

// The E8M0 scale 2^(s - 127) (s < 255).
inline float e8m0_to_float(uint8_t s) { return std::ldexp(1.f, int(s) - 127); }

}  // namespace flashserve

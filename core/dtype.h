// Element types and host-side conversions between fp32 and the 16-bit formats (FP8 E4M3: core/fp8.h).
// C++17-clean. The conversions round to nearest even, matching __float2bfloat16_rn / __float2half_rn.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/fp8.h"

namespace flashserve {

// kF8E4M3: FP8 weights (core/fp8.h), one byte each, always with per-output-row scales
// (TensorView::row_scale, Tensor::row_scale); never an activation. kI4: a device weight of int4
// codes, two a byte, with per-group scales and zero points (Tensor::int4, docs/QUANTIZATION.md);
// dtype_size says 1 (the byte that holds two), Tensor::bytes() counts half a byte each.
enum class DType { kF32, kF16, kBF16, kI32, kF8E4M3, kI4 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kI32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kF8E4M3: return 1;
    case DType::kI4: return 1;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kI32: return "i32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF8E4M3: return "fp8_e4m3";
    case DType::kI4: return "int4";
  }
  return "?";
}

// The bits of an fp32 value and back (std::bit_cast is C++20).
inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_bits_to_float(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                          // round to nearest even
  return uint16_t(u >> 16);
}

inline float f16_bits_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((man & 0x400u) == 0) {
        man <<= 1;
        exp--;
      }
      man &= 0x3ffu;
      u = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  return f32_from_bits(u);
}

inline uint16_t float_to_f16_bits(float f) {
  const uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u); // overflow (incl. inf) -> inf
  if (abs < 0x38800000u) {                                 // subnormal or zero in f16
    // |f| * 2^24 rounded to nearest even gives the subnormal mantissa.
    float scaled = f32_from_bits(abs) * 16777216.0f;
    uint32_t m = uint32_t(std::nearbyint(scaled));
    return uint16_t(sign | m);
  }
  uint32_t exp = ((abs >> 23) - 127 + 15);
  uint32_t man = abs & 0x7fffffu;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;  // may carry into the exponent: fine
  return uint16_t(sign | h);
}

// Rounds x to the nearest value representable in t (identity for f32).
inline float round_to(DType t, float x) {
  switch (t) {
    case DType::kBF16: return bf16_bits_to_float(float_to_bf16_bits(x));
    case DType::kF16: return f16_bits_to_float(float_to_f16_bits(x));
    case DType::kF8E4M3: return fp8_e4m3_to_float(float_to_fp8_e4m3(x));
    default: return x;
  }
}

}  // namespace flashserve

// MXFP4 decoding on the device (the format: core/fp4.h), shared by the GEMV and the GEMM: bit
// arithmetic rather than a lookup table, so that the 32 lanes of a warp never serialise on one.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace flashserve::cuda::mxfp4 {

// The E2M1 code in the low 4 bits of `n`: magnitudes 2..7 are normal floats with exponent
// (m >> 1) - 1 and mantissa bit m & 1; 1 is 0.5, 0 is zero.
__device__ __forceinline__ float e2m1(uint32_t n) {
  const uint32_t m = n & 7u;
  const uint32_t mag = m >= 2u ? (((m >> 1) + 126u) << 23) | ((m & 1u) << 22)
                               : (m ? 0x3f000000u : 0u);
  return __uint_as_float(mag | ((n & 8u) << 28));
}

// The E8M0 scale 2^(s - 127); s = 0 is the subnormal 2^-127.
__device__ __forceinline__ float e8m0(uint32_t s) {
  return __uint_as_float(s ? s << 23 : 0x00400000u);
}

}  // namespace flashserve::cuda::mxfp4

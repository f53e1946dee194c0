// FP8 E4M3 weights in CUDA kernels: codes to floats and to bf16, exactly (every E4M3 value is an
// f16 and a bf16). cuda_fp8.h's conversion is one cvt.rn.f16x2.e4m3x2 on sm_89 and newer and a
// few integer operations on sm_80/86, so the kernels build for every architecture of the
// project. The host-side format is core/fp8.h; docs/FP8.md has how the kernels use it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace flashserve::cuda {

// Two codes (the low byte first) as two floats.
__device__ __forceinline__ float2 fp8x2_to_float2(uint16_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two), __NV_E4M3);
  return __half22float2(__half2(h));
}

// Eight codes (8 bytes, the lowest first) as eight bf16 in the same order (16 bytes): what a
// 16-byte load of eight bf16 weights would have given.
__device__ __forceinline__ uint4 fp8x8_to_bf16x8(uint2 v) {
  const uint32_t in[2] = {v.x, v.y};
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = fp8x2_to_float2(uint16_t(in[i / 2] >> (16 * (i % 2))));
    __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
    out[i] = *reinterpret_cast<uint32_t*>(&b);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

}  // namespace flashserve::cuda

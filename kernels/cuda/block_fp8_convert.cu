// The block-wise FP8 conversions around cuBLASLt (kernels/block_fp8.h). block_fp8_dequantize_bf16:
// the weight in bf16 for the fallback GEMM, one element a thread (it runs where the block-scaled
// GEMM has no algorithm, so it is kept simple). quantize_blocks_fp8: activations to E4M3 with a
// scale per token per 128 columns, one warp per (token, 128 columns): 16 lanes load 8 values
// each, the warp reduces their amax, and each lane encodes its 8 (x * (448 / amax), IEEE
// division as the twin, rounded to nearest even and saturated: bitwise its CPU twin's codes).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "core/error.h"
#include "core/fp8.h"
#include "kernels/block_fp8.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8.cuh"

namespace flashserve::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    dequantize_kernel(__nv_bfloat16* __restrict__ out,   // [n, k]
                      const uint8_t* __restrict__ w,     // [n, k]
                      const float* __restrict__ scales,  // [ceil(n / block_n), scale_ld]
                      int scale_ld, int n, int k, int block_n, int block_k) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= int64_t(n) * k) return;
  const int r = int(i / k), c = int(i % k);
  const float v = fp8x2_to_float2(w[i]).x * scales[int64_t(r / block_n) * scale_ld + c / block_k];
  out[i] = __float2bfloat16(v);
}

__global__ void __launch_bounds__(kThreads)
    quantize_kernel(uint2* __restrict__ codes,        // [m, k / 8] (8 codes each)
                    float* __restrict__ scales,       // [ceil(k / 128), m]
                    const uint4* __restrict__ x,      // [m, k / 8] (8 bf16 each)
                    int m, int k) {
  constexpr int kUnits = kFp8ActBlock / 8;  // 16-byte units of x per block
  const int lane = threadIdx.x % 32;
  const int blocks_k = (k + kFp8ActBlock - 1) / kFp8ActBlock;
  const int64_t item = int64_t(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  if (item >= int64_t(m) * blocks_k) return;
  const int row = int(item / blocks_k), b = int(item % blocks_k);
  const int unit = b * kUnits + lane, units_per_row = k / 8;
  const bool mine = lane < kUnits && unit < units_per_row;
  float f[8] = {};
  float amax = 0.f;
  if (mine) {
    const uint4 v = x[int64_t(row) * units_per_row + unit];
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 p = __bfloat1622float2(h[i]);
      f[2 * i] = p.x, f[2 * i + 1] = p.y;
      amax = fmaxf(amax, fmaxf(fabsf(p.x), fabsf(p.y)));
    }
  }
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  // A block of zeros (or of values too small to scale) gets scale 1, as quantize_rows_fp8 does.
  const bool scaled = amax >= kFp8MinRowAmax;
  const float inv = scaled ? kFp8E4M3Max / amax : 1.f;
  if (lane == 0) scales[int64_t(b) * m + row] = scaled ? amax / kFp8E4M3Max : 1.f;
  if (!mine) return;
  uint32_t out[2] = {0, 0};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_fp8x2_storage_t q = __nv_cvt_float2_to_fp8x2(
        make_float2(f[2 * i] * inv, f[2 * i + 1] * inv), __NV_SATFINITE, __NV_E4M3);
    out[i / 2] |= uint32_t(q) << (16 * (i % 2));
  }
  codes[int64_t(row) * units_per_row + unit] = make_uint2(out[0], out[1]);
}

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

void block_fp8_dequantize_bf16(void* out, const void* w, const float* scales, int scale_ld, int n,
                               int k, int block_n, int block_k, cudaStream_t stream) {
  FS_CHECK(n >= 0 && k > 0 && block_n > 0 && block_k > 0 && scales,
           "block_fp8_dequantize_bf16: bad shape or no scales");
  const int64_t total = int64_t(n) * k;
  if (total == 0) return;
  dequantize_kernel<<<unsigned((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      static_cast<__nv_bfloat16*>(out), static_cast<const uint8_t*>(w), scales, scale_ld, n, k,
      block_n, block_k);
  CUDA_CHECK_LAUNCH();
}

void quantize_blocks_fp8(void* codes, float* scales, const void* x, int m, int k,
                         cudaStream_t stream) {
  FS_CHECK(m >= 0 && k > 0 && k % 8 == 0 && aligned(x, 16) && aligned(codes, 8) && scales,
           "quantize_blocks_fp8: k ", k, " not a multiple of 8, or unaligned pointers");
  const int64_t items = int64_t(m) * ((k + kFp8ActBlock - 1) / kFp8ActBlock);
  if (items == 0) return;
  constexpr int kPerBlock = kThreads / 32;
  quantize_kernel<<<unsigned((items + kPerBlock - 1) / kPerBlock), kThreads, 0, stream>>>(
      static_cast<uint2*>(codes), scales, static_cast<const uint4*>(x), m, k);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda

// FP8 weights to bf16 for the steps too large for the skinny matmul (m > kGemvMaxRows): the
// CUDA backend dequantizes the layer's weight into a scratch buffer and runs its cuBLASLt GEMM
// on it (docs/FP8.md: the simple baseline; an FP8 cuBLASLt GEMM is the plan for prefill). One
// thread per 8 codes: one 8-byte load, one 16-byte store. The CPU twin is
// kernels/cpu/fp8_matmul_ref.h's dequantize_fp8 (rounded to bf16 once).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8.cuh"
#include "kernels/fp8_quantize.h"

namespace flashserve::cuda {
namespace {

__global__ void dequantize_fp8_kernel(uint4* __restrict__ out,          // [n, k / 8]
                                      const uint2* __restrict__ w,      // [n, k / 8]
                                      const float* __restrict__ w_scale,  // [n]
                                      int64_t units, int units_per_row) {
  for (int64_t u = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; u < units;
       u += int64_t(gridDim.x) * blockDim.x) {
    const uint2 q = __ldg(w + u);
    const float s = __ldg(w_scale + u / units_per_row);
    const uint32_t in[2] = {q.x, q.y};
    uint32_t o[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = fp8x2_to_float2(uint16_t(in[i / 2] >> (16 * (i % 2))));
      __nv_bfloat162 b = __floats2bfloat162_rn(f.x * s, f.y * s);
      o[i] = *reinterpret_cast<uint32_t*>(&b);
    }
    out[u] = make_uint4(o[0], o[1], o[2], o[3]);
  }
}

}  // namespace

void dequantize_fp8_bf16(void* out, const void* w, const float* w_scale, int n, int k,
                         cudaStream_t stream) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  FS_CHECK(n >= 0 && k > 0 && k % 8 == 0 && aligned(out) && aligned(w) && w_scale,
           "dequantize_fp8: unsupported k ", k, ", unaligned pointers or no scales");
  const int64_t units = int64_t(n) * (k / 8);
  if (units == 0) return;
  constexpr int kThreads = 256;
  const int blocks = int(std::min<int64_t>((units + kThreads - 1) / kThreads, 8192));
  dequantize_fp8_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<uint4*>(out),
                                                         static_cast<const uint2*>(w), w_scale,
                                                         units, k / 8);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda

// Grid sizing and block-wide reductions shared by the row and elementwise kernels (norms,
// generic attention): blocks_for() covers n elements with blocks of `threads`; block_sum() and
// block_max() reduce one value per thread over the whole block.
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

namespace flashserve::cuda::detail {

inline int blocks_for(int64_t n, int threads) { return int((n + threads - 1) / threads); }

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ inline float block_sum(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float s = 0.f;
  for (int i = 0; i < int(blockDim.x / 32); ++i) s += part[i];
  return s;
}

__device__ inline float block_max(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float m = -FLT_MAX;
  for (int i = 0; i < int(blockDim.x / 32); ++i) m = fmaxf(m, part[i]);
  return m;
}

}  // namespace flashserve::cuda::detail

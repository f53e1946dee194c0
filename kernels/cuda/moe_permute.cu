// The MoE token permutation (kernels/moe.h): the (token, choice) pairs grouped by expert on the
// GPU, the gather of the experts' input rows in that order, and the combine back to token order
// with the routing weights. Launch shapes depend on n and top_k only (graph-safe); the routing
// lives in device arrays that the later kernels read.
//
// moe_permute is one thread block: at decode there are n * top_k <= a few hundred pairs, and at
// prefill (tens of thousands) it is still a few tens of microseconds beside the experts' GEMMs.
// It counts pairs per expert (shared-memory atomics: the order of a count does not matter), takes
// the prefix sums, then gives each pair its row in (token, choice) order, tile by tile: within a
// warp __match_any_sync finds the lanes with the same expert (a lane's rank = the same-expert
// lanes below it), and a per-(warp, expert) prefix over the tile's warps places the warps. So the
// permutation is a function of the ids alone, and the GEMMs and the combine are deterministic.
#include <cuda_bf16.h>

#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/moe.h"

namespace flashserve::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kPermuteWarps = 32;
constexpr int kPermuteThreads = kPermuteWarps * 32;

__global__ void __launch_bounds__(kPermuteThreads)
    moe_permute_kernel(MoePermutation p, const int32_t* __restrict__ ids, int total, int top_k,
                       int num_experts) {
  __shared__ int count[kMoeMaxExperts];
  __shared__ int next[kMoeMaxExperts];        // the next free row of each expert
  __shared__ int warp_base[kPermuteWarps][kMoeMaxExperts];  // a tile's per-warp counts, then bases
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  for (int e = tid; e < num_experts; e += kPermuteThreads) count[e] = 0;
  for (int r = tid; r < total; r += kPermuteThreads) p.row_token[r] = 0;  // rows of no pair
  __syncthreads();
  for (int i = tid; i < total; i += kPermuteThreads) {
    const int e = ids[i];
    if (e >= 0 && e < num_experts) atomicAdd(&count[e], 1);
  }
  __syncthreads();
  // Prefix sums over at most 256 experts: each thread sums the counts below its expert.
  for (int e = tid; e <= num_experts; e += kPermuteThreads) {
    int rows = 0;
    for (int f = 0; f < e; ++f) rows += count[f];
    p.offsets[e] = rows;
    if (e < num_experts) next[e] = rows;
  }
  __syncthreads();
  for (int tile = 0; tile < total; tile += kPermuteThreads) {
    for (int i = tid; i < kPermuteWarps * num_experts; i += kPermuteThreads)
      warp_base[i / num_experts][i % num_experts] = 0;
    __syncthreads();
    const int i = tile + tid;
    int e = i < total ? ids[i] : -1;
    if (e < 0 || e >= num_experts) e = -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    const int rank = __popc(same & ((1u << lane) - 1u));
    if (e >= 0 && rank == 0) warp_base[warp][e] = __popc(same);
    __syncthreads();
    for (int f = tid; f < num_experts; f += kPermuteThreads) {
      int row = next[f];
      for (int w = 0; w < kPermuteWarps; ++w) {
        const int c = warp_base[w][f];
        warp_base[w][f] = row;
        row += c;
      }
      next[f] = row;
    }
    __syncthreads();
    if (i < total) {
      const int row = e >= 0 ? warp_base[warp][e] + rank : -1;
      p.pair_row[i] = row;
      if (row >= 0) p.row_token[row] = i / top_k;
    }
    __syncthreads();
  }
}

__global__ void moe_gather_rows_kernel(bf16* __restrict__ xp, const bf16* __restrict__ x,
                                       const int32_t* __restrict__ row_token, int hidden) {
  const int r = blockIdx.x;
  const int64_t t = row_token[r];
  if (hidden % 8 == 0) {
    const uint4* src = reinterpret_cast<const uint4*>(x + t * hidden);
    uint4* dst = reinterpret_cast<uint4*>(xp + int64_t(r) * hidden);
    for (int c = threadIdx.x; c < hidden / 8; c += blockDim.x) dst[c] = src[c];
  } else {
    for (int c = threadIdx.x; c < hidden; c += blockDim.x)
      xp[int64_t(r) * hidden + c] = x[t * hidden + c];
  }
}

template <class Y>
__device__ inline float to_float(Y v);
template <>
__device__ inline float to_float<float>(float v) { return v; }
template <>
__device__ inline float to_float<bf16>(bf16 v) { return __bfloat162float(v); }

template <class Y>
__global__ void moe_combine_kernel(bf16* __restrict__ out, const Y* __restrict__ y,
                                   const int32_t* __restrict__ pair_row,
                                   const int32_t* __restrict__ ids, int num_experts,
                                   const float* __restrict__ weights, int top_k, int hidden) {
  pdl_wait();  // y: the previous kernel's output
  pdl_trigger();
  const int t = blockIdx.x;
  const int h = blockIdx.y * blockDim.x + threadIdx.x;
  if (h < hidden) {
    float acc = 0.f;
    for (int j = 0; j < top_k; ++j) {
      const int q = t * top_k + j;
      const int row = pair_row ? pair_row[q] : (ids[q] >= 0 && ids[q] < num_experts ? q : -1);
      if (row >= 0) acc = fmaf(weights[q], to_float(y[int64_t(row) * hidden + h]), acc);
    }
    out[int64_t(t) * hidden + h] = __float2bfloat16(acc);
  }
}

}  // namespace

size_t moe_permutation_bytes(int n, int top_k, int num_experts) {
  return size_t((num_experts + 1) + 2 * size_t(n) * top_k) * sizeof(int32_t);
}

MoePermutation moe_permutation_in(void* workspace, int n, int top_k, int num_experts) {
  int32_t* at = static_cast<int32_t*>(workspace);
  MoePermutation p;
  p.offsets = at;
  p.row_token = at += num_experts + 1;
  p.pair_row = at + size_t(n) * top_k;
  return p;
}

void moe_permute(const MoePermutation& p, const int32_t* ids, int n, int top_k, int num_experts,
                 cudaStream_t stream) {
  FS_CHECK(num_experts >= 1 && num_experts <= kMoeMaxExperts && top_k >= 1 && n >= 0,
           "moe_permute: ", num_experts, " experts, top_k ", top_k);
  moe_permute_kernel<<<1, kPermuteThreads, 0, stream>>>(p, ids, n * top_k, top_k, num_experts);
  CUDA_CHECK_LAUNCH();
}

void moe_gather_rows(void* xp, const void* x, const int32_t* row_token, int rows, int hidden,
                     cudaStream_t stream) {
  if (rows == 0) return;
  moe_gather_rows_kernel<<<rows, 128, 0, stream>>>(static_cast<bf16*>(xp),
                                                   static_cast<const bf16*>(x), row_token, hidden);
  CUDA_CHECK_LAUNCH();
}

void moe_combine(void* out, const void* y, bool y_f32, const int32_t* pair_row,
                 const int32_t* ids, int num_experts, const float* weights, int n, int top_k,
                 int hidden, cudaStream_t stream) {
  FS_CHECK(pair_row || ids, "moe_combine: needs the pairs' rows or their ids");
  if (n == 0) return;
  // A block per (token, 256 columns): at batch 1 the combine is a few µs of latency, spread wide.
  const dim3 threads(256), grid(n, (hidden + 255) / 256);
  if (y_f32)
    launch_pdl(moe_combine_kernel<float>, grid, threads, 0, stream, static_cast<bf16*>(out),
               static_cast<const float*>(y), pair_row, ids, num_experts, weights, top_k, hidden);
  else
    launch_pdl(moe_combine_kernel<bf16>, grid, threads, 0, stream, static_cast<bf16*>(out),
               static_cast<const bf16*>(y), pair_row, ids, num_experts, weights, top_k, hidden);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda

// A plain grouped GEMM over the permuted rows of a MoE layer (kernels/moe.h): the correct general
// path for steps above the fused decode kernels. One 64x64 output tile per block, bf16 tensor
// cores through WMMA (16x16x16, f32 accumulators), 32-column k-steps staged in shared memory.
// The grid's y covers every tile any routing of max_rows rows can make (floor(max_rows / 64) +
// num_experts, since each expert adds at most one partial tile); each block finds its expert in
// moe_permute's tile_offsets and returns when the routing has no tile for it. So the launch
// shape never depends on the routing, and the GEMM records in a CUDA graph. The tuned Hopper
// grouped GEMM (kernels/moe_grouped_gemm.h) takes this kernel's place where it is built.
#include <cuda_bf16.h>
#include <mma.h>

#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/moe.h"

namespace flashserve::cuda {
namespace {

using bf16 = __nv_bfloat16;
namespace wmma = nvcuda::wmma;

constexpr int kBm = kMoeGemmTileRows;  // rows of a tile: those of moe_permute's tile_offsets
constexpr int kBn = 64;
constexpr int kBk = 32;
constexpr int kPad = 8;                // bf16 per row of padding against bank conflicts
constexpr int kThreads = 128;          // 4 warps, each a 32x32 quarter of the tile

__global__ void __launch_bounds__(kThreads)
    moe_expert_gemm_kernel(bf16* __restrict__ out, const bf16* __restrict__ a,
                           const int32_t* __restrict__ offsets,
                           const int32_t* __restrict__ tile_offsets, const bf16* __restrict__ w,
                           int num_experts, int n, int k) {
  __shared__ __align__(32) bf16 sa[kBm][kBk + kPad];
  __shared__ __align__(32) bf16 sb[kBn][kBk + kPad];
  __shared__ __align__(32) float sc[kBm][kBn + 4];
  const int tile = tile_offsets[0] + blockIdx.y;
  if (tile >= tile_offsets[num_experts]) return;
  int lo = 0, hi = num_experts - 1;  // the expert e with tile_offsets[e] <= tile < [e + 1]
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tile_offsets[mid] <= tile) lo = mid; else hi = mid - 1;
  }
  const int e = lo;
  const int row0 = offsets[e] + (tile - tile_offsets[e]) * kBm;
  const int row_end = min(offsets[e + 1], row0 + kBm);
  const int col0 = blockIdx.x * kBn;
  const bf16* we = w + int64_t(e) * n * k;
  const int warp = threadIdx.x / 32;
  const int wm = warp / 2, wn = warp % 2;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);

  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int k0 = 0; k0 < k; k0 += kBk) {
    // 64 rows x 4 vectors of 8 bf16 per operand: two vectors per thread each.
    for (int v = threadIdx.x; v < kBm * kBk / 8; v += kThreads) {
      const int r = v / (kBk / 8), c = k0 + (v % (kBk / 8)) * 8;
      const int row = row0 + r, col = col0 + r;
      *reinterpret_cast<uint4*>(&sa[r][c - k0]) =
          row < row_end && c < k ? *reinterpret_cast<const uint4*>(a + int64_t(row) * k + c) : zero;
      *reinterpret_cast<uint4*>(&sb[r][c - k0]) =
          col < n && c < k ? *reinterpret_cast<const uint4*>(we + int64_t(col) * k + c) : zero;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBk; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb[2];
#pragma unroll
      for (int i = 0; i < 2; ++i)
        wmma::load_matrix_sync(fa[i], &sa[wm * 32 + i * 16][kk], kBk + kPad);
#pragma unroll
      for (int j = 0; j < 2; ++j)
        wmma::load_matrix_sync(fb[j], &sb[wn * 32 + j * 16][kk], kBk + kPad);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(&sc[wm * 32 + i * 16][wn * 32 + j * 16], acc[i][j], kBn + 4,
                              wmma::mem_row_major);
  __syncthreads();
  for (int v = threadIdx.x; v < kBm * kBn; v += kThreads) {
    const int r = v / kBn, c = v % kBn;
    if (row0 + r < row_end && col0 + c < n)
      out[int64_t(row0 + r) * n + col0 + c] = __float2bfloat16(sc[r][c]);
  }
}

}  // namespace

void moe_expert_gemm_bf16(void* out, const void* a, const int32_t* offsets,
                          const int32_t* tile_offsets, const void* w, int num_experts, int n,
                          int k, int max_rows, cudaStream_t stream) {
  FS_CHECK(num_experts >= 1 && n >= 1 && k >= 8 && k % 8 == 0 && max_rows >= 0,
           "moe_expert_gemm: n ", n, " k ", k, " (k a multiple of 8)");
  if (max_rows == 0) return;
  const dim3 grid((n + kBn - 1) / kBn, max_rows / kBm + num_experts);
  FS_CHECK(grid.y <= 65535u, "moe_expert_gemm: ", max_rows, " rows over ", num_experts,
           " experts is more tiles than a grid holds");
  moe_expert_gemm_kernel<<<grid, kThreads, 0, stream>>>(
      static_cast<bf16*>(out), static_cast<const bf16*>(a), offsets, tile_offsets,
      static_cast<const bf16*>(w), num_experts, n, k);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda

// The grouped GEMM's mma.sync kernel (sm_80 instructions): what runs on every GPU that is not a
// Hopper with the sm_90a kernel built (Ampere, Ada, Blackwell, an 80-virtual build). The same
// persistent grid and tile schedule as the Hopper kernel (moe_tile_schedule.cuh); each CTA
// computes 128 x 128 tiles with 8 warps of 64 x 32, k-blocks of 64 columns double-buffered with
// zero-filling cp.async and read with ldmatrix (fragments and swizzle: docs/KERNEL_NOTES.md §2).
// Simple rather than fast: docs/MOE_GROUPED_GEMM.md.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_grouped_gemm_kernels.h"
#include "kernels/cuda/moe_tile_schedule.cuh"
#include "kernels/cuda/ptx.cuh"

namespace flashserve::cuda::detail {
namespace {

constexpr int kBlockM = 128, kBlockN = 128, kBlockK = 64, kBand = 16, kThreads = 256;
constexpr int kTileBytes = 128 * 128;         // 128 rows of 64 bf16 (128 bytes): A or W
constexpr int kStageBytes = 2 * kTileBytes;   // A then W
constexpr int kSchedOffset = 2 * kStageBytes;  // two stages, then the schedule

size_t smem_bytes(int num_experts) { return size_t(kSchedOffset) + size_t(moe_schedule_bytes(num_experts)); }

// Byte offset of 16-byte chunk `chunk` (0..7) of row `row` in a 128-byte-row tile, swizzled
// (chunk c of row r at c ^ (r % 8)) so that ldmatrix's eight rows hit distinct banks.
__device__ __forceinline__ uint32_t swizzled(int row, int chunk) {
  return uint32_t(row * 128 + ((chunk ^ (row & 7)) << 4));
}

__global__ void __launch_bounds__(kThreads) moe_grouped_gemm_mma_kernel(
    __nv_bfloat16* __restrict__ out,      // [max_rows, n]
    const __nv_bfloat16* __restrict__ a,  // [max_rows, k]
    const int32_t* __restrict__ offsets,  // [num_experts + 1]
    const __nv_bfloat16* __restrict__ w,  // [num_experts, n, k]
    int num_experts, int n, int k, int max_rows) {
#if __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t base = smem_addr(smem);
  const MoeSchedule sched = moe_build_schedule<kBlockM, kBlockN>(smem + kSchedOffset, offsets, num_experts, n, max_rows);
  __syncthreads();
  const int total_tiles = sched.tile_start[num_experts];
  const int k_blocks = (k + kBlockK - 1) / kBlockK;
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g = lane >> 2, t4 = lane & 3;
  const int wm = warp >> 2, wn = warp & 3;  // warp tile: rows wm * 64, columns wn * 32

  for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
    const MoeTile c = moe_find_tile<kBlockM, kBlockN, kBand>(sched, t);
    // k-block kb into stage st: A rows from the tile's first row (zeros past max_rows; rows past the
    // expert's range only feed rows that are never stored), W[e] rows n0.. (zeros past n), zeros
    // past k (k % 8 == 0: a 16-byte chunk is all in or all out).
    auto load = [&](int kb, int st) {
      const uint32_t sa = base + uint32_t(st * kStageBytes), sw = sa + kTileBytes;
      for (int i = int(threadIdx.x); i < 128 * 8; i += kThreads) {
        const int r = i >> 3, ch = i & 7, col = kb * kBlockK + ch * 8;
        const bool a_ok = col < k && c.row0 + r < max_rows;
        cp_async_16(sa + swizzled(r, ch), a_ok ? a + int64_t(c.row0 + r) * k + col : a, a_ok);
        const bool w_ok = col < k && c.n0 + r < n;
        cp_async_16(sw + swizzled(r, ch), w_ok ? w + (int64_t(c.e) * n + c.n0 + r) * k + col : w, w_ok);
      }
      cp_async_commit();
    };

    float acc[4][4][4];  // [m16 tile][n8 tile][C fragment]
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    load(0, 0);
    for (int kb = 0; kb < k_blocks; ++kb) {
      if (kb + 1 < k_blocks) {
        load(kb + 1, (kb + 1) & 1);  // its stage was last read before the previous barrier
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      const uint32_t sa = base + uint32_t((kb & 1) * kStageBytes), sw = sa + kTileBytes;
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk) {
        uint32_t af[4][4], bf[2][4];
        // A: lanes 0-15 give rows 0-15 of k-chunk 2kk, lanes 16-31 the same rows of chunk 2kk + 1.
#pragma unroll
        for (int i = 0; i < 4; ++i) ldmatrix_x4(af[i], sa + swizzled(wm * 64 + i * 16 + (lane & 15), 2 * kk + (lane >> 4)));
        // W rows are columns of B (k contiguous): matrices (n 0-7, chunk 2kk), (n 0-7, 2kk + 1),
        // (n 8-15, 2kk), (n 8-15, 2kk + 1) are b0, b1 of two n8 tiles.
#pragma unroll
        for (int j = 0; j < 2; ++j)
          ldmatrix_x4(bf[j], sw + swizzled(wn * 32 + j * 16 + ((lane >> 4) << 3) + (lane & 7), 2 * kk + ((lane >> 3) & 1)));
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const uint32_t b[2] = {bf[j >> 1][(j & 1) * 2], bf[j >> 1][(j & 1) * 2 + 1]};
            mma_m16n8k16<__nv_bfloat16>(acc[i][j], af[i], b);
          }
      }
      __syncthreads();
    }

    // Epilogue: bf16 pairs from the C fragments; rows past the expert's range and columns past n
    // are not stored.
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = wm * 64 + i * 16 + g + 8 * h;
        if (r >= c.rows) continue;
        __nv_bfloat16* row_out = out + int64_t(c.row0 + r) * n;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int col = c.n0 + wn * 32 + j * 8 + 2 * t4;
          if (col < n)
            *reinterpret_cast<__nv_bfloat162*>(row_out + col) =
                __floats2bfloat162_rn(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        }
      }
  }
#endif  // __CUDA_ARCH__ >= 800
}

}  // namespace

void run_moe_grouped_gemm_mma(void* out, const void* a, const int32_t* offsets, const void* w, int num_experts,
                              int n, int k, int max_rows, int num_sms, cudaStream_t stream) {
  const size_t smem = smem_bytes(num_experts);
  auto kernel = moe_grouped_gemm_mma_kernel;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
  // As the Hopper kernel: a grid that depends on the sizes only, never on the offsets.
  const int64_t n_tiles = (n + kBlockN - 1) / kBlockN;
  const int64_t max_tiles = (int64_t(max_rows) / kBlockM + num_experts) * n_tiles;
  const int grid = int(std::max<int64_t>(1, std::min<int64_t>(int64_t(num_sms) * std::max(per_sm, 1), max_tiles)));
  kernel<<<grid, kThreads, smem, stream>>>(static_cast<__nv_bfloat16*>(out), static_cast<const __nv_bfloat16*>(a),
                                           offsets, static_cast<const __nv_bfloat16*>(w), num_experts, n, k,
                                           max_rows);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda::detail

// The Hopper (sm_90a) grouped GEMM over experts: out rows of expert e = a rows of e · w[e]ᵀ for
// every expert in one persistent, warp-specialised launch. Each CTA first turns the device row
// offsets into a tile schedule in shared memory (kernels/cuda/moe_tile_schedule.cuh), then walks
// tiles t = blockIdx.x, + gridDim.x, ... of all experts together: a producer warp streams the
// tile's A rows and W[e] rows through a ring of shared-memory stages with bulk tensor copies
// (TMA, 128-byte swizzle), and two consumer warpgroups multiply them with wgmma into fp32
// registers and store bf16. Design: docs/MOE_GROUPED_GEMM.md.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_tile_schedule.cuh"
#include "kernels/cuda/ptx.cuh"
#include "kernels/cuda/moe_grouped_gemm_kernels.h"
#include "kernels/cuda/sm90/ptx_sm90.cuh"
#include "kernels/cuda/sm90/tensor_map.cuh"
#include "kernels/moe_grouped_gemm.h"

namespace flashserve::cuda::detail::sm90 {
namespace {

// kBlockM x kBlockN output tiles, 64-column k-blocks (one 128-byte swizzle row of bf16), kStages
// A+W stages in the ring. Three warpgroups: 0 produces (one thread issues the copies), 1 and 2
// consume. With kBlockM = 128 the consumers split the rows (64 x 256 each, m64n256k16); with
// kBlockM = 64 they split the columns (64 x 128 each, m64n128k16, both reading the same A rows).
template <int kBlockM_, int kStages_>
struct MoeTraits {
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = 256;
  static constexpr int kBlockK = 64;
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = 384;
  static constexpr int kWgRows = kBlockM / 2 >= 64 ? 2 : 1;  // consumer warpgroups along M
  static constexpr int kWgCols = kBlockN / (2 / kWgRows);    // columns per consumer warpgroup
  // Registers after setmaxnreg: 128 * 40 + 256 * 232 <= 64K.
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;
  // Row tiles per band of the schedule (moe_find_tile): an expert with thousands of rows re-reads
  // each A row from HBM once per band, not once per column tile.
  static constexpr int kBand = 16;

  static constexpr int kABytes = kBlockM * 128;
  static constexpr int kBBytes = kBlockN * 128;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // Layout: [stage 0: A | W] ... [stage S-1] | full[S] | empty[S] | schedule, base 1 KiB aligned.
  static constexpr int kBarOffset = kStages * kStageBytes;
  static constexpr int kSchedOffset = kBarOffset + 16 * kStages;
  static constexpr size_t smem_bytes(int num_experts) {
    return size_t(kSchedOffset) + size_t(moe_schedule_bytes(num_experts)) + 1024;
  }

  static_assert(kBlockM == 64 || kBlockM == 128, "64 or 128 rows");
  static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 65536, "register file");
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "1 KiB swizzle atoms");
};

using Tile128 = MoeTraits<128, 4>;  // 48 KiB per stage
using Tile64 = MoeTraits<64, 5>;    // 40 KiB per stage
static_assert(Tile128::smem_bytes(kMoeGroupedGemmMaxExperts) <= 227 * 1024, "fits the sm90 opt-in shared memory");
static_assert(Tile64::smem_bytes(kMoeGroupedGemmMaxExperts) <= 227 * 1024, "fits the sm90 opt-in shared memory");

struct MoeParams {
  CUtensorMap tmap_a;  // [max_rows][k] bf16, boxes kBlockM rows x 64
  CUtensorMap tmap_w;  // [num_experts * n][k] bf16, boxes 256 rows x 64
  __nv_bfloat16* out;  // [max_rows][n]
  const int32_t* offsets;
  int num_experts, n, k, max_rows;
};

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads, 1) moe_grouped_gemm_kernel(const __grid_constant__ MoeParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kStages = Tr::kStages;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw_addr = smem_addr(smem_raw);
  const uint32_t base = (raw_addr + 1023u) & ~1023u;  // 1 KiB atoms: swizzle base offset 0
  uint8_t* smem = smem_raw + (base - raw_addr);
  auto stage_a = [&](int s) { return base + uint32_t(s * Tr::kStageBytes); };
  auto stage_b = [&](int s) { return base + uint32_t(s * Tr::kStageBytes + Tr::kABytes); };
  auto bar_full = [&](int s) { return base + uint32_t(Tr::kBarOffset + 8 * s); };
  auto bar_empty = [&](int s) { return base + uint32_t(Tr::kBarOffset + 8 * (kStages + s)); };
  const int k_blocks = (p.k + Tr::kBlockK - 1) / Tr::kBlockK;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const MoeSchedule sched = moe_build_schedule<Tr::kBlockM, Tr::kBlockN>(smem + Tr::kSchedOffset, p.offsets,
                                                                         p.num_experts, p.n, p.max_rows);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(bar_full(s), 1);       // the producer's expect-tx arrival
      mbar_init(bar_empty(s), 4 * 2);  // one arrival per consumer warp
    }
    mbar_fence_init();
  }
  __syncthreads();
  const int total_tiles = sched.tile_start[p.num_experts];
  auto find_tile = [&](int t) { return moe_find_tile<Tr::kBlockM, Tr::kBlockN, Tr::kBand>(sched, t); };

  if (threadIdx.x < 128) {
    // ================= producer warpgroup: thread 0 issues every copy ======================
    setmaxnreg_dec<Tr::kProducerRegs>();
    if (threadIdx.x != 0) return;
    int it = 0;  // k-blocks filled so far, over all of this CTA's tiles
    for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
      const MoeTile c = find_tile(t);
      const int w_row = c.e * p.n + c.n0;
      for (int kb = 0; kb < k_blocks; ++kb, ++it) {
        const int s = it % kStages;
        if (it >= kStages) mbar_wait(bar_empty(s), ((it / kStages) - 1) & 1);
        // Boxes past the last row or column of a tensor are zero-filled and still count their
        // bytes. A rows past the expert's range belong to the next expert (or are zeros): their
        // products land in rows that are never stored.
        mbar_arrive_expect_tx(bar_full(s), Tr::kStageBytes);
        tma_load_2d(stage_a(s), &p.tmap_a, kb * Tr::kBlockK, c.row0, bar_full(s));
        tma_load_2d(stage_b(s), &p.tmap_w, kb * Tr::kBlockK, w_row, bar_full(s));
      }
    }
  } else {
    // ================= consumer warpgroups ==================================================
    setmaxnreg_inc<Tr::kConsumerRegs>();
    const int cwg = (threadIdx.x >> 7) - 1;  // 0 or 1
    const int wg_row = Tr::kWgRows == 2 ? cwg * 64 : 0;
    const int wg_col = Tr::kWgRows == 2 ? 0 : cwg * Tr::kWgCols;
    const int cwarp = warp & 3, g = lane >> 2, t4 = lane & 3;
    constexpr uint64_t kDesc = wgmma_desc_template(16, 1024);  // K-major: 8-row groups 1 KiB apart
    float acc[Tr::kWgCols / 2];
    auto release = [&](int s) {
      __syncwarp();
      if (lane == 0) mbar_arrive(bar_empty(s));
    };
    int it = 0;
    for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
      const MoeTile c = find_tile(t);
      for (int kb = 0; kb < k_blocks; ++kb, ++it) {
        const int s = it % kStages;
        mbar_wait(bar_full(s), (it / kStages) & 1);
        const uint32_t a_base = stage_a(s) + uint32_t(wg_row * 128);
        const uint32_t b_base = stage_b(s) + uint32_t(wg_col * 128);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < Tr::kBlockK / 16; ++ks)  // k16 steps inside the 128-byte row
          Wgmma<Tr::kWgCols, __nv_bfloat16>::ss(acc, wgmma_desc(kDesc, a_base + ks * 32),
                                                wgmma_desc(kDesc, b_base + ks * 32), (kb | ks) != 0);
        wgmma_commit();
        // One group stays in flight: the previous k-block's is done, so its stage is free.
        if (kb > 0) {
          wgmma_wait<1>();
          release((it - 1) % kStages);
        }
      }
      wgmma_wait<0>();
      fence_regs(acc);
      release((it - 1) % kStages);

      // ---- epilogue: bf16 pairs straight from the accumulators (rows g and g + 8 of the warp's
      // 16, columns 8i + 2 t4 of the warpgroup's); rows past the expert's range and columns
      // past n are not stored.
      const int r0 = wg_row + cwarp * 16 + g;
      const int col0 = c.n0 + wg_col + 2 * t4;
      __nv_bfloat16* out0 = p.out + int64_t(c.row0 + r0) * p.n + col0;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (r0 + 8 * h >= c.rows) continue;
        __nv_bfloat16* row_out = out0 + int64_t(8 * h) * p.n;
#pragma unroll
        for (int i = 0; i < Tr::kWgCols / 8; ++i) {
          if (col0 + 8 * i < p.n)
            *reinterpret_cast<__nv_bfloat162*>(row_out + 8 * i) =
                __floats2bfloat162_rn(acc[4 * i + 2 * h], acc[4 * i + 2 * h + 1]);
        }
      }
    }
  }
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

template <class Tr>
void launch(void* out, const void* a, const int32_t* offsets, const void* w, int num_experts, int n, int k,
            int max_rows, int num_sms, cudaStream_t stream) {
  MoeParams p{};
  p.tmap_a = make_tensor_map_2d(a, k, max_rows, k, Tr::kBlockM, false);
  p.tmap_w = make_tensor_map_2d(w, k, int64_t(num_experts) * n, k, Tr::kBlockN, false);
  p.out = static_cast<__nv_bfloat16*>(out);
  p.offsets = offsets;
  p.num_experts = num_experts;
  p.n = n;
  p.k = k;
  p.max_rows = max_rows;
  // The grid does not depend on the offsets (graph-safe): one CTA per SM, fewer when even the
  // most tiles the row bound allows (every expert one partial row tile more) cannot fill them.
  const int64_t n_tiles = (n + Tr::kBlockN - 1) / Tr::kBlockN;
  const int64_t max_tiles = (int64_t(max_rows) / Tr::kBlockM + num_experts) * n_tiles;
  const int grid = int(std::max<int64_t>(1, std::min<int64_t>(num_sms, max_tiles)));
  const size_t smem = Tr::smem_bytes(num_experts);
  auto kernel = moe_grouped_gemm_kernel<Tr>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<grid, Tr::kThreads, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace flashserve::cuda::detail::sm90

namespace flashserve::cuda::detail {

void run_moe_grouped_gemm_sm90(bool tile_128x256, void* out, const void* a, const int32_t* offsets,
                               const void* w, int num_experts, int n, int k, int max_rows, int num_sms,
                               cudaStream_t stream) {
  if (tile_128x256)
    sm90::launch<sm90::Tile128>(out, a, offsets, w, num_experts, n, k, max_rows, num_sms, stream);
  else
    sm90::launch<sm90::Tile64>(out, a, offsets, w, num_experts, n, k, max_rows, num_sms, stream);
}

}  // namespace flashserve::cuda::detail

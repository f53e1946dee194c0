// The grouped GEMM's tile schedule (kernels/moe_grouped_gemm.h), shared by its Hopper and mma.sync
// kernels: every CTA of the persistent grid turns the device row offsets into per-expert tile
// counts, prefix-summed in shared memory, and maps each of its tiles back to (expert, rows,
// columns). Nothing is read on the host. docs/MOE_GROUPED_GEMM.md ("One persistent grid").
#pragma once

#include <cstdint>

namespace flashserve::cuda::detail {

// Shared memory of the schedule: tile_start[E + 1] (tiles of the experts before e; [E] = all),
// row_begin[E] and row_count[E] (expert e's clamped row range).
__host__ __device__ constexpr int moe_schedule_bytes(int num_experts) { return (3 * num_experts + 1) * 4; }

struct MoeSchedule {
  int* tile_start;
  int* row_begin;
  int* row_count;
  int num_experts, n_tiles;
};

// One output tile: expert e's rows [row0, row0 + rows) of a and out (rows <= kBlockM of them
// belong to e) and columns [n0, n0 + kBlockN).
struct MoeTile {
  int e, row0, rows, n0;
};

// Lays the schedule out at `smem` (4-byte aligned) and fills it: warp 0 scans the experts 32 at a
// time. The caller synchronises the block before reading it. Offsets are clamped into [0, max_rows]
// and made non-decreasing per expert, so no offsets can make a kernel touch rows outside a and out.
template <int kBlockM, int kBlockN>
__device__ MoeSchedule moe_build_schedule(void* smem, const int32_t* offsets, int num_experts, int n, int max_rows) {
  MoeSchedule s;
  s.tile_start = static_cast<int*>(smem);
  s.row_begin = s.tile_start + num_experts + 1;
  s.row_count = s.row_begin + num_experts;
  s.num_experts = num_experts;
  s.n_tiles = (n + kBlockN - 1) / kBlockN;
  if (threadIdx.x < 32) {
    const int lane = int(threadIdx.x);
    int carry = 0;
    for (int e0 = 0; e0 < num_experts; e0 += 32) {
      const int e = e0 + lane;
      int tiles = 0;
      if (e < num_experts) {
        const int begin = min(max(__ldg(offsets + e), 0), max_rows);
        const int end = min(max(__ldg(offsets + e + 1), begin), max_rows);
        s.row_begin[e] = begin;
        s.row_count[e] = end - begin;
        tiles = (end - begin + kBlockM - 1) / kBlockM * s.n_tiles;
      }
      int incl = tiles;  // inclusive scan over the warp
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += v;
      }
      if (e < num_experts) s.tile_start[e] = carry + incl - tiles;
      carry += __shfl_sync(0xffffffffu, incl, 31);
    }
    if (lane == 0) s.tile_start[num_experts] = carry;
  }
  return s;
}

// Tile t of the schedule. Inside an expert the tiles go in bands of kBand row tiles: every column
// tile of a band, the band's row tiles fastest, so the CTAs running together share a band of A
// rows and a few W[e] tiles through L2.
template <int kBlockM, int kBlockN, int kBand>
__device__ __forceinline__ MoeTile moe_find_tile(const MoeSchedule& s, int t) {
  // The largest e with tile_start[e] <= t (experts without rows have tile_start[e] ==
  // tile_start[e + 1] and are never it).
  int lo = 0, hi = s.num_experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (s.tile_start[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  const int e = lo, local = t - s.tile_start[e];
  const int rows = s.row_count[e];
  const int m_tiles = (rows + kBlockM - 1) / kBlockM;
  const int band = local / (kBand * s.n_tiles);
  const int in_band = local - band * kBand * s.n_tiles;
  const int band_rows = min(kBand, m_tiles - band * kBand);  // row tiles in this band
  const int mt = band * kBand + in_band % band_rows, nt = in_band / band_rows;
  MoeTile c;
  c.e = e;
  c.row0 = s.row_begin[e] + mt * kBlockM;
  c.rows = min(kBlockM, rows - mt * kBlockM);
  c.n0 = nt * kBlockN;
  return c;
}

}  // namespace flashserve::cuda::detail

// The decode megakernel's device helpers: counters in global memory (acquire spin, release
// bump), bf16 unpacking and block reductions, and the weight stream: the bf16 bytes each
// instruction streams, cut into shared-memory pages that cp.async fills ahead of use.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/ptx.cuh"
#include "kernels/megakernel.h"

namespace flashserve::cuda::detail {

constexpr int kMkThreads = 256, kMkWarps = kMkThreads / 32;
constexpr int kMkPageBytes = 16384, kMkPages = 9;  // the ring: 144 KB of weights in flight
constexpr unsigned kFull = 0xffffffffu;
// Shared floats for a GEMV's input rows (staged when batch * k fits) or an attention split's
// K/V rows.
constexpr int kMkStageFloats = 14336;

__device__ __forceinline__ int ld_acquire(const int32_t* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// Thread 0 spins until *counter >= need; then the whole CTA goes on.
__device__ __forceinline__ void wait_counter(const int32_t* counter, int need) {
  if (threadIdx.x == 0)
    while (ld_acquire(counter) < need) __nanosleep(32);
  __syncthreads();
}
// Every thread's writes are made visible at GPU scope before thread 0 bumps.
__device__ __forceinline__ void bump_counter(int32_t* counter) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(counter, 1);
}

// The GPU's nanosecond clock, comparable across SMs (the trace's timeline).
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float bf16_at(const uint16_t* p, int64_t i) {
  return __uint_as_float(uint32_t(p[i]) << 16);
}
__device__ __forceinline__ uint16_t to_bf16(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// The bf16 matrix `op` streams in `layer`, its row length, and where a tile's segment starts:
// kGateUp has two segments (gate rows, then the same up rows), the others one.
struct Segment {
  const uint8_t* src;  // first byte
  int64_t bytes;
  int64_t row0;        // the segment's first row in the tile's accumulator
  int k, rows;         // row length (elements) and rows of the segment
};
__device__ __forceinline__ int num_segments(const MegaInstr& in) {
  const MegaOp op = MegaOp(in.op);
  if (op == MegaOp::kEmbed || op == MegaOp::kAttention) return 0;
  return op == MegaOp::kGateUp ? 2 : 1;
}
__device__ __forceinline__ int64_t row_length(const MegaDims& d, MegaOp op) {
  if (op == MegaOp::kOProj) return int64_t(d.num_q_heads) * d.head_dim;
  return op == MegaOp::kDown ? d.intermediate : d.hidden;
}
__device__ __forceinline__ Segment segment(const MegaKernelArgs& a, const MegaInstr& in, int s) {
  const MegaOp op = MegaOp(in.op);
  const MegaLayerPtrs& L = a.layers[in.layer];
  const uint16_t* w = op == MegaOp::kQkv      ? L.wqkv
                      : op == MegaOp::kOProj  ? L.wo
                      : op == MegaOp::kGateUp ? L.w_gate_up
                      : op == MegaOp::kDown   ? L.w_down
                                              : a.lm_head;
  const int64_t k = row_length(a.dims, op), rows = in.end - in.begin;
  const int64_t first = in.begin + (s == 1 ? int64_t(a.dims.intermediate) : 0);
  return {reinterpret_cast<const uint8_t*>(w + first * k), rows * k * 2, s * rows, int(k),
          int(rows)};
}
// Rows of whole 16-byte chunks: the GEMV's vector paths.
__device__ __forceinline__ bool is_vec(const Segment& s) {
  return (s.k & 7) == 0 && (reinterpret_cast<uintptr_t>(s.src) & 15) == 0;
}

// Steps of 2 to 8 sequences run the GEMV on the tensor cores ("mma" steps, docs/MEGAKERNEL.md):
// a vec segment's pages are then blocks of 8 rows x 1024 columns (16 KB when whole), row group
// by row group, each group's column blocks in order. Other pages are 16 KB runs of bytes.
constexpr int kMkMmaRows = 8, kMkMmaCols = 1024;
__device__ __forceinline__ bool mma_pages(const Segment& s, bool mma) { return mma && is_vec(s); }
__device__ __forceinline__ int col_blocks(const Segment& s) {
  return (s.k + kMkMmaCols - 1) / kMkMmaCols;
}
__device__ __forceinline__ int num_pages(const Segment& s, bool mma) {
  if (mma_pages(s, mma)) return (s.rows + kMkMmaRows - 1) / kMkMmaRows * col_blocks(s);
  return int((s.bytes + kMkPageBytes - 1) / kMkPageBytes);
}

// A position in the SM's weight stream: instruction, segment, page, and the segment itself once
// looked up (pages < 0: not yet). Uniform across the CTA.
struct StreamPos {
  int instr, seg, page, pages;
  Segment s;
};
// Moves `p` forward to the next page that exists (past instructions without weights).
__device__ __forceinline__ void settle(const MegaKernelArgs& a, int end, bool mma, StreamPos& p) {
  while (p.instr < end) {
    if (p.pages < 0) {
      const MegaInstr& in = a.instrs[p.instr];
      if (p.seg >= num_segments(in)) {
        ++p.instr, p.seg = 0, p.page = 0;
        continue;
      }
      p.s = segment(a, in, p.seg);
      p.pages = num_pages(p.s, mma);
    }
    if (p.page < p.pages) return;
    ++p.seg, p.page = 0, p.pages = -1;
  }
}

// Which 16-byte chunks of a page thread t copies and reads: warp w owns chunks [128 w, 128 w +
// 128), lane l every 32nd of them from its l-th. A thread reading only what it copied itself
// needs no barrier between the copy landing and its use.
constexpr int kMkChunksPerLane = kMkPageBytes / 16 / kMkThreads;
static_assert(kMkChunksPerLane >= 1, "a page has a chunk per thread");
__device__ __forceinline__ int owned_chunk(int j) {
  return (threadIdx.x >> 5) * (32 * kMkChunksPerLane) + (threadIdx.x & 31) + 32 * j;
}
// In mma steps a thread owns other chunks: on a page of 8 rows, lane (g, t) of warp w owns
// row g's chunk 16 w + t + 4 j of 128 (its 8 columns): the B operand of its mmas. Row g's
// chunks start at unit 128 g, and odd rows' units are swapped in fours, so the 8 lanes of one
// 16-byte shared access (rows g and g + 1, four t) hit distinct banks.
struct MmaChunk {
  int row, col;  // in the page: row 0..7, first column 0..1023
  int unit;      // 16-byte unit in the slot
};
static_assert(kMkChunksPerLane == 4 && kMkWarps == 8,
              "an mma page is 8 rows of 128 chunks: 8 warps x 16 chunks, 4 a lane");
__device__ __forceinline__ MmaChunk mma_chunk(int j) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int c = 16 * (threadIdx.x >> 5) + t + 4 * j;
  return {g, 8 * c, g * 128 + (c ^ (4 * (g & 1)))};
}
// The 16-byte unit of a slot a thread owns j-th in either kind of step.
__device__ __forceinline__ int owned_unit(int j, bool mma) {
  return mma ? mma_chunk(j).unit : owned_chunk(j);
}

// Issues the copy of the page at `p` into ring slot `slot` (nothing past the queue's end) and
// commits one cp.async group either way, then steps `p` on. Every thread writes only its owned
// units (owned_unit), whatever the page: the slot's previous page may still be read by the
// other threads (an owned page has no barrier). Runs of 16-byte-aligned bytes go as whole
// chunks; mma pages as their rows' chunks (those past the segment's rows or columns are not
// copied: their readers mask them); other runs (rows of a length not a multiple of 8: small
// models) as 4-byte words of the owned units, which their consumer reads after a barrier.
__device__ __forceinline__ void issue_page(const MegaKernelArgs& a, int end, bool mma,
                                           StreamPos& p, uint8_t* ring, int slot) {
  settle(a, end, mma, p);
  if (p.instr < end) {
    uint8_t* dst = ring + size_t(slot) * kMkPageBytes;
    if (mma_pages(p.s, mma)) {
      const int cbs = col_blocks(p.s), r0 = p.page / cbs * kMkMmaRows,
                c0 = p.page % cbs * kMkMmaCols;
#pragma unroll
      for (int j = 0; j < kMkChunksPerLane; ++j) {
        const MmaChunk m = mma_chunk(j);
        const int row = r0 + m.row, col = c0 + m.col;
        if (row < p.s.rows && col < p.s.k)
          cp_async_16(smem_addr(dst + m.unit * 16), p.s.src + (int64_t(row) * p.s.k + col) * 2,
                      true);
      }
    } else {
      const int64_t off = int64_t(p.page) * kMkPageBytes;
      const int n = int(min(int64_t(kMkPageBytes), p.s.bytes - off));
      const uint8_t* src = p.s.src + off;
      if ((reinterpret_cast<uintptr_t>(src) & 15) == 0 && (n & 15) == 0) {
#pragma unroll
        for (int j = 0; j < kMkChunksPerLane; ++j) {
          const int c = owned_unit(j, mma);
          if (c * 16 < n) cp_async_16(smem_addr(dst + c * 16), src + c * 16, true);
        }
      } else {
#pragma unroll
        for (int j = 0; j < kMkChunksPerLane; ++j)
          for (int i = owned_unit(j, mma) * 16, w = 0; w < 4 && i < n; ++w, i += 4)
            asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst + i)),
                         "l"(src + i));
      }
    }
    ++p.page;
  }
  cp_async_commit();
}

}  // namespace flashserve::cuda::detail

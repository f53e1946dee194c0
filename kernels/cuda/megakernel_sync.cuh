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
constexpr int kMkPageBytes = 16384, kMkPages = 12;  // the ring: 192 KB of weights in flight
constexpr unsigned kFull = 0xffffffffu;

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
  return {reinterpret_cast<const uint8_t*>(w + first * k), rows * k * 2, s * rows};
}
__device__ __forceinline__ int num_pages(const Segment& s) {
  return int((s.bytes + kMkPageBytes - 1) / kMkPageBytes);
}

// A position in the SM's weight stream: instruction, segment, page. Uniform across the CTA.
struct StreamPos {
  int instr, seg, page;
};
// Moves `p` forward to the next page that exists (past instructions without weights).
__device__ __forceinline__ void settle(const MegaKernelArgs& a, int end, StreamPos& p) {
  while (p.instr < end) {
    const MegaInstr& in = a.instrs[p.instr];
    if (p.seg >= num_segments(in)) {
      ++p.instr, p.seg = 0, p.page = 0;
    } else if (p.page >= num_pages(segment(a, in, p.seg))) {
      ++p.seg, p.page = 0;
    } else {
      return;
    }
  }
}
// Issues the copy of the page at `p` into ring slot `slot` (nothing past the queue's end) and
// commits one cp.async group either way, then steps `p` on.
__device__ __forceinline__ void issue_page(const MegaKernelArgs& a, int end, StreamPos& p,
                                           uint8_t* ring, int slot) {
  settle(a, end, p);
  if (p.instr < end) {
    const Segment s = segment(a, a.instrs[p.instr], p.seg);
    const int64_t off = int64_t(p.page) * kMkPageBytes;
    const int n = int(min(int64_t(kMkPageBytes), s.bytes - off));
    const uint8_t* src = s.src + off;
    uint8_t* dst = ring + size_t(slot) * kMkPageBytes;
    if ((reinterpret_cast<uintptr_t>(src) & 15) == 0 && (n & 15) == 0) {
      for (int i = threadIdx.x * 16; i < n; i += kMkThreads * 16)
        cp_async_16(smem_addr(dst + i), src + i, true);
    } else {  // rows whose bytes are not a multiple of 16 (small models): 4-byte copies
      for (int i = threadIdx.x * 4; i < n; i += kMkThreads * 4)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst + i)),
                     "l"(src + i));
    }
    ++p.page;
  }
  cp_async_commit();
}

}  // namespace flashserve::cuda::detail

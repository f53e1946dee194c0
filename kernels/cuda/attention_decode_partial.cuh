// The split-K decode partial kernel (docs/KERNEL_NOTES.md §3.1): one thread block per (sequence, kv head,
// split) computes the G = num_q_heads / num_kv_heads query heads sharing that kv head, packed as
// rows of one m16 mma tile, so each K/V byte is read once. K/V tiles of 64 keys are gathered
// through the block table with 16-byte cp.async into a 3-4 stage ring (swizzled rows, zero-fill
// past the split end); each of the 4 warps takes 16 keys of a tile and keeps its own online-softmax
// state (base 2), and the warps' states are merged through shared memory at the end. A windowed
// layer's splits start at kv_len - window, so it reads only the window's keys; soft-capping
// (Gemma 2) bends the scores before the softmax. A sink (gpt-oss) joins each row once: in this
// kernel's warp merge when there is one split, else in the merge kernel.
// kHeads = 2 (head_dim 64, even num_kv_heads, 2G <= 16): one block serves two adjacent kv heads as
// one 128-wide "virtual head": K/V rows of both heads are contiguous (256 B, as at head_dim 128),
// Q is block-diagonal (head 0's queries are zero in columns 64..127 and vice versa), so each row's
// scores see only its own head, and each row keeps only its own 64 output columns.
// head_dim 256 keeps Q in shared memory, not registers (see DecodeTraits::kQInSmem).
// Included by attention_decode_hdim{64,128,256}.cu, which instantiate it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/attention_state.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/paged_params.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/ptx.cuh"

namespace flashserve::cuda::detail {

struct DecodeParams {
  const void* q;        // [num_seqs, num_q_heads, head_dim]
  const void* k_cache;  // [num_blocks, block_size, num_kv_heads, head_dim]
  const void* v_cache;  // [num_blocks, block_size, num_kv_heads, head_dim]
  void* out;            // [num_seqs, num_q_heads, head_dim], written when num_splits == 1
  float* lse;           // [num_seqs, num_q_heads] or nullptr, written when num_splits == 1
  float* o_part;        // [num_seqs, num_q_heads, num_splits, head_dim] when num_splits > 1
  float* lse_part;      // [num_seqs, num_q_heads, num_splits] when num_splits > 1
  const int32_t* kv_lens;      // [num_seqs]
  const int32_t* block_table;  // [num_seqs, max_blocks_per_seq]
  int max_blocks_per_seq;
  int block_size_log2;
  int num_q_heads;
  int num_kv_heads;
  int group_size;
  int num_splits;
  int chunk_len;
  float scale_log2;  // softmax scale * log2(e)
  int window;        // sliding window (0 = every key): keys [kv_len - window, kv_len) only
  float softcap_in;  // soft-capping: scale / softcap (0 = off)
  float softcap_out;  // softcap * log2(e)
  // [num_q_heads] sink logits or nullptr: added here when num_splits == 1, else by the merge (once
  // per row, never per split).
  const float* sinks;
};

template <class T, int kHeadDim, int kHeads>
struct DecodeTraits {
  static constexpr int kDim = kHeadDim * kHeads;  // width of a K/V tile row (both heads)
  static constexpr int kBlockN = 64;  // keys per tile; each warp takes 16
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  // Ring depth: 64 KB (kDim 64, 4 stages) / 96 KB (128, 3 stages): 3 / 2 blocks per SM. At
  // kDim 256 a stage is 64 KB, so even two stages (128 KB) leave room for one block per SM only;
  // three (192 KB) keep two tiles (128 KB) in flight while one is consumed, several times the
  // ~25 KB an SM needs in flight to stream at full HBM bandwidth (H100: 3.35 TB/s x ~1 us over
  // 132 SMs), so the four warps of that one block can still saturate it.
  static constexpr int kStages = kDim == 64 ? 4 : 3;
  // Q as A fragments costs kDim / 4 registers per thread, O kDim / 2: at kDim 256 that is 64 + 128.
  // With Q in shared memory (16 rows, 8 KB, after the ring) the kernel takes 240 registers, so Q
  // in registers would pass the 255 cap and spill; each tile re-reads it with ldmatrix instead (16
  // per warp per tile, beside 64 MMAs; the kernel is bound by K/V bytes).
  static constexpr bool kQInSmem = kDim > 128;
  static constexpr int kChunksPerRow = kDim * int(sizeof(T)) / 16;
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static constexpr int kPasses = kBlockN / kRowsPerPass;  // 16-B copies per thread per K tile
  static constexpr int kRowBytes = kDim * int(sizeof(T));
  static constexpr int kTileBytes = kBlockN * kRowBytes;
  static constexpr int kStageBytes = 2 * kTileBytes;  // K then V
  static constexpr int kPipeBytes = kStages * kStageBytes;
  static constexpr int kQBytes = kQInSmem ? 16 * kRowBytes : 0;  // at kPipeBytes
  static constexpr int kOStride = kDim + 8;  // fp32 row pitch of the warp-merge scratch
  static constexpr int kMergeBytes = (kWarps * 16 * kOStride + 2 * kWarps * 16) * 4;
  static constexpr int kSmemBytes =
      kPipeBytes + kQBytes > kMergeBytes ? kPipeBytes + kQBytes : kMergeBytes;
  static_assert(kHeadDim % 16 == 0 && kThreads % kChunksPerRow == 0, "bad head_dim");
  static_assert(kHeads == 1 || kHeads == 2, "one or two kv heads per block");
  static_assert(kBlockN % kRowsPerPass == 0 && kBlockN == 16 * kWarps, "bad tile");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the sm_90 limit");
};

// Byte offset of 16-B chunk `chunk` of tile row `row`: chunk XOR (row mod 8) spreads the 8 rows
// of an ldmatrix phase over all banks for 128- and 256-byte rows (docs/KERNEL_NOTES.md §2.2).
__device__ __forceinline__ uint32_t swizzle(int row, int chunk, int row_bytes) {
  return uint32_t(row * row_bytes + ((chunk ^ (row & 7)) << 4));
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <class T, int kHeadDim, int kHeads>
__global__ void __launch_bounds__(DecodeTraits<T, kHeadDim, kHeads>::kThreads)
    decode_partial_kernel(const __grid_constant__ DecodeParams p) {
  using Tr = DecodeTraits<T, kHeadDim, kHeads>;
  constexpr int kDim = Tr::kDim;
  extern __shared__ __align__(128) unsigned char smem[];

  // Launched with launch_pdl (kernels/cuda/pdl.cuh): q and the cache were written by the
  // kernel before, which may still be finishing.
  pdl_wait();
  const int split = blockIdx.x, kvh = blockIdx.y * kHeads, b = blockIdx.z;  // kvh: first kv head
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;  // mma fragment row / column pair
  const int G = p.group_size;
  const int rows = G * kHeads;  // query rows of the m16 tile (<= 16, checked by the launcher)

  // Start-up loads are independent of each other, so their latencies overlap: kv_len, Q, and the
  // block-table entries of the first kStages tiles (read while in bounds of the table row; an
  // entry is used only for tokens < split_end, so unused slots may hold anything).
  const int kv_len = p.kv_lens[b];
  // Splits cut the keys the query reads, [kv_start, kv_len) (kernels/decode_plan.h). Only a
  // windowed layer's kv_start depends on kv_len: the uniform branch keeps the full-attention
  // path's block-table reads below independent of the kv_len load, so their latencies overlap.
  int split_start = split * p.chunk_len;
  if (p.window > 0) split_start += max(0, kv_len - p.window);
  const size_t row0 = size_t(b) * p.num_q_heads + size_t(kvh) * G;  // first q head of this block

  // Q fragments (A operand, rows = query heads, zero past `rows`), straight from global. Row r
  // belongs to kv head kvh + r / G and is non-zero only in that head's kHeadDim columns.
  // kQInSmem: the 16 x kDim tile goes to shared memory instead (published by the loop's first
  // barrier), swizzled like the K/V rows.
  uint32_t qf[Tr::kQInSmem ? 1 : kDim / 16][4];
  const uint32_t smem_q = smem_addr(smem) + Tr::kPipeBytes;
  if constexpr (Tr::kQInSmem) {
    static_assert(kHeads == 1, "Q in shared memory serves one kv head per block");
    const T* q = static_cast<const T*>(p.q) + row0 * kHeadDim;
    for (int i = tid; i < 16 * Tr::kChunksPerRow; i += Tr::kThreads) {
      const int r = i / Tr::kChunksPerRow, c = i % Tr::kChunksPerRow;
      const uint4 x = r < rows ? *reinterpret_cast<const uint4*>(q + r * kHeadDim + c * 8)
                               : make_uint4(0u, 0u, 0u, 0u);
      *reinterpret_cast<uint4*>(smem + Tr::kPipeBytes + swizzle(r, c, Tr::kRowBytes)) = x;
    }
  } else {
    const T* q = static_cast<const T*>(p.q) + row0 * kHeadDim;
#pragma unroll
    for (int kk = 0; kk < kDim / 16; ++kk) {
      const int half = kk * 16 / kHeadDim;  // which head's columns this k16 block holds
      const int c = kk * 16 - half * kHeadDim + 2 * t;
      const bool r0 = g < rows && (kHeads == 1 || g / G == half);
      const bool r1 = g + 8 < rows && (kHeads == 1 || (g + 8) / G == half);
      qf[kk][0] = r0 ? *reinterpret_cast<const uint32_t*>(q + g * kHeadDim + c) : 0u;
      qf[kk][1] = r1 ? *reinterpret_cast<const uint32_t*>(q + (g + 8) * kHeadDim + c) : 0u;
      qf[kk][2] = r0 ? *reinterpret_cast<const uint32_t*>(q + g * kHeadDim + c + 8) : 0u;
      qf[kk][3] = r1 ? *reinterpret_cast<const uint32_t*>(q + (g + 8) * kHeadDim + c + 8) : 0u;
    }
  }

  // Copy roles: this thread moves chunk `ld_chunk` of rows ld_row + i * kRowsPerPass.
  const int ld_chunk = tid % Tr::kChunksPerRow, ld_row = tid / Tr::kChunksPerRow;
  const int32_t* table = p.block_table + size_t(b) * p.max_blocks_per_seq;
  const int table_tokens = p.max_blocks_per_seq << p.block_size_log2;
  auto read_pages = [&](int tile, int (&pages)[Tr::kPasses]) {
#pragma unroll
    for (int i = 0; i < Tr::kPasses; ++i) {
      const int token = split_start + tile * Tr::kBlockN + ld_row + i * Tr::kRowsPerPass;
      pages[i] = token < table_tokens ? __ldg(table + (token >> p.block_size_log2)) : 0;
    }
  };
  int pro_pages[Tr::kStages][Tr::kPasses];  // tiles 0 .. kStages-1
#pragma unroll
  for (int s = 0; s < Tr::kStages; ++s) read_pages(s, pro_pages[s]);

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Let the merge kernel (launched with programmatic stream serialisation) get scheduled as soon
  // as every partial block has started; it waits in griddepcontrol.wait for this grid to finish.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif

  const int split_end = split == p.num_splits - 1 ? kv_len : min(kv_len, split_start + p.chunk_len);
  if (split_start >= kv_len && p.num_splits > 1) {  // empty split: weighs zero, o is not read
    if (tid < rows) p.lse_part[(row0 + tid) * p.num_splits + split] = -INFINITY;
    return;
  }
  const int num_tiles = split_end > split_start ? (split_end - split_start + Tr::kBlockN - 1) / Tr::kBlockN : 0;

  const int bs_mask = (1 << p.block_size_log2) - 1;
  const size_t tok_stride = size_t(p.num_kv_heads) * kHeadDim;  // elements between cache rows
  const T* k_base = static_cast<const T*>(p.k_cache) + size_t(kvh) * kHeadDim + ld_chunk * 8;
  const T* v_base = static_cast<const T*>(p.v_cache) + size_t(kvh) * kHeadDim + ld_chunk * 8;
  const uint32_t smem_base = smem_addr(smem);

  int pages[Tr::kPasses];  // block ids of this thread's rows in the next tile to issue
  auto fetch_pages = [&](int tile) {
#pragma unroll
    for (int i = 0; i < Tr::kPasses; ++i) {
      const int token = split_start + tile * Tr::kBlockN + ld_row + i * Tr::kRowsPerPass;
      pages[i] = (tile < num_tiles && token < split_end) ? __ldg(table + (token >> p.block_size_log2)) : 0;
    }
  };
  auto issue_tile = [&](int tile, int stage, const int (&tile_pages)[Tr::kPasses]) {
    const uint32_t sk = smem_base + stage * Tr::kStageBytes, sv = sk + Tr::kTileBytes;
#pragma unroll
    for (int i = 0; i < Tr::kPasses; ++i) {
      const int row = ld_row + i * Tr::kRowsPerPass;
      const int token = split_start + tile * Tr::kBlockN + row;
      const bool valid = token < split_end;
      const size_t off = valid ? ((size_t(tile_pages[i]) << p.block_size_log2) + (token & bs_mask)) * tok_stride : 0;
      const uint32_t dst = swizzle(row, ld_chunk, Tr::kRowBytes);
      cp_async_16(sk + dst, k_base + off, valid);
      cp_async_16(sv + dst, v_base + off, valid);
    }
  };

  // Per-warp online-softmax state for rows g and g + 8: running max (base 2), per-thread partial
  // sum of exponentials and the unnormalised output fragments.
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float o[kDim / 8][4];
#pragma unroll
  for (int n = 0; n < kDim / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;

  // ldmatrix lane addresses: K plain (two n8 key tiles per x4), V transposed (two n8 d tiles).
  const int k_row = warp * 16 + (lane & 7) + ((lane >> 4) << 3), k_chunk = (lane >> 3) & 1;
  const int v_row = warp * 16 + (lane & 15), v_chunk = lane >> 4;
  const int q_row = lane & 15;  // kQInSmem: A operand rows lane % 16, chunk lane / 16 (= v_chunk)

#pragma unroll
  for (int s = 0; s < Tr::kStages - 1; ++s) {
    if (s < num_tiles) issue_tile(s, s, pro_pages[s]);
    cp_async_commit();  // empty groups keep the group count uniform
  }
#pragma unroll
  for (int i = 0; i < Tr::kPasses; ++i) pages[i] = pro_pages[Tr::kStages - 1][i];

  for (int j = 0; j < num_tiles; ++j) {
    cp_async_wait<Tr::kStages - 2>();  // tile j has landed (this thread's copies) ...
    __syncthreads();                   // ... and everyone's; stage (j-1) % kStages is free again
    const int next = j + Tr::kStages - 1;
    if (next < num_tiles) issue_tile(next, next % Tr::kStages, pages);
    cp_async_commit();
    fetch_pages(next + 1);

    const uint32_t sk = smem_base + (j % Tr::kStages) * Tr::kStageBytes, sv = sk + Tr::kTileBytes;
    // S = Q K^T for this warp's 16 keys: s[n] holds keys warp*16 + n*8 + 2t (+1), rows g / g+8.
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kk = 0; kk < kDim / 16; ++kk) {
      uint32_t kf[4], a[4];  // a: Q's k16 block kk (register copies fold away)
      if constexpr (Tr::kQInSmem) {
        ldmatrix_x4(a, smem_q + swizzle(q_row, 2 * kk + v_chunk, Tr::kRowBytes));
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[e] = qf[kk][e];
      }
      ldmatrix_x4(kf, sk + swizzle(k_row, 2 * kk + k_chunk, Tr::kRowBytes));
      const uint32_t b0[2] = {kf[0], kf[1]}, b1[2] = {kf[2], kf[3]};
      mma_m16n8k16<T>(s[0], a, b0);
      mma_m16n8k16<T>(s[1], a, b1);
    }
    const int tile_start = split_start + j * Tr::kBlockN;
    const bool ragged = tile_start + Tr::kBlockN > split_end;
    // Scores in base 2: scale * log2(e) * q.k, or softcap * log2(e) * tanh(scale * q.k / softcap).
    // A uniform branch on the launch's parameter: one predicate test per tile when soft-capping
    // is off (the kernel is bound by K/V bytes, not by these instructions).
    if (p.softcap_in > 0.f) {
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[n][i] = p.softcap_out * tanhf(s[n][i] * p.softcap_in);
    } else {
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[n][i] *= p.scale_log2;
    }
    if (ragged) {
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (tile_start + warp * 16 + n * 8 + 2 * t + (i & 1) >= split_end) s[n][i] = -INFINITY;
    }

    float p_[2][4];
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // r = 0: row g (elements 0, 1); r = 1: row g + 8 (2, 3)
      const float tile_max = quad_max(fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1])));
      const float m_new = fmaxf(m[r], tile_max);
      const float m_sub = m_new == -INFINITY ? 0.f : m_new;  // nothing seen yet: p = alpha = 0
      const float alpha = fast_exp2(m[r] - m_sub);
      m[r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        p_[n][2 * r] = fast_exp2(s[n][2 * r] - m_sub);
        p_[n][2 * r + 1] = fast_exp2(s[n][2 * r + 1] - m_sub);
        sum += p_[n][2 * r] + p_[n][2 * r + 1];
      }
      l[r] = l[r] * alpha + sum;
#pragma unroll
      for (int n = 0; n < kDim / 8; ++n) {
        o[n][2 * r] *= alpha;
        o[n][2 * r + 1] *= alpha;
      }
    }
    // P (fp32, rounded to T) as the A operand: two n8 C tiles are one k16 A tile (§2.3).
    const uint32_t pa[4] = {pack2<T>(p_[0][0], p_[0][1]), pack2<T>(p_[0][2], p_[0][3]),
                            pack2<T>(p_[1][0], p_[1][1]), pack2<T>(p_[1][2], p_[1][3])};
#pragma unroll
    for (int nn = 0; nn < kDim / 16; ++nn) {
      uint32_t vf[4];
      ldmatrix_x4_trans(vf, sv + swizzle(v_row, 2 * nn + v_chunk, Tr::kRowBytes));
      const uint32_t b0[2] = {vf[0], vf[1]}, b1[2] = {vf[2], vf[3]};
      mma_m16n8k16<T>(o[2 * nn], pa, b0);
      mma_m16n8k16<T>(o[2 * nn + 1], pa, b1);
    }
  }

  // Merge the 4 warps' states (each over a disjoint quarter of every tile) through shared memory.
  cp_async_wait<0>();
  __syncthreads();
  float* so = reinterpret_cast<float*>(smem);     // [kWarps][16][kOStride] unnormalised o
  float* sm = so + Tr::kWarps * 16 * Tr::kOStride;  // [kWarps][16] running max
  float* sl = sm + Tr::kWarps * 16;                 // [kWarps][16] sum of exponentials
#pragma unroll
  for (int n = 0; n < kDim / 8; ++n) {
    float* r0 = so + (warp * 16 + g) * Tr::kOStride + n * 8 + 2 * t;
    *reinterpret_cast<float2*>(r0) = make_float2(o[n][0], o[n][1]);
    *reinterpret_cast<float2*>(r0 + 8 * Tr::kOStride) = make_float2(o[n][2], o[n][3]);
  }
  l[0] = quad_sum(l[0]);
  l[1] = quad_sum(l[1]);
  if (t == 0) {
    sm[warp * 16 + g] = m[0];
    sm[warp * 16 + g + 8] = m[1];
    sl[warp * 16 + g] = l[0];
    sl[warp * 16 + g + 8] = l[1];
  }
  __syncthreads();

  constexpr int kVecPerRow = kHeadDim / 4;
  for (int item = tid; item < rows * kVecPerRow; item += Tr::kThreads) {
    const int r = item / kVecPerRow, c = (item % kVecPerRow) * 4;
    const int cv = (kHeads == 1 ? 0 : r / G * kHeadDim) + c;  // column in the virtual head
    float lse_w[Tr::kWarps];  // each warp's state in (o / l, lse) form for attention_state.h
#pragma unroll
    for (int w = 0; w < Tr::kWarps; ++w) {
      const float lw = sl[w * 16 + r];
      lse_w[w] = lw > 0.f ? sm[w * 16 + r] + log2f(lw) : -INFINITY;
    }
    float lse = merged_lse(Tr::kWarps, [&](int w) { return lse_w[w]; });
    // One split holds the row's every key: its sink joins here, as one more state with o = 0
    // (the weights below then scale the keys' states down by the sink's share).
    if (p.num_splits == 1 && p.sinks != nullptr)
      lse = lse_with_sink(lse, __ldg(p.sinks + kvh * G + r) * 1.4426950408889634f);
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < Tr::kWarps; ++w) {
      const float weight = merge_weight(lse_w[w], lse);
      if (weight == 0.f) continue;
      const float f = weight / sl[w * 16 + r];
      const float4 x = *reinterpret_cast<const float4*>(so + (w * 16 + r) * Tr::kOStride + cv);
      acc.x += f * x.x;
      acc.y += f * x.y;
      acc.z += f * x.z;
      acc.w += f * x.w;
    }
    const size_t row = row0 + r;
    if (p.num_splits == 1) {
      T* out = static_cast<T*>(p.out) + row * kHeadDim + c;
      const uint2 packed = make_uint2(pack2<T>(acc.x, acc.y), pack2<T>(acc.z, acc.w));
      *reinterpret_cast<uint2*>(out) = packed;
      if (p.lse != nullptr && c == 0) p.lse[row] = lse;
    } else {
      const size_t prow = row * p.num_splits + split;
      *reinterpret_cast<float4*>(p.o_part + prow * kHeadDim + c) = acc;
      if (c == 0) p.lse_part[prow] = lse;
    }
  }
}

// Launches the partial kernel for one (T, kHeadDim); defined in attention_decode_hdim*.cu.
template <class T, int kHeadDim, int kHeads>
void launch_decode_partial(const DecodeParams& params, int num_seqs, cudaStream_t stream) {
  using Tr = DecodeTraits<T, kHeadDim, kHeads>;
  auto kernel = decode_partial_kernel<T, kHeadDim, kHeads>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes));
  const dim3 grid(params.num_splits, params.num_kv_heads / kHeads, num_seqs);
  launch_pdl(kernel, grid, dim3(Tr::kThreads), Tr::kSmemBytes, stream, params);
  CUDA_CHECK_LAUNCH();
}

template <class T, int kHeadDim, int kHeads>
int decode_partial_ctas_per_sm() {
  using Tr = DecodeTraits<T, kHeadDim, kHeads>;
  auto kernel = decode_partial_kernel<T, kHeadDim, kHeads>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes));
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, Tr::kThreads, Tr::kSmemBytes));
  return blocks;
}

// Kv heads one partial block serves: 2 for head_dim 64 when the heads pair up and the 2G query
// rows fit one m16 tile, else 1.
inline int decode_heads_per_block(int head_dim, int num_q_heads, int num_kv_heads) {
  const int group = num_q_heads / num_kv_heads;
  return head_dim == 64 && num_kv_heads % 2 == 0 && 2 * group <= 16 ? 2 : 1;
}

// Non-template entry points, one translation unit per head_dim (compile time on 2-core builders).
void launch_decode_partial_hdim64(const DecodeParams& params, bool bf16, int heads_per_block, int num_seqs,
                                  cudaStream_t stream);
void launch_decode_partial_hdim128(const DecodeParams& params, bool bf16, int num_seqs, cudaStream_t stream);
void launch_decode_partial_hdim256(const DecodeParams& params, bool bf16, int num_seqs, cudaStream_t stream);
int decode_partial_ctas_per_sm_hdim64(bool bf16, int heads_per_block);
int decode_partial_ctas_per_sm_hdim128(bool bf16);
int decode_partial_ctas_per_sm_hdim256(bool bf16);

}  // namespace flashserve::cuda::detail

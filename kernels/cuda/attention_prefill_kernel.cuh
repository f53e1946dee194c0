// The sm80-class prefill attention kernel (FlashAttention-2 recurrence, mma.sync m16n8k16,
// ldmatrix from XOR-swizzled shared memory, cp.async ring of K/V tiles gathered through the
// block table) and its typed launcher, with sliding windows (whole KV tiles before every row's
// window are skipped), soft-capping and sinks (added once per row in the epilogue). Included by
// the per-(head_dim, dtype) .cu files only.
// Numerics and schedule: docs/PREFILL_ATTENTION.md; docs/KERNEL_NOTES.md §1-2.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention_state.h"
#include "kernels/cuda/attention_prefill_traits.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ptx.cuh"

namespace flashserve::cuda::detail {

// Work map. CTA x handles q head (x % num_q_heads) of virtual tile
// v = num_vtiles - 1 - x / num_q_heads (reversed, so the last, heaviest causal tiles start
// first). Sequence b owns virtual tiles start_b .. start_b + ceil(q_len_b / BLOCK_M) - 1 with
// start_b = cu_q_lens[b] / BLOCK_M + b; consecutive starts never overlap, the few virtual
// tiles in the gaps exit at once, and the total is num_tokens / BLOCK_M + num_seqs, so a
// ragged batch never launches a max-length grid. Each warp finds its sequence with a
// 32-wide ballot scan over cu_q_lens (the starts increase strictly, so "start <= v" is a
// prefix of the sequences).
template <int kBlockM>
__device__ __forceinline__ int find_sequence(const int32_t* cu_q_lens, int num_seqs, int vtile) {
  const int lane = threadIdx.x & 31;
  int count = 0;
  for (int base = 0; base < num_seqs; base += 32) {
    const int b = base + lane;
    const bool le = b < num_seqs && (__ldg(cu_q_lens + b) / kBlockM + b) <= vtile;
    const unsigned mask = __ballot_sync(0xffffffffu, le);
    count += __popc(mask);
    if (mask != 0xffffffffu) break;
  }
  return count - 1;
}

// The KV tiles of kBlockN keys a CTA of rows [m0, m0 + kBlockM) visits, and which need the mask
// (causal alignment and sliding window: kernels/paged_attention.h). Tiles [begin, end) are
// visited; tile n is masked when n < mask_lo (keys before the last row's window start) or
// n >= mask_hi (keys past the first row's diagonal, or past kv_len). Tiles that lie wholly before
// every row's window are skipped, so a long windowed prefill does windowed work. Without a window
// begin = mask_lo = 0.
struct KvTiles {
  int begin, end, mask_lo, mask_hi;
};

template <int kBlockM, int kBlockN>
__device__ __forceinline__ KvTiles kv_tiles(const PrefillParams& p, int m0, int q_len, int kv_len) {
  const int diag = kv_len - q_len;  // row i sits at position i + diag
  KvTiles t{0, 0, 0, 0};
  if (p.causal) {
    const int visible = min(kv_len, m0 + kBlockM + diag);  // keys seen by the tile's last row
    t.end = visible > 0 ? (visible + kBlockN - 1) / kBlockN : 0;
    const int first_row_keys = m0 + diag + 1;  // keys seen by the tile's first row
    t.mask_hi = min(first_row_keys > 0 ? first_row_keys / kBlockN : 0, kv_len / kBlockN);
  } else {
    t.end = (kv_len + kBlockN - 1) / kBlockN;
    t.mask_hi = kv_len / kBlockN;
  }
  if (p.window > 0) {
    const int first_lo = max(0, m0 + diag - p.window + 1);  // the first row's first key
    const int last_lo = max(0, min(m0 + kBlockM, q_len) - 1 + diag - p.window + 1);
    t.begin = min(first_lo / kBlockN, t.end);
    t.mask_lo = (last_lo + kBlockN - 1) / kBlockN;
  }
  return t;
}

// Whether the row at position pos sees key `key`. win_gap is the window, or a huge number
// without one (so the window test is always true and costs no branch).
__device__ __forceinline__ bool key_visible(bool causal, int key, int pos, int kv_len, int win_gap) {
  return key < kv_len && (!causal || key <= pos) && key > pos - win_gap;
}
__device__ __forceinline__ int window_gap(const PrefillParams& p) {
  return p.window > 0 ? p.window : (1 << 30);
}

// Soft-capped raw score (PrefillParams::softcap_in/out). Callers test softcap_in > 0 once per tile,
// a uniform branch on a launch parameter: with soft-capping off (every model but Gemma 2) the
// tile costs one predicate more, and no extra kernel instantiations are compiled.
__device__ __forceinline__ float softcap_score(const PrefillParams& p, float x) {
  return p.softcap_out * tanhf(x * p.softcap_in);
}

// The end of a row's online softmax (both prefill kernels): from its running max (base 2) and
// its whole sum l, the factor that normalises the row's unnormalised O and the row's lse, with
// the head's sink when there is one (kernels/attention_state.h; a uniform branch on a launch
// parameter, once per row).
struct RowEnd {
  float inv, lse;
};
__device__ __forceinline__ RowEnd finish_row(const PrefillParams& p, int head, float row_max, float l) {
  RowEnd e{l > 0.f ? 1.f / l : 0.f, l > 0.f ? row_max + log2f(l) : -INFINITY};
  if (p.sinks != nullptr) {
    const float lse = lse_with_sink(e.lse, __ldg(p.sinks + head) * 1.4426950408889634f);
    e.inv *= merge_weight(e.lse, lse);
    e.lse = lse;
  }
  return e;
}

template <class Tr, class T>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocks)
    attention_prefill_kernel(const __grid_constant__ PrefillParams p) {
  constexpr int kBlockM = Tr::kBlockM, kBlockN = Tr::kBlockN, kHeadDim = Tr::kHeadDim;
  constexpr int kMT = Tr::kMTiles, kNT = Tr::kNTiles, kDT = Tr::kDTiles;
  constexpr int kPitch = Tr::kRowPitch, kStages = Tr::kStages;
  extern __shared__ __align__(1024) uint8_t smem_raw[];

  // ---- which tile -------------------------------------------------------------------------
  const int head = blockIdx.x % p.num_q_heads;
  const int vtile = p.num_vtiles - 1 - int(blockIdx.x / p.num_q_heads);
  const int seq = find_sequence<kBlockM>(p.cu_q_lens, p.num_seqs, vtile);
  const int q_begin = __ldg(p.cu_q_lens + seq);
  const int q_len = __ldg(p.cu_q_lens + seq + 1) - q_begin;
  const int m0 = (vtile - (q_begin / kBlockM + seq)) * kBlockM;  // first row of the tile
  if (m0 >= q_len) return;  // a gap tile: uniform across the CTA, before any barrier
  const int kv_len = __ldg(p.kv_lens + seq);
  const int diag = kv_len - q_len;  // row i sees keys j <= i + diag when causal
  const int kv_head = head / p.group_size;

  // KV tiles to visit: n_tiles of them from tile n_begin (loop index j is tile n_begin + j).
  const KvTiles tiles = kv_tiles<kBlockM, kBlockN>(p, m0, q_len, kv_len);
  const int n_begin = tiles.begin, n_tiles = tiles.end - tiles.begin;
  const int win_gap = window_gap(p);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Tiles start on a 1 KiB boundary of the shared window (kSmemBytes has the slack), so the
  // swizzle can XOR chunk bits 4..7 of full shared addresses.
  const uint32_t smem_raw_addr = smem_addr(smem_raw);
  const uint32_t smem_q = (smem_raw_addr + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (smem_q - smem_raw_addr);
  int32_t* kv_rows = reinterpret_cast<int32_t*>(smem + Tr::kRowsOffset);  // [kStages][kBlockN]
  const uint32_t smem_k = smem_q + Tr::kQBytes;
  const uint32_t smem_v = smem_k + kStages * Tr::kKvTileBytes;

  // ---- global -> shared copies (16-byte cp.async, zero-filled past the end) ---------------
  const int copy_chunk = tid % Tr::kChunksPerRow;
  const int copy_row = tid / Tr::kChunksPerRow;
  {
    const T* q_src = static_cast<const T*>(p.q) + int64_t(q_begin) * p.q_row_stride +
                     int64_t(head) * kHeadDim + copy_chunk * 8;
#pragma unroll
    for (int i = 0; i < Tr::kQRowsPerThread; ++i) {
      const int r = copy_row + i * Tr::kRowsPerPass;
      const bool valid = m0 + r < q_len;
      const T* src = valid ? q_src + int64_t(m0 + r) * p.q_row_stride : q_src;
      cp_async_16(smem_q + swizzled_offset<kPitch>(r, copy_chunk), src, valid);
    }
    cp_async_commit();
  }
  const int32_t* table = p.block_table + int64_t(seq) * p.max_blocks_per_seq;
  const int64_t kv_head_offset = int64_t(kv_head) * kHeadDim + copy_chunk * 8;
  // Physical cache row (block * block_size + t % block_size, or -1 past kv_len) of key t.
  // Threads tid < kBlockN resolve one key each through the block table into the smem ring
  // kv_rows[tile % kStages], one tile ahead of its copy, so a single register carries the
  // block-table load across the previous tile's math.
  auto physical_row = [&](int t) -> int32_t {
    return t < kv_len ? __ldg(table + t / p.block_size) * p.block_size + t % p.block_size : -1;
  };
  auto issue_kv = [&](int stage, int n) {
    const T* k_base = static_cast<const T*>(p.k_cache) + kv_head_offset;
    const T* v_base = static_cast<const T*>(p.v_cache) + kv_head_offset;
    const int32_t* rows = kv_rows + (n % kStages) * kBlockN;
#pragma unroll
    for (int i = 0; i < Tr::kKvRowsPerThread; ++i) {
      const int r = copy_row + i * Tr::kRowsPerPass;
      const int32_t prow = rows[r];
      const bool valid = prow >= 0;
      const int64_t off = valid ? int64_t(prow) * p.kv_row_stride : 0;
      const uint32_t dst = uint32_t(stage * Tr::kKvTileBytes) + swizzled_offset<kPitch>(r, copy_chunk);
      cp_async_16(smem_k + dst, k_base + off, valid);
      cp_async_16(smem_v + dst, v_base + off, valid);
    }
  };

  // ---- per-lane ldmatrix offsets (docs/KERNEL_NOTES.md §2.1 has the fragment maps) --------------
  // A operand (Q) and the transposed B operand (V) use rows lane%16 and chunk lane/16; K uses
  // rows lane%8 + 8*(lane/16) and chunk (lane/8)%2. Chunk c of k-step ks is 2*ks + c, and since
  // row % 8 == lane % 8 the swizzled offset of step ks is (offset of step 0) ^ (ks << 5).
  const int warp_row0 = warp * Tr::kRowsPerWarp;
  const uint32_t a_lane_off =
      uint32_t((lane & 15) * kPitch) + ((((lane >> 4) ^ (lane & 7)) & 7) << 4);
  const uint32_t q_lane_off = uint32_t(warp_row0 * kPitch) + a_lane_off;
  const uint32_t k_lane_off = uint32_t(((lane & 7) + 8 * (lane >> 4)) * kPitch) +
                              (((((lane >> 3) & 1) ^ (lane & 7)) & 7) << 4);

  // ---- the online-softmax state of this thread's rows g and g+8 of each m16 tile ----------
  float o[kMT][kDT][4];
  float row_max[kMT][2], row_sum[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.f;
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }
  uint32_t q_frag[Tr::kQInRegs ? Tr::kKSteps : 1][4];
  const int g = lane >> 2, t4 = lane & 3;
  const float c = p.scale_log2;

  // One KV tile: S = Q K^T, mask (kMask), online softmax, O += P V.
  auto process_tile = [&](auto mask_tag, int stage, int n) {
    constexpr bool kMask = decltype(mask_tag)::value;
    // Per-tile lane addresses, opaque to the compiler so it re-derives each k-step's address
    // with one XOR instead of keeping 8 hoisted addresses per operand live (register pressure).
    const uint32_t k_lane = opaque(smem_k + uint32_t(stage * Tr::kKvTileBytes) + k_lane_off);
    const uint32_t v_lane = opaque(smem_v + uint32_t(stage * Tr::kKvTileBytes) + a_lane_off);
    const uint32_t q_lane = opaque(smem_q + q_lane_off);
    float s[kMT][kNT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < Tr::kKSteps; ++ks) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        if constexpr (Tr::kQInRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[mt][e] = q_frag[ks][e];
        } else {
          ldmatrix_x4(a[mt], (q_lane ^ uint32_t(ks << 5)) + uint32_t(mt * 16 * kPitch));
        }
      }
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, (k_lane ^ uint32_t(ks << 5)) + uint32_t(np * 16 * kPitch));
        const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_m16n8k16<T>(s[mt][2 * np], a[mt], b0);
          mma_m16n8k16<T>(s[mt][2 * np + 1], a[mt], b1);
        }
      }
    }
    if (p.softcap_in > 0.f) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] = softcap_score(p, s[mt][nt][e]);
    }
    if constexpr (kMask) {  // invisible keys become exactly -inf
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = n * kBlockN + nt * 8 + 2 * t4 + (e & 1);
            const int row = m0 + warp_row0 + mt * 16 + g + (e >> 1) * 8;
            if (!key_visible(p.causal, key, row + diag, kv_len, win_gap)) s[mt][nt][e] = -INFINITY;
          }
    }
    // Online softmax in base 2; rows with nothing seen yet keep p = 0, alpha = 0 (no NaN).
    float alphas[kMT][2];
    bool rescale = false;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(row_max[mt][h], mx * c);
        const float m_sub = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = fast_exp2(row_max[mt][h] - m_sub);
        row_max[mt][h] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          s[mt][nt][2 * h] = fast_exp2(fmaf(s[mt][nt][2 * h], c, -m_sub));
          s[mt][nt][2 * h + 1] = fast_exp2(fmaf(s[mt][nt][2 * h + 1], c, -m_sub));
          sum += s[mt][nt][2 * h] + s[mt][nt][2 * h + 1];
        }
        row_sum[mt][h] = fmaf(row_sum[mt][h], alpha, sum);  // partial over this lane's columns
        alphas[mt][h] = alpha;
        rescale |= alpha != 1.f;
      }
    }
    // O *= alpha costs as many instructions as the MMAs of a tile; once the running maxima
    // settle alpha is exactly 1 for every row of the warp, and the multiply is skipped (exact).
    if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) {
          o[mt][dt][0] *= alphas[mt][0];
          o[mt][dt][1] *= alphas[mt][0];
          o[mt][dt][2] *= alphas[mt][1];
          o[mt][dt][3] *= alphas[mt][1];
        }
    }
    // O += P V: two adjacent n8 tiles of S are one k16 A fragment; V goes through ldmatrix.trans.
#pragma unroll
    for (int kk = 0; kk < Tr::kPSteps; ++kk) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        a[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < kDT / 2; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, (v_lane ^ uint32_t(dp << 5)) + uint32_t(kk * 16 * kPitch));
        const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_m16n8k16<T>(o[mt][2 * dp], a[mt], b0);
          mma_m16n8k16<T>(o[mt][2 * dp + 1], a[mt], b1);
        }
      }
    }
  };

  // ---- the pipelined KV loop ----------------------------------------------------------------
  // Prologue: tiles 0..S-2 in flight (one commit group each, empty groups too, so the count
  // that wait_group sees stays fixed). Iteration j: wait for tile j, barrier (everyone is done
  // with tile j-1, whose buffer is refilled now), issue tile j+S-1, then compute tile j.
  // Ring slots and the pipeline count loop indices j; keys are those of tile n_begin + j.
  const int kv0 = n_begin * kBlockN;  // first key of loop tile 0
  if (tid < kBlockN) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) kv_rows[s * kBlockN + tid] = physical_row(kv0 + s * kBlockN + tid);
  }
  __syncthreads();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_tiles) issue_kv(s, s);
    cp_async_commit();
  }
  int read_stage = 0, write_stage = kStages - 1;
  for (int j = 0; j < n_tiles; ++j) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // also publishes kv_rows of tile j + kStages - 1
    const int n_next = j + kStages - 1;
    if (n_next < n_tiles) issue_kv(write_stage, n_next);
    cp_async_commit();
    // Resolve tile n_next + 1 now and store it after this tile's math, into ring slot
    // (n_next + 1) % kStages == j % kStages: tile j's copy was issued before this barrier.
    int32_t next_row = -1;
    const bool resolve = tid < kBlockN && n_next + 1 < n_tiles;
    if (resolve) next_row = physical_row(kv0 + (n_next + 1) * kBlockN + tid);
    if constexpr (Tr::kQInRegs) {
      if (j == 0) {
#pragma unroll
        for (int ks = 0; ks < Tr::kKSteps; ++ks) ldmatrix_x4(q_frag[ks], smem_q + (q_lane_off ^ uint32_t(ks << 5)));
      }
    }
    const int n = n_begin + j;
    if (n >= tiles.mask_hi || n < tiles.mask_lo) {
      process_tile(std::true_type{}, read_stage, n);
    } else {
      process_tile(std::false_type{}, read_stage, n);
    }
    if (resolve) kv_rows[((n_next + 1) % kStages) * kBlockN + tid] = next_row;
    read_stage = read_stage + 1 == kStages ? 0 : read_stage + 1;
    write_stage = write_stage + 1 == kStages ? 0 : write_stage + 1;
  }

  // ---- epilogue: O / l as 16-bit through this warp's own Q rows, then 16-byte stores -------
  cp_async_wait<0>();
  __syncthreads();  // the Q copy (issued by all threads) has landed even if no tile ran
  T* out = static_cast<T*>(p.out);
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = row_sum[mt][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const RowEnd end = finish_row(p, head, row_max[mt][h], l);
      const int r = warp_row0 + mt * 16 + g + h * 8;  // row inside the CTA tile
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        const uint32_t v = pack2<T>(o[mt][dt][2 * h] * end.inv, o[mt][dt][2 * h + 1] * end.inv);
        *reinterpret_cast<uint32_t*>(smem + swizzled_offset<kPitch>(r, dt) + t4 * 4) = v;
      }
      if (p.lse != nullptr && t4 == 0 && m0 + r < q_len)
        p.lse[int64_t(q_begin + m0 + r) * p.num_q_heads + head] = end.lse;
    }
  }
  __syncwarp();
  constexpr int kStoreIters = Tr::kRowsPerWarp * Tr::kChunksPerRow / 32;
#pragma unroll
  for (int i = 0; i < kStoreIters; ++i) {
    const int idx = lane + 32 * i;
    const int r = warp_row0 + idx / Tr::kChunksPerRow;
    const int ch = idx % Tr::kChunksPerRow;
    if (m0 + r < q_len) {
      const uint4 v = *reinterpret_cast<const uint4*>(smem + swizzled_offset<kPitch>(r, ch));
      *reinterpret_cast<uint4*>(out + int64_t(q_begin + m0 + r) * p.q_row_stride +
                                int64_t(head) * kHeadDim + ch * 8) = v;
    }
  }
}

// Launches one tile configuration. p.num_vtiles is filled in here (it depends on BLOCK_M).
template <class Tr, class T>
void launch_prefill(PrefillParams p, int num_tokens, cudaStream_t stream) {
  p.num_vtiles = num_tokens / Tr::kBlockM + p.num_seqs;
  const long long ctas = (long long)p.num_vtiles * p.num_q_heads;
  if (num_tokens == 0 || ctas == 0) return;
  FS_CHECK(ctas < (1ll << 31), "prefill grid too large: ", ctas, " CTAs");
  auto kernel = attention_prefill_kernel<Tr, T>;
  // Ada/Ampere consumer parts allow 99 KiB per block (A100 163, Hopper 227): every default tile
  // fits 99 KiB; a test-only shape that does not is refused here with its numbers.
  int device = 0, smem_optin = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  FS_CHECK(Tr::kSmemBytes <= size_t(smem_optin), "prefill tile needs ", Tr::kSmemBytes,
           " bytes of shared memory; this GPU allows ", smem_optin);
  if (Tr::kSmemBytes > 48 * 1024) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(Tr::kSmemBytes)));
  }
  kernel<<<unsigned(ctas), Tr::kThreads, Tr::kSmemBytes, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

// Runs variant `variant` of head_dim kHeadDim for element type T; false if not compiled.
template <int kHeadDim, class T, bool kAllVariants>
bool run_prefill(int variant, const PrefillParams& p, int num_tokens, cudaStream_t stream) {
  return dispatch_variant<kHeadDim, kAllVariants>(
      variant, [&](auto traits) { launch_prefill<decltype(traits), T>(p, num_tokens, stream); });
}

}  // namespace flashserve::cuda::detail

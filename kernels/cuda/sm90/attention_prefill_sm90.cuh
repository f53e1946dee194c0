// The Hopper (sm_90a) prefill attention kernel: warp-specialised, wgmma-based, over the paged KV
// cache. One producer warpgroup fills a ring of K/V shared-memory stages guarded by mbarriers,
// either with bulk tensor copies (TMA) of 8-row page pieces through the block table, or with
// cp.async gathers (block sizes that are not multiples of 8, and the ragged last tile); one or
// two consumer warpgroups (64 query rows each) compute S = Q K^T with wgmma from shared memory,
// the online softmax in registers, and O += P V with P as the register A operand, optionally
// taking turns on the tensor cores (ping-pong). Contiguous configurations read a fresh prompt's
// K/V (q_len == kv_len) from the step's own packed rows with one 128-row bulk copy per column
// half and tile, and gather cache pages only for the other sequences. Same contract and work map
// as the mma.sync kernel (attention_prefill_kernel.cuh, whose PrefillParams, find_sequence and
// finish_row it reuses), with its sliding-window tile range, soft-capping and sinks.
// Design, timeline and measurements: docs/PREFILL_ATTENTION.md ("Hopper kernel").
#pragma once

#include <cuda.h>  // CUtensorMap (the type only; maps are encoded through the runtime's driver entry point)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_prefill_kernel.cuh"
#include "kernels/cuda/sm90/ptx_sm90.cuh"

namespace flashserve::cuda::detail::sm90 {

// kHeadDim 64 or 128; kConsumers consumer warpgroups of 64 query rows (BLOCK_M = 64 * kConsumers);
// kStages K and V buffers in the ring; kOverlap issues S_{j+1} = Q K_{j+1}^T and O += P_j V_j
// together so the softmax of tile j+1 runs while the tensor cores work on P_j V_j; kRealloc
// moves registers from the producer to the consumers with setmaxnreg; kTma loads K/V with bulk
// tensor copies (else cp.async); kPingPong makes the consumer warpgroups issue their GEMMs in
// turns, so one's softmax runs under the other's GEMMs; kContig: a CTA whose sequence has no
// cached prefix and whose launch was given the step's own K/V rows (Sm90Params::have_fresh) loads
// whole tiles from them with 128-row bulk copies (warp 0; the configuration's paged path for
// every other CTA).
template <int kHeadDim_, int kConsumers_, int kStages_, bool kOverlap_, bool kRealloc_, bool kTma_,
          bool kPingPong_, bool kContig_ = false>
struct Sm90Traits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumers = kConsumers_;
  static constexpr int kStages = kStages_;
  static constexpr bool kOverlap = kOverlap_;
  static constexpr bool kRealloc = kRealloc_;
  static constexpr bool kTma = kTma_;
  static constexpr bool kPingPong = kPingPong_;
  static constexpr bool kContig = kContig_;
  // The same configuration loading with cp.async (what runs when TMA cannot: block sizes that
  // are not multiples of 8).
  using CpAsync = Sm90Traits<kHeadDim_, kConsumers_, kStages_, kOverlap_, kRealloc_, false, kPingPong_, kContig_>;

  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = 128;
  static constexpr int kThreads = 128 * (kConsumers + 1);  // warpgroup 0 produces
  // Registers after setmaxnreg: 128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= 64K.
  static constexpr int kProducerRegs = 56;
  static constexpr int kConsumerRegs = 224;

  // Every operand tile is stored as kHalves column blocks of 64 elements (128-byte rows),
  // each [rows][128 B] with the 128-byte swizzle (chunk c of row r at chunk c ^ (r % 8)): the
  // K-major layout wgmma wants for Q and K, and the N-major one for V.
  static constexpr int kHalves = kHeadDim / 64;
  static constexpr int kQHalfBytes = kBlockM * 128;
  static constexpr int kQBytes = kQHalfBytes * kHalves;
  static constexpr int kKvHalfBytes = kBlockN * 128;
  static constexpr int kKvBytes = kKvHalfBytes * kHalves;  // one K (or V) stage
  // Layout: [Q | K stage 0..S-1 | V stage 0..S-1 | barriers], base rounded up to 1 KiB.
  static constexpr int kKOffset = kQBytes;
  static constexpr int kVOffset = kKOffset + kStages * kKvBytes;
  static constexpr int kBarOffset = kVOffset + kStages * kKvBytes;
  // Barriers: Q full, then per stage K full, V full, K empty, V empty.
  static constexpr int kNumBarriers = 1 + 4 * kStages;
  static constexpr size_t kSmemBytes = size_t(kBarOffset) + kNumBarriers * 8 + 1024;

  static_assert(kHeadDim == 64 || kHeadDim == 128, "head_dim 64 or 128");
  static_assert(kConsumers == 1 || kConsumers == 2, "one or two consumer warpgroups");
  static_assert(kStages >= 2, "at least double buffering");
  static_assert(!kRealloc || kConsumers == 2, "setmaxnreg only pays with two consumers");
  static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= 65536, "register file");
  static_assert(kSmemBytes <= 227 * 1024, "fits the sm90 opt-in shared memory");
  static_assert(!kPingPong || (kConsumers == 2 && kOverlap), "ping-pong: two consumers, overlapped loop");
  // Full-barrier arrivals per fill: cp.async, one per producer thread; TMA, warp 0's 32 cp.async
  // arrivals (the ragged last tile) plus lane 0's expect-tx arrival; a contiguous CTA's warp 0
  // arrives as the TMA configuration does.
  static constexpr int kFullArrivals = kTma ? 33 : 128;
  static constexpr int kContigArrivals = 33;
  static_assert(!kContig || !kTma, "contiguous configurations gather the paged sequences with cp.async");
};

// The kernel's parameter block: the common one plus the K and V tensor maps (TMA variants):
// 2-D views [rows = block * block_size + offset][num_kv_heads * head_dim] of the caches, boxes of
// 8 rows x 64 elements with the 128-byte swizzle.
struct Sm90Params {
  PrefillParams p;
  CUtensorMap tmap_k;
  CUtensorMap tmap_v;
  // Timing diagnostic only (TMA variants; the bench's "diag_no_kv_loads"): the producer signals
  // every K/V stage as full without copying anything, so the kernel runs the consumers' work at
  // the speed it would have with free loads. The output is then not attention.
  bool skip_kv_loads;
  // Contiguous configurations: whether the step's own K/V rows were given (FreshKv; false: every
  // CTA gathers pages) and their tensor maps, 2-D views [num_tokens][num_kv_heads * head_dim] with
  // each tensor's row stride (FreshKv), boxes of 128 rows x 64 elements, 128-byte swizzle.
  bool have_fresh;
  CUtensorMap tmap_fresh_k;
  CUtensorMap tmap_fresh_v;
};

// Byte offset of 16-byte chunk `chunk` (0 .. kHeadDim/8 - 1) of row `row` in a swizzled tile
// whose column halves are `half_bytes` apart.
__device__ __forceinline__ uint32_t tile_offset(int row, int chunk, int half_bytes) {
  return uint32_t((chunk >> 3) * half_bytes + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

template <class Tr, class T>
__global__ void __launch_bounds__(Tr::kThreads, 1)
    attention_prefill_sm90_kernel(const __grid_constant__ Sm90Params sp) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const PrefillParams& p = sp.p;
  constexpr int kBlockM = Tr::kBlockM, kBlockN = Tr::kBlockN, kHeadDim = Tr::kHeadDim;
  constexpr int kStages = Tr::kStages;
  extern __shared__ __align__(1024) uint8_t smem_raw[];

  // ---- which tile (the mma.sync kernel's work map, BLOCK_M rows per CTA) -------------------
  const int head = blockIdx.x % p.num_q_heads;
  const int vtile = p.num_vtiles - 1 - int(blockIdx.x / p.num_q_heads);
  const int seq = find_sequence<kBlockM>(p.cu_q_lens, p.num_seqs, vtile);
  const int q_begin = __ldg(p.cu_q_lens + seq);
  const int q_len = __ldg(p.cu_q_lens + seq + 1) - q_begin;
  const int m0 = (vtile - (q_begin / kBlockM + seq)) * kBlockM;
  if (m0 >= q_len) return;  // a gap tile: uniform across the CTA, before any barrier
  const int kv_len = __ldg(p.kv_lens + seq);
  const int diag = kv_len - q_len;  // row i sees keys j <= i + diag when causal
  const int kv_head = head / p.group_size;
  // Every key of a sequence with no cached prefix is one of this step's rows: the contiguous path
  // (false at compile time for the other configurations, so their code is unchanged).
  const bool contig = Tr::kContig && sp.have_fresh && q_len == kv_len;
  // KV tiles: n_end of them, loop tile j holding keys kv0 + j * kBlockN ..; a sliding window skips
  // the tiles before every row's window (kv_tiles in attention_prefill_kernel.cuh). Ring slots
  // and barrier phases count loop tiles.
  const KvTiles tiles = kv_tiles<kBlockM, kBlockN>(p, m0, q_len, kv_len);
  const int n_end = tiles.end - tiles.begin, kv0 = tiles.begin * kBlockN;

  const uint32_t raw_addr = smem_addr(smem_raw);
  const uint32_t smem_q = (raw_addr + 1023u) & ~1023u;  // 1 KiB atoms: swizzle base offset 0
  uint8_t* smem = smem_raw + (smem_q - raw_addr);
  const uint32_t smem_k = smem_q + Tr::kKOffset, smem_v = smem_q + Tr::kVOffset;
  const uint32_t bar_q = smem_q + Tr::kBarOffset;
  auto bar_k_full = [&](int s) { return bar_q + 8u * uint32_t(1 + s); };
  auto bar_v_full = [&](int s) { return bar_q + 8u * uint32_t(1 + kStages + s); };
  auto bar_k_empty = [&](int s) { return bar_q + 8u * uint32_t(1 + 2 * kStages + s); };
  auto bar_v_empty = [&](int s) { return bar_q + 8u * uint32_t(1 + 3 * kStages + s); };
  if (threadIdx.x == 0) {
    mbar_init(bar_q, 128);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(bar_k_full(s), contig ? Tr::kContigArrivals : Tr::kFullArrivals);
      mbar_init(bar_v_full(s), contig ? Tr::kContigArrivals : Tr::kFullArrivals);
      mbar_init(bar_k_empty(s), 4 * Tr::kConsumers);  // one arrival per consumer warp
      mbar_init(bar_v_empty(s), 4 * Tr::kConsumers);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (threadIdx.x < 128) {
    // ================= producer warpgroup: Q once, then K and V tile by tile ==================
    if constexpr (Tr::kRealloc) setmaxnreg_dec<Tr::kProducerRegs>();
    constexpr int kChunks = kHeadDim / 8;         // 16-byte chunks per row
    constexpr int kRowsPerCopy = 32 / kChunks;    // rows one warp-wide cp.async covers
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int chunk = lane % kChunks, sub_row = lane / kChunks;
    {  // Q rows [warp * kBlockM/4, +kBlockM/4); rows past q_len are zero-filled
      constexpr int kRows = kBlockM / 4;
      const T* src = static_cast<const T*>(p.q) + int64_t(q_begin + m0) * p.q_row_stride +
                     int64_t(head) * kHeadDim + chunk * 8;
#pragma unroll
      for (int r = sub_row; r < kRows; r += kRowsPerCopy) {
        const int row = warp * kRows + r;
        const bool valid = m0 + row < q_len;
        cp_async_16(smem_q + tile_offset(row, chunk, Tr::kQHalfBytes),
                    valid ? src + int64_t(row) * p.q_row_stride : src, valid);
      }
      mbar_arrive_on_cp_async(bar_q);
    }
    // K/V tiles are filled in the order K_0, K_1, V_0, K_2, V_1, ...: the K the next S = Q K^T
    // needs goes before the V of the P V that runs beside it. The block-table rows of a tile are
    // loaded one tile ahead, so their latency hides behind the waits for free stages.
    const int32_t* table = p.block_table + int64_t(seq) * p.max_blocks_per_seq;
    const int64_t col = int64_t(kv_head) * kHeadDim + chunk * 8;
    const T* k_src = static_cast<const T*>(p.k_cache) + col;
    const T* v_src = static_cast<const T*>(p.v_cache) + col;
    auto physical_row = [&](int key) -> int32_t {
      return key < kv_len ? __ldg(table + key / p.block_size) * p.block_size + key % p.block_size : -1;
    };
    // cp.async of K/V rows [32 * rows_block, +32) of a tile; `prow` is this lane's row (key
    // 32 * rows_block + lane; -1 past kv_len: zero-filled, so stale NaN never reaches P V), and
    // the warp shares the rows with shuffles.
    auto copy_rows = [&](uint32_t dst_tile, const T* src, int32_t prow, int rows_block) {
#pragma unroll
      for (int r = sub_row; r < 32; r += kRowsPerCopy) {
        const int32_t pr = __shfl_sync(0xffffffffu, prow, r);
        const int row = rows_block * 32 + r;
        cp_async_16(dst_tile + tile_offset(row, chunk, Tr::kKvHalfBytes),
                    pr >= 0 ? src + int64_t(pr) * p.kv_row_stride : src, pr >= 0);
      }
    };
    // Warp 0's fill of a tile that runs past kv_len (bulk-copy configurations): a zero-filling
    // cp.async gather through the block table, and lane 0 arrives without bytes.
    auto gather_last_tile = [&](uint32_t dst_tile, const T* src, uint32_t bar, int j) {
#pragma unroll 1
      for (int b = 0; b < 4; ++b)
        copy_rows(dst_tile, src, physical_row(kv0 + j * kBlockN + b * 32 + lane), b);
      if (lane == 0) mbar_arrive(bar);
    };
    // Ring slot and fill count of tile j, and the wait for that slot to be free again.
    auto slot = [&](int j) { return j % kStages; };
    auto wait_empty = [&](uint32_t bar, int j) {
      if (j >= kStages) mbar_wait(bar, (j / kStages - 1) & 1);
    };
    if (contig) {
      if constexpr (Tr::kContig) {  // (the other configurations never take this branch)
        if (warp == 0) {
          // Warp 0 alone: a full tile is kHalves bulk copies of 128 rows x 64 columns (16 KiB) at
          // row q_begin + kv0 + j * kBlockN of the fresh K/V, issued by lane 0 with the tile's bytes. The
          // ragged last tile is gathered from the cache pages (the same values) with zero-filling
          // cp.async, as in the TMA configuration: rows past kv_len in the fresh K/V belong to other
          // sequences. 33 arrivals per fill either way.
          auto fill = [&](uint32_t dst_tile, const T* src, const CUtensorMap* tmap, uint32_t bar, int j) {
            if (kv0 + (j + 1) * kBlockN <= kv_len) {
              if (lane == 0) {
                mbar_arrive_expect_tx(bar, Tr::kKvBytes);
#pragma unroll
                for (int half = 0; half < Tr::kHalves; ++half)
                  tma_load_2d(dst_tile + half * Tr::kKvHalfBytes, tmap, kv_head * kHeadDim + half * 64,
                              q_begin + kv0 + j * kBlockN, bar);
              }
            } else {
              gather_last_tile(dst_tile, src, bar, j);
            }
            mbar_arrive_on_cp_async(bar);
          };
          for (int j = 0; j <= n_end; ++j) {  // same order as the paged paths: K_j, then V_{j-1}
            if (j < n_end) {
              wait_empty(bar_k_empty(slot(j)), j);
              fill(smem_k + slot(j) * Tr::kKvBytes, k_src, &sp.tmap_fresh_k, bar_k_full(slot(j)), j);
            }
            if (j > 0) {
              wait_empty(bar_v_empty(slot(j - 1)), j - 1);
              fill(smem_v + slot(j - 1) * Tr::kKvBytes, v_src, &sp.tmap_fresh_v, bar_v_full(slot(j - 1)), j - 1);
            }
          }
        }
      }
    } else if constexpr (!Tr::kTma) {
      // All four warps gather, one 32-row block each; one cp.async arrival per thread.
      int32_t next = physical_row(kv0 + warp * 32 + lane), prev = -1;
      for (int j = 0; j <= n_end; ++j) {
        const int32_t cur = next;
        if (j + 1 < n_end) next = physical_row(kv0 + (j + 1) * kBlockN + warp * 32 + lane);
        if (j < n_end) {
          wait_empty(bar_k_empty(slot(j)), j);
          copy_rows(smem_k + slot(j) * Tr::kKvBytes, k_src, cur, warp);
          mbar_arrive_on_cp_async(bar_k_full(slot(j)));
        }
        if (j > 0) {
          wait_empty(bar_v_empty(slot(j - 1)), j - 1);
          copy_rows(smem_v + slot(j - 1) * Tr::kKvBytes, v_src, prev, warp);
          mbar_arrive_on_cp_async(bar_v_full(slot(j - 1)));
        }
        prev = cur;
      }
    } else if (warp == 0) {
      // Warp 0 alone: per full tile, lane l copies 8-row group l % 16 (inside one page, as
      // block_size % 8 == 0) of column half l / 16 with one bulk tensor copy, and lane 0 posts the
      // tile's bytes. The last tile, when it runs past kv_len, is gathered with zero-filling
      // cp.async instead, and lane 0 arrives without bytes. Every lane also arrives through
      // cp.async, so each fill counts 33 arrivals either way.
      constexpr int kCopies = 16 * Tr::kHalves;  // bulk copies per K (or V) tile
      const int group = lane & 15, half = lane >> 4;
      auto group_row = [&](int j) {
        const int key = kv0 + j * kBlockN;
        return lane < kCopies && key + kBlockN <= kv_len ? physical_row(key + group * 8) : -1;
      };
      auto fill = [&](uint32_t dst_tile, const T* src, const CUtensorMap* tmap, uint32_t bar, int j,
                      int32_t grow) {
        if (sp.skip_kv_loads) {  // timing diagnostic: no data moves (see Sm90Params)
          if (lane == 0) mbar_arrive(bar);
        } else if (kv0 + (j + 1) * kBlockN <= kv_len) {
          if (lane == 0) mbar_arrive_expect_tx(bar, Tr::kKvBytes);
          if (lane < kCopies)
            tma_load_2d(dst_tile + half * Tr::kKvHalfBytes + group * 1024, tmap,
                        kv_head * kHeadDim + half * 64, grow, bar);
        } else {
          gather_last_tile(dst_tile, src, bar, j);
        }
        mbar_arrive_on_cp_async(bar);
      };
      int32_t next = group_row(0), prev = -1;
      for (int j = 0; j <= n_end; ++j) {
        const int32_t cur = next;
        if (j + 1 < n_end) next = group_row(j + 1);
        if (j < n_end) {
          wait_empty(bar_k_empty(slot(j)), j);
          fill(smem_k + slot(j) * Tr::kKvBytes, k_src, &sp.tmap_k, bar_k_full(slot(j)), j, cur);
        }
        if (j > 0) {
          wait_empty(bar_v_empty(slot(j - 1)), j - 1);
          fill(smem_v + slot(j - 1) * Tr::kKvBytes, v_src, &sp.tmap_v, bar_v_full(slot(j - 1)), j - 1, prev);
        }
        prev = cur;
      }
    }
    cp_async_wait<0>();  // nothing may land after the CTA has retired
  } else {
    // ================= consumer warpgroups: 64 query rows each ===============================
    if constexpr (Tr::kRealloc) setmaxnreg_inc<Tr::kConsumerRegs>();
    const int ctid = threadIdx.x - 128;
    const int wg = ctid >> 7;                   // consumer warpgroup
    const int warp = (ctid >> 5) & 3, lane = ctid & 31, g = lane >> 2, t4 = lane & 3;
    const int row0 = m0 + wg * 64 + warp * 16 + g;  // this thread's rows: row0 and row0 + 8
    const float c = p.scale_log2;
    const int win_gap = window_gap(p);

    float o[kHeadDim / 2];   // O accumulators, rows row0 / row0 + 8
    float s[kBlockN / 2];    // S (then P in fp32) accumulators
    uint32_t pf[kBlockN / 16][4];  // P as 16-bit A fragments, one per k16 step of P.V
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.f;
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) s[i] = 0.f;

    constexpr uint64_t kDescQK = wgmma_desc_template(16, 1024);  // K-major: 8-row groups 1 KiB apart
    constexpr uint64_t kDescV = wgmma_desc_template(Tr::kKvHalfBytes, 1024);  // N-major V
    const uint32_t q_base = smem_q + wg * 64 * 128;
    auto issue_qk = [&](int st) {  // S = Q K^T over head_dim in k16 steps
      const uint32_t k_base = smem_k + st * Tr::kKvBytes;
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kHeadDim / 16; ++ks) {
        const uint32_t off = (ks & 3) * 32;  // k16 step inside the 128-byte row
        const uint64_t da = wgmma_desc(kDescQK, q_base + (ks >> 2) * Tr::kQHalfBytes + off);
        const uint64_t db = wgmma_desc(kDescQK, k_base + (ks >> 2) * Tr::kKvHalfBytes + off);
        Wgmma<kBlockN, T>::ss(s, da, db, ks > 0);
      }
      wgmma_commit();
    };
    auto issue_pv = [&](int st) {  // O += P V over the tile's keys in k16 steps
      const uint32_t v_base = smem_v + st * Tr::kKvBytes;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk)
        Wgmma<kHeadDim, T>::rs(o, pf[kk], wgmma_desc(kDescV, v_base + kk * 16 * 128), 1);
      wgmma_commit();
    };
    auto release = [&](uint32_t bar) {  // this warp is done with a K or V stage
      __syncwarp();
      if (lane == 0) mbar_arrive(bar);
    };
    // Soft-capping (softcap_score), mask (kMask), then the online softmax of S in base 2, leaving
    // P (fp32) in s and the factor the old O must be scaled by in alpha. Rows that have seen
    // nothing keep p = 0. j is the loop tile.
    auto softmax = [&](auto mask_tag, int j, float (&alpha)[2]) {
      if (p.softcap_in > 0.f) {
#pragma unroll
        for (int i = 0; i < kBlockN / 2; ++i) s[i] = softcap_score(p, s[i]);
      }
      if constexpr (decltype(mask_tag)::value) {
#pragma unroll
        for (int i = 0; i < kBlockN / 8; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = kv0 + j * kBlockN + i * 8 + 2 * t4 + (e & 1);
            const int row = row0 + (e >> 1) * 8;
            if (!key_visible(p.causal, key, row + diag, kv_len, win_gap)) s[4 * i + e] = -INFINITY;
          }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < kBlockN / 8; ++i) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * h], s[4 * i + 2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(row_max[h], mx * c);
        const float m_sub = m_new == -INFINITY ? 0.f : m_new;
        alpha[h] = fast_exp2(row_max[h] - m_sub);
        row_max[h] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < kBlockN / 8; ++i) {
          s[4 * i + 2 * h] = fast_exp2(fmaf(s[4 * i + 2 * h], c, -m_sub));
          s[4 * i + 2 * h + 1] = fast_exp2(fmaf(s[4 * i + 2 * h + 1], c, -m_sub));
          sum += s[4 * i + 2 * h] + s[4 * i + 2 * h + 1];
        }
        row_sum[h] = fmaf(row_sum[h], alpha[h], sum);  // partial over this lane's columns
      }
    };
    auto softmax_tile = [&](int j, float (&alpha)[2]) {
      const int n = tiles.begin + j;
      if (n >= tiles.mask_hi || n < tiles.mask_lo) softmax(std::true_type{}, j, alpha);
      else softmax(std::false_type{}, j, alpha);
    };
    // O *= alpha, skipped when every alpha of the warp is 1 (exact; the maxima settle early).
    auto rescale_o = [&](const float (&alpha)[2]) {
      if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
        for (int i = 0; i < kHeadDim / 8; ++i) {
          o[4 * i] *= alpha[0];
          o[4 * i + 1] *= alpha[0];
          o[4 * i + 2] *= alpha[1];
          o[4 * i + 3] *= alpha[1];
        }
      }
    };
    // Two adjacent n8 accumulator tiles of S are one k16 A fragment of P.
    auto convert_p = [&]() {
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        pf[kk][0] = pack2<T>(s[8 * kk], s[8 * kk + 1]);
        pf[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
        pf[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
        pf[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
      }
    };
    auto fence_p = [&]() {
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(pf[kk][e])::"memory");
    };
    // Data from cp.async (generic proxy) is read by wgmma (async proxy) after the full barrier.
    auto wait_full = [&](uint32_t bar, int use) {
      mbar_wait(bar, use & 1);
      fence_proxy_async();
    };

    // Ping-pong: named barrier 3 + w is "warpgroup w may issue its GEMMs". Each GEMM batch (tile
    // 0's S, then S_j with P_{j-1} V_{j-1}, then the last P V: n_end + 1 batches) waits for its
    // turn and hands the turn to the other warpgroup; warpgroup 0 starts, and warpgroup 1 does
    // not hand back after its last batch, so every arrival is matched.
    auto turn_begin = [&]() {
      if constexpr (Tr::kPingPong) named_barrier_sync(3 + wg, 256);
    };
    auto turn_end = [&](bool last) {
      if constexpr (Tr::kPingPong) {
        if (!last || wg == 0) named_barrier_arrive(4 - wg, 256);
      }
    };
    if constexpr (Tr::kPingPong) {
      if (wg == 0 && n_end > 0) named_barrier_arrive(3, 256);
    }

    mbar_wait(bar_q, 0);  // also before the epilogue reuses the Q rows when no tile runs
    fence_proxy_async();
    if constexpr (!Tr::kOverlap) {
      int stage = 0, use = 0;
      for (int j = 0; j < n_end; ++j) {
        wait_full(bar_k_full(stage), use);
        issue_qk(stage);
        wgmma_wait<0>();
        fence_regs(s);
        release(bar_k_empty(stage));
        float alpha[2];
        softmax_tile(j, alpha);
        rescale_o(alpha);
        convert_p();
        wait_full(bar_v_full(stage), use);
        issue_pv(stage);
        wgmma_wait<0>();
        fence_regs(o);
        fence_p();
        release(bar_v_empty(stage));
        if (++stage == kStages) stage = 0, ++use;
      }
    } else if (n_end > 0) {
      // Tile 0 alone, then per tile j >= 1: issue S_j = Q K_j^T and O += P_{j-1} V_{j-1}, wait
      // for S_j only, run the softmax of tile j while P_{j-1} V_{j-1} is on the tensor cores,
      // then wait for it, rescale O and make P_j. The last P V follows the loop.
      turn_begin();
      wait_full(bar_k_full(0), 0);
      issue_qk(0);
      turn_end(false);
      wgmma_wait<0>();
      fence_regs(s);
      release(bar_k_empty(0));
      {
        float alpha[2];
        softmax_tile(0, alpha);  // O is still 0: no rescale
      }
      convert_p();
      int prev = 0, prev_use = 0;  // ring slot (and fill count) of tile j - 1
      int stage = kStages > 1 ? 1 : 0, use = 0;
      for (int j = 1; j < n_end; ++j) {
        turn_begin();
        wait_full(bar_k_full(stage), use);
        issue_qk(stage);
        wait_full(bar_v_full(prev), prev_use);
        issue_pv(prev);
        turn_end(false);
        wgmma_wait<1>();  // S_j is done, P_{j-1} V_{j-1} may still run
        fence_regs(s);
        release(bar_k_empty(stage));
        float alpha[2];
        softmax_tile(j, alpha);
        wgmma_wait<0>();
        fence_regs(o);
        fence_p();
        release(bar_v_empty(prev));
        rescale_o(alpha);
        convert_p();
        prev = stage, prev_use = use;
        if (++stage == kStages) stage = 0, ++use;
      }
      turn_begin();
      wait_full(bar_v_full(prev), prev_use);
      issue_pv(prev);
      turn_end(true);
      wgmma_wait<0>();
      fence_regs(o);
      release(bar_v_empty(prev));
    }

    // ---- epilogue: O / l as 16-bit into this warpgroup's Q rows, then 16-byte stores -------
    const uint32_t q_rows = uint32_t(wg * 64);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = row_sum[h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const RowEnd end = finish_row(p, head, row_max[h], l);  // with the sink, if any
      const int r = int(q_rows) + warp * 16 + g + h * 8;  // row inside the CTA tile
#pragma unroll
      for (int i = 0; i < kHeadDim / 8; ++i) {
        const uint32_t v = pack2<T>(o[4 * i + 2 * h] * end.inv, o[4 * i + 2 * h + 1] * end.inv);
        *reinterpret_cast<uint32_t*>(smem + tile_offset(r, i, Tr::kQHalfBytes) + t4 * 4) = v;
      }
      if (p.lse != nullptr && t4 == 0 && m0 + r < q_len)
        p.lse[int64_t(q_begin + m0 + r) * p.num_q_heads + head] = end.lse;
    }
    named_barrier_sync(1 + wg, 128);
    constexpr int kChunks = kHeadDim / 8;
    T* out = static_cast<T*>(p.out) + int64_t(head) * kHeadDim;
#pragma unroll
    for (int i = 0; i < 64 * kChunks / 128; ++i) {
      const int idx = (ctid & 127) + 128 * i;
      const int r = int(q_rows) + idx / kChunks, ch = idx % kChunks;
      if (m0 + r < q_len) {
        const uint4 v = *reinterpret_cast<const uint4*>(smem + tile_offset(r, ch, Tr::kQHalfBytes));
        *reinterpret_cast<uint4*>(out + int64_t(q_begin + m0 + r) * p.q_row_stride + ch * 8) = v;
      }
    }
  }
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

}  // namespace flashserve::cuda::detail::sm90

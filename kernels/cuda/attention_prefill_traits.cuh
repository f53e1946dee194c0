// Compile-time configuration of the sm80-class (mma.sync) prefill attention kernel: one traits
// struct per tile shape, the kernel's parameter block, and the list of tile shapes compiled per
// head_dim (variant 0 is the default; the others exist for tests and benchmarks). A Hopper
// wgmma/TMA path would add its own traits and kernel files beside these and be chosen in
// attention_prefill.cu by compute capability.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/cuda/paged_params.cuh"

namespace flashserve::cuda::detail {

// kHeadDim: 64, 128 or 256. kBlockM query rows per CTA, kBlockN keys per KV tile, kNumWarps warps
// each owning kBlockM / kNumWarps consecutive rows (16 or 32: one or two m16 MMA tiles),
// kStages K/V tiles in flight (cp.async ring), kQInRegs keeps the Q fragments in registers for
// the whole KV loop (only sensible with 16 rows per warp), kMinBlocks CTAs per SM for
// __launch_bounds__ (caps registers at 64K / (threads * kMinBlocks)).
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNumWarps_, int kStages_, bool kQInRegs_,
          int kMinBlocks_>
struct AttnPrefillTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kNumWarps = kNumWarps_;
  static constexpr int kStages = kStages_;
  static constexpr bool kQInRegs = kQInRegs_;
  static constexpr int kMinBlocks = kMinBlocks_;

  static constexpr int kThreads = kNumWarps * 32;
  static constexpr int kRowsPerWarp = kBlockM / kNumWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;   // m16 MMA tiles per warp
  static constexpr int kNTiles = kBlockN / 8;         // n8 tiles of S per KV tile
  static constexpr int kDTiles = kHeadDim / 8;        // n8 tiles of O
  static constexpr int kKSteps = kHeadDim / 16;       // k16 steps of Q.K^T
  static constexpr int kPSteps = kBlockN / 16;        // k16 steps of P.V
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks in one row
  static constexpr int kRowPitch = kHeadDim * 2;      // bytes per smem row (16-bit elements)
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;  // rows one copy pass covers
  static constexpr int kQRowsPerThread = kBlockM / kRowsPerPass;
  static constexpr int kKvRowsPerThread = kBlockN / kRowsPerPass;

  static constexpr int kQBytes = kBlockM * kRowPitch;
  static constexpr int kKvTileBytes = kBlockN * kRowPitch;  // one K (or V) tile
  // Layout: [Q | K stage 0..S-1 | V stage 0..S-1 | kv_rows[S][kBlockN] int32], every tile
  // 16-byte-chunk swizzled by row; plus 1 KiB of slack to align the base to 1 KiB.
  static constexpr int kRowsOffset = kQBytes + 2 * kStages * kKvTileBytes;
  static constexpr size_t kSmemBytes = size_t(kRowsOffset) + size_t(kStages) * kBlockN * 4 + 1024;

  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "head_dim 64, 128 or 256");
  static_assert(kRowsPerWarp == 16 || kRowsPerWarp == 32, "16 or 32 rows per warp");
  static_assert(kRowsPerWarp * kNumWarps == kBlockM, "warps tile BLOCK_M exactly");
  static_assert(!kQInRegs || kMTiles == 1, "Q in registers only with 16 rows per warp");
  static_assert(kBlockN % 16 == 0, "BLOCK_N a multiple of the k16 step");
  static_assert(kThreads % kChunksPerRow == 0, "a copy pass covers whole rows");
  static_assert(kBlockM % kRowsPerPass == 0 && kBlockN % kRowsPerPass == 0,
                "tiles are whole copy passes");
  static_assert(kStages >= 2, "at least double buffering");
  static_assert(kThreads >= kBlockN, "one thread per key resolves the block table");
  // The XOR swizzle below flips chunk bits 4.. of the byte offset; tiles start at multiples
  // of 1 KiB so the XOR never reaches the row bits.
  static_assert(kQBytes % 1024 == 0 && kKvTileBytes % 1024 == 0, "1 KiB aligned tiles");
  static_assert(kSmemBytes <= 227 * 1024, "fits the sm90 opt-in shared memory");
  static_assert(kRowsPerWarp * kChunksPerRow % 32 == 0, "epilogue store covers warp rows");
};

// Byte offset of 16-byte chunk `chunk` of row `row` inside a swizzled tile: the chunk index is
// XORed with row % 8, so the 8 rows one ldmatrix phase reads hit 8 different bank groups.
template <int kRowPitch>
__host__ __device__ __forceinline__ uint32_t swizzled_offset(int row, int chunk) {
  return uint32_t(row * kRowPitch + ((chunk ^ (row & 7)) << 4));
}

// Everything the kernel reads, by value (__grid_constant__). Pointers are device pointers.
struct PrefillParams {
  const void* q;            // [num_tokens, num_q_heads, head_dim]
  const void* k_cache;      // [num_blocks, block_size, num_kv_heads, head_dim]
  const void* v_cache;      // [num_blocks, block_size, num_kv_heads, head_dim]
  void* out;                // [num_tokens, num_q_heads, head_dim]
  float* lse;               // [num_tokens, num_q_heads] or nullptr
  const int32_t* cu_q_lens;    // [num_seqs + 1]
  const int32_t* kv_lens;      // [num_seqs]
  const int32_t* block_table;  // [num_seqs, max_blocks_per_seq]
  int num_seqs;
  int num_vtiles;           // num_tokens / kBlockM + num_seqs (see the kernel's tile map)
  int max_blocks_per_seq;
  int block_size;
  int num_q_heads;
  int group_size;           // num_q_heads / num_kv_heads
  int64_t q_row_stride;     // num_q_heads * head_dim (elements)
  int64_t kv_row_stride;    // num_kv_heads * head_dim
  int64_t kv_block_stride;  // block_size * num_kv_heads * head_dim
  float scale_log2;         // scale * log2(e)
  bool causal;
  int window;               // sliding window (kernels/paged_attention.h); 0 = every key
  // Soft-capping of the raw scores x = q.k, which the kernels keep unscaled (the softmax
  // multiplies by scale_log2): x becomes softcap_out * tanh(x * softcap_in) with softcap_in =
  // scale / softcap, softcap_out = softcap / scale. softcap_in 0 = off.
  float softcap_in;
  float softcap_out;
  const float* sinks;       // [num_q_heads] sink logits (kernels/paged_attention.h) or nullptr
};

// The tile shapes compiled per head_dim. Variant 0 is the one fp16 compiles; bf16 compiles all
// and attention_prefill picks kLargeGridVariant or kSmallGridVariant (see attention_prefill.cu).
template <class... Ts>
struct TraitsList {
  static constexpr int kCount = int(sizeof...(Ts));
};

template <int kHeadDim>
struct PrefillVariants;

template <>
struct PrefillVariants<128> {
  using List = TraitsList<AttnPrefillTraits<128, 128, 32, 4, 2, false, 2>,
                          AttnPrefillTraits<128, 128, 64, 8, 2, true, 1>,
                          AttnPrefillTraits<128, 128, 32, 4, 3, false, 2>,
                          AttnPrefillTraits<128, 128, 48, 4, 2, false, 2>,
                          AttnPrefillTraits<128, 128, 48, 4, 3, false, 2>,
                          AttnPrefillTraits<128, 128, 64, 4, 2, false, 2>>;
  static constexpr int kCount = List::kCount;
  static constexpr const char* kNames[kCount] = {"m128n32w4s2", "m128n64w8s2q", "m128n32w4s3",
                                                 "m128n48w4s2", "m128n48w4s3", "m128n64w4s2"};
  static constexpr int kLargeGridVariant = 3;  // m128n48w4s2
  static constexpr int kSmallGridVariant = 1;  // m128n64w8s2q
};

template <>
struct PrefillVariants<64> {
  using List = TraitsList<AttnPrefillTraits<64, 128, 64, 4, 3, false, 2>,
                          AttnPrefillTraits<64, 64, 64, 4, 2, true, 4>,
                          AttnPrefillTraits<64, 128, 64, 8, 2, true, 2>,
                          AttnPrefillTraits<64, 128, 96, 4, 2, false, 2>,
                          AttnPrefillTraits<64, 128, 128, 4, 2, false, 2>,
                          AttnPrefillTraits<64, 128, 64, 4, 2, false, 2>>;
  static constexpr int kCount = List::kCount;
  static constexpr const char* kNames[kCount] = {"m128n64w4s3", "m64n64w4s2q_b4", "m128n64w8s2q_b2",
                                                 "m128n96w4s2", "m128n128w4s2", "m128n64w4s2"};
  static constexpr int kLargeGridVariant = 4;  // m128n128w4s2
  static constexpr int kSmallGridVariant = 1;  // m64n64w4s2q_b4
};

// head_dim 256 (Gemma 2/3): O alone is 128 fp32 registers per thread at 16 rows per warp, so Q
// stays in shared memory and S is kept narrow. A 512-byte row makes every tile large: 64 query
// rows (32 KB) with K and V tiles of 32 keys (16 KB each) in two stages come to 97 KiB, so two
// 4-warp CTAs share an SM (and the tile fits the 99 KiB of sm_86/sm_89) with up to 255 registers
// a thread; BLOCK_N 64 would need 160 KiB, one CTA of 4 warps per SM. 128 rows of 8 warps
// (1 CTA per SM, half the K/V reads per query) is compiled for the benchmark to compare.
template <>
struct PrefillVariants<256> {
  using List = TraitsList<AttnPrefillTraits<256, 64, 32, 4, 2, false, 2>,
                          AttnPrefillTraits<256, 128, 32, 8, 2, false, 1>>;
  static constexpr int kCount = List::kCount;
  static constexpr const char* kNames[kCount] = {"m64n32w4s2_b2", "m128n32w8s2"};
  static constexpr int kLargeGridVariant = 0;
  static constexpr int kSmallGridVariant = 0;
};

template <class F, class T0, class... Ts>
bool dispatch_in(int v, F& f, TraitsList<T0, Ts...>*) {
  if (v == 0) return f(T0{}), true;
  if constexpr (sizeof...(Ts) > 0) return dispatch_in(v - 1, f, static_cast<TraitsList<Ts...>*>(nullptr));
  return false;
}

template <class T0, class... Ts>
T0 first_traits(TraitsList<T0, Ts...>*);  // declaration only: used in decltype

// Calls f(Traits{}) for variant `v`; with kAllVariants false only variant 0 is compiled
// (the fp16 build keeps just the default to save compile time).
template <int kHeadDim, bool kAllVariants, class F>
bool dispatch_variant(int v, F&& f) {
  using L = typename PrefillVariants<kHeadDim>::List;
  if constexpr (kAllVariants) {
    return v >= 0 && dispatch_in(v, f, static_cast<L*>(nullptr));
  } else {
    if (v != 0) return false;
    f(decltype(first_traits(static_cast<L*>(nullptr))){});
    return true;
  }
}

// One entry point per (head_dim, dtype), each in its own .cu file to keep compile units small.
// They return false for a variant that is not compiled (fp16 builds only variant 0).
bool run_prefill_hdim64_bf16(int variant, const PrefillParams& p, int num_tokens, cudaStream_t s);
bool run_prefill_hdim64_f16(int variant, const PrefillParams& p, int num_tokens, cudaStream_t s);
bool run_prefill_hdim128_bf16(int variant, const PrefillParams& p, int num_tokens, cudaStream_t s);
bool run_prefill_hdim128_f16(int variant, const PrefillParams& p, int num_tokens, cudaStream_t s);
bool run_prefill_hdim256_bf16(int variant, const PrefillParams& p, int num_tokens, cudaStream_t s);
bool run_prefill_hdim256_f16(int variant, const PrefillParams& p, int num_tokens, cudaStream_t s);

}  // namespace flashserve::cuda::detail

// Host launcher for the CUDA prefill attention kernels over the paged KV cache: the Hopper kernel
// (wgmma, warp-specialised mbarrier pipeline; sm_90a builds on compute capability 9.x) and the
// FlashAttention-2 style mma.sync kernel (every other GPU, and the A/B reference). Contract
// (layouts, causal alignment to the end of each sequence, base-2 LSE, empty rows -> out 0 /
// lse -inf): kernels/paged_attention.h. Design: docs/prefill_attention.md.
// Plain C++17: callable from .cpp files without CUDA headers beyond cuda_runtime_api.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/paged_attention.h"

namespace flashserve::cuda {

// This step's own K and V rows (after RoPE: the values just written to the cache for them),
// packed like q: row cu_q_lens[b] + i holds sequence b's new token i, kv head h at columns
// h * head_dim .. h * head_dim + head_dim - 1 (e.g. the K and V column blocks of the fused qkv
// projection, or a buffer of their own). A sequence with no cached prefix (q_len == kv_len) finds all its keys here, so
// the Hopper kernel's contiguous configuration copies whole 128-key tiles from these tensors
// instead of gathering cache pages (docs/prefill_attention.md, "Next step (session 27)").
struct FreshKv {
  const void* k = nullptr;   // [num_tokens, k_row_stride], 16-byte aligned
  const void* v = nullptr;   // [num_tokens, v_row_stride], 16-byte aligned
  int64_t k_row_stride = 0;  // elements from one token to the next: >= num_kv_heads * head_dim, % 8 == 0
  int64_t v_row_stride = 0;  // the same for v
};

// Attention of the packed queries over the paged K/V cache, written to `out` (and `lse`).
// Every pointer, including those inside `args`, is a DEVICE pointer. Supported: head_dim 64 or
// 128, dtype kBF16 or kF16, any block_size > 0, num_kv_heads dividing num_q_heads, scale > 0.
// `num_tokens` is cu_q_lens[num_seqs] (the caller knows it; the launcher never reads device
// memory or synchronizes). Work is a flattened list of (sequence, 128-row tile) pairs, so a
// ragged batch launches only the tiles it has. On compute capability 9.x (with sm_90a compiled
// in) it runs the Hopper kernel, elsewhere the mma.sync one; FLASHSERVE_PREFILL_KERNEL=fa2 in the
// environment forces the mma.sync kernel (A/B switch). Throws flashserve::Error on bad
// arguments or a CUDA error. `fresh` (optional, may be nullptr) offers this step's own K/V rows;
// the Hopper kernel reads them (its contiguous variant) for the sequences whose q_len equals
// their kv_len, unless FLASHSERVE_PREFILL_KV=paged is in the environment (read once: the paged
// path, as without `fresh`); the cache must hold the same values either way.
void attention_prefill(const PagedAttentionArgs& args, int num_tokens,
                       const void* q,        // [num_tokens, num_q_heads, head_dim]
                       const void* k_cache,  // [num_blocks, block_size, num_kv_heads, head_dim]
                       const void* v_cache,  // [num_blocks, block_size, num_kv_heads, head_dim]
                       void* out,            // [num_tokens, num_q_heads, head_dim]
                       float* lse,           // [num_tokens, num_q_heads] base 2, or nullptr
                       DType dtype, cudaStream_t stream, const FreshKv* fresh = nullptr);

namespace detail {
// Tile configurations compiled for a head_dim, for tests and benchmarks. Names read
// "m128n64w8s2q" (BLOCK_M, BLOCK_N, warps, pipeline stages, q: Q fragments kept in registers,
// _bN: N CTAs per SM requested). bf16 compiles every variant, fp16 only variant 0.
// attention_prefill picks prefill_default_variant (bf16) by grid size against the SM count.
int prefill_num_variants(int head_dim);
int prefill_default_variant(int head_dim, int num_tokens, int num_seqs, int num_q_heads);
const char* prefill_variant_name(int head_dim, int variant);
// Shared memory a variant's CTA needs: sm_86/sm_89 allow 99 KiB, sm_80 163, sm_90 227.
size_t prefill_variant_smem_bytes(int head_dim, int variant);
void attention_prefill_variant(int variant, const PagedAttentionArgs& args, int num_tokens,
                               const void* q, const void* k_cache, const void* v_cache, void* out,
                               float* lse, DType dtype, cudaStream_t stream);
// The mma.sync kernel with its own default tile choice (what attention_prefill runs off Hopper).
void attention_prefill_fa2(const PagedAttentionArgs& args, int num_tokens, const void* q,
                           const void* k_cache, const void* v_cache, void* out, float* lse,
                           DType dtype, cudaStream_t stream);

// The Hopper kernel (kernels/cuda/sm90/). Available when the build has sm_90a and the current
// device is compute capability 9.x. Variants (0 is the default) exist to measure each technique;
// fp16 compiles variant 0 only. attention_prefill_sm90 throws when it is not available.
bool prefill_sm90_available();
int prefill_sm90_num_variants(int head_dim);  // 0 when not compiled
const char* prefill_sm90_variant_name(int head_dim, int variant);
// `fresh`: read by the contiguous variants (prefill_sm90_contig_variant) only, for sequences with
// q_len == kv_len; every other variant, and those variants without it, gather the cache pages.
void attention_prefill_sm90(int variant, const PagedAttentionArgs& args, int num_tokens,
                            const void* q, const void* k_cache, const void* v_cache, void* out,
                            float* lse, DType dtype, cudaStream_t stream,
                            const FreshKv* fresh = nullptr);
// The contiguous-K/V variant the launcher runs on offered fresh rows (-1 when the Hopper kernel
// is not compiled), and whether it is selected: by default where the Hopper kernel runs;
// FLASHSERVE_PREFILL_KV=paged or contig overrides.
int prefill_sm90_contig_variant(int head_dim);
bool prefill_kv_contig_selected();
// Timing diagnostic for benchmarks only: a TMA variant of the Hopper kernel with its K/V copies
// skipped (the consumers run on whatever shared memory holds), i.e. its speed with free loads.
// The output is NOT attention.
void attention_prefill_sm90_timing_only(int variant, const PagedAttentionArgs& args, int num_tokens,
                                        const void* q, const void* k_cache, const void* v_cache,
                                        void* out, float* lse, DType dtype, cudaStream_t stream);
// "sm90" or "fa2": the kernel attention_prefill runs on the current device.
const char* prefill_default_kernel();
}  // namespace detail

}  // namespace flashserve::cuda

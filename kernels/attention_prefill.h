// Host launcher for the CUDA prefill attention kernels over the paged KV cache: the Hopper kernel
// (wgmma, warp-specialised mbarrier pipeline; sm_90a builds on compute capability 9.x) and the
// FlashAttention-2 style mma.sync kernel (every other GPU). Contract
// (layouts, causal alignment to the end of each sequence, base-2 LSE, empty rows -> out 0 /
// lse -inf): kernels/paged_attention.h. Design: docs/PREFILL_ATTENTION.md. The kernels' tile
// variants, for tests and benchmarks, are in kernels/cuda/attention_prefill_variants.h.
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
// instead of gathering cache pages (docs/PREFILL_ATTENTION.md).
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
// in) it runs the Hopper kernel, elsewhere the mma.sync one. Throws flashserve::Error on bad
// arguments or a CUDA error. `fresh` (optional, may be nullptr) offers this step's own K/V rows;
// the Hopper kernel reads them (its contiguous variant, bf16) for the sequences whose q_len
// equals their kv_len, and gathers cache pages for the others; the cache must hold the same
// values either way.
void attention_prefill(const PagedAttentionArgs& args, int num_tokens,
                       const void* q,        // [num_tokens, num_q_heads, head_dim]
                       const void* k_cache,  // [num_blocks, block_size, num_kv_heads, head_dim]
                       const void* v_cache,  // [num_blocks, block_size, num_kv_heads, head_dim]
                       void* out,            // [num_tokens, num_q_heads, head_dim]
                       float* lse,           // [num_tokens, num_q_heads] base 2, or nullptr
                       DType dtype, cudaStream_t stream, const FreshKv* fresh = nullptr);

// True where attention_prefill reads an offered FreshKv at this head_dim (the Hopper kernel runs
// on the current device and serves the head_dim: 64 or 128): a caller keeps its turned K rows
// for it only then.
bool attention_prefill_reads_fresh_kv(int head_dim);


}  // namespace flashserve::cuda

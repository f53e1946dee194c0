// CPU reference for paged attention (prefill chunks and decode alike), written for obviousness.
// It is the CPU backend's attention and the oracle the CUDA kernels are tested against.
// Contract, layouts and LSE base: kernels/paged_attention.h.
#pragma once

#include "kernels/paged_attention.h"

namespace flashserve::ref {

// T is float (CPU backend) or double (kernel tests). All pointers are host pointers.
template <class T>
void paged_attention(const PagedAttentionArgs& args,
                     const T* q,        // [total_q, num_q_heads, head_dim]
                     const T* k_cache,  // [num_blocks, block_size, num_kv_heads, head_dim]
                     const T* v_cache,  // [num_blocks, block_size, num_kv_heads, head_dim]
                     T* out,            // [total_q, num_q_heads, head_dim]
                     T* lse);           // [total_q, num_q_heads] base 2, or nullptr

}  // namespace flashserve::ref

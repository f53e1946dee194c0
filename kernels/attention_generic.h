// Host launcher of the generic paged attention kernel (kernels/cuda/attention_generic.cu): any
// head_dim, fp32 math, bf16 storage; the fallback where the fast kernels (kernels/
// attention_decode.h, kernels/attention_prefill.h) do not cover the head_dim. CPU twin:
// ref::paged_attention (kernels/cpu/paged_attention_ref.h). The launcher checks the launch and
// throws flashserve::Error. C++17-clean, so host .cpp files include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/paged_attention.h"

namespace flashserve::cuda {

// Simple, correct causal paged attention for any head_dim (fp32 math, one block per
// (token, q head)), with sliding windows, soft-capping and sinks; the fallback for head dims the fast
// kernels do not cover (e.g. Gemma's 256). A windowed row reads only its window's keys.
void paged_attention_generic_bf16(const PagedAttentionArgs& args, int num_tokens,
                                  const void* q,        // [n, hq, d] bf16
                                  const void* k_cache,  // [blocks, bs, hkv, d] bf16
                                  const void* v_cache,  // [blocks, bs, hkv, d] bf16
                                  void* out,            // [n, hq, d] bf16
                                  cudaStream_t stream,
                                  int max_kv_len);      // >= longest kv_lens[s] (smem size; a
                                                        // window smaller than it bounds it)
}  // namespace flashserve::cuda

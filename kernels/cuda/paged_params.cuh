// What every paged-attention launcher copies from the public arguments (kernels/paged_attention.h)
// into its kernel's own parameter block: the tensors and the block table. The blocks
// (PrefillParams, DecodeParams) name these fields alike; the rest of each block is the kernel's own.
#pragma once

#include "kernels/paged_attention.h"

namespace flashserve::cuda::detail {

template <class Params>
void set_paged_tensors(Params& p, const PagedAttentionArgs& a, const void* q, const void* k_cache,
                       const void* v_cache, void* out, float* lse) {
  p.q = q;
  p.k_cache = k_cache;
  p.v_cache = v_cache;
  p.out = out;
  p.lse = lse;
  p.kv_lens = a.kv_lens;
  p.block_table = a.block_table;
  p.max_blocks_per_seq = a.max_blocks_per_seq;
}

}  // namespace flashserve::cuda::detail

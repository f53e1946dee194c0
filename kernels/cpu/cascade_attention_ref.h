// CPU twin of cascade decode attention (kernels/cascade_attention.h): the prefix pass, the
// suffix pass and the LSE merge, each through the plain reference (paged_attention_ref.h). The
// CPU backend runs it when a step carries a cascade plan; tests check it against the plain pass.
#pragma once

#include "kernels/cascade_attention.h"

namespace flashserve::ref {

// T is float (CPU backend) or double (tests). All pointers, including those inside `args`, are
// host pointers.
template <class T>
void cascade_attention(const CascadeAttentionArgs& args,
                       const T* q,        // [num_seqs, num_q_heads, head_dim]
                       const T* k_cache,  // [num_blocks, block_size, num_kv_heads, head_dim]
                       const T* v_cache,  // [num_blocks, block_size, num_kv_heads, head_dim]
                       T* out);           // [num_seqs, num_q_heads, head_dim]

}  // namespace flashserve::ref

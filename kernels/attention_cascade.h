// CUDA cascade decode attention (contract: kernels/cascade_attention.h). Four launches per layer:
// the prefix rows' queries gathered into one packed buffer, the FA2 prefill kernel over them
// (non-causal, with LSE) for the prefix pass, the split-K decode kernel over each sequence's own
// blocks (with LSE, written straight to `out`) for the suffix pass, and a merge kernel that
// combines each (sequence, q head) row's states in place. C++17-clean; launchers never allocate
// and never synchronise.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/dtype.h"
#include "kernels/cascade_attention.h"
#include "kernels/decode_plan.h"

namespace flashserve::cuda {

// Supported: what attention_decode and attention_prefill both support (bf16 or f16, head_dim
// 64 or 128, power-of-two block_size 8..256, group size up to 16). Every pointer in `args` is a
// device pointer; its sizes (num_parts, num_prefix_rows, strides) are host values.
// suffix_plan: plan_attention_decode over the host copy of args.suffix_kv_lens.
void attention_cascade(const CascadeAttentionArgs& args,
                       const void* q,        // [num_seqs, num_q_heads, head_dim]
                       const void* k_cache,  // [num_blocks, block_size, num_kv_heads, head_dim]
                       const void* v_cache,  // [num_blocks, block_size, num_kv_heads, head_dim]
                       void* out,            // [num_seqs, num_q_heads, head_dim]
                       DType dtype, const DecodePlan& suffix_plan,
                       void* workspace,  // attention_cascade_workspace_bytes(...), 256-B aligned
                       size_t workspace_bytes, cudaStream_t stream);

// Bytes of workspace: the gathered queries and the prefix pass's out [num_prefix_rows,
// num_q_heads, head_dim] (dtype), its lse and the suffix lse (fp32), and the suffix decode's own.
size_t attention_cascade_workspace_bytes(const CascadeAttentionArgs& args, DType dtype,
                                         const DecodePlan& suffix_plan);

// The merge on its own: out[b, h] (the suffix state, rewritten in place) combined with the
// prefix rows merge_rows[b, :] of prefix_out / prefix_lse.
void attention_cascade_merge(const CascadeAttentionArgs& args,
                             const void* prefix_out,   // [num_prefix_rows, num_q_heads, head_dim]
                             const float* prefix_lse,  // [num_prefix_rows, num_q_heads] base 2
                             const float* suffix_lse,  // [num_seqs, num_q_heads] base 2
                             void* out,                // [num_seqs, num_q_heads, head_dim]
                             DType dtype, cudaStream_t stream);

}  // namespace flashserve::cuda

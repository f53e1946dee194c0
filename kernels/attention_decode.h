// CUDA split-K decode attention over the paged KV cache (one query token per sequence).
// plan_decode (kernels/decode_plan.h, host) -> attention_decode: a partial kernel per
// (sequence, kv head, split) and, when the plan has more than one split, a merge kernel that
// combines the splits by their base-2 LSE (kernels/attention_state.h). With one split the partial
// kernel writes the output directly. Layouts and the LSE base: kernels/paged_attention.h. Sinks
// (args.sinks) join each row once: in the merge, or in the partial kernel when it has one split.
// C++17-clean; launchers never allocate and never synchronise.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/decode_plan.h"
#include "kernels/paged_attention.h"

namespace flashserve::cuda {

// Supported: dtype kBF16 or kF16 (q, caches and out share it); head_dim 64, 128 or 256; block_size a
// power of two from 8 to 256; group_size = num_q_heads / num_kv_heads from 1 to 16.
// args: device pointers; every sequence has q_len 1 (cu_q_lens is not read, may be null); causal
// is irrelevant for a single query at the end of the sequence; window and softcap as in
// kernels/paged_attention.h. Sequences with kv_len 0 get out = 0 and lse = -inf. plan: from
// plan_attention_decode for this batch and window, or plan_decode_fixed;
// its kv_heads_per_block (0 = pair kv heads at head_dim 64 when they can, 1 = never) must be
// possible for the shape.
void attention_decode(const PagedAttentionArgs& args,
                      const void* q,        // [num_seqs, num_q_heads, head_dim]
                      const void* k_cache,  // [num_blocks, block_size, num_kv_heads, head_dim]
                      const void* v_cache,  // [num_blocks, block_size, num_kv_heads, head_dim]
                      void* out,            // [num_seqs, num_q_heads, head_dim]
                      float* lse,           // [num_seqs, num_q_heads] base 2, or nullptr
                      DType dtype, const DecodePlan& plan,
                      void* workspace,  // attention_decode_workspace_bytes(...) bytes, 256-B aligned
                      size_t workspace_bytes, cudaStream_t stream);

// Bytes of split partials: o [num_seqs, num_q_heads, num_splits, head_dim] fp32 followed by
// lse [num_seqs, num_q_heads, num_splits] fp32. Zero when plan.num_splits == 1.
size_t attention_decode_workspace_bytes(int num_seqs, int num_q_heads, int head_dim,
                                        const DecodePlan& plan);

// The merge on its own: row r = seq * num_q_heads + head combines its num_splits states.
// A state with lse -inf weighs zero and its o is not read; a row whose states are all empty
// gets out = 0 and lse = -inf. With sinks, row r's sink (sinks[r % num_q_heads]) joins its merge
// once, as one more state with o = 0 (kernels/attention_state.h); lse then includes it.
void attention_decode_merge(const float* o_part,    // [num_rows, num_splits, head_dim]
                            const float* lse_part,  // [num_rows, num_splits] base 2
                            int num_rows, int num_splits, int head_dim,
                            void* out,   // [num_rows, head_dim] of dtype
                            float* lse,  // [num_rows] or nullptr
                            DType dtype, cudaStream_t stream,
                            const float* sinks = nullptr,  // [num_q_heads] device, or nullptr
                            int num_q_heads = 0);          // > 0 when sinks are given

// plan_decode for this kernel: fills DecodePlanConfig with the device's SM count, the partial
// kernel's occupancy and the thread blocks per (sequence, split) (one per kv head, or one per pair
// of kv heads at head_dim 64). kv_lens is the host copy [num_seqs]; device -1 = current device.
// `tuning` supplies the policy knobs (min_chunk_len, max_splits, fill/eff fractions; its num_sms and
// ctas_per_sm are ignored): the defaults, or another setting the benchmark compares against.
// window: the layers' sliding window (0 = full attention; plan_decode cuts decode_span keys).
// Call once per decode step and window; every layer with that window reuses the plan.
DecodePlan plan_attention_decode(const int32_t* kv_lens, int num_seqs, int num_q_heads, int num_kv_heads,
                                 int head_dim, int block_size, DType dtype, int device = -1,
                                 const DecodePlanConfig& tuning = DecodePlanConfig(), int window = 0);

}  // namespace flashserve::cuda

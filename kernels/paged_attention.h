// kernels/: the compute kernels (CUDA) and their CPU twins, with the contracts they share.
//
// The contract shared by every paged-attention implementation: the CPU reference (kernels/cpu),
// the CUDA prefill kernel and the CUDA split-K decode kernels (kernels/cuda).
//
// KV cache layout, per layer: K and V each [num_blocks, block_size, num_kv_heads, head_dim]
// (token-major "NHD", as in vLLM and FlashAttention-2). A sequence's token t lives in block
// block_table[seq][t / block_size] at row t % block_size. The new tokens of this step are
// written to the cache before attention runs, so kv_len includes them.
//
// Queries are packed: sequence b owns rows cu_q_lens[b] .. cu_q_lens[b+1]-1 of q and out.
// Causal masking is aligned to the end of the sequence: query i of a chunk of q_len sits at
// position p = kv_len - q_len + i and sees keys 0 .. p. A decode step is q_len == 1. With a
// sliding window it sees only keys max(0, p - window + 1) .. p (the same alignment, so a chunk
// of a prefill with a cached prefix, or one longer than the window, windows each row alike).
//
// LSE convention (every kernel boundary uses it): base 2 of the scores s_j (s_j = scale * q.k_j,
// or softcap * tanh(scale * q.k_j / softcap) with soft-capping),
//   lse[row, h] = log2( sum_j 2^( log2(e) * s_j ) )
// i.e. the natural-log LSE of the scores divided by ln 2. A row that sees no key has
// out = 0 and lse = -inf. C++17-clean: included by .cu files.
#pragma once

#include <cstdint>

namespace flashserve {

struct PagedAttentionArgs {
  int num_seqs = 0;
  const int32_t* cu_q_lens = nullptr;    // [num_seqs + 1] prefix sums of q_len
  const int32_t* kv_lens = nullptr;      // [num_seqs] cached tokens including this step's
  const int32_t* block_table = nullptr;  // [num_seqs, max_blocks_per_seq], unused slots any value
  int max_blocks_per_seq = 0;
  int block_size = 16;
  int num_q_heads = 0;
  int num_kv_heads = 0;  // divides num_q_heads; q head h reads kv head h / (num_q_heads / num_kv_heads)
  int head_dim = 0;
  float scale = 0.f;     // softmax scale, usually 1 / sqrt(head_dim)
  bool causal = true;
  // Sliding window: query at position p sees keys p - window + 1 .. p; 0 = every key. Without
  // causal masking the window bounds keys from below only.
  int window = 0;
  // Logit soft-capping: a score s = scale * q.k becomes softcap * tanh(s / softcap) before the
  // softmax (the LSE above is then of the capped scores); 0 = off.
  float softcap = 0.f;
  // Per-head learned sink logits [num_q_heads] fp32, or nullptr: as AttentionScoring::sinks.
  const float* sinks = nullptr;
};

// How one layer scores its keys: the softmax scale, its window and soft-cap (as above).
struct AttentionScoring {
  float scale = 0.f;
  int window = 0;
  float softcap = 0.f;
  // Per-head learned sink logits [num_q_heads] fp32 (device memory for CUDA, host for CPU);
  // nullptr = no sink. A sink joins each row's softmax denominator once (exp(sink - max)),
  // contributes no value.
  const float* sinks = nullptr;
};

}  // namespace flashserve

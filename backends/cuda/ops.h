// The CUDA backend's own ops (backends/cuda/ops.cu): elementwise and row ops, argmax, the
// bf16 conversion and the generic paged-attention fallback. All activations are bf16 (raw uint16
// bits on the host side); math is fp32. Every launcher checks the launch and throws
// flashserve::Error. C++17-clean so that backends/cuda/cuda_backend.cpp can include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/paged_attention.h"

namespace flashserve::cuda {

// out[i, :] = table[ids[i], :]
void embedding_bf16(void* out,             // [n, hidden] bf16
                    const int32_t* ids,    // [n]
                    const void* table,     // [vocab, hidden] bf16
                    int n, int hidden, int vocab, cudaStream_t stream);
// out = x * rsqrt(mean(x^2) + eps) * w per row; out may alias x.
void rms_norm_bf16(void* out, const void* x,  // [n, hidden] bf16
                   const void* w,             // [hidden] bf16
                   int n, int hidden, float eps, cudaStream_t stream);
// Rotate-half RoPE in place on q and k.
void rope_bf16(void* q,                   // [n, hq, d] bf16
               void* k,                   // [n, hkv, d] bf16
               const int32_t* positions,  // [n]
               const float* inv_freq,     // [d / 2]
               int n, int hq, int hkv, int d, cudaStream_t stream);
// out = silu(gate) * up; out may alias either.
void swiglu_bf16(void* out, const void* gate, const void* up, int64_t numel,
                 cudaStream_t stream);
// out = a + b; out may alias either.
void add_bf16(void* out, const void* a, const void* b, int64_t numel, cudaStream_t stream);
// x[r, :] += bias for every row r, in place.
void add_bias_bf16(void* x,           // [n, width] bf16
                   const void* bias,  // [width] bf16
                   int n, int width, cudaStream_t stream);
// Per-head RMSNorm in place of the first hq + hkv heads of each token (q with q_w, k with k_w);
// the v heads after them are untouched.
void qk_norm_bf16(void* qkv,                     // [n, hq + 2 hkv, d] bf16
                  const void* q_w, const void* k_w,  // [d] bf16 each
                  int n, int hq, int hkv, int d, float eps, cudaStream_t stream);
// out[r] = x[row_ids[r]] (rows of `row_bytes` bytes).
void gather_rows(void* out, const void* x, const int32_t* row_ids, int rows, int row_bytes,
                 cudaStream_t stream);
// cache[slot[t]] = k[t], v likewise (slot < 0: skipped).
void write_kv_bf16(void* k_cache, void* v_cache,  // [blocks, block_size, hkv, d] bf16
                   const void* k, const void* v,  // [n, hkv, d] bf16
                   const int32_t* slot_mapping,   // [n]
                   int n, int hkv, int d, cudaStream_t stream);
// Simple, correct causal paged attention for any head_dim (fp32 math, one block per
// (token, q head)); the fallback for head dims the fast kernels do not cover.
void paged_attention_generic_bf16(const PagedAttentionArgs& args, int num_tokens,
                                  const void* q,        // [n, hq, d] bf16
                                  const void* k_cache,  // [blocks, bs, hkv, d] bf16
                                  const void* v_cache,  // [blocks, bs, hkv, d] bf16
                                  void* out,            // [n, hq, d] bf16
                                  cudaStream_t stream,
                                  int max_kv_len);      // longest kv_lens[s] (smem size)
// x += delta (rounded to bf16); out = rms_norm(x) * w. out may alias delta.
void add_rms_norm_bf16(void* out, void* x, const void* delta,  // [n, hidden] bf16
                       const void* w,                           // [hidden] bf16
                       int n, int hidden, float eps, cudaStream_t stream);
// The same with the sum going to x_out (which may be x_in): x_out = x_in + delta.
void add_rms_norm_out_bf16(void* out, void* x_out, const void* x_in,  // [n, hidden] bf16
                           const void* delta,                         // [n, hidden] bf16
                           const void* w,                             // [hidden] bf16
                           int n, int hidden, float eps, cudaStream_t stream);
// Splits qkv rows [q | k | v], RoPE-turns q and k, writes q to `q` and k, v to the cache slots
// (slot < 0: skipped), and the turned k also to `k_rows` when given (the prefill kernel's fresh
// K rows, cuda::FreshKv; the same bf16 values the cache receives).
void qkv_rope_write_kv_bf16(void* q,                       // [n, hq, d] bf16
                            void* k_cache, void* v_cache,  // [blocks, bs, hkv, d] bf16
                            const void* qkv,               // [n, (hq + 2 hkv) d] bf16
                            const int32_t* positions,      // [n]
                            const float* inv_freq,         // [d / 2]
                            const int32_t* slot_mapping,   // [n]
                            int n, int hq, int hkv, int d, cudaStream_t stream,
                            void* k_rows = nullptr);       // [n, hkv, d] bf16 or nullptr
// out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i]
void swiglu_fused_bf16(void* out,            // [n, inter] bf16
                       const void* gate_up,  // [n, 2 inter] bf16
                       int n, int inter, cudaStream_t stream);
// ids[r] = argmax of row r (ties to the lowest index), -1 if the row holds a NaN.
void argmax_rows_f32(int32_t* ids,          // [rows]
                     const float* logits,   // [rows, cols]
                     int rows, int cols, cudaStream_t stream);
// dst = float_to_bf16(src)
void f32_to_bf16(void* dst, const float* src, int64_t numel, cudaStream_t stream);

}  // namespace flashserve::cuda

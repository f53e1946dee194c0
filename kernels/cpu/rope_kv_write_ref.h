// CPU reference twins of RoPE and the KV-cache write (kernels/rope_kv_write.h): plain loops, the
// rotation angle in double. They are the CPU backend's ops and the oracle the CUDA kernels are
// tested against (tests/kernels/test_rope_kv_write.cpp). All pointers are host pointers.
#pragma once

#include <cstdint>

namespace flashserve::ref {

// Rotate-half RoPE in place: pair (i, i + head_dim/2) of every head turns by
// positions[t] * inv_freq[i].
void rope(float* q,                  // [n, num_q_heads, head_dim]
          float* k,                  // [n, num_kv_heads, head_dim]
          const int32_t* positions,  // [n]
          const float* inv_freq,     // [head_dim / 2]
          int64_t n, int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim);

// Row t of k and v to cache slot slots[t] (rows of row_bytes bytes: any dtype). A slot < 0 is
// skipped (a padded row, as the kernel does); one >= num_slots throws flashserve::Error.
void write_kv(void* k_cache, void* v_cache,  // [num_slots, row_bytes] each
              const void* k, const void* v,  // [n, row_bytes] each
              const int32_t* slots,          // [n]
              int64_t n, int64_t row_bytes, int64_t num_slots);

// Splits qkv rows [q | k | v], turns q and k by rope(), writes q to `q` and k, v to their cache
// slots as write_kv(). kv_rows receives the split rows: the turned k (what the CUDA kernel's
// optional k_rows gets), then v.
void qkv_rope_write_kv(float* q,                  // [n, num_q_heads, head_dim]
                       float* k_cache,            // [num_slots, num_kv_heads, head_dim]
                       float* v_cache,            // [num_slots, num_kv_heads, head_dim]
                       const float* qkv,          // [n, (num_q_heads + 2 num_kv_heads) head_dim]
                       const int32_t* positions,  // [n]
                       const float* inv_freq,     // [head_dim / 2]
                       const int32_t* slots,      // [n]
                       int64_t n, int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim,
                       int64_t num_slots,
                       float* kv_rows);           // [2, n, num_kv_heads, head_dim] scratch

}  // namespace flashserve::ref

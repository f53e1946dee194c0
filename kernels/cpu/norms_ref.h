// CPU reference twins of the RMSNorm kernels (kernels/norms.h): plain fp32 loops with a double
// sum of squares. They are the CPU backend's norms and the oracle the CUDA kernels are tested
// against (tests/kernels/test_norms.cpp). All pointers are host pointers.
#pragma once

#include <cstdint>

namespace flashserve::ref {

// out = x / sqrt(mean(x^2) + eps) * w, per row; out may alias x.
void rms_norm(float* out,        // [n, hidden]
              const float* x,    // [n, hidden]
              const float* w,    // [hidden]
              int64_t n, int64_t hidden, float eps);

// x_out = x_in + delta over all rows, then out = rms_norm(x_out) * w. x_out may alias x_in,
// out may alias delta. (The CUDA kernel rounds x_out to bf16 before norming it.)
void add_rms_norm(float* out,          // [n, hidden]
                  float* x_out,        // [n, hidden]
                  const float* x_in,   // [n, hidden]
                  const float* delta,  // [n, hidden]
                  const float* w,      // [hidden]
                  int64_t n, int64_t hidden, float eps);

// Per-head RMSNorm in place: heads [0, num_q_heads) of each token with q_w, the next
// num_kv_heads with k_w; the v heads after them are left alone.
void qk_norm(float* qkv,         // [n, num_q_heads + 2 num_kv_heads, head_dim]
             const float* q_w,   // [head_dim]
             const float* k_w,   // [head_dim]
             int64_t n, int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim, float eps);

}  // namespace flashserve::ref

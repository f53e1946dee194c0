// Host launchers of the RMSNorm kernels (kernels/cuda/norms.cu): per row, with the residual add
// in front, and per q/k head (Qwen3). bf16 storage (raw bits on the host side), fp32 math; CPU
// twins in kernels/cpu/norms_ref.h. Every launcher checks the launch and throws
// flashserve::Error. C++17-clean, so host .cpp files include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace flashserve::cuda {

// out = x * rsqrt(mean(x^2) + eps) * w per row; out may alias x.
void rms_norm_bf16(void* out, const void* x,  // [n, hidden] bf16
                   const void* w,             // [hidden] bf16
                   int n, int hidden, float eps, cudaStream_t stream);

// x += delta (rounded to bf16); out = rms_norm(x) * w. out may alias delta.
void add_rms_norm_bf16(void* out, void* x, const void* delta,  // [n, hidden] bf16
                       const void* w,                           // [hidden] bf16
                       int n, int hidden, float eps, cudaStream_t stream);

// The same with the sum going to x_out (which may be x_in): x_out = x_in + delta.
void add_rms_norm_out_bf16(void* out, void* x_out, const void* x_in,  // [n, hidden] bf16
                           const void* delta,                         // [n, hidden] bf16
                           const void* w,                             // [hidden] bf16
                           int n, int hidden, float eps, cudaStream_t stream);

// Per-head RMSNorm in place of the first hq + hkv heads of each token (q with q_w, k with k_w);
// the v heads after them are untouched.
void qk_norm_bf16(void* qkv,                     // [n, hq + 2 hkv, d] bf16
                  const void* q_w, const void* k_w,  // [d] bf16 each
                  int n, int hq, int hkv, int d, float eps, cudaStream_t stream);

}  // namespace flashserve::cuda

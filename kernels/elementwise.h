// Host launchers of the elementwise kernels (kernels/cuda/elementwise.cu): SwiGLU and GeGLU, the
// residual and bias adds, scaling, logit soft-capping and the f32 -> bf16 conversion. bf16 storage,
// fp32 math; CPU twins in kernels/cpu/elementwise_ref.h. Every launcher checks the launch and
// throws flashserve::Error. C++17-clean, so host .cpp files include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace flashserve::cuda {

// out = silu(gate) * up; out may alias either.
void swiglu_bf16(void* out, const void* gate, const void* up, int64_t numel,
                 cudaStream_t stream);

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i]
void swiglu_fused_bf16(void* out,            // [n, inter] bf16
                       const void* gate_up,  // [n, 2 inter] bf16
                       int n, int inter, cudaStream_t stream);

// out[r, i] = gelu_tanh(gate_up[r, i]) * gate_up[r, inter + i] (ref::geglu_fused)
void geglu_fused_bf16(void* out,            // [n, inter] bf16
                      const void* gate_up,  // [n, 2 inter] bf16
                      int n, int inter, cudaStream_t stream);

// x *= factor, in place.
void scale_bf16(void* x,  // [numel] bf16
                float factor, int64_t numel, cudaStream_t stream);

// x = cap * tanh(x / cap), in place.
void softcap_f32(float* x,  // [numel]
                 float cap, int64_t numel, cudaStream_t stream);

// out = a + b; out may alias either.
void add_bf16(void* out, const void* a, const void* b, int64_t numel, cudaStream_t stream);

// x[r, :] += bias for every row r, in place.
void add_bias_bf16(void* x,           // [n, width] bf16
                   const void* bias,  // [width] bf16
                   int n, int width, cudaStream_t stream);

// x[r, :] += bias for every row r, in place, in f32 (the router logits of gpt-oss).
void add_bias_f32(float* x,            // [n, width]
                  const float* bias,   // [width]
                  int n, int width, cudaStream_t stream);

// dst = float_to_bf16(src)
void f32_to_bf16(void* dst, const float* src, int64_t numel, cudaStream_t stream);

}  // namespace flashserve::cuda

// CPU reference twins of the elementwise kernels (kernels/elementwise.h): plain fp32 loops. They
// are the CPU backend's ops and the oracle the CUDA kernels are tested against
// (tests/kernels/test_elementwise.cpp). All pointers are host pointers.
#pragma once

#include <cstdint>

namespace flashserve::ref {

// out = silu(gate) * up = gate / (1 + exp(-gate)) * up; out may alias either.
void swiglu(float* out, const float* gate, const float* up, int64_t numel);  // all [numel]

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i]
void swiglu_fused(float* out,            // [n, inter]
                  const float* gate_up,  // [n, 2 inter]
                  int64_t n, int64_t inter);

// out[r, i] = gelu_tanh(gate_up[r, i]) * gate_up[r, inter + i] (Gemma's GeGLU), with
// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), PyTorch's approximate="tanh".
void geglu_fused(float* out,            // [n, inter]
                 const float* gate_up,  // [n, 2 inter]
                 int64_t n, int64_t inter);

// x *= factor, in place.
void scale(float* x, float factor, int64_t numel);  // [numel]

// x = cap * tanh(x / cap), in place (logit soft-capping).
void softcap(float* x, float cap, int64_t numel);  // [numel]

// out = a + b; out may alias either.
void add(float* out, const float* a, const float* b, int64_t numel);  // all [numel]

// x[r, :] += bias for every row r, in place.
void add_bias(float* x,           // [n, width]
              const float* bias,  // [width]
              int64_t n, int64_t width);

// dst = src rounded to bf16 (nearest, ties to even; raw bits).
void f32_to_bf16(uint16_t* dst, const float* src, int64_t numel);  // both [numel]

}  // namespace flashserve::ref

// CPU twins of the elementwise kernels: one plain loop each.
#include "kernels/cpu/elementwise_ref.h"

#include <cmath>

#include "core/dtype.h"

namespace flashserve::ref {

void swiglu(float* out, const float* gate, const float* up, int64_t numel) {
  for (int64_t i = 0; i < numel; ++i) {
    const float g = gate[i];
    out[i] = g / (1.f + std::exp(-g)) * up[i];
  }
}

void swiglu_fused(float* out, const float* gate_up, int64_t n, int64_t inter) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < inter; ++i) {
      const float g = gate_up[r * 2 * inter + i], u = gate_up[r * 2 * inter + inter + i];
      out[r * inter + i] = g / (1.f + std::exp(-g)) * u;
    }
}

namespace {
float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.f + std::tanh(k * (x + 0.044715f * x * x * x)));
}
}  // namespace

void geglu_fused(float* out, const float* gate_up, int64_t n, int64_t inter) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < inter; ++i)
      out[r * inter + i] =
          gelu_tanh(gate_up[r * 2 * inter + i]) * gate_up[r * 2 * inter + inter + i];
}

void scale(float* x, float factor, int64_t numel) {
  for (int64_t i = 0; i < numel; ++i) x[i] *= factor;
}

void softcap(float* x, float cap, int64_t numel) {
  for (int64_t i = 0; i < numel; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void add(float* out, const float* a, const float* b, int64_t numel) {
  for (int64_t i = 0; i < numel; ++i) out[i] = a[i] + b[i];
}

void add_bias(float* x, const float* bias, int64_t n, int64_t width) {
  for (int64_t r = 0; r < n; ++r) {
    float* xr = x + r * width;
    for (int64_t c = 0; c < width; ++c) xr[c] += bias[c];
  }
}

void f32_to_bf16(uint16_t* dst, const float* src, int64_t numel) {
  for (int64_t i = 0; i < numel; ++i) dst[i] = float_to_bf16_bits(src[i]);
}

}  // namespace flashserve::ref

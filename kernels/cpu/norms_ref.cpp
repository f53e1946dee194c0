// CPU twins of the RMSNorm kernels: plain loops, double sums of squares.
#include "kernels/cpu/norms_ref.h"

#include <cmath>

#include "kernels/cpu/elementwise_ref.h"

namespace flashserve::ref {

void rms_norm(float* out, const float* x, const float* w, int64_t n, int64_t hidden, float eps) {
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * hidden;
    float* o = out + r * hidden;
    double ss = 0.0;
    for (int64_t c = 0; c < hidden; ++c) ss += double(xr[c]) * xr[c];
    const float inv = float(1.0 / std::sqrt(ss / double(hidden) + double(eps)));
    for (int64_t c = 0; c < hidden; ++c) o[c] = xr[c] * inv * w[c];
  }
}

void add_rms_norm(float* out, float* x_out, const float* x_in, const float* delta, const float* w,
                  int64_t n, int64_t hidden, float eps) {
  add(x_out, x_in, delta, n * hidden);
  rms_norm(out, x_out, w, n, hidden, eps);
}

void qk_norm(float* qkv, const float* q_w, const float* k_w, int64_t n, int64_t num_q_heads,
             int64_t num_kv_heads, int64_t head_dim, float eps) {
  const int64_t heads = num_q_heads + 2 * num_kv_heads, d = head_dim;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < num_q_heads + num_kv_heads; ++h) {
      float* v = qkv + (t * heads + h) * d;
      const float* w = h < num_q_heads ? q_w : k_w;
      double ss = 0.0;
      for (int64_t i = 0; i < d; ++i) ss += double(v[i]) * v[i];
      const float inv = float(1.0 / std::sqrt(ss / double(d) + double(eps)));
      for (int64_t i = 0; i < d; ++i) v[i] = v[i] * inv * w[i];
    }
}

}  // namespace flashserve::ref

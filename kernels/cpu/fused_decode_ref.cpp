// CPU reference twin of the fused decode op (see the header).
#include "kernels/cpu/fused_decode_ref.h"

#include <cmath>
#include <vector>

#include "core/error.h"

namespace flashserve::ref {
namespace {

// out[r, j] = sum_c h[r, c] * w[j, c], in double.
void matmul_rows(float* out, const std::vector<float>& h, const float* w, int m, int n, int k) {
  for (int r = 0; r < m; ++r)
    for (int j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int c = 0; c < k; ++c) acc += double(h[size_t(r) * k + c]) * w[size_t(j) * k + c];
      out[size_t(r) * n + j] = float(acc);
    }
}

}  // namespace

void add_rms_norm_matmul(float* out, float* x_out, const float* x, const float* delta,
                         const float* norm_w, float eps, const float* w, int m, int n, int k,
                         DType act) {
  FS_CHECK(m >= 0 && n >= 0 && k > 0, "add_rms_norm_matmul: m ", m, " n ", n, " k ", k);
  std::vector<float> h(size_t(m) * k);
  for (int r = 0; r < m; ++r) {
    float* s = h.data() + size_t(r) * k;
    double ss = 0.0;
    for (int c = 0; c < k; ++c) {
      const size_t i = size_t(r) * k + c;
      s[c] = delta != nullptr ? round_to(act, x[i] + delta[i]) : x[i];
      if (delta != nullptr && x_out != nullptr) x_out[i] = s[c];
      ss += double(s[c]) * s[c];
    }
    const float inv = float(1.0 / std::sqrt(ss / k + double(eps)));
    for (int c = 0; c < k; ++c) s[c] = round_to(act, s[c] * inv * norm_w[c]);
  }
  matmul_rows(out, h, w, m, n, k);
}

}  // namespace flashserve::ref

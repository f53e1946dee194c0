// The FP8 kernels' CPU twins (fp8_matmul_ref.h).
#include "kernels/cpu/fp8_matmul_ref.h"

#include <algorithm>
#include <cmath>

#include "core/fp8.h"

namespace flashserve::ref {

void matmul_fp8(float* out, const float* x, const uint8_t* w, const float* w_scale, int m, int n,
                int k) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int c = 0; c < k; ++c)
        acc += double(x[size_t(i) * k + c]) * fp8_e4m3_to_float(w[size_t(j) * k + c]);
      out[size_t(i) * n + j] = float(acc * w_scale[j]);
    }
}

void dequantize_fp8(float* out, const uint8_t* w, const float* w_scale, int n, int k) {
  for (int j = 0; j < n; ++j)
    for (int c = 0; c < k; ++c)
      out[size_t(j) * k + c] = fp8_e4m3_to_float(w[size_t(j) * k + c]) * w_scale[j];
}

void quantize_rows_fp8(uint8_t* q, float* scale, const float* x, int m, int k) {
  for (int i = 0; i < m; ++i) {
    const float* row = x + size_t(i) * k;
    float amax = 0.f;
    for (int c = 0; c < k; ++c) amax = std::max(amax, std::fabs(row[c]));
    const bool scaled = amax >= kFp8MinRowAmax;
    const float inv = scaled ? kFp8E4M3Max / amax : 1.f;
    scale[i] = scaled ? amax / kFp8E4M3Max : 1.f;
    for (int c = 0; c < k; ++c) q[size_t(i) * k + c] = float_to_fp8_e4m3(row[c] * inv);
  }
}

void scale_rows_cols(float* out, const float* row_scale, const float* col_scale, int m, int n) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) out[size_t(i) * n + j] *= row_scale[i] * col_scale[j];
}

}  // namespace flashserve::ref

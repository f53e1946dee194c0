// The FP8 weight-only kernels' CPU twins (fp8_matmul_ref.h).
#include "kernels/cpu/fp8_matmul_ref.h"

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

}  // namespace flashserve::ref

// The block-wise FP8 matmul's CPU twin (block_fp8_matmul_ref.h).
#include "kernels/cpu/block_fp8_matmul_ref.h"

#include <algorithm>

#include "core/fp8.h"

namespace flashserve::ref {

void matmul_block_fp8(float* out, const float* x, const uint8_t* w, const float* scales, int m,
                      int n, int k, int block_n, int block_k) {
  const int blocks_k = (k + block_k - 1) / block_k;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int b = 0; b < blocks_k; ++b) {
        double part = 0;
        for (int c = b * block_k; c < std::min(k, (b + 1) * block_k); ++c)
          part += double(fp8_e4m3_to_float(w[int64_t(j) * k + c])) * x[int64_t(i) * k + c];
        acc += part * scales[int64_t(j / block_n) * blocks_k + b];
      }
      out[int64_t(i) * n + j] = float(acc);
    }
}

}  // namespace flashserve::ref

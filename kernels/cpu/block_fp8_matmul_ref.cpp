// The block-wise FP8 kernels' CPU twins (block_fp8_matmul_ref.h).
#include "kernels/cpu/block_fp8_matmul_ref.h"

#include <algorithm>
#include <cmath>

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

void dequantize_block_fp8(float* out, const uint8_t* w, const float* scales, int n, int k,
                          int block_n, int block_k) {
  const int blocks_k = (k + block_k - 1) / block_k;
  for (int j = 0; j < n; ++j)
    for (int c = 0; c < k; ++c)
      out[int64_t(j) * k + c] = fp8_e4m3_to_float(w[int64_t(j) * k + c]) *
                                scales[int64_t(j / block_n) * blocks_k + c / block_k];
}

void quantize_blocks_fp8(uint8_t* q, float* scales, const float* x, int m, int k) {
  constexpr int kBlock = 128;
  for (int i = 0; i < m; ++i)
    for (int b = 0; b * kBlock < k; ++b) {
      const int end = std::min(k, (b + 1) * kBlock);
      float amax = 0.f;
      for (int c = b * kBlock; c < end; ++c)
        amax = std::max(amax, std::fabs(x[int64_t(i) * k + c]));
      const bool scaled = amax >= kFp8MinRowAmax;
      const float inv = scaled ? kFp8E4M3Max / amax : 1.f;
      scales[int64_t(b) * m + i] = scaled ? amax / kFp8E4M3Max : 1.f;
      for (int c = b * kBlock; c < end; ++c)
        q[int64_t(i) * k + c] = float_to_fp8_e4m3(x[int64_t(i) * k + c] * inv);
    }
}

}  // namespace flashserve::ref

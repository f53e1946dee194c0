// The int4 matmul's CPU twin (int4_matmul_ref.h).
#include "kernels/cpu/int4_matmul_ref.h"

#include <cstddef>
#include <vector>

namespace flashserve::ref {

void matmul_int4(float* out, const float* x, const uint8_t* packed, const float* scales,
                 const uint8_t* zeros, const int32_t* perm, int m, int n, int k, int group_size) {
  const int groups = k / group_size;
  std::vector<float> xp(static_cast<std::size_t>(k));  // one row of x in the weight's column order
  for (int i = 0; i < m; ++i) {
    for (int c = 0; c < k; ++c) xp[std::size_t(c)] = x[int64_t(i) * k + (perm ? perm[c] : c)];
    for (int j = 0; j < n; ++j) {
      const uint8_t* row = packed + int64_t(j) * (k / 2);
      double acc = 0;
      for (int g = 0; g < groups; ++g) {
        const int zero = zeros[int64_t(j) * groups + g];
        const double scale = scales[int64_t(j) * groups + g];
        double part = 0;
        for (int c = g * group_size; c < (g + 1) * group_size; ++c) {
          const int code = c % 2 ? row[c / 2] >> 4 : row[c / 2] & 0xF;
          part += double(code - zero) * xp[std::size_t(c)];
        }
        acc += part * scale;
      }
      out[int64_t(i) * n + j] = float(acc);
    }
  }
}

}  // namespace flashserve::ref

// The grouped GEMM's CPU twin (kernels/cpu/moe_grouped_gemm_ref.h).
#include "kernels/cpu/moe_grouped_gemm_ref.h"

#include "core/error.h"

namespace flashserve::ref {

void moe_grouped_gemm(float* out, const float* a, const int32_t* offsets, const float* w, int num_experts,
                      int n, int k) {
  FS_CHECK(num_experts >= 1 && n >= 1 && k >= 1, "moe_grouped_gemm: bad sizes");
  FS_CHECK(offsets[0] >= 0, "moe_grouped_gemm: offsets[0] is negative");
  for (int e = 0; e < num_experts; ++e) {
    FS_CHECK(offsets[e + 1] >= offsets[e], "moe_grouped_gemm: offsets decrease at expert ", e);
    const float* we = w + int64_t(e) * n * k;
    for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
      const float* x = a + r * k;
      for (int j = 0; j < n; ++j) {
        const float* wr = we + int64_t(j) * k;
        double s = 0;
        for (int c = 0; c < k; ++c) s += double(x[c]) * double(wr[c]);
        out[r * n + j] = float(s);
      }
    }
  }
}

}  // namespace flashserve::ref

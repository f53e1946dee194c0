// kernels/cpu/mxfp4_ref.h: the MXFP4 references, written for clarity, not speed.
#include "kernels/cpu/mxfp4_ref.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/fp4.h"

namespace flashserve::ref {

namespace {
// Row r of w as floats.
void dequantize_row(float* out, const Mxfp4Ref& w, int64_t r) {
  const uint8_t* b = w.blocks + r * (w.cols / 2);
  const uint8_t* s = w.scales + r * (w.cols / kMxfp4Block);
  for (int64_t c = 0; c < w.cols; c += 2) {
    const float scale = e8m0_to_float(s[c / kMxfp4Block]);
    out[c] = e2m1_to_float(b[c / 2] & 0xf) * scale;
    out[c + 1] = e2m1_to_float(b[c / 2] >> 4) * scale;
  }
}
}  // namespace

void mxfp4_dequantize(float* out, const Mxfp4Ref& w) {
  FS_CHECK(w.cols % kMxfp4Block == 0, "MXFP4 weight of ", w.cols, " columns (not a multiple of 32)");
  for (int64_t r = 0; r < w.rows; ++r) dequantize_row(out + r * w.cols, w, r);
}

void mxfp4_matmul(float* out, const float* x, const Mxfp4Ref& w, const float* bias, int64_t m) {
  FS_CHECK(w.cols % kMxfp4Block == 0, "MXFP4 weight of ", w.cols, " columns (not a multiple of 32)");
  std::vector<float> row(size_t(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(row.data(), w, r);
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * w.cols;
      double s = bias ? bias[r] : 0.0;
      for (int64_t c = 0; c < w.cols; ++c) s += double(row[size_t(c)]) * xi[c];
      out[i * w.rows + r] = float(s);
    }
  }
}

void swiglu_clamped(float* out, const float* gate_up, int64_t n, int64_t inter, float limit,
                    float alpha) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < inter; ++i) {
      const double g = std::min(double(gate_up[t * 2 * inter + 2 * i]), double(limit));
      const double u = std::clamp(double(gate_up[t * 2 * inter + 2 * i + 1]), -double(limit),
                                  double(limit));
      out[t * inter + i] = float((u + 1.0) * g / (1.0 + std::exp(-double(alpha) * g)));
    }
}

Mxfp4Ref expert_gate_up(const Mxfp4Experts& x, int e) {
  const int64_t rows = 2 * x.inter;
  return {x.gate_up_blocks + e * rows * (x.hidden / 2),
          x.gate_up_scales + e * rows * (x.hidden / kMxfp4Block), rows, x.hidden};
}

Mxfp4Ref expert_down(const Mxfp4Experts& x, int e) {
  return {x.down_blocks + e * x.hidden * (x.inter / 2),
          x.down_scales + e * x.hidden * (x.inter / kMxfp4Block), x.hidden, x.inter};
}

void mxfp4_moe_experts(float* out, const float* x, const int32_t* ids, const float* weights,
                       const Mxfp4Experts& ex, int64_t n, int top_k) {
  std::vector<float> gu(size_t(2 * ex.inter)), act(size_t(ex.inter)), y(size_t(ex.hidden));
  std::vector<double> acc(size_t(ex.hidden));
  for (int64_t t = 0; t < n; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int j = 0; j < top_k; ++j) {
      const int e = ids[t * top_k + j];
      FS_CHECK(e >= 0 && e < ex.num_experts, "expert id ", e, " of ", ex.num_experts);
      mxfp4_matmul(gu.data(), x + t * ex.hidden, expert_gate_up(ex, e), ex.gate_up_bias + e * 2 * ex.inter, 1);
      swiglu_clamped(act.data(), gu.data(), 1, ex.inter, ex.limit, ex.alpha);
      mxfp4_matmul(y.data(), act.data(), expert_down(ex, e), ex.down_bias + e * ex.hidden, 1);
      for (int64_t h = 0; h < ex.hidden; ++h) acc[size_t(h)] += double(weights[t * top_k + j]) * y[size_t(h)];
    }
    for (int64_t h = 0; h < ex.hidden; ++h) out[t * ex.hidden + h] = float(acc[size_t(h)]);
  }
}

}  // namespace flashserve::ref

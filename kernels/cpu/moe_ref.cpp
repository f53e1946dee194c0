// kernels/cpu/moe_ref.h: the MoE references, written for clarity, not speed.
#include "kernels/cpu/moe_ref.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace flashserve::ref {

void moe_route(int32_t* ids, float* weights, const float* logits, int64_t n, int num_experts,
               int top_k, bool renormalize) {
  FS_CHECK(top_k >= 1 && top_k <= num_experts, "top_k ", top_k, " of ", num_experts, " experts");
  std::vector<int> order(num_experts);
  for (int64_t t = 0; t < n; ++t) {
    const float* row = logits + t * num_experts;
    std::iota(order.begin(), order.end(), 0);
    // Stable: equal logits keep the lower expert id first.
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
    const float max = row[order[0]];
    double denom = 0;
    for (int e = 0; e < num_experts; ++e) denom += std::exp(double(row[e]) - max);
    double picked = 0;
    for (int j = 0; j < top_k; ++j) picked += std::exp(double(row[order[j]]) - max);
    for (int j = 0; j < top_k; ++j) {
      ids[t * top_k + j] = order[j];
      const double p = std::exp(double(row[order[j]]) - max);
      weights[t * top_k + j] = float(p / (renormalize ? picked : denom));
    }
  }
}

void moe_experts(float* out, const float* x, const int32_t* ids, const float* weights,
                 std::span<const float* const> gate_up, std::span<const float* const> down,
                 int64_t n, int top_k, int64_t hidden, int64_t intermediate) {
  FS_CHECK(gate_up.size() == down.size(), "experts: ", gate_up.size(), " gate/up and ",
           down.size(), " down projections");
  std::vector<double> acc(hidden);
  std::vector<float> act(intermediate);
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * hidden;
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int j = 0; j < top_k; ++j) {
      const int e = ids[t * top_k + j];
      FS_CHECK(e >= 0 && size_t(e) < gate_up.size(), "expert id ", e, " of ", gate_up.size());
      const float* gu = gate_up[e];
      for (int64_t i = 0; i < intermediate; ++i) {
        double g = 0, u = 0;
        const float* grow = gu + i * hidden;
        const float* urow = gu + (intermediate + i) * hidden;
        for (int64_t c = 0; c < hidden; ++c) {
          g += double(grow[c]) * xt[c];
          u += double(urow[c]) * xt[c];
        }
        act[i] = float(g / (1.0 + std::exp(-g)) * u);
      }
      const double w = weights[t * top_k + j];
      for (int64_t h = 0; h < hidden; ++h) {
        const float* drow = down[e] + h * intermediate;
        double s = 0;
        for (int64_t i = 0; i < intermediate; ++i) s += double(drow[i]) * act[i];
        acc[h] += w * s;
      }
    }
    for (int64_t h = 0; h < hidden; ++h) out[t * hidden + h] = float(acc[h]);
  }
}

void add_sigmoid_gated(float* out, const float* y, const float* gate_logit, int64_t n,
                       int64_t hidden) {
  for (int64_t r = 0; r < n; ++r) {
    const float s = float(1.0 / (1.0 + std::exp(-double(gate_logit[r]))));
    for (int64_t h = 0; h < hidden; ++h) out[r * hidden + h] += s * y[r * hidden + h];
  }
}

}  // namespace flashserve::ref

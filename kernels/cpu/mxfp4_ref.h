// CPU reference twins of the MXFP4 kernels (kernels/mxfp4.h; the format: core/fp4.h): the
// dequantized weight, the product x · wᵀ, gpt-oss's clamped SwiGLU and its experts (MXFP4 with
// biases, kernels/mxfp4_experts.h), as plain loops with double accumulators. They are the CPU backend's ops and the
// oracle the CUDA kernels are tested against. All pointers are host pointers.
#pragma once

#include <cstdint>

#include "kernels/mxfp4_experts.h"

namespace flashserve::ref {

// One MXFP4 weight [rows, cols] (cols a multiple of 32), as core/fp4.h lays it out.
struct Mxfp4Ref {
  const uint8_t* blocks = nullptr;  // [rows, cols / 2]
  const uint8_t* scales = nullptr;  // [rows, cols / 32]
  int64_t rows = 0, cols = 0;
};

// out[r, c] = the weight's value at (r, c).
void mxfp4_dequantize(float* out,  // [rows, cols]
                      const Mxfp4Ref& w);

// out[i, r] = x[i, :] · w[r, :] (+ bias[r]), double accumulation.
void mxfp4_matmul(float* out,         // [m, w.rows]
                  const float* x,     // [m, w.cols]
                  const Mxfp4Ref& w,
                  const float* bias,  // [w.rows] or null
                  int64_t m);

// gpt-oss's activation on interleaved gate/up columns (gate = even, up = odd):
//   g = min(gate, limit), u = clamp(up, -limit, limit), out = (u + 1) * g * sigmoid(alpha * g).
void swiglu_clamped(float* out,            // [n, inter]
                    const float* gate_up,  // [n, 2 * inter] interleaved
                    int64_t n, int64_t inter, float limit, float alpha);

// Expert e's projections of `experts` as single weights.
Mxfp4Ref expert_gate_up(const Mxfp4Experts& experts, int e);
Mxfp4Ref expert_down(const Mxfp4Experts& experts, int e);

// out[t] = sum_j weights[t, j] * (down_e · swiglu_clamped(gate_up_e · x[t] + bu_e) + bd_e),
// e = ids[t, j].
void mxfp4_moe_experts(float* out,             // [n, hidden]
                       const float* x,         // [n, hidden]
                       const int32_t* ids,     // [n, top_k]
                       const float* weights,   // [n, top_k]
                       const Mxfp4Experts& experts, int64_t n, int top_k);

}  // namespace flashserve::ref

// CPU reference twins of the MXFP4 kernels (kernels/mxfp4.h; the format: core/fp4.h): the
// dequantized weight, the product x · wᵀ, gpt-oss's clamped SwiGLU and its experts (MXFP4 with
// biases), as plain loops with double accumulators. They are the CPU backend's ops and the
// oracle the CUDA kernels are tested against. All pointers are host pointers.
#pragma once

#include <cstdint>

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

// gpt-oss's experts: every expert e has gate_up [2 inter, hidden] (rows interleaved gate/up)
// and down [hidden, inter], both MXFP4 and stacked over the experts, with f32 biases.
struct Mxfp4ExpertsRef {
  const uint8_t* gate_up_blocks = nullptr;  // [E, 2 inter, hidden / 2]
  const uint8_t* gate_up_scales = nullptr;  // [E, 2 inter, hidden / 32]
  const float* gate_up_bias = nullptr;      // [E, 2 inter]
  const uint8_t* down_blocks = nullptr;     // [E, hidden, inter / 2]
  const uint8_t* down_scales = nullptr;     // [E, hidden, inter / 32]
  const float* down_bias = nullptr;         // [E, hidden]
  int num_experts = 0;
  int64_t hidden = 0, inter = 0;
  float limit = 7.f, alpha = 1.702f;
  // Expert e's projections as single weights.
  Mxfp4Ref gate_up(int e) const;
  Mxfp4Ref down(int e) const;
};

// out[t] = sum_j weights[t, j] * (down_e · swiglu_clamped(gate_up_e · x[t] + bu_e) + bd_e),
// e = ids[t, j].
void mxfp4_moe_experts(float* out,             // [n, hidden]
                       const float* x,         // [n, hidden]
                       const int32_t* ids,     // [n, top_k]
                       const float* weights,   // [n, top_k]
                       const Mxfp4ExpertsRef& experts, int64_t n, int top_k);

}  // namespace flashserve::ref

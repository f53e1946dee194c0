// CPU reference twins of the mixture-of-experts kernels (kernels/moe.h): routing (softmax,
// top-k, renormalise) and the routed experts' SwiGLU MLPs, as plain fp32 loops with double
// accumulators. They are the CPU backend's MoE ops and the oracle the CUDA kernels are tested
// against. All pointers are host pointers.
#pragma once

#include <cstdint>
#include <span>

namespace flashserve::ref {

// Per row: the top_k experts by logit, ties to the lower expert id (what torch.topk returns on
// the CPU for equal values), in descending order of logit; weights[j] = softmax(logits)[ids[j]],
// divided by the k weights' sum when `renormalize`.
void moe_route(int32_t* ids,          // [n, top_k]
               float* weights,        // [n, top_k]
               const float* logits,   // [n, num_experts]
               int64_t n, int num_experts, int top_k, bool renormalize);

// out[t] = sum_j weights[t, j] * down_e · (silu(gate_e · x[t]) * (up_e · x[t])), e = ids[t, j],
// where gate_up[e] holds expert e's gate rows then its up rows.
void moe_experts(float* out,                            // [n, hidden]
                 const float* x,                        // [n, hidden]
                 const int32_t* ids,                    // [n, top_k]
                 const float* weights,                  // [n, top_k]
                 std::span<const float* const> gate_up, // [num_experts] each [2 inter, hidden]
                 std::span<const float* const> down,    // [num_experts] each [hidden, inter]
                 int64_t n, int top_k, int64_t hidden, int64_t intermediate);

// out[r, :] += sigmoid(gate_logit[r]) * y[r, :] (Qwen2-MoE's shared expert gate).
void add_sigmoid_gated(float* out,               // [n, hidden]
                       const float* y,           // [n, hidden]
                       const float* gate_logit,  // [n]
                       int64_t n, int64_t hidden);

}  // namespace flashserve::ref

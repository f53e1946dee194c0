// CPU reference twin of the mixture-of-experts grouped GEMM (kernels/moe_grouped_gemm.h): each
// expert's rows times its weights, plain loops with double accumulators. The oracle the CUDA
// kernel is tested against. All pointers are host pointers.
#pragma once

#include <cstdint>

namespace flashserve::ref {

// out rows [offsets[e], offsets[e+1]) = a rows [offsets[e], offsets[e+1]) · w[e]ᵀ for every expert
// e; other rows of out are left as they are. offsets must be non-decreasing from offsets[0] >= 0.
void moe_grouped_gemm(float* out,              // [offsets[E], n]
                      const float* a,          // [offsets[E], k]
                      const int32_t* offsets,  // [num_experts + 1]
                      const float* w,          // [num_experts, n, k]
                      int num_experts, int n, int k);

}  // namespace flashserve::ref

// CPU reference twin of the block-wise FP8 weight matmul (weights/block_fp8_weights.h): one
// fp32 scale per block of block_n output rows x block_k input columns, applied to each block's
// partial dot product. Plain loops, double accumulation; host pointers.
#pragma once

#include <cstdint>

namespace flashserve::ref {

// out = x · Wᵀ, W[j, c] = decode(w[j, c]) * scales[j / block_n, c / block_k].
void matmul_block_fp8(float* out,           // [m, n]
                      const float* x,       // [m, k]
                      const uint8_t* w,     // [n, k] E4M3
                      const float* scales,  // [ceil(n / block_n), ceil(k / block_k)]
                      int m, int n, int k, int block_n, int block_k);

}  // namespace flashserve::ref

// CPU reference twins of the block-wise FP8 kernels (kernels/block_fp8.h; the weights of
// weights/block_fp8_weights.h): the matmul with one fp32 scale per block of block_n output rows
// x block_k input columns, applied to each block's partial dot product; the dequantized weight;
// activations quantized per token per 128 columns. Plain loops, double accumulation; host pointers.
#pragma once

#include <cstdint>

namespace flashserve::ref {

// out = x · Wᵀ, W[j, c] = decode(w[j, c]) * scales[j / block_n, c / block_k].
void matmul_block_fp8(float* out,           // [m, n]
                      const float* x,       // [m, k]
                      const uint8_t* w,     // [n, k] E4M3
                      const float* scales,  // [ceil(n / block_n), ceil(k / block_k)]
                      int m, int n, int k, int block_n, int block_k);

// out[j, c] = decode(w[j, c]) * scales[j / block_n, c / block_k] in f32 (exact).
void dequantize_block_fp8(float* out,           // [n, k]
                          const uint8_t* w,     // [n, k] E4M3
                          const float* scales,  // [ceil(n / block_n), ceil(k / block_k)]
                          int n, int k, int block_n, int block_k);

// Row i's columns [128 b, 128 b + 128) get scale amax / 448 (1 under kFp8MinRowAmax) in
// scales[b * m + i] and codes encode(x * (448 / amax)): cuda::quantize_blocks_fp8's twin.
void quantize_blocks_fp8(uint8_t* q,       // [m, k] E4M3
                         float* scales,    // [ceil(k / 128), m]
                         const float* x,   // [m, k]
                         int m, int k);

}  // namespace flashserve::ref

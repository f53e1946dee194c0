// CPU reference twins of the FP8 kernels (kernels/cuda/gemv.cu, fp8_dequantize.cu and
// fp8_quantize.cu; docs/FP8.md), written for obviousness: plain loops, double accumulation. w
// holds E4M3 codes (core/fp8.h) with one fp32 scale per row; row j of the weight is decode(w[j, :]) * w_scale[j]. All
// pointers are host pointers.
#pragma once

#include <cstdint>

namespace flashserve::ref {

// out = x · (decode(w) * w_scale)ᵀ, the scale applied to each output column's dot product
// (where the CUDA kernels apply it, in their epilogue).
void matmul_fp8(float* out,            // [m, n]
                const float* x,        // [m, k]
                const uint8_t* w,      // [n, k] E4M3
                const float* w_scale,  // [n]
                int m, int n, int k);

// out = decode(w) * w_scale per row, in fp32 (the CUDA kernel rounds it to bf16 once).
void dequantize_fp8(float* out,            // [n, k]
                    const uint8_t* w,      // [n, k] E4M3
                    const float* w_scale,  // [n]
                    int n, int k);

// Activations to FP8 with one scale per row (the W8A8 GEMM of larger steps, docs/FP8.md):
// scale[i] = amax_i / 448 and q[i, :] = encode(x[i, :] * (448 / amax_i)), a row whose amax is
// under kFp8MinRowAmax (core/fp8.h) keeping scale 1. Row i is then decode(q[i, :]) * scale[i].
void quantize_rows_fp8(uint8_t* q,      // [m, k] E4M3
                       float* scale,    // [m]
                       const float* x,  // [m, k]
                       int m, int k);

// out[i, j] = out[i, j] * (row_scale[i] * col_scale[j]) in fp32 (the CUDA kernel then rounds
// bf16 outputs once): an unscaled FP8 GEMM's output given its two scale vectors.
void scale_rows_cols(float* out,              // [m, n]
                     const float* row_scale,  // [m]
                     const float* col_scale,  // [n]
                     int m, int n);

}  // namespace flashserve::ref

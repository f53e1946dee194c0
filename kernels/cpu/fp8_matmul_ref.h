// CPU reference twins of the FP8 weight-only kernels (kernels/cuda/gemv_fp8.cu; docs/FP8.md),
// written for obviousness: plain loops, double accumulation. w holds E4M3 codes (core/fp8.h)
// with one fp32 scale per row; row j of the weight is decode(w[j, :]) * w_scale[j]. All
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

}  // namespace flashserve::ref

// CPU reference twin of the fused decode op Backend::add_rms_norm_matmul (the CUDA kernel is
// kernels/cuda/skinny_gemm.cuh's kAddNorm prologue), written for obviousness: plain loops,
// double accumulation. `act` is the dtype the fused op stores its intermediates in: kBF16
// rounds the residual sum and the matmul's input row to bf16 where the CUDA kernel does (its
// oracle in tests/backends), kF32 keeps them (the CPU backend's composition of its own ops,
// tests/kernels). The output itself is left unrounded. All pointers are host pointers.
#pragma once

#include "core/dtype.h"

namespace flashserve::ref {

// x_out = x + delta; h = x_out / sqrt(mean(x_out^2) + eps) * norm_w; out = h · wᵀ. With delta
// null, x is normed as is and x_out is not written (it may be null).
void add_rms_norm_matmul(float* out,           // [m, n]
                         float* x_out,         // [m, k] or null
                         const float* x,       // [m, k]
                         const float* delta,   // [m, k] or null
                         const float* norm_w,  // [k]
                         float eps,
                         const float* w,       // [n, k]
                         int m, int n, int k, DType act);

}  // namespace flashserve::ref

// Host launchers of the block-wise FP8 weight kernels (kernels/cuda/block_fp8_gemv.cu,
// kernels/cuda/block_fp8_convert.cu; docs/QUANTIZATION.md): E4M3 codes [n, k] with one fp32
// scale per block of block_n rows x block_k columns, weight (r, c) = decode(w[r, c]) *
// scales[(r / block_n) * scale_ld + c / block_k]. CPU twins: kernels/cpu/block_fp8_matmul_ref.h.
// Every launcher checks the launch and throws flashserve::Error. C++17-clean.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace flashserve::cuda {

// The skinny matmul of decode steps: out[m, n] = x[m, k] · Wᵀ, each weight read once. Up to 2
// rows, or blocks not a multiple of 16 rows x 32 columns: one warp per row of w, each 16-code
// vector's fp32 dot product multiplied by its block's scale (kernels/cuda/block_fp8_gemv.cu);
// from 3 rows, the tensor-core kernel of kernels/cuda/skinny_gemm.cuh with block scales. Supported
// when block_fp8_gemv_supported(): 1 <= m <= kBlockFp8GemvMaxRows, k and block_k multiples of 16,
// x, w and out 16-byte aligned.
constexpr int kBlockFp8GemvMaxRows = 16;
bool block_fp8_gemv_supported(int m, int k, int block_k, const void* x, const void* w,
                              const void* out);
void block_fp8_gemv(void* out,             // [m, n] fp32 (out_f32) or bf16
                    bool out_f32,
                    const void* x,         // [m, k] bf16
                    const void* w,         // [n, k] E4M3 codes
                    const float* scales,   // [ceil(n / block_n), scale_ld]
                    int scale_ld, int m, int n, int k, int block_n, int block_k,
                    cudaStream_t stream);

// out = decode(w) * its block's scale, rounded to bf16 once: the weight as the bf16 GEMM of the
// fallback path takes it. Any n, k.
void block_fp8_dequantize_bf16(void* out,            // [n, k] bf16
                               const void* w,        // [n, k] E4M3 codes
                               const float* scales,  // [ceil(n / block_n), scale_ld]
                               int scale_ld, int n, int k, int block_n, int block_k,
                               cudaStream_t stream);

// x to E4M3 with one scale per token per 128 columns (amax / 448, as quantize_rows_fp8 per row),
// the scales k-block-major as cuBLASLt's VEC128_32F scale mode reads them. CPU twin
// ref::quantize_blocks_fp8, bitwise the same. k a multiple of 8, x 16-byte and codes 8-byte
// aligned.
constexpr int kFp8ActBlock = 128;
void quantize_blocks_fp8(void* codes,    // [m, k] E4M3
                         float* scales,  // [ceil(k / 128), m]
                         const void* x,  // [m, k] bf16
                         int m, int k, cudaStream_t stream);

}  // namespace flashserve::cuda

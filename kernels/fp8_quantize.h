// Host launchers of the FP8 conversions around cuBLASLt (kernels/cuda/fp8_dequantize.cu,
// kernels/cuda/fp8_quantize.cu): weights dequantized to bf16, activations quantized per row to
// E4M3, the per-row and per-column rescale of an unscaled FP8 GEMM, and weights quantized to
// E4M3 at load (docs/FP8.md). Every launcher checks the launch and throws flashserve::Error.
// C++17-clean.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace flashserve::cuda {

// out = decode(w) * w_scale rounded to bf16 once (kernels/cuda/fp8_dequantize.cu): the FP8
// weight as the cuBLASLt path of larger steps takes it. k a multiple of 8, pointers 16-byte aligned.
void dequantize_fp8_bf16(void* out,             // [n, k] bf16
                         const void* w,         // [n, k] E4M3 codes
                         const float* w_scale,  // [n]
                         int n, int k, cudaStream_t stream);
// x to E4M3 codes with one scale per row (kernels/cuda/fp8_quantize.cu; the CPU twin, bitwise
// the same, is ref::quantize_rows_fp8): what the FP8 cuBLASLt GEMM of larger steps multiplies
// the FP8 weights by. k a multiple of 8; x 16-byte and codes 8-byte aligned.
void quantize_rows_fp8(void* codes,     // [m, k] E4M3
                       float* scales,   // [m]
                       const void* x,   // [m, k] bf16
                       int m, int k, cudaStream_t stream);
// out[i, j] = out[i, j] * (row_scale[i] * col_scale[j]), in place, rounded once to out's type
// (kernels/cuda/fp8_quantize.cu; CPU twin ref::scale_rows_cols): the per-token and per-channel
// scales of an FP8 GEMM that cuBLASLt ran unscaled. n a multiple of 8, out 16-byte aligned.
void scale_rows_cols_fp8(void* out,                // [m, n] fp32 (out_f32) or bf16
                         bool out_f32,
                         const float* row_scale,   // [m]
                         const float* col_scale,   // [n]
                         int m, int n, cudaStream_t stream);
// --quantize fp8 on the GPU (kernels/cuda/fp8_quantize.cu): w to E4M3 codes with one scale per
// row, scale = amax(|row|) / 448 (1 for a row of zeros) and codes = encode(w / scale), bit for
// bit what the host's quantize_fp8_rows (weights/fp8_weights.h, the twin) gives. A row holding
// a non-finite value gets no codes or scale: *bad_row becomes min(*bad_row, that row) instead,
// so the caller sets it to UINT_MAX first and reads it back after. Any cols; no alignment.
void quantize_weight_fp8(void* codes,        // [rows, cols] E4M3
                         float* scales,      // [rows]
                         const void* w,      // [rows, cols] f16 (f16) or bf16
                         bool f16, int64_t rows, int64_t cols,
                         unsigned* bad_row,  // [1] device memory
                         cudaStream_t stream);

}  // namespace flashserve::cuda

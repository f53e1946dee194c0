// Host launcher of the int4 weight-only (W4A16) GEMM of kernels/cuda/int4_gemm.cu: the matmul of
// steps above kInt4GemvMaxRows rows (prefill chunks, larger batches) over the packed int4 weights
// of kernels/int4_gemv.h, read as laid out there. The CPU twin is kernels/cpu/int4_matmul_ref.h;
// docs/QUANTIZATION.md has the design. C++17-clean, so host .cpp files include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace flashserve::cuda {

// Rows up to which the int4 GEMM beats dequantizing into bf16 and cuBLASLt: it wins by x1.7-4.9
// at 17-64 rows on Llama-2-7B shapes and is even at 256 (H200, docs/QUANTIZATION.md); the
// backend dequantizes above.
constexpr int kInt4GemmMaxRows = 128;

// Supported when the weight is one int4_gemv takes (k a multiple of 8, group_size 32, 64, a
// multiple of 128 or k, x and out 16-byte aligned), at any m >= 1, and n is a multiple of 4
// (the kernel copies 4 rows' scales and zero points at once).
bool int4_gemm_supported(int m, int n, int k, int group_size, const void* x, const void* out);

// out[m, n] = x[m, k] · dequant(w)ᵀ, x already in the weight's packed column order
// (int4_gather_columns under act-order). Each weight is widened in registers to the bf16
// (code - zero) * bf16(scale), rounded once more to bf16 (within 2^-8 of its f32 value), and the
// products are summed in fp32 on the tensor cores. Bitwise-repeatable (no atomics).
void int4_gemm(void* out,             // [m, n] fp32 (out_f32) or bf16
               bool out_f32,
               const void* x,         // [m, k] bf16, packed column order
               const uint8_t* codes,  // [n, int4_row_bytes(k)], 16-byte aligned
               const float* scales,   // [groups, n], 16-byte aligned
               const uint8_t* zeros,  // [groups, n], 4-byte aligned
               int m, int n, int k, int group_size, cudaStream_t stream);

}  // namespace flashserve::cuda

// Host launchers of the skinny matmul of decode steps (kernels/cuda/gemv.cu): bf16 and FP8
// weights, and its form with the residual add and RMSNorm in front (kernels/cuda/gemv_fused.cu).
// Every launcher checks the launch and throws flashserve::Error. C++17-clean, so host .cpp files
// include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace flashserve::cuda {

// Skinny matmul for decode steps (kernels/cuda/gemv.cu): out[m, n] = x[m, k] · w[n, k]ᵀ, fp32
// accumulation (a warp per row of w up to m = 2, tensor cores from m = 3). Supported when
// gemv_supported(): 1 <= m <= kGemvMaxRows, k a multiple of 8, every pointer 16-byte aligned.
constexpr int kGemvMaxRows = 16;
// Up to this many rows the CUDA backend prefers it to cuBLASLt: measured on an H100 (bench_linear,
// docs/DECODE.md): ahead at m = 1 and 2 (the warp-per-row kernel); from m = 3 the tensor-core
// kernel is 5-10% behind cuBLASLt over a TinyLlama step's projections (and offline 8x128/256 lost
// 10% with it), so cuBLASLt keeps m >= 3. The fused add + norm uses the tensor-core kernel at
// m <= 2 (gemv_add_rms_norm_pays).
constexpr int kGemvDefaultRows = 2;
bool gemv_supported(int m, int k, const void* x, const void* w, const void* out);
void gemv_bf16(void* out,            // [m, n] fp32 (out_f32) or bf16
               bool out_f32,
               const void* x,        // [m, k] bf16
               const void* w,        // [n, k] bf16
               int m, int n, int k, cudaStream_t stream);
// The skinny matmul with FP8 E4M3 weights (docs/FP8.md; same kernels, the CPU twin is
// kernels/cpu/fp8_matmul_ref.h): out = x · (decode(w) * w_scale)ᵀ, each output multiplied by its
// row's scale after an fp32 dot product of x and the widened codes. Supported when
// gemv_fp8_supported(): 1 <= m <= kGemvMaxRows, k a multiple of 16, x, w and out 16-byte aligned.
bool gemv_fp8_supported(int m, int k, const void* x, const void* w, const float* w_scale,
                        const void* out);
void gemv_fp8(void* out,              // [m, n] fp32 (out_f32) or bf16
              bool out_f32,
              const void* x,          // [m, k] bf16
              const void* w,          // [n, k] E4M3 codes
              const float* w_scale,   // [n]
              int m, int n, int k, cudaStream_t stream);
// The skinny matmul with the residual add and RMSNorm in front (kernels/cuda/gemv_fused.cu):
// x_out = x + delta (rounded to bf16), out = (rms_norm(x_out) * norm_w) · wᵀ; with delta null
// x is normed as is and x_out (then optional) is not written. x_out must not alias x or delta.
// Supported: m, k and alignment as gemv_supported(), and the m normed rows within the kernel's
// shared memory; worth it (measured) only where gemv_add_rms_norm_pays().
bool gemv_add_rms_norm_supported(int m, int k, const void* x, const void* delta, const void* x_out,
                                 const void* norm_w, const void* w, const void* out);
bool gemv_add_rms_norm_pays(int m, int k);
void gemv_add_rms_norm_bf16(void* out,           // [m, n] fp32 (out_f32) or bf16
                            bool out_f32,
                            void* x_out,         // [m, k] bf16 or null
                            const void* x,       // [m, k] bf16
                            const void* delta,   // [m, k] bf16 or null
                            const void* norm_w,  // [k] bf16
                            float eps,
                            const void* w,       // [n, k] bf16
                            int m, int n, int k, cudaStream_t stream);

}  // namespace flashserve::cuda

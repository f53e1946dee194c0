// Launchers for the CUDA kernels the CUDA backend calls besides attention: the skinny matmul
// (kernels/cuda/gemv.cu) and the GPU sampler (kernels/cuda/sampling.cu). Every launcher checks
// the launch and throws flashserve::Error. C++17-clean so that host .cpp files can include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/sampling_args.h"

namespace flashserve::cuda {

// Skinny matmul for decode steps (kernels/cuda/gemv.cu): out[m, n] = x[m, k] · w[n, k]ᵀ, one
// warp per row of w, fp32 accumulation. Supported when gemv_supported(): 1 <= m <= kGemvMaxRows,
// k a multiple of 8, every pointer 16-byte aligned.
constexpr int kGemvMaxRows = 8;
// Up to this many rows the CUDA backend prefers it to cuBLASLt: measured on an H100 by
// bench_linear (bench/results/), it is ~1.1x cuBLASLt over a decode step's projections at m = 1
// and even at m = 2; from m = 4 on, cuBLASLt's tiles reuse each weight load better.
constexpr int kGemvDefaultRows = 2;
bool gemv_supported(int m, int k, const void* x, const void* w, const void* out);
void gemv_bf16(void* out,            // [m, n] fp32 (out_f32) or bf16
               bool out_f32,
               const void* x,        // [m, k] bf16
               const void* w,        // [n, k] bf16
               int m, int n, int k, cudaStream_t stream);
// ids[r] = the host sampler's token for logits row args[r].logits_row under args[r]
// (kernels/cuda/sampling.cu), -1 if that row holds a NaN.
void sample_rows_f32(int32_t* ids,               // [n]
                     float* work,                // [n, vocab] scratch: the penalised rows
                     uint8_t* alive,             // [n, vocab] scratch
                     const float* logits,        // [rows, vocab]
                     const SampleRowArgs* args,  // [n]
                     const TokenEdit* edits,     // [args[n-1].edits_end]
                     const float* biases,        // [edits' bias_end max]
                     int n, int vocab, cudaStream_t stream);
}  // namespace flashserve::cuda

// Host launchers of the MXFP4 kernels (the format: core/fp4.h; the CPU twins:
// kernels/cpu/mxfp4_ref.h): a skinny GEMV for decode (kernels/cuda/mxfp4_gemv.cu), which also
// runs gpt-oss's experts pair by pair, and an MXFP4 x bf16 GEMM for prefill and large batches
// (kernels/cuda/mxfp4_gemm.cu), grouped over experts by device-side row offsets. Weights are
// dequantized in registers (GEMV) or in shared memory tile by tile (GEMM), never to a bf16 copy.
// Launch shapes follow from the sizes only, never from the routing, so these record in a CUDA
// graph. Every launcher checks its launch and throws flashserve::Error. C++17-clean.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace flashserve::cuda {

// `groups` MXFP4 weights [rows, cols] stacked (cols a multiple of 32), group g's at
// blocks + g * rows * cols / 2 and scales + g * rows * cols / 32, with optional f32 biases.
struct Mxfp4Weights {
  const uint8_t* blocks = nullptr;  // [groups, rows, cols / 2]
  const uint8_t* scales = nullptr;  // [groups, rows, cols / 32]
  const float* bias = nullptr;      // [groups, rows] or null
  int groups = 1, rows = 0, cols = 0;
};

// gpt-oss's activation (ref::swiglu_clamped) on interleaved gate/up values.
struct SwigluClamp {
  float limit = 7.f, alpha = 1.702f;
};

// ---- GEMV (decode) -----------------------------------------------------------------------
// out[q, r] = x[q / top_k, :] · w_g[r, :] + bias_g[r] for every output row q < pairs, with
// g = ids[q] (gpt-oss's (token, choice) pairs; q / top_k is the token) or, ids null, g = 0 and
// top_k 1 (a dense product of `pairs` rows). A pair whose id is outside [0, groups) gets zeros.
// x bf16 (x_f32 false) or f32; out f32 (out_f32) or bf16. With `swiglu`, rows 2i and 2i + 1 are
// gate and up and out[q, i] = the clamped SwiGLU of them ([pairs, rows / 2]; rows even).
void mxfp4_gemv(void* out, bool out_f32,
                const void* x, bool x_f32,  // [pairs / top_k, cols]
                const Mxfp4Weights& w,
                const int32_t* ids,  // [pairs] or null
                int pairs, int top_k, const SwigluClamp* swiglu, cudaStream_t stream);

// ---- GEMM (prefill, large batches) ---------------------------------------------------------
// out rows [offsets[g], offsets[g + 1]) = a's rows · w_gᵀ + bias_g for every group g (offsets on
// the device, offsets[groups] <= max_rows), or, offsets null, the first max_rows rows by w_0:
// bf16 in and out, f32 accumulation on tensor cores. The grid covers max_rows rows per group;
// tiles past a group's rows return at once.
void mxfp4_gemm(void* out,                // [max_rows, w.rows] bf16
                const void* a,            // [max_rows, w.cols] bf16
                const Mxfp4Weights& w,
                const int32_t* offsets,   // [w.groups + 1] device, or null
                int max_rows, cudaStream_t stream);

// out[r, i] = the clamped SwiGLU of gate_up[r, 2i] and gate_up[r, 2i + 1], bf16 in and out.
void swiglu_clamped_bf16(void* out,            // [rows, inter]
                         const void* gate_up,  // [rows, 2 * inter]
                         int rows, int inter, SwigluClamp clamp, cudaStream_t stream);

}  // namespace flashserve::cuda

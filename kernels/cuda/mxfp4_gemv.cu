// The skinny MXFP4 product (kernels/mxfp4.h): one block per output row pair q (blockIdx.y) and
// 8 warps over its weight rows; each warp takes two adjacent rows (gate and up with the fused
// SwiGLU), each lane one block of 32 columns at a time: 16 bytes of codes (one uint4 load) and
// its scale, dequantized in registers and multiplied with the 32 inputs in f32. The warp's sums
// meet by shuffles; each block of 32 is scaled once, after its 32 products.
#include <cuda_bf16.h>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mxfp4.cuh"
#include "kernels/mxfp4.h"

namespace flashserve::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kRowsPerWarp = 2;

// The 32 inputs of block g of row `x` as f32.
template <class In>
__device__ __forceinline__ void load_inputs(float (&v)[32], const In* x, int g);
template <>
__device__ __forceinline__ void load_inputs<__nv_bfloat16>(float (&v)[32], const __nv_bfloat16* x, int g) {
  const uint4* p = reinterpret_cast<const uint4*>(x + size_t(g) * 32);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint4 u = p[i];
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[i * 8 + 2 * j] = __uint_as_float(w[j] << 16);
      v[i * 8 + 2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
    }
  }
}
template <>
__device__ __forceinline__ void load_inputs<float>(float (&v)[32], const float* x, int g) {
  const float4* p = reinterpret_cast<const float4*>(x + size_t(g) * 32);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float4 u = p[i];
    v[4 * i] = u.x, v[4 * i + 1] = u.y, v[4 * i + 2] = u.z, v[4 * i + 3] = u.w;
  }
}

// Row r's product with the inputs of block g (unscaled) and the block's scale.
__device__ __forceinline__ float block_dot(const uint8_t* blocks, int r, int cols, int g,
                                           const float (&v)[32]) {
  const uint4 u = *reinterpret_cast<const uint4*>(blocks + (size_t(r) * cols + size_t(g) * 32) / 2);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const uint32_t byte = (w[i] >> (8 * b)) & 0xffu;
      s = fmaf(mxfp4::e2m1(byte), v[i * 8 + 2 * b], s);
      s = fmaf(mxfp4::e2m1(byte >> 4), v[i * 8 + 2 * b + 1], s);
    }
  return s;
}

template <class In, class Out, bool kSwiglu>
__global__ void __launch_bounds__(kWarps * 32)
    mxfp4_gemv_kernel(Out* out, const In* x, Mxfp4Weights w, const int32_t* ids, int top_k,
                      SwigluClamp clamp) {
  const int q = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = (blockIdx.x * kWarps + warp) * kRowsPerWarp;
  if (r0 >= w.rows) return;
  const int g = ids ? ids[q] : 0;
  const int out_cols = kSwiglu ? w.rows / 2 : w.rows;
  Out* o = out + size_t(q) * out_cols;
  const bool valid = g >= 0 && g < w.groups;
  float acc[kRowsPerWarp] = {0.f, 0.f};
  if (valid) {
    const In* xr = x + size_t(ids ? q / top_k : q) * w.cols;
    const uint8_t* blocks = w.blocks + size_t(g) * w.rows * (w.cols / 2);
    const uint8_t* scales = w.scales + size_t(g) * w.rows * (w.cols / 32);
    const int nblocks = w.cols / 32;
    for (int b = lane; b < nblocks; b += 32) {
      float v[32];
      load_inputs<In>(v, xr, b);
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i)
        if (r0 + i < w.rows)
          acc[i] += block_dot(blocks, r0 + i, w.cols, b, v) *
                    mxfp4::e8m0(scales[size_t(r0 + i) * nblocks + b]);
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i)
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], off);
  if (lane != 0) return;
  if (valid && w.bias)
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i)
      if (r0 + i < w.rows) acc[i] += w.bias[size_t(g) * w.rows + r0 + i];
  if constexpr (kSwiglu) {
    const float gate = fminf(acc[0], clamp.limit);
    const float up = fminf(fmaxf(acc[1], -clamp.limit), clamp.limit);
    const float y = valid ? (up + 1.f) * gate / (1.f + __expf(-clamp.alpha * gate)) : 0.f;
    if constexpr (sizeof(Out) == 4) o[r0 / 2] = y;
    else o[r0 / 2] = __float2bfloat16(y);
  } else {
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      if (r0 + i >= w.rows) continue;
      if constexpr (sizeof(Out) == 4) o[r0 + i] = acc[i];
      else o[r0 + i] = __float2bfloat16(acc[i]);
    }
  }
}

template <class In, class Out>
void launch(void* out, const void* x, const Mxfp4Weights& w, const int32_t* ids, int pairs,
            int top_k, const SwigluClamp* swiglu, cudaStream_t stream) {
  const dim3 grid((w.rows + kWarps * kRowsPerWarp - 1) / (kWarps * kRowsPerWarp), pairs);
  const SwigluClamp clamp = swiglu ? *swiglu : SwigluClamp{};
  if (swiglu)
    mxfp4_gemv_kernel<In, Out, true><<<grid, kWarps * 32, 0, stream>>>(
        static_cast<Out*>(out), static_cast<const In*>(x), w, ids, top_k, clamp);
  else
    mxfp4_gemv_kernel<In, Out, false><<<grid, kWarps * 32, 0, stream>>>(
        static_cast<Out*>(out), static_cast<const In*>(x), w, ids, top_k, clamp);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void mxfp4_gemv(void* out, bool out_f32, const void* x, bool x_f32, const Mxfp4Weights& w,
                const int32_t* ids, int pairs, int top_k, const SwigluClamp* swiglu,
                cudaStream_t stream) {
  FS_CHECK(w.cols > 0 && w.cols % 32 == 0 && w.rows > 0 && w.groups >= 1 && top_k >= 1 &&
               (ids || top_k == 1) && (!swiglu || w.rows % 2 == 0) && pairs <= 65535,
           "mxfp4_gemv: rows ", w.rows, " cols ", w.cols, " (a multiple of 32), groups ", w.groups,
           ", ", pairs, " pairs (at most 65535), top_k ", top_k,
           swiglu ? " (with SwiGLU: rows even)" : "");
  if (pairs <= 0) return;
  if (x_f32) {
    if (out_f32) launch<float, float>(out, x, w, ids, pairs, top_k, swiglu, stream);
    else launch<float, __nv_bfloat16>(out, x, w, ids, pairs, top_k, swiglu, stream);
  } else {
    if (out_f32) launch<__nv_bfloat16, float>(out, x, w, ids, pairs, top_k, swiglu, stream);
    else launch<__nv_bfloat16, __nv_bfloat16>(out, x, w, ids, pairs, top_k, swiglu, stream);
  }
}

}  // namespace flashserve::cuda

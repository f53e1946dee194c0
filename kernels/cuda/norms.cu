// RMSNorm kernels (kernels/norms.h): one block per row (the plain, the residual add in front,
// and its vectorised form) and one warp per head for the per-head q/k norm. bf16 storage, fp32
// math; the CPU twins are kernels/cpu/norms_ref.h.
#include <cuda_bf16.h>

#include "core/error.h"
#include "kernels/cuda/block_util.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/norms.h"

namespace flashserve::cuda {
namespace {

using bf16 = __nv_bfloat16;
using detail::block_sum;

constexpr int kThreads = 256;

__global__ void rms_norm_kernel(bf16* out, const bf16* x, const bf16* w, int hidden, float eps) {
  const bf16* xr = x + int64_t(blockIdx.x) * hidden;
  bf16* orow = out + int64_t(blockIdx.x) * hidden;
  float ss = 0.f;
  for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
    const float v = __bfloat162float(xr[c]);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss) / float(hidden) + eps);
  for (int c = threadIdx.x; c < hidden; c += blockDim.x)
    orow[c] = __float2bfloat16(__bfloat162float(xr[c]) * inv * __bfloat162float(w[c]));
}

// Per-head RMSNorm of the q and k heads of qkv rows [q heads | k heads | v heads], in place:
// one warp per (token, normed head); the whole warp leaves together past the last one.
__global__ void qk_norm_kernel(bf16* qkv, const bf16* q_w, const bf16* k_w, int n, int hq, int hkv,
                               int d, float eps) {
  const int normed = hq + hkv;
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= int64_t(n) * normed) return;
  const int t = int(warp / normed), h = int(warp % normed);
  bf16* v = qkv + (int64_t(t) * (hq + 2 * hkv) + h) * d;
  const bf16* w = h < hq ? q_w : k_w;
  float ss = 0.f;
  for (int i = lane; i < d; i += 32) {
    const float x = __bfloat162float(v[i]);
    ss += x * x;
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float inv = rsqrtf(ss / float(d) + eps);
  for (int i = lane; i < d; i += 32)
    v[i] = __float2bfloat16(__bfloat162float(v[i]) * inv * __bfloat162float(w[i]));
}

// x_out may be x_in (the residual updated in place) or another buffer (LlamaModel's fused
// decode path keeps the residual in two buffers; this is its unfused fallback).
__global__ void add_rms_norm_kernel(bf16* out, bf16* x_out, const bf16* x_in, const bf16* delta,
                                    const bf16* w, int hidden, float eps) {
  pdl_trigger();  // launched with launch_pdl (kernels/cuda/pdl.cuh)
  pdl_wait();
  const bf16* xi = x_in + int64_t(blockIdx.x) * hidden;
  bf16* xr = x_out + int64_t(blockIdx.x) * hidden;
  const bf16* dr = delta + int64_t(blockIdx.x) * hidden;
  bf16* orow = out + int64_t(blockIdx.x) * hidden;
  float ss = 0.f;
  // Each thread owns the same columns in both loops, so out may alias delta.
  for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
    const bf16 s = __float2bfloat16(__bfloat162float(xi[c]) + __bfloat162float(dr[c]));
    xr[c] = s;
    const float v = __bfloat162float(s);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss) / float(hidden) + eps);
  for (int c = threadIdx.x; c < hidden; c += blockDim.x)
    orow[c] = __float2bfloat16(__bfloat162float(xr[c]) * inv * __bfloat162float(w[c]));
}

// The same with the row held in registers: each thread loads its V 16-byte vectors of x and
// delta at once, then stores. The loop above stores x between loads, so the compiler (out and x
// may alias delta) cannot overlap them: one memory round trip per 256 columns, ~4 us a row at
// hidden 2048 on an H100, where a decode step runs two per layer. Needs hidden % 8 == 0 and
// hidden <= 8 * V * blockDim.x; every thread owns the same vectors in all three passes.
template <int V>
__global__ void add_rms_norm_vec_kernel(bf16* out, bf16* x_out, const bf16* x_in, const bf16* delta,
                                        const bf16* w, int hidden, float eps) {
  pdl_trigger();  // launched with launch_pdl (kernels/cuda/pdl.cuh)
  pdl_wait();
  const uint4* xi = reinterpret_cast<const uint4*>(x_in + int64_t(blockIdx.x) * hidden);
  uint4* xr = reinterpret_cast<uint4*>(x_out + int64_t(blockIdx.x) * hidden);
  const uint4* dr = reinterpret_cast<const uint4*>(delta + int64_t(blockIdx.x) * hidden);
  uint4* orow = reinterpret_cast<uint4*>(out + int64_t(blockIdx.x) * hidden);
  const uint4* wr = reinterpret_cast<const uint4*>(w);
  const int nvec = hidden / 8;
  uint4 a[V], b[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = threadIdx.x + i * blockDim.x;
    if (c < nvec) a[i] = xi[c], b[i] = dr[c];
  }
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = threadIdx.x + i * blockDim.x;
    if (c >= nvec) continue;
    __nv_bfloat162* pa = reinterpret_cast<__nv_bfloat162*>(&a[i]);
    const __nv_bfloat162* pb = reinterpret_cast<const __nv_bfloat162*>(&b[i]);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 fa = __bfloat1622float2(pa[j]), fb = __bfloat1622float2(pb[j]);
      pa[j] = __floats2bfloat162_rn(fa.x + fb.x, fa.y + fb.y);  // the residual, rounded to bf16
      const float2 s = __bfloat1622float2(pa[j]);
      ss += s.x * s.x + s.y * s.y;
    }
    xr[c] = a[i];
  }
  const float inv = rsqrtf(block_sum(ss) / float(hidden) + eps);
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = threadIdx.x + i * blockDim.x;
    if (c >= nvec) continue;
    uint4 wv = wr[c], o;
    const __nv_bfloat162* pa = reinterpret_cast<const __nv_bfloat162*>(&a[i]);
    const __nv_bfloat162* pw = reinterpret_cast<const __nv_bfloat162*>(&wv);
    __nv_bfloat162* po = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 s = __bfloat1622float2(pa[j]), ww = __bfloat1622float2(pw[j]);
      po[j] = __floats2bfloat162_rn(s.x * inv * ww.x, s.y * inv * ww.y);
    }
    orow[c] = o;
  }
}

}  // namespace

void rms_norm_bf16(void* out, const void* x, const void* w, int n, int hidden, float eps,
                   cudaStream_t stream) {
  if (n == 0) return;
  rms_norm_kernel<<<n, kThreads, 0, stream>>>(static_cast<bf16*>(out),
                                              static_cast<const bf16*>(x),
                                              static_cast<const bf16*>(w), hidden, eps);
  CUDA_CHECK_LAUNCH();
}

void qk_norm_bf16(void* qkv, const void* q_w, const void* k_w, int n, int hq, int hkv, int d,
                  float eps, cudaStream_t stream) {
  const int64_t warps = int64_t(n) * (hq + hkv);
  if (warps == 0) return;
  constexpr int kWarpsPerBlock = 4;
  qk_norm_kernel<<<int((warps + kWarpsPerBlock - 1) / kWarpsPerBlock), 32 * kWarpsPerBlock, 0,
                   stream>>>(static_cast<bf16*>(qkv), static_cast<const bf16*>(q_w),
                             static_cast<const bf16*>(k_w), n, hq, hkv, d, eps);
  CUDA_CHECK_LAUNCH();
}

void add_rms_norm_bf16(void* out, void* x, const void* delta, const void* w, int n, int hidden,
                       float eps, cudaStream_t stream) {
  add_rms_norm_out_bf16(out, x, x, delta, w, n, hidden, eps, stream);
}

void add_rms_norm_out_bf16(void* out, void* x_out, const void* x_in, const void* delta,
                           const void* w, int n, int hidden, float eps, cudaStream_t stream) {
  if (n == 0) return;
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vec = hidden % 8 == 0 && hidden <= 8 * 4 * kThreads && aligned(out) &&
                   aligned(x_out) && aligned(x_in) && aligned(delta) && aligned(w);
  auto* o = static_cast<bf16*>(out);
  auto* xo = static_cast<bf16*>(x_out);
  const auto* xi = static_cast<const bf16*>(x_in);
  const auto* d = static_cast<const bf16*>(delta);
  const auto* wb = static_cast<const bf16*>(w);
  if (vec) {
    launch_pdl(add_rms_norm_vec_kernel<4>, n, kThreads, 0, stream, o, xo, xi, d, wb, hidden, eps);
  } else {
    launch_pdl(add_rms_norm_kernel, n, kThreads, 0, stream, o, xo, xi, d, wb, hidden, eps);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda

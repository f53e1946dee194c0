// Skinny matmul for decode: out[m, n] = x[m, k] · w[n, k]ᵀ with m of 1..kGemvMaxRows. At such m
// the product is a pass over the weights: every weight byte is read once and used m times, so the
// kernel's job is to stream w at the memory's speed. Two kernels, each where it measured faster
// (bench_linear and the probe of docs/DECODE.md, H100):
//  - m <= 2: one warp per row of w, four 16-byte loads in flight per lane, x re-read from L1/L2,
//    fp32 FMAs. Small blocks (8 rows), so many are resident and much is in flight; but each
//    weight vector costs m loads of x and 8 m conversions, which is why it falls off from m = 3;
//  - m >= 3: the tensor-core kernel of kernels/cuda/skinny_gemm.cuh, whose cost does not grow
//    with m up to 8.
// FP8 weights (gemv_fp8, docs/FP8.md) take the same two kernels: a 16-byte load then holds 16
// E4M3 codes, widened in registers (kernels/cuda/fp8.cuh), and each output is multiplied by its
// row's scale at the end. Half the bytes of bf16 per weight, the same arithmetic after widening.
#include <cuda_bf16.h>

#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/skinny_gemm.cuh"
#include "kernels/gemv.h"

namespace flashserve::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarpKernelRows = 2;  // m up to this: the warp-per-row kernel
constexpr int kWarps = 8;           // rows of w per block
constexpr int kUnroll = 4;          // 16-byte loads of w in flight per lane

// The 8 products of a 16-byte bf16 weight vector and x's 8 values at the same columns, summed
// into acc[r] for each row r of x (xr: row 0's 16-byte vector, x_stride vectors between rows).
template <int M>
__device__ inline void dot_vec(const uint4& w, const uint4* xr, int64_t x_stride, float (&acc)[M]) {
  const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const uint4 x = __ldca(xr + r * x_stride);
    const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 a = __bfloat1622float2(wp[i]);
      const float2 b = __bfloat1622float2(xp[i]);
      acc[r] = fmaf(a.x, b.x, acc[r]);
      acc[r] = fmaf(a.y, b.y, acc[r]);
    }
  }
}

// FP8: a 16-byte vector holds 16 codes, against two of x's 16-byte vectors; each pair of codes
// is widened once for all M rows.
template <int M>
__device__ inline void dot_vec_fp8(const uint4& w, const uint4* xr, int64_t x_stride,
                                   float (&acc)[M]) {
  const uint32_t wq[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // codes 8h .. 8h + 7 against x vector h
    float2 a[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = fp8x2_to_float2(uint16_t(wq[2 * h + i / 2] >> (16 * (i % 2))));
#pragma unroll
    for (int r = 0; r < M; ++r) {
      const uint4 x = __ldca(xr + r * x_stride + h);
      const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 b = __bfloat1622float2(xp[i]);
        acc[r] = fmaf(a[i].x, b.x, acc[r]);
        acc[r] = fmaf(a[i].y, b.y, acc[r]);
      }
    }
  }
}

// One warp per row of w; M = rows of x (compile-time so the accumulators stay in registers).
// kFp8: w holds E4M3 codes (16 per 16-byte vector) and w_scale their rows' scales.
template <int M, class Out, bool kFp8>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(Out* __restrict__ out, const bf16* __restrict__ x, const void* __restrict__ w,
                const float* __restrict__ w_scale, int n, int k) {
  pdl_trigger();  // launched with launch_pdl (kernels/cuda/pdl.cuh)
  constexpr int kPerVec = kFp8 ? 16 : 8;  // weights per 16-byte vector
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarps + threadIdx.x / 32;
  if (row >= n) return;
  const int vecs = k / kPerVec;  // 16-byte vectors per row of w
  const uint4* wr = reinterpret_cast<const uint4*>(static_cast<const unsigned char*>(w) +
                                                   int64_t(row) * k * (kFp8 ? 1 : 2));
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  const int64_t x_stride = k / 8;  // x's 16-byte vectors per row
  auto dot = [&](const uint4& wv, int v, float (&acc)[M]) {  // w vector v against x
    if constexpr (kFp8)
      dot_vec_fp8<M>(wv, xv + 2 * v, x_stride, acc);
    else
      dot_vec<M>(wv, xv + v, x_stride, acc);
  };
  float acc[M];
#pragma unroll
  for (int r = 0; r < M; ++r) acc[r] = 0.f;
  int v = lane;
  // The weights do not depend on the previous kernel: the first loads go out before waiting
  // for it. x, its output, is read only after pdl_wait, and through the coherent path (ld.ca,
  // not the read-only ld.nc: x is written by a kernel that may have overlapped this one).
  uint4 wv[kUnroll];
  bool full = v + 32 * (kUnroll - 1) < vecs;
  if (full)
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = __ldg(wr + v + 32 * u);
  pdl_wait();
  while (full) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dot(wv[u], v + 32 * u, acc);
    v += 32 * kUnroll;
    full = v + 32 * (kUnroll - 1) < vecs;
    if (full)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wv[u] = __ldg(wr + v + 32 * u);  // loads first, then math
  }
  for (; v < vecs; v += 32) dot(__ldg(wr + v), v, acc);
  const float scale = kFp8 ? w_scale[row] : 1.f;
#pragma unroll
  for (int r = 0; r < M; ++r) {
    float s = acc[r];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) skinny::store_out(out + int64_t(r) * n + row, kFp8 ? s * scale : s);
  }
}

template <bool kFp8, class Out>
void launch_warp_kernel(Out* out, const bf16* x, const void* w, const float* w_scale, int m,
                        int n, int k, cudaStream_t stream) {
  const dim3 grid((n + kWarps - 1) / kWarps), block(kWarps * 32);
  if (m == 1)
    launch_pdl(gemv_kernel<1, Out, kFp8>, grid, block, 0, stream, out, x, w, w_scale, n, k);
  else
    launch_pdl(gemv_kernel<2, Out, kFp8>, grid, block, 0, stream, out, x, w, w_scale, n, k);
  CUDA_CHECK_LAUNCH();
}

// Both weight formats: the warp kernel up to kWarpKernelRows, the tensor-core kernel above.
template <bool kFp8>
void skinny_matmul(void* out, bool out_f32, const void* x, const void* w, const float* w_scale,
                   int m, int n, int k, cudaStream_t stream) {
  if (n == 0) return;
  const bf16* xb = static_cast<const bf16*>(x);
  if (m <= kWarpKernelRows) {
    if (out_f32)
      launch_warp_kernel<kFp8>(static_cast<float*>(out), xb, w, w_scale, m, n, k, stream);
    else
      launch_warp_kernel<kFp8>(static_cast<bf16*>(out), xb, w, w_scale, m, n, k, stream);
    return;
  }
  skinny::Args a = skinny::make_args(out, x, w, m, n, k);
  a.w_scale = w_scale;
  if (out_f32)
    skinny::launch<skinny::Prologue::kPlain, float, kFp8>(a, stream);
  else
    skinny::launch<skinny::Prologue::kPlain, skinny::bf16, kFp8>(a, stream);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

static_assert(kGemvMaxRows == skinny::kMaxRows, "kernels/gemv.h and skinny_gemm.cuh disagree");

bool gemv_supported(int m, int k, const void* x, const void* w, const void* out) {
  return m >= 1 && m <= kGemvMaxRows && k > 0 && k % 8 == 0 && aligned16(x) && aligned16(w) &&
         aligned16(out);
}

void gemv_bf16(void* out, bool out_f32, const void* x, const void* w, int m, int n, int k,
               cudaStream_t stream) {
  FS_CHECK(gemv_supported(m, k, x, w, out), "gemv: unsupported m ", m, " k ", k,
           " or unaligned pointers");
  skinny_matmul<false>(out, out_f32, x, w, nullptr, m, n, k, stream);
}

bool gemv_fp8_supported(int m, int k, const void* x, const void* w, const float* w_scale,
                        const void* out) {
  return m >= 1 && m <= kGemvMaxRows && k > 0 && k % 16 == 0 && aligned16(x) && aligned16(w) &&
         aligned16(out) && w_scale != nullptr;
}

void gemv_fp8(void* out, bool out_f32, const void* x, const void* w, const float* w_scale, int m,
              int n, int k, cudaStream_t stream) {
  FS_CHECK(gemv_fp8_supported(m, k, x, w, w_scale, out), "gemv_fp8: unsupported m ", m, " k ", k,
           ", unaligned pointers or no scales");
  skinny_matmul<true>(out, out_f32, x, w, w_scale, m, n, k, stream);
}

}  // namespace flashserve::cuda

// Skinny matmul of decode steps with block-wise FP8 weights (kernels/block_fp8.h), each weight
// read once, as gemv.cu does for per-row FP8:
//  - up to 2 rows (or blocks the tensor-core kernel cannot take): one warp per row of w streams
//    its E4M3 codes, 16 a 16-byte load, four loads in flight per lane. A 16-code vector lies
//    inside one block of block_k columns, so each lane takes the vector's fp32 dot product with x
//    and adds it times the block's scale: one FMA per row of x per 16 weights on top of the
//    per-row FP8 kernel's work. The warp re-reads x from L1 for every row of w, so its cost grows
//    with m;
//  - from 3 rows: kernels/cuda/skinny_gemm.cuh's tensor-core kernel with kBlock, whose cost does
//    not grow with m up to 8.
// The scales of a row block are a few hundred bytes, read through the read-only cache.
#include <cuda_bf16.h>

#include <cstdint>

#include "core/error.h"
#include "kernels/block_fp8.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/skinny_gemm.cuh"

namespace flashserve::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarpKernelRows = 2;  // m up to this: the warp-per-row kernel
constexpr int kWarps = 8;   // rows of w per block
constexpr int kUnroll = 4;  // 16-byte loads of w in flight per lane

// acc[r] += scale * (16 codes of w) · (x row r at the same 16 columns), for the m rows of x.
template <int M>
__device__ __forceinline__ void dot_block_vec(const uint4& w, const uint4* xr, int64_t x_stride,
                                              int m, float scale, float (&acc)[M]) {
  const uint32_t wq[4] = {w.x, w.y, w.z, w.w};
  float2 a[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) a[i] = fp8x2_to_float2(uint16_t(wq[i / 2] >> (16 * (i % 2))));
#pragma unroll
  for (int r = 0; r < M; ++r) {
    if (r >= m) break;
    float part = 0.f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint4 x = __ldca(xr + r * x_stride + h);
      const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 b = __bfloat1622float2(xp[i]);
        part = fmaf(a[4 * h + i].x, b.x, part);
        part = fmaf(a[4 * h + i].y, b.y, part);
      }
    }
    acc[r] = fmaf(part, scale, acc[r]);
  }
}

// M: rows of x rounded up to 1, 2, 4, 8 or 16 (compile-time, so the accumulators stay in
// registers); m: the actual rows.
template <int M, class Out>
__global__ void __launch_bounds__(kWarps * 32)
    block_fp8_gemv_kernel(Out* __restrict__ out,            // [m, n]
                          const bf16* __restrict__ x,       // [m, k]
                          const uint8_t* __restrict__ w,    // [n, k]
                          const float* __restrict__ scales, // [ceil(n / block_n), scale_ld]
                          int scale_ld, int m, int n, int k, int block_n, int block_k) {
  pdl_trigger();  // launched with launch_pdl (kernels/cuda/pdl.cuh)
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarps + threadIdx.x / 32;
  if (row >= n) return;
  const int vecs = k / 16, vecs_per_block = block_k / 16;
  const uint4* wr = reinterpret_cast<const uint4*>(w + int64_t(row) * k);
  const float* srow = scales + int64_t(row / block_n) * scale_ld;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  const int64_t x_stride = k / 8;  // x's 16-byte vectors per row
  float acc[M];
#pragma unroll
  for (int r = 0; r < M; ++r) acc[r] = 0.f;
  auto dot = [&](const uint4& wv, int v) {
    dot_block_vec<M>(wv, xv + 2 * v, x_stride, m, __ldg(srow + v / vecs_per_block), acc);
  };
  int v = lane;
  // The weights do not depend on the previous kernel: the first loads go out before waiting.
  uint4 wv[kUnroll];
  bool full = v + 32 * (kUnroll - 1) < vecs;
  if (full)
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = __ldg(wr + v + 32 * u);
  pdl_wait();
  while (full) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dot(wv[u], v + 32 * u);
    v += 32 * kUnroll;
    full = v + 32 * (kUnroll - 1) < vecs;
    if (full)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wv[u] = __ldg(wr + v + 32 * u);
  }
  for (; v < vecs; v += 32) dot(__ldg(wr + v), v);
#pragma unroll
  for (int r = 0; r < M; ++r) {
    float s = acc[r];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0 && r < m) skinny::store_out(out + int64_t(r) * n + row, s);
  }
}

template <class Out>
void launch_warp_kernel(Out* out, const bf16* x, const uint8_t* w, const float* scales,
                        int scale_ld, int m, int n, int k, int block_n, int block_k,
                        cudaStream_t stream) {
  const dim3 grid((n + kWarps - 1) / kWarps), block(kWarps * 32);
  auto kernel = m <= 1   ? block_fp8_gemv_kernel<1, Out>
                : m <= 2 ? block_fp8_gemv_kernel<2, Out>
                : m <= 4 ? block_fp8_gemv_kernel<4, Out>
                : m <= 8 ? block_fp8_gemv_kernel<8, Out>
                         : block_fp8_gemv_kernel<16, Out>;
  launch_pdl(kernel, grid, block, 0, stream, out, x, w, scales, scale_ld, m, n, k, block_n,
             block_k);
  CUDA_CHECK_LAUNCH();
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool block_fp8_gemv_supported(int m, int k, int block_k, const void* x, const void* w,
                              const void* out) {
  return m >= 1 && m <= kBlockFp8GemvMaxRows && k > 0 && k % 16 == 0 && block_k > 0 &&
         block_k % 16 == 0 && aligned16(x) && aligned16(w) && aligned16(out);
}

void block_fp8_gemv(void* out, bool out_f32, const void* x, const void* w, const float* scales,
                    int scale_ld, int m, int n, int k, int block_n, int block_k,
                    cudaStream_t stream) {
  FS_CHECK(block_fp8_gemv_supported(m, k, block_k, x, w, out) && scales && block_n > 0,
           "block_fp8_gemv: unsupported m ", m, " k ", k, " block_k ", block_k,
           ", unaligned pointers or no scales");
  if (n == 0) return;
  if (m > kWarpKernelRows && block_n % 16 == 0 && block_k % 32 == 0) {
    skinny::Args a = skinny::make_args(out, x, w, m, n, k);
    a.w_block_scale = scales;
    a.block_n = block_n;
    a.block_k = block_k;
    a.block_scale_ld = scale_ld;
    if (out_f32)
      skinny::launch<skinny::Prologue::kPlain, float, true, true>(a, stream);
    else
      skinny::launch<skinny::Prologue::kPlain, bf16, true, true>(a, stream);
    return;
  }
  const auto* xb = static_cast<const bf16*>(x);
  const auto* wc = static_cast<const uint8_t*>(w);
  if (out_f32)
    launch_warp_kernel(static_cast<float*>(out), xb, wc, scales, scale_ld, m, n, k, block_n,
                       block_k, stream);
  else
    launch_warp_kernel(static_cast<bf16*>(out), xb, wc, scales, scale_ld, m, n, k, block_n,
                       block_k, stream);
}

}  // namespace flashserve::cuda

// The MXFP4 x bf16 GEMM (kernels/mxfp4.h), correctness first: one 64 x 64 output tile per block
// of 4 warps, k in steps of one MXFP4 block (32 columns). Each step stages the 64 activation
// rows (bf16, as stored) and the 64 weight rows dequantized to bf16 in shared memory, then every
// warp multiplies its 32 x 32 quarter with bf16 tensor-core fragments (wmma, f32 accumulation).
// bf16 holds every MXFP4 value exactly (E2M1 times a power of two, within f32's exponent range,
// which bf16 shares), so the only rounding is the products' f32 accumulation. Grouped: the
// grid's z is the group, whose rows come from device-side offsets.
#include <cuda_bf16.h>
#include <mma.h>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mxfp4.cuh"
#include "kernels/mxfp4.h"

namespace flashserve::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kTile = 64;       // rows of a and of w per block
constexpr int kK = 32;          // columns per step: one MXFP4 block
constexpr int kLd = kK + 8;     // shared row stride (bf16), off the bank period
constexpr int kCld = kTile + 4;  // the f32 output tile's stride
constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads)
    mxfp4_gemm_kernel(bf16* out, const bf16* a, Mxfp4Weights w, const int32_t* offsets,
                      int max_rows) {
  namespace wmma = nvcuda::wmma;
  const int g = blockIdx.z;
  const int begin = offsets ? offsets[g] : 0;
  const int end = offsets ? min(offsets[g + 1], max_rows) : max_rows;
  const int m0 = begin + blockIdx.y * kTile, n0 = blockIdx.x * kTile;
  if (m0 >= end) return;
  __shared__ __align__(32) bf16 as[kTile * kLd];
  __shared__ __align__(32) bf16 bs[kTile * kLd];
  __shared__ __align__(32) float cs[kTile * kCld];
  const int t = threadIdx.x, warp = t / 32;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
  const uint8_t* blocks = w.blocks + size_t(g) * w.rows * (w.cols / 2);
  const uint8_t* scales = w.scales + size_t(g) * w.rows * (w.cols / 32);
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);
  for (int k0 = 0; k0 < w.cols; k0 += kK) {
    // a: 64 rows x 32 bf16 = 256 chunks of 16 bytes, two per thread; rows past the group zero.
#pragma unroll
    for (int c = t; c < kTile * 4; c += kThreads) {
      const int r = c / 4, part = c % 4;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (m0 + r < end)
        v = *reinterpret_cast<const uint4*>(a + size_t(m0 + r) * w.cols + k0 + part * 8);
      *reinterpret_cast<uint4*>(as + r * kLd + part * 8) = v;
    }
    // w: 64 rows x 16 bytes of codes; each thread dequantizes half a row (8 bytes, 16 values).
    {
      const int r = t / 2, half = t % 2;
      bf16* dst = bs + r * kLd + half * 16;
      if (n0 + r < w.rows) {
        const size_t row = size_t(n0 + r);
        const uint2 u =
            *reinterpret_cast<const uint2*>(blocks + (row * w.cols + k0) / 2 + half * 8);
        const float s = mxfp4::e8m0(scales[row * (w.cols / 32) + k0 / 32]);
        const uint32_t words[2] = {u.x, u.y};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const uint32_t byte = (words[i / 4] >> (8 * (i % 4))) & 0xffu;
          dst[2 * i] = __float2bfloat16(mxfp4::e2m1(byte) * s);
          dst[2 * i + 1] = __float2bfloat16(mxfp4::e2m1(byte >> 4) * s);
        }
      } else {
#pragma unroll
        for (int i = 0; i < 16; ++i) dst[i] = __float2bfloat16(0.f);
      }
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], as + (wm + 16 * i) * kLd + kk, kLd);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], bs + (wn + 16 * j) * kLd + kk, kLd);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(cs + (wm + 16 * i) * kCld + wn + 16 * j, acc[i][j], kCld,
                              wmma::mem_row_major);
  __syncthreads();
  for (int c = t; c < kTile * kTile; c += kThreads) {
    const int r = c / kTile, n = c % kTile;
    if (m0 + r >= end || n0 + n >= w.rows) continue;
    float v = cs[r * kCld + n];
    if (w.bias) v += w.bias[size_t(g) * w.rows + n0 + n];
    out[size_t(m0 + r) * w.rows + n0 + n] = __float2bfloat16(v);
  }
}

__global__ void swiglu_clamped_kernel(bf16* out, const bf16* gate_up, int64_t total, int inter,
                                      SwigluClamp clamp) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t r = i / inter, c = i % inter;
  const bf16* gu = gate_up + r * 2 * inter + 2 * c;
  const float gate = fminf(__bfloat162float(gu[0]), clamp.limit);
  const float up = fminf(fmaxf(__bfloat162float(gu[1]), -clamp.limit), clamp.limit);
  out[i] = __float2bfloat16((up + 1.f) * gate / (1.f + __expf(-clamp.alpha * gate)));
}

}  // namespace

void mxfp4_gemm(void* out, const void* a, const Mxfp4Weights& w, const int32_t* offsets,
                int max_rows, cudaStream_t stream) {
  FS_CHECK(w.cols > 0 && w.cols % 32 == 0 && w.rows > 0 && w.groups >= 1 &&
               (offsets || w.groups == 1) && w.groups <= 65535,
           "mxfp4_gemm: rows ", w.rows, " cols ", w.cols, " (a multiple of 32), groups ",
           w.groups, offsets ? "" : " (without offsets: one)");
  if (max_rows <= 0) return;
  const dim3 grid((w.rows + kTile - 1) / kTile, (max_rows + kTile - 1) / kTile, w.groups);
  FS_CHECK(grid.y <= 65535u, "mxfp4_gemm: ", max_rows, " rows is more than one launch covers");
  mxfp4_gemm_kernel<<<grid, kThreads, 0, stream>>>(
      static_cast<bf16*>(out), static_cast<const bf16*>(a), w, offsets, max_rows);
  CUDA_CHECK_LAUNCH();
}

void swiglu_clamped_bf16(void* out, const void* gate_up, int rows, int inter, SwigluClamp clamp,
                         cudaStream_t stream) {
  const int64_t total = int64_t(rows) * inter;
  if (total == 0) return;
  constexpr int kBlock = 256;
  swiglu_clamped_kernel<<<unsigned((total + kBlock - 1) / kBlock), kBlock, 0, stream>>>(
      static_cast<bf16*>(out), static_cast<const bf16*>(gate_up), total, inter, clamp);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda

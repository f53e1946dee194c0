// Skinny matmul for decode: out[m, n] = x[m, k] · w[n, k]ᵀ with m of 1..kGemvMaxRows. At such m
// the product is a pass over the weights: every weight byte is read once and used m times, so the
// kernel's job is to stream w at the memory's speed. Two kernels, each where it measured faster
// (bench_linear and the probe of docs/decode.md, H100):
//  - m <= 2: one warp per row of w, four 16-byte loads in flight per lane, x re-read from L1/L2,
//    fp32 FMAs. Small blocks (8 rows), so many are resident and much is in flight; but each
//    weight vector costs m loads of x and 8 m conversions, which is why it falls off from m = 3;
//  - m >= 3: the tensor-core kernel of kernels/cuda/skinny_gemm.cuh, whose cost does not grow
//    with m up to 8.
#include <cuda_bf16.h>

#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/skinny_gemm.cuh"
#include "kernels/cuda_ops.h"

namespace flashserve::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarpKernelRows = 2;  // m up to this: the warp-per-row kernel
constexpr int kWarps = 8;           // rows of w per block
constexpr int kUnroll = 4;          // 16-byte loads of w in flight per lane

__device__ inline void dot8(const uint4& w, const uint4& x, float& acc) {
  const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = __bfloat1622float2(wp[i]);
    const float2 b = __bfloat1622float2(xp[i]);
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
  }
}

// One warp per row of w; M = rows of x (compile-time so the accumulators stay in registers).
template <int M, class Out>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(Out* __restrict__ out, const bf16* __restrict__ x, const bf16* __restrict__ w,
                int n, int k) {
  pdl_trigger();  // launched with launch_pdl (kernels/cuda/pdl.cuh)
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarps + threadIdx.x / 32;
  if (row >= n) return;
  const int vecs = k / 8;  // 16-byte vectors per row
  const uint4* wr = reinterpret_cast<const uint4*>(w + int64_t(row) * k);
  const uint4* xv = reinterpret_cast<const uint4*>(x);
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
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int r = 0; r < M; ++r)
        dot8(wv[u], __ldca(xv + int64_t(r) * vecs + v + 32 * u), acc[r]);
    v += 32 * kUnroll;
    full = v + 32 * (kUnroll - 1) < vecs;
    if (full)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wv[u] = __ldg(wr + v + 32 * u);  // loads first, then math
  }
  for (; v < vecs; v += 32) {
    const uint4 wv = __ldg(wr + v);
#pragma unroll
    for (int r = 0; r < M; ++r) dot8(wv, __ldca(xv + int64_t(r) * vecs + v), acc[r]);
  }
#pragma unroll
  for (int r = 0; r < M; ++r) {
    float s = acc[r];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) skinny::store_out(out + int64_t(r) * n + row, s);
  }
}

template <class Out>
void launch_warp_kernel(Out* out, const bf16* x, const bf16* w, int m, int n, int k,
                        cudaStream_t stream) {
  const dim3 grid((n + kWarps - 1) / kWarps), block(kWarps * 32);
  if (m == 1)
    launch_pdl(gemv_kernel<1, Out>, grid, block, 0, stream, out, x, w, n, k);
  else
    launch_pdl(gemv_kernel<2, Out>, grid, block, 0, stream, out, x, w, n, k);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

static_assert(kGemvMaxRows == skinny::kMaxRows, "kernels/cuda_ops.h and skinny_gemm.cuh disagree");

bool gemv_supported(int m, int k, const void* x, const void* w, const void* out) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return m >= 1 && m <= kGemvMaxRows && k > 0 && k % 8 == 0 && aligned(x) && aligned(w) &&
         aligned(out);
}

void gemv_bf16(void* out, bool out_f32, const void* x, const void* w, int m, int n, int k,
               cudaStream_t stream) {
  FS_CHECK(gemv_supported(m, k, x, w, out), "gemv: unsupported m ", m, " k ", k,
           " or unaligned pointers");
  if (n == 0) return;
  const bf16* xb = static_cast<const bf16*>(x);
  const bf16* wb = static_cast<const bf16*>(w);
  if (m <= kWarpKernelRows) {
    if (out_f32)
      launch_warp_kernel(static_cast<float*>(out), xb, wb, m, n, k, stream);
    else
      launch_warp_kernel(static_cast<bf16*>(out), xb, wb, m, n, k, stream);
    return;
  }
  const skinny::Args a = skinny::make_args(out, x, w, m, n, k);
  if (out_f32)
    skinny::launch<skinny::Prologue::kPlain, float>(a, stream);
  else
    skinny::launch<skinny::Prologue::kPlain, skinny::bf16>(a, stream);
}

}  // namespace flashserve::cuda

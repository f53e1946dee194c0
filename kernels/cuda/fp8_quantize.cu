// FP8 quantization kernels (docs/FP8.md). quantize_rows_fp8: activations to FP8 for the FP8 GEMM
// of larger steps ("W8A8 above 16 rows"): each row of x gets its own scale, amax / 448, and codes
// = encode(x * (448 / amax)), rounded to nearest even and saturated (cvt.rn.satfinite on sm_89+,
// the same rounding core/fp8.h's encoder does on the host). Per-row (per-token) scales keep one
// outlier token from flattening the others. One block per row: pass 1 reduces amax, pass 2 writes
// 8 codes per 16-byte load. The CPU twin is kernels/cpu/fp8_matmul_ref.h's quantize_rows_fp8;
// both divide the same way (IEEE division, no fast math), so codes and scales agree bitwise.
// scale_rows_cols_fp8: the GEMM's output times its row's activation scale and its column's
// weight scale (cuBLASLt's own per-row "outer vector" scales have no FP8 algorithm on the H100
// with CUDA 13.0). quantize_weight_fp8: --quantize fp8 of a bf16/f16 weight on the GPU, bit for
// bit what weights/fp8_weights.h's quantize_fp8_rows computes on the host.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "core/fp8.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/fp8_quantize.h"

namespace flashserve::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float block_max(float v, float* red) {  // red: [kThreads / 32]
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = red[0];
  for (int w = 1; w < kThreads / 32; ++w) v = fmaxf(v, red[w]);
  return v;
}

__global__ void __launch_bounds__(kThreads)
quantize_rows_fp8_kernel(uint2* __restrict__ codes,        // [m, k / 8] (8 codes each)
                         float* __restrict__ scales,       // [m]
                         const uint4* __restrict__ x,      // [m, k / 8] (8 bf16 each)
                         int units_per_row) {
  __shared__ float red[kThreads / 32];
  const uint4* xr = x + size_t(blockIdx.x) * units_per_row;
  float amax = 0.f;
  for (int u = threadIdx.x; u < units_per_row; u += kThreads) {
    const uint4 v = xr[u];
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
  }
  amax = block_max(amax, red);
  // A row of zeros (or of values too small to scale, whose 448 / amax would overflow) gets
  // scale 1: its codes round to zero, as the host encoder's would.
  const bool scaled = amax >= kFp8MinRowAmax;
  const float inv = scaled ? kFp8E4M3Max / amax : 1.f;
  if (threadIdx.x == 0) scales[blockIdx.x] = scaled ? amax / kFp8E4M3Max : 1.f;
  uint2* cr = codes + size_t(blockIdx.x) * units_per_row;
  for (int u = threadIdx.x; u < units_per_row; u += kThreads) {
    const uint4 v = xr[u];
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
    uint32_t out[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      const __nv_fp8x2_storage_t q =
          __nv_cvt_float2_to_fp8x2(make_float2(f.x * inv, f.y * inv), __NV_SATFINITE, __NV_E4M3);
      out[i / 2] |= uint32_t(q) << (16 * (i % 2));
    }
    cr[u] = make_uint2(out[0], out[1]);
  }
}

// out[i, j] *= row_scale[i] * col_scale[j], eight outputs (16 bytes of bf16, 32 of f32) a thread.
template <bool kF32>
__global__ void scale_rows_cols_kernel(void* __restrict__ out,              // [m, n]
                                       const float* __restrict__ row_scale,  // [m]
                                       const float* __restrict__ col_scale,  // [n]
                                       int64_t units, int units_per_row) {
  for (int64_t u = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; u < units;
       u += int64_t(gridDim.x) * blockDim.x) {
    const float r = __ldg(row_scale + u / units_per_row);
    const int c0 = int(u % units_per_row) * 8;
    float v[8];
    if constexpr (kF32) {
      const float4* p = static_cast<const float4*>(out) + u * 2;
      const float4 a = p[0], b = p[1];
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
      const uint4 q = static_cast<const uint4*>(out)[u];
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&q);
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(h[i]);
        v[2 * i] = f.x, v[2 * i + 1] = f.y;
      }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] *= r * __ldg(col_scale + c0 + i);
    if constexpr (kF32) {
      float4* p = static_cast<float4*>(out) + u * 2;
      p[0] = make_float4(v[0], v[1], v[2], v[3]);
      p[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
      uint4 q;
      __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&q);
      for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
      static_cast<uint4*>(out)[u] = q;
    }
  }
}

// One block per weight row: pass 1 its amax (and whether every value is finite), pass 2 its
// codes, encode(w / scale) with scale = amax / 448 (1 for a row of zeros): quantize_fp8_rows'
// formula, divisions and all (IEEE, as the host's), so the codes and scales agree bitwise. One
// value a thread per load: the weight comes over PCIe at a fraction of what this reads, so the
// kernel is not worth vectorising, and any cols works.
template <class T>
__global__ void __launch_bounds__(kThreads)
quantize_weight_fp8_kernel(uint8_t* __restrict__ codes,     // [rows, cols]
                           float* __restrict__ scales,      // [rows]
                           const T* __restrict__ w,         // [rows, cols]
                           int64_t cols,
                           unsigned* __restrict__ bad_row) {  // [1]
  __shared__ float red[kThreads / 32];
  const int64_t row = blockIdx.x;
  const T* wr = w + row * cols;
  float amax = 0.f;
  bool finite = true;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    const float v = float(wr[c]);
    finite &= isfinite(v);
    amax = fmaxf(amax, fabsf(v));
  }
  amax = block_max(amax, red);
  if (!__syncthreads_and(finite)) {  // the host's quantize_fp8_rows throws here
    if (threadIdx.x == 0) atomicMin(bad_row, unsigned(row));
    return;
  }
  const float scale = amax > 0.f ? __fdiv_rn(amax, kFp8E4M3Max) : 1.f;
  if (threadIdx.x == 0) scales[row] = scale;
  uint8_t* cr = codes + row * cols;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads)
    cr[c] = __nv_cvt_float_to_fp8(__fdiv_rn(float(wr[c]), scale), __NV_SATFINITE, __NV_E4M3);
}

}  // namespace

void scale_rows_cols_fp8(void* out, bool out_f32, const float* row_scale, const float* col_scale,
                         int m, int n, cudaStream_t stream) {
  FS_CHECK(m >= 0 && n > 0 && n % 8 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
               row_scale && col_scale,
           "scale_rows_cols_fp8: unsupported n ", n, ", unaligned output or no scales");
  const int64_t units = int64_t(m) * (n / 8);
  if (units == 0) return;
  const int blocks = int(std::min<int64_t>((units + kThreads - 1) / kThreads, 8192));
  if (out_f32)
    scale_rows_cols_kernel<true><<<blocks, kThreads, 0, stream>>>(out, row_scale, col_scale, units, n / 8);
  else
    scale_rows_cols_kernel<false><<<blocks, kThreads, 0, stream>>>(out, row_scale, col_scale, units, n / 8);
  CUDA_CHECK_LAUNCH();
}

void quantize_rows_fp8(void* codes, float* scales, const void* x, int m, int k,
                       cudaStream_t stream) {
  auto aligned = [](const void* p, int a) { return reinterpret_cast<uintptr_t>(p) % a == 0; };
  FS_CHECK(m >= 0 && k > 0 && k % 8 == 0 && aligned(codes, 8) && aligned(x, 16) && scales,
           "quantize_rows_fp8: unsupported k ", k, " or unaligned pointers");
  if (m == 0) return;
  quantize_rows_fp8_kernel<<<m, kThreads, 0, stream>>>(static_cast<uint2*>(codes), scales,
                                                       static_cast<const uint4*>(x), k / 8);
  CUDA_CHECK_LAUNCH();
}

void quantize_weight_fp8(void* codes, float* scales, const void* w, bool f16, int64_t rows,
                         int64_t cols, unsigned* bad_row, cudaStream_t stream) {
  FS_CHECK(rows >= 0 && rows <= INT32_MAX && cols > 0 && bad_row,
           "quantize_weight_fp8: unsupported shape [", rows, ", ", cols, "]");
  if (rows == 0) return;
  auto* q = static_cast<uint8_t*>(codes);
  if (f16)
    quantize_weight_fp8_kernel<<<unsigned(rows), kThreads, 0, stream>>>(
        q, scales, static_cast<const __half*>(w), cols, bad_row);
  else
    quantize_weight_fp8_kernel<<<unsigned(rows), kThreads, 0, stream>>>(
        q, scales, static_cast<const __nv_bfloat16*>(w), cols, bad_row);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda

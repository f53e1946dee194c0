// Int4 weight-only matmul of decode steps (kernels/int4_gemv.h): out[m, n] = x[m, k] · dequant(w)ᵀ
// for m <= 16, the act-order gather of x, and the dequantization to bf16 for larger steps.
// The matmul is kernels/cuda/skinny_gemm.cuh's design with int4 codes: at such m it is one pass
// over the weights, so the job is to stream the codes at the memory's speed. A block owns 16 rows
// of w (one mma A tile) and its 8 warps split k in units of 128 columns; each lane loads 16 bytes
// of a unit for its rows g and g + 8 (32 codes each), kUnroll units at once, before it waits
// for the previous kernel (programmatic dependent launch) and before any arithmetic. A 32-bit
// word of codes becomes four bf16 pairs (q - zero) with a mask, an OR that makes the bf16 128 + q
// and one subtraction of 128 + zero, all exact; one pair of m16n8k16 mmas takes them against x's
// 16-byte vector of the same 8 columns, so the fp32 sums of exact products run on the tensor
// cores, and each 32-column run (one group) is scaled once per output. The warps' partial sums
// meet in shared memory in a fixed order (bitwise-repeatable results).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/skinny_gemm.cuh"
#include "kernels/int4_gemv.h"

namespace flashserve::cuda {
namespace {

using skinny::bf16;

constexpr int kWarps = 8;       // warps per block, splitting k
constexpr int kUnitCols = 128;  // packed columns per unit: 64 bytes of a row, 16 per quad lane
constexpr int kUnitBytes = 64;

struct Int4Args {
  void* out;             // [m, n] bf16 or f32
  const bf16* x;         // [m, k], packed column order
  const uint8_t* codes;  // [n, row_bytes]
  const float* scales;   // [groups, n]
  const uint8_t* zeros;  // [groups, n]
  int m, n, k, group_size, groups, row_bytes;
};

// Four bf16 pairs (q - zero) from one word of codes (pair s: columns 2s, 2s + 1 of its 8), as mma
// A registers. zero2: the bf16 pair (128 + zero, 128 + zero).
__device__ __forceinline__ void dequant_word(uint32_t word, uint32_t zero2, uint32_t (&a)[4]) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint32_t biased = ((word >> (4 * s)) & 0x000F000Fu) | 0x43004300u;  // 128 + q, exact
    const __nv_bfloat162 d = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&biased),
                                     *reinterpret_cast<const __nv_bfloat162*>(&zero2));
    a[s] = *reinterpret_cast<const uint32_t*>(&d);
  }
}

__device__ __forceinline__ uint32_t zero_pair(uint32_t zero) { return 0x43004300u + zero * 0x00010001u; }

// kNT n8 tiles of x rows (m <= 8 kNT); kGroupWords: 32-column words per group run (1, 2, or 4
// when a group spans a whole unit); kUnroll units in flight per warp.
template <int kNT, int kGroupWords, int kUnroll, class Out>
__global__ void __launch_bounds__(kWarps * 32) int4_gemv_kernel(const __grid_constant__ Int4Args a) {
  constexpr int kRuns = 4 / kGroupWords;  // group runs per unit
  __shared__ float partial[kWarps][kNT * 4][32];
  pdl_trigger();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid / 32, g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.x * 16;
  int rows[2];  // w rows g and g + 8, clamped onto n - 1 (read, never stored)
  const uint8_t* wrow[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    rows[hf] = min(row0 + 8 * hf + g, a.n - 1);
    wrow[hf] = a.codes + size_t(rows[hf]) * a.row_bytes + 16 * t;
  }
  const int units = (a.k + kUnitCols - 1) / kUnitCols;
  constexpr int kPerRound = kWarps * kUnroll;

  uint4 wv[kUnroll][2];
  float scale[kUnroll][kRuns][2];
  uint32_t zero[kUnroll][kRuns][2];
  // The codes and their groups' scales and zeros of this warp's units in round `first`; all are
  // written at load, so they may be read before pdl_wait.
  auto load_w = [&](int first) {
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int u = first + warp * kUnroll + j;
      const bool ok = u < units;
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        wv[j][hf] = ok ? skinny::load_stream(wrow[hf] + size_t(u) * kUnitBytes) : uint4{};
#pragma unroll
        for (int r = 0; r < kRuns; ++r) {
          const int col = u * kUnitCols + 32 * kGroupWords * r;
          const int grp = min(col / a.group_size, a.groups - 1);
          const size_t at = size_t(grp) * a.n + rows[hf];
          scale[j][r][hf] = ok && col < a.k ? __ldg(a.scales + at) : 0.f;
          zero[j][r][hf] = ok && col < a.k ? uint32_t(__ldg(a.zeros + at)) : 0u;
        }
      }
    }
  };
  load_w(0);
  pdl_wait();

  float acc[kNT][4];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;

  for (int first = 0; first < units; first += kPerRound) {
    if (first > 0) load_w(first);
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int u = first + warp * kUnroll + j;
      if (u >= units) break;  // warp-uniform
#pragma unroll
      for (int r = 0; r < kRuns; ++r) {
        float run[kNT][4];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) run[nt][0] = run[nt][1] = run[nt][2] = run[nt][3] = 0.f;
        const uint32_t z0 = zero_pair(zero[j][r][0]), z1 = zero_pair(zero[j][r][1]);
#pragma unroll
        for (int ww = 0; ww < kGroupWords; ++ww) {
          const int w = r * kGroupWords + ww;
          const int col = u * kUnitCols + 32 * w + 8 * t;
          const uint32_t* lo = &wv[j][0].x;
          const uint32_t* hi = &wv[j][1].x;
          uint32_t d0[4], d1[4];
          dequant_word(lo[w], z0, d0);  // row g
          dequant_word(hi[w], z1, d1);  // row g + 8
          const uint32_t a_lo[4] = {d0[0], d1[0], d0[1], d1[1]}, a_hi[4] = {d0[2], d1[2], d0[3], d1[3]};
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
            const int xr = nt * 8 + g;
            const uint4 xv = col < a.k && xr < a.m ? skinny::load_act(a.x + size_t(xr) * a.k + col)
                                                   : make_uint4(0, 0, 0, 0);
            const uint32_t b_lo[2] = {xv.x, xv.y}, b_hi[2] = {xv.z, xv.w};
            detail::mma_m16n8k16<bf16>(run[nt], a_lo, b_lo);
            detail::mma_m16n8k16<bf16>(run[nt], a_hi, b_hi);
          }
        }
        // C fragment: c0, c1 belong to w row g, c2, c3 to row g + 8.
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          acc[nt][0] = fmaf(run[nt][0], scale[j][r][0], acc[nt][0]);
          acc[nt][1] = fmaf(run[nt][1], scale[j][r][0], acc[nt][1]);
          acc[nt][2] = fmaf(run[nt][2], scale[j][r][1], acc[nt][2]);
          acc[nt][3] = fmaf(run[nt][3], scale[j][r][1], acc[nt][3]);
        }
      }
    }
  }

#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int c = 0; c < 4; ++c) partial[warp][nt * 4 + c][lane] = acc[nt][c];
  __syncthreads();
  Out* out = static_cast<Out*>(a.out);
  for (int idx = tid; idx < kNT * 4 * 32; idx += kWarps * 32) {
    const int e = idx / 32, l = idx % 32;
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += partial[w][e][l];
    // Accumulator c of tile nt in lane l: w row l / 4 (+ 8 for c >= 2), x row 8 nt + 2 (l % 4)
    // (+ 1 for odd c): the m16n8 C fragment layout.
    const int c = e % 4, nt = e / 4;
    const int row = row0 + l / 4 + 8 * (c / 2), xr = 8 * nt + 2 * (l % 4) + c % 2;
    if (row < a.n && xr < a.m) skinny::store_out(out + size_t(xr) * a.n + row, s);
  }
}

// Fewer units in flight where small groups need more scale registers per unit.
template <int kNT, int kGroupWords, class Out>
void launch_gemv(const Int4Args& a, cudaStream_t stream) {
  constexpr int kUnroll = kGroupWords == 4 ? 4 : 2;
  const dim3 grid((a.n + 15) / 16), block(kWarps * 32);
  launch_pdl(int4_gemv_kernel<kNT, kGroupWords, kUnroll, Out>, grid, block, 0, stream, a);
  CUDA_CHECK_LAUNCH();
}

template <int kNT, class Out>
void launch_groups(const Int4Args& a, cudaStream_t stream) {
  if (a.group_size == 32)
    launch_gemv<kNT, 1, Out>(a, stream);
  else if (a.group_size == 64)
    launch_gemv<kNT, 2, Out>(a, stream);
  else
    launch_gemv<kNT, 4, Out>(a, stream);  // a multiple of 128, or one group per row
}

// xp[r, j] = x[r, perm[j]], one element a thread.
__global__ void gather_columns_kernel(uint16_t* __restrict__ xp, const uint16_t* __restrict__ x,
                                      const int32_t* __restrict__ perm, int m, int k) {
  pdl_trigger();
  pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(m) * k) return;
  const int64_t r = i / k, j = i - r * k;
  xp[i] = x[r * k + __ldg(perm + j)];
}

// One thread per word of codes: its 8 columns, each to its input column.
__global__ void dequantize_kernel(bf16* __restrict__ w, const uint8_t* __restrict__ codes,
                                  const float* __restrict__ scales,
                                  const uint8_t* __restrict__ zeros,
                                  const int32_t* __restrict__ perm, int n, int k, int group_size,
                                  int row_bytes) {
  const int words = row_bytes / 4;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * words) return;
  const int o = int(i / words), wi = int(i % words);
  const int u = wi / 16, t = (wi % 16) / 4, wd = wi % 4;
  const int c = u * kUnitCols + 32 * wd + 8 * t;
  if (c >= k) return;  // padding
  const uint32_t word = __ldg(reinterpret_cast<const uint32_t*>(codes + size_t(o) * row_bytes) + wi);
  const size_t at = size_t(c / group_size) * n + o;
  const float scale = __ldg(scales + at);
  const int zero = __ldg(zeros + at);
  for (int s = 0; s < 8; ++s) {
    const int q = (word >> (s % 2 ? 16 + 4 * (s / 2) : 4 * (s / 2))) & 0xF;
    const int col = c + s;
    w[size_t(o) * k + (perm ? __ldg(perm + col) : col)] = __float2bfloat16(float(q - zero) * scale);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

int int4_row_bytes(int k) { return (k + kUnitCols - 1) / kUnitCols * kUnitBytes; }

Int4GpuLayout int4_gpu_layout(const uint8_t* packed, const float* scales, const uint8_t* zeros,
                              int n, int k, int group_size) {
  FS_CHECK(n > 0 && k > 0 && k % 8 == 0 && group_size > 0 && k % group_size == 0,
           "int4 layout: bad shape ", n, "x", k, " group ", group_size);
  const int groups = k / group_size, row_bytes = int4_row_bytes(k);
  Int4GpuLayout out;
  out.codes.assign(size_t(n) * row_bytes, 0);
  out.scales.resize(size_t(groups) * n);
  out.zeros.resize(size_t(groups) * n);
  for (int o = 0; o < n; ++o) {
    const uint8_t* row = packed + size_t(o) * (k / 2);
    auto code = [&](int c) -> uint32_t { return c < k ? (c % 2 ? row[c / 2] >> 4 : row[c / 2] & 0xF) : 0; };
    for (int wi = 0; wi < row_bytes / 4; ++wi) {
      const int u = wi / 16, t = (wi % 16) / 4, wd = wi % 4;
      const int c = u * kUnitCols + 32 * wd + 8 * t;
      uint32_t word = 0;
      for (int s = 0; s < 4; ++s) word |= code(c + 2 * s) << (4 * s) | code(c + 2 * s + 1) << (16 + 4 * s);
      for (int b = 0; b < 4; ++b) out.codes[size_t(o) * row_bytes + 4 * wi + b] = uint8_t(word >> (8 * b));
    }
    for (int gi = 0; gi < groups; ++gi) {
      out.scales[size_t(gi) * n + o] = scales[size_t(o) * groups + gi];
      out.zeros[size_t(gi) * n + o] = zeros[size_t(o) * groups + gi];
    }
  }
  return out;
}

bool int4_gemv_supported(int m, int k, int group_size, const void* x, const void* out) {
  const bool groups_ok = group_size == 32 || group_size == 64 ||
                         (group_size > 0 && group_size % 128 == 0) || group_size == k;
  return m >= 1 && m <= kInt4GemvMaxRows && k > 0 && k % 8 == 0 && groups_ok &&
         k % group_size == 0 && aligned16(x) && aligned16(out);
}

void int4_gemv(void* out, bool out_f32, const void* x, const uint8_t* codes, const float* scales,
               const uint8_t* zeros, int m, int n, int k, int group_size, cudaStream_t stream) {
  FS_CHECK(int4_gemv_supported(m, k, group_size, x, out), "int4_gemv: unsupported m ", m, " k ",
           k, " group ", group_size, " or unaligned pointers");
  if (n == 0) return;
  const Int4Args a{out, static_cast<const bf16*>(x), codes, scales, zeros,
                   m, n, k, group_size, k / group_size, int4_row_bytes(k)};
  if (m <= 8 && out_f32)
    launch_groups<1, float>(a, stream);
  else if (m <= 8)
    launch_groups<1, bf16>(a, stream);
  else if (out_f32)
    launch_groups<2, float>(a, stream);
  else
    launch_groups<2, bf16>(a, stream);
}

void int4_gather_columns(void* xp, const void* x, const int32_t* perm, int m, int k,
                         cudaStream_t stream) {
  const int64_t total = int64_t(m) * k;
  if (total == 0) return;
  constexpr int kThreads = 256;
  launch_pdl(gather_columns_kernel, dim3(unsigned((total + kThreads - 1) / kThreads)),
             dim3(kThreads), 0, stream, static_cast<uint16_t*>(xp),
             static_cast<const uint16_t*>(x), perm, m, k);
  CUDA_CHECK_LAUNCH();
}

void int4_dequantize_bf16(void* w, const uint8_t* codes, const float* scales, const uint8_t* zeros,
                          const int32_t* perm, int n, int k, int group_size, cudaStream_t stream) {
  FS_CHECK(k % 8 == 0 && group_size > 0 && k % group_size == 0, "int4_dequantize_bf16: k ", k,
           " group ", group_size);
  const int row_bytes = int4_row_bytes(k);
  const int64_t total = int64_t(n) * (row_bytes / 4);
  if (total == 0) return;
  constexpr int kThreads = 256;
  dequantize_kernel<<<unsigned((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      static_cast<bf16*>(w), codes, scales, zeros, perm, n, k, group_size, row_bytes);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda

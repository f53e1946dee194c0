// Int4 weight-only GEMM for steps above kInt4GemvMaxRows rows (kernels/int4_gemm.h), in the style
// of Marlin: bf16 x times int4 codes read in the layout of kernels/int4_gemv.h, widened to bf16 in
// registers, mma.sync m16n8k16 with fp32 accumulation, a cp.async pipeline of kStages stages.
// A block owns kBM rows of x and kBN rows of w; one stage is one 128-column unit of both (x's
// [kBM, 128] bf16, w's [kBN, 64 bytes] of codes and the unit's group rows of scales and zero
// points). Its warps tile the block kWarpsM x kWarpsN and split each unit's four 32-column words
// kWarpsK ways; the kWarpsK partial sums meet in shared memory in a fixed order at the end.
// x is the mma A operand and w the B operand. The layout's 16 bytes of a row for quad lane t hold
// its columns 32 w + 8 t + (0..7) of each word w, and the mma's k index is a logical one: lane t
// feeds its k slots 2t, 2t+1, 2t+8, 2t+9 from columns 32 w + 8 t + (0..3) of both operands (and
// the next mma from + (4..7)), so one 16-byte shared load gives a lane an x row's fragment of two
// mmas and one code word the w row's; no ldmatrix, no repacking (docs/QUANTIZATION.md).
#include <cuda_bf16.h>

#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/ptx.cuh"
#include "kernels/int4_gemm.h"
#include "kernels/int4_gemv.h"

namespace flashserve::cuda {
namespace {

using bf16 = __nv_bfloat16;
using detail::cp_async_16;
using detail::smem_addr;

constexpr int kUnitCols = 128;  // columns per unit, one pipeline stage
constexpr int kUnitBytes = 64;  // codes per row and unit
constexpr int kXRowBytes = 2 * kUnitCols;  // an x row of one unit in shared memory
constexpr int kMaxRuns = 4;     // groups per unit (group_size 32)

struct GemmArgs {
  void* out;             // [m, n] bf16 or f32
  const bf16* x;         // [m, k], packed column order
  const uint8_t* codes;  // [n, row_bytes]
  const float* scales;   // [groups, n]
  const uint8_t* zeros;  // [groups, n]
  int m, n, k, group_size, groups, row_bytes, units;
  int runs;  // groups per unit: 4 (group 32), 2 (64) or 1
};

// A block's shape: kWarpsM x kWarpsN warps over its output tile, each warp kMT m16 tiles of x by
// kNT n8 tiles of w, kWarpsK warps per output tile splitting a unit's words.
template <int kWarpsM_, int kWarpsN_, int kWarpsK_, int kMT_, int kNT_, int kStages_>
struct Tile {
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = kWarpsN_, kWarpsK = kWarpsK_;
  static constexpr int kMT = kMT_, kNT = kNT_, kStages = kStages_;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN * kWarpsK;
  static constexpr int kBM = 16 * kMT * kWarpsM;  // x rows per block
  static constexpr int kBN = 8 * kNT * kWarpsN;   // w rows per block
  static constexpr int kWords = 4 / kWarpsK;      // 32-column words of each unit per warp
  // One stage: x [kBM][128] bf16, codes [kBN][64 bytes], scales [kMaxRuns][kBN] f32, zeros
  // [kMaxRuns][kBN] u8; every part a multiple of 16 bytes.
  static constexpr int kCodesAt = kBM * kXRowBytes;
  static constexpr int kScalesAt = kCodesAt + kBN * kUnitBytes;
  static constexpr int kZerosAt = kScalesAt + kMaxRuns * kBN * 4;
  static constexpr int kStageBytes = kZerosAt + kMaxRuns * kBN;
  // The partial sums of warps kWarpsK > 0 reuse the pipeline's memory after the last stage.
  static constexpr int kReduceBytes = (kWarpsK - 1) * kWarpsM * kWarpsN * kMT * kNT * 4 * 32 * 4;
  static constexpr int kSmemBytes =
      kStages * kStageBytes > kReduceBytes ? kStages * kStageBytes : kReduceBytes;
  static_assert(4 % kWarpsK == 0 && kStages >= 2, "tile shape");
};

// Byte offset of columns 8 j..8 j + 7 of row r of a stage's x tile. Odd rows swap the two halves
// of each 128-byte line, so the 8 lanes of a quarter-warp (rows g = 2p, 2p + 1, chunks 4 w + t)
// read 8 different 16-byte bank groups.
__device__ __forceinline__ int x_offset(int r, int j) {
  return r * kXRowBytes + 16 * (j ^ ((r & 1) << 2));
}

// 4-byte async copy (zero-filled when !valid), for a unit's 4 rows of zero points.
__device__ __forceinline__ void cp_async_4(uint32_t dst_smem, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst_smem), "l"(src),
               "r"(valid ? 4 : 0));
}

// Stage copies of unit u. Rows past m or n and columns past k are zero-filled: zero x columns
// meet the padding codes, so the padding adds nothing; rows past n get scale 0.
template <class T>
__device__ void load_w(const GemmArgs& a, uint8_t* stage, int u, int n0) {
  for (int i = threadIdx.x; i < T::kBN * 4; i += T::kThreads) {
    const int r = i / 4, c = i % 4, row = n0 + r;
    const bool ok = row < a.n;
    const size_t at = ok ? size_t(row) * a.row_bytes + size_t(u) * kUnitBytes + 16 * c : 0;
    cp_async_16(smem_addr(stage + T::kCodesAt + r * kUnitBytes + 16 * c), a.codes + at, ok);
  }
  // Run r of the unit: its group's scales and zero points of the block's rows, 4 rows a copy
  // (n % 4 == 0, so 4 rows are all in range or all out).
  constexpr int kQuads = T::kBN / 4;
  for (int i = threadIdx.x; i < a.runs * kQuads; i += T::kThreads) {
    const int r = i / kQuads, row = n0 + 4 * (i % kQuads);
    const int group = (u * kUnitCols + r * (kUnitCols / a.runs)) / a.group_size;
    const bool ok = group < a.groups && row < a.n;
    const size_t at = ok ? size_t(group) * a.n + row : 0;
    const int e = r * T::kBN + 4 * (i % kQuads);
    cp_async_16(smem_addr(stage + T::kScalesAt + 4 * e), a.scales + at, ok);
    cp_async_4(smem_addr(stage + T::kZerosAt + e), a.zeros + at, ok);
  }
}

template <class T>
__device__ void load_x(const GemmArgs& a, uint8_t* stage, int u, int m0) {
  for (int i = threadIdx.x; i < T::kBM * 16; i += T::kThreads) {
    const int r = i / 16, j = i % 16, row = m0 + r, col = u * kUnitCols + 8 * j;
    const bool ok = row < a.m && col < a.k;  // k % 8 == 0: all 8 columns or none
    const bf16* src = a.x + (ok ? size_t(row) * a.k + col : 0);
    cp_async_16(smem_addr(stage + x_offset(r, j)), src, ok);
  }
}

__device__ __forceinline__ uint4 lds128(const uint8_t* p) {
  return *reinterpret_cast<const uint4*>(p);
}

// Word w of a 16-byte vector by selects (w is warp-uniform, often a constant): indexing a
// register array at run time would move it to local memory.
__device__ __forceinline__ uint32_t word_of(const uint4& v, int w) {
  return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
}

// The B fragments of two mmas from one word of codes (pair s: columns 2 s, 2 s + 1 of its 8):
// 128 + q by a mask and an OR, minus 128 + zero (exact), times the scale (rounded to bf16).
__device__ __forceinline__ void widen_word(uint32_t word, uint32_t zero, float scale,
                                           uint32_t (&b)[4]) {
  const uint32_t zero2 = 0x43004300u + zero * 0x00010001u;
  const __nv_bfloat162 scale2 = __float2bfloat162_rn(scale);
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint32_t biased = ((word >> (4 * s)) & 0x000F000Fu) | 0x43004300u;
    const __nv_bfloat162 q = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&biased),
                                     *reinterpret_cast<const __nv_bfloat162*>(&zero2));
    const __nv_bfloat162 w = __hmul2(q, scale2);
    b[s] = *reinterpret_cast<const uint32_t*>(&w);
  }
}

// This warp's words of one stage into acc[mt][nt] (the m16n8 C fragments).
template <class T>
__device__ __forceinline__ void compute_stage(const GemmArgs& a, const uint8_t* stage, int wm,
                                              int wn, int wk, float (&acc)[T::kMT][T::kNT][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  uint4 codes[T::kNT];  // words 0..3 of quad lane t for w row g of each n8 tile
#pragma unroll
  for (int nt = 0; nt < T::kNT; ++nt) {
    const int row = (wn * T::kNT + nt) * 8 + g;
    codes[nt] = lds128(stage + T::kCodesAt + row * kUnitBytes + 16 * t);
  }
#pragma unroll
  for (int ww = 0; ww < T::kWords; ++ww) {
    const int w = wk * T::kWords + ww;
    const int run = w * a.runs / 4;
    uint4 xf[T::kMT][2];  // x rows g and g + 8 of each m16 tile, columns 32 w + 8 t..
#pragma unroll
    for (int mt = 0; mt < T::kMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        xf[mt][h] = lds128(stage + x_offset((wm * T::kMT + mt) * 16 + 8 * h + g, 4 * w + t));
#pragma unroll
    for (int nt = 0; nt < T::kNT; ++nt) {
      const int row = (wn * T::kNT + nt) * 8 + g, e = run * T::kBN + row;
      const float scale = reinterpret_cast<const float*>(stage + T::kScalesAt)[e];
      const uint32_t zero = stage[T::kZerosAt + e];
      uint32_t b[4];
      widen_word(word_of(codes[nt], w), zero, scale, b);
      const uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
#pragma unroll
      for (int mt = 0; mt < T::kMT; ++mt) {
        // A fragment: rows g, g + 8 of the tile, k slots 2t.. and 2t + 8.. = columns +0,+1 and
        // +2,+3 of the lane's 8 (the next mma: +4..+7).
        const uint32_t a_lo[4] = {xf[mt][0].x, xf[mt][1].x, xf[mt][0].y, xf[mt][1].y};
        const uint32_t a_hi[4] = {xf[mt][0].z, xf[mt][1].z, xf[mt][0].w, xf[mt][1].w};
        detail::mma_m16n8k16<bf16>(acc[mt][nt], a_lo, b_lo);
        detail::mma_m16n8k16<bf16>(acc[mt][nt], a_hi, b_hi);
      }
    }
  }
}

__device__ __forceinline__ void store2(float* p, float v0, float v1) {
  *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
}
__device__ __forceinline__ void store2(bf16* p, float v0, float v1) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
}

template <class T, class Out>
__global__ void __launch_bounds__(T::kThreads)
    int4_gemm_kernel(const __grid_constant__ GemmArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wn = warp % T::kWarpsN, wm = warp / T::kWarpsN % T::kWarpsM;
  const int wk = T::kWarpsK == 1 ? 0 : warp / (T::kWarpsN * T::kWarpsM);  // a constant if it can be
  // blockIdx.x walks m, so the blocks sharing a tile of w run together and read it once from HBM.
  const int m0 = blockIdx.x * T::kBM, n0 = blockIdx.y * T::kBN;
  auto stage = [&](int u) { return smem + (u % T::kStages) * T::kStageBytes; };

  // The weights were written at load: their first stages are requested before waiting for the
  // kernel that writes x (programmatic dependent launch). One commit group per stage.
  for (int u = 0; u < T::kStages - 1; ++u)
    if (u < a.units) load_w<T>(a, stage(u), u, n0);
  pdl_wait();
  for (int u = 0; u < T::kStages - 1; ++u) {
    if (u < a.units) load_x<T>(a, stage(u), u, m0);
    detail::cp_async_commit();
  }

  float acc[T::kMT][T::kNT][4];
#pragma unroll
  for (int i = 0; i < T::kMT * T::kNT * 4; ++i) (&acc[0][0][0])[i] = 0.f;

  for (int u = 0; u < a.units; ++u) {
    detail::cp_async_wait<T::kStages - 2>();  // unit u has landed (this thread's copies)
    __syncthreads();  // ... everyone's, and unit u - 1's stage is no longer read
    const int next = u + T::kStages - 1;
    if (next < a.units) {
      load_w<T>(a, stage(next), next, n0);
      load_x<T>(a, stage(next), next, m0);
    }
    detail::cp_async_commit();
    compute_stage<T>(a, stage(u), wm, wn, wk, acc);
  }
  detail::cp_async_wait<0>();
  pdl_trigger();

  if constexpr (T::kWarpsK > 1) {
    // Warps wk > 0 leave their sums in shared memory; warp wk = 0 adds them in order wk = 1, 2..
    constexpr int kFrag = T::kMT * T::kNT * 4;
    float* red = reinterpret_cast<float*>(smem);
    const int tile = wm * T::kWarpsN + wn;
    __syncthreads();  // the pipeline's memory is free
    if (wk > 0) {
      float* p = red + ((wk - 1) * T::kWarpsM * T::kWarpsN + tile) * kFrag * 32;
#pragma unroll
      for (int i = 0; i < kFrag; ++i) p[i * 32 + lane] = (&acc[0][0][0])[i];
    }
    __syncthreads();
    if (wk > 0) return;
#pragma unroll
    for (int j = 1; j < T::kWarpsK; ++j) {
      const float* p = red + ((j - 1) * T::kWarpsM * T::kWarpsN + tile) * kFrag * 32;
#pragma unroll
      for (int i = 0; i < kFrag; ++i) (&acc[0][0][0])[i] += p[i * 32 + lane];
    }
  }

  // C fragment: c0, c1 at x row g, w rows 2t, 2t + 1; c2, c3 at x row g + 8. n % 4 == 0, so an
  // even column in range has its neighbour in range.
  Out* out = static_cast<Out*>(a.out);
#pragma unroll
  for (int mt = 0; mt < T::kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::kNT; ++nt) {
      const int xr = m0 + (wm * T::kMT + mt) * 16 + g;
      const int col = n0 + (wn * T::kNT + nt) * 8 + 2 * t;
      if (col >= a.n) continue;
      if (xr < a.m) store2(out + size_t(xr) * a.n + col, acc[mt][nt][0], acc[mt][nt][1]);
      if (xr + 8 < a.m) store2(out + size_t(xr + 8) * a.n + col, acc[mt][nt][2], acc[mt][nt][3]);
    }
}

// The shapes by step size. Up to 64 rows the weights' bytes bound the time: narrow blocks (32 or
// 64 w rows, whose 4 warps per 32 rows split each unit's words) give every SM its share of w, and
// 6 stages keep enough of it in flight; 64 w rows from 33 x rows up halve the times x is read
// from L2. Above, the mmas bound it: 128 x rows per block, each warp 64 x 32, so one widened word
// feeds 8 mmas and one x fragment 8.
template <int kMT, int kWarpsN, int kStages>
using NarrowTile = Tile<1, kWarpsN, 4, kMT, 4, kStages>;  // kBM = 16 kMT, kBN = 32 kWarpsN
using MediumTile = Tile<2, 2, 2, 4, 4, 4>;  // kBM 128, kBN 64 (up to 256 rows)
using WideTile = Tile<2, 4, 1, 4, 4, 4>;    // kBM 128, kBN 128
static_assert(NarrowTile<2, 1, 6>::kSmemBytes <= 99 * 1024 &&
                  NarrowTile<4, 1, 4>::kSmemBytes <= 99 * 1024,
              "the tiles of every GPU fit sm_86's 99 KB");
static_assert(NarrowTile<4, 2, 6>::kSmemBytes <= WideTile::kSmemBytes &&
                  MediumTile::kSmemBytes <= WideTile::kSmemBytes &&
                  WideTile::kSmemBytes <= 227 * 1024,
              "the roomy tiles fit where the wide one does, and Hopper's 227 KB");

template <class T, class Out>
void launch(const GemmArgs& a, cudaStream_t stream) {
  auto kernel = int4_gemm_kernel<T, Out>;
  CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes));
  const dim3 grid((a.m + T::kBM - 1) / T::kBM, (a.n + T::kBN - 1) / T::kBN);
  launch_pdl(kernel, grid, dim3(T::kThreads), T::kSmemBytes, stream, a);
  CUDA_CHECK_LAUNCH();
}

// Hopper gives a block 227 KB of shared memory; other GPUs (99-163 KB) run small narrow tiles at
// every size.
template <class Out>
void launch_for_rows(const GemmArgs& a, cudaStream_t stream) {
  int device = 0, smem_optin = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const bool roomy = smem_optin >= WideTile::kSmemBytes;
  if (a.m <= 32)
    launch<NarrowTile<2, 1, 6>, Out>(a, stream);
  else if (!roomy)
    launch<NarrowTile<4, 1, 4>, Out>(a, stream);
  else if (a.m <= 48)
    launch<NarrowTile<3, 2, 6>, Out>(a, stream);
  else if (a.m <= 64)
    launch<NarrowTile<4, 2, 6>, Out>(a, stream);
  else if (a.m <= 256)
    launch<MediumTile, Out>(a, stream);
  else
    launch<WideTile, Out>(a, stream);
}

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

bool int4_gemm_supported(int m, int n, int k, int group_size, const void* x, const void* out) {
  return m >= 1 && n >= 0 && n % 4 == 0 && int4_gemv_supported(1, k, group_size, x, out);
}

void int4_gemm(void* out, bool out_f32, const void* x, const uint8_t* codes, const float* scales,
               const uint8_t* zeros, int m, int n, int k, int group_size, cudaStream_t stream) {
  FS_CHECK(int4_gemm_supported(m, n, k, group_size, x, out), "int4_gemm: unsupported m ", m,
           " n ", n, " k ", k, " group ", group_size, " or unaligned x / out");
  FS_CHECK(aligned(codes, 16) && aligned(scales, 16) && aligned(zeros, 4),
           "int4_gemm: codes and scales must be 16-byte aligned, zeros 4-byte");
  if (n == 0) return;
  const int runs = group_size == 32 ? 4 : group_size == 64 ? 2 : 1;
  const GemmArgs a{out,  static_cast<const bf16*>(x), codes, scales, zeros, m, n, k, group_size,
                   k / group_size, int4_row_bytes(k), (k + kUnitCols - 1) / kUnitCols, runs};
  if (out_f32)
    launch_for_rows<float>(a, stream);
  else
    launch_for_rows<bf16>(a, stream);
}

}  // namespace flashserve::cuda

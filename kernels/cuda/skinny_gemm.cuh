// The skinny matmul of decode steps on tensor cores: out[m, n] = x[m, k] · w[n, k]ᵀ for m <= 16,
// optionally with the op that produces x fused in front of it (the "prologue"):
//   kPlain    x as given;
//   kAddNorm  x_out = x + delta (bf16), x = rms_norm(x_out) * norm_w: the residual add and the
//             next block's RMSNorm (LlamaModel's add_rms_norm + the projection after it).
// At such m the product is one pass over w, so the kernel's job is to stream w at the memory's
// speed and keep the arithmetic out of the way. One mma.sync m16n8k16 takes 16 rows of w as the A
// operand and 8 rows of x as the B operand (m <= 8: one n8 tile; m <= 16: two), so m costs the
// same from 1 to 8 and the fp32 accumulation runs on the tensor cores; no bf16 -> fp32 converts.
// The k index of a fragment is a logical one: the dot product does not care which physical
// column a logical k stands for as long as A and B agree, so each thread feeds the mma straight
// from one 16-byte load per row: thread (g = lane / 4, t = lane % 4) loads columns 8t..8t+7 of a
// 32-column unit for w rows g and g + 8 and for x row g; words .x/.y feed one mma, .z/.w the next
// (docs/DECODE.md has the mapping). A block owns kTiles 16-row tiles of w and its kWarps warps split
// k; their partial sums meet in shared memory in a fixed order (bitwise-repeatable results).
// Programmatic dependent launch (kernels/cuda/pdl.cuh): before waiting for the previous kernel a
// block loads its first unroll of w into registers, so the weight stream starts while the kernel
// before it finishes. Rows past n are clamped onto row n - 1 (read, never stored); the columns of
// a last partial unit are zero in both operands. FP8 weights (kFp8, docs/FP8.md): each thread
// loads its 8 columns as 8 bytes of E4M3 codes and widens them to the same bf16 fragment in
// registers (exact), and the epilogue multiplies each output by its row's scale. Block-wise FP8
// weights (kBlock, kernels/block_fp8.h): a 16-row tile lies in one block of rows and a 32-column
// unit in one block of columns, so each unit's two mmas go into fresh accumulators that are then
// added times the block's scale (fp32 FMAs, no epilogue scale). Included by
// gemv.cu, gemv_fused.cu and gemv_fp8.cu, which instantiate it. docs/DECODE.md has the measurements (and what did not pay: an L2 bulk prefetch
// of the block's rows, a SwiGLU prologue).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/ptx.cuh"

namespace flashserve::cuda::skinny {

using bf16 = __nv_bfloat16;

enum class Prologue { kPlain, kAddNorm };

struct Args {
  void* out;           // [m, n] bf16 or f32
  const void* w;       // [n, k] bf16, or E4M3 codes (kFp8)
  const float* w_scale;  // kFp8: [n] the rows' scales
  const float* w_block_scale;  // kBlock: [ceil(n / block_n), block_scale_ld]
  int block_n, block_k, block_scale_ld;  // kBlock: block_n a multiple of 16, block_k of 32
  const bf16* x;       // kPlain: [m, k]; kAddNorm: the residual [m, k]
  const bf16* delta;   // kAddNorm: [m, k] added to the residual, or null (x used as is)
  bf16* x_out;         // kAddNorm: [m, k] receives x + delta (block 0 writes it), or null
  const bf16* norm_w;  // kAddNorm: [k]
  float eps;           // kAddNorm
  int m, n, k;
};

// Shared-memory row pitch of the normed x (kAddNorm), in elements: 64 extra bytes put the 8 rows
// a quarter-warp reads at once into different banks.
__host__ __device__ constexpr int norm_pitch(int k) { return k + 32; }

__device__ __forceinline__ uint4 load_stream(const void* p) {  // w: read once, keep out of L1
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 load_stream8(const void* p) {  // FP8 w: 8 codes
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// Activations written by the previous kernel: the coherent, L1-cached path (never ld.nc: that
// kernel may have overlapped this one until pdl_wait).
__device__ __forceinline__ uint4 load_act(const bf16* p) {
  return __ldca(reinterpret_cast<const uint4*>(p));
}

__device__ __forceinline__ uint32_t bf16x2_bits(__nv_bfloat162 v) {
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ float2 bf16x2_float(uint32_t bits) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
}

// A w fragment as the mma takes it: bf16 as loaded, FP8 codes widened to bf16.
__device__ __forceinline__ uint4 widen(uint4 v) { return v; }
__device__ __forceinline__ uint4 widen(uint2 v) { return fp8x8_to_bf16x8(v); }

__device__ __forceinline__ void store_out(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_out(bf16* p, float v) { *p = __float2bfloat16(v); }

// kAddNorm prologue: the block's copy of rms_norm(x + delta) * norm_w in shared memory h
// [m][norm_pitch(k)] bf16 (block 0 also writes x + delta to x_out). The rounding is that of
// add_rms_norm_vec_kernel: the sum rounded to bf16, its squares summed in fp32, h rounded once.
template <int kThreads>
__device__ void add_norm_prologue(const Args& a, bf16* h) {
  __shared__ float inv_rms[16];
  const int tid = threadIdx.x, vecs = a.k / 8, pitch = norm_pitch(a.k);
  const bool write = a.x_out != nullptr && blockIdx.x == 0;
  for (int i = tid; i < a.m * vecs; i += kThreads) {
    const int r = i / vecs, c = (i - r * vecs) * 8;
    uint4 s = load_act(a.x + size_t(r) * a.k + c);
    if (a.delta != nullptr) {
      const uint4 d = load_act(a.delta + size_t(r) * a.k + c);
      uint32_t* sp = &s.x;
      const uint32_t* dp = &d.x;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 x = bf16x2_float(sp[j]), y = bf16x2_float(dp[j]);
        sp[j] = bf16x2_bits(__floats2bfloat162_rn(x.x + y.x, x.y + y.y));
      }
    }
    if (write) *reinterpret_cast<uint4*>(a.x_out + size_t(r) * a.k + c) = s;
    *reinterpret_cast<uint4*>(h + r * pitch + c) = s;
  }
  __syncthreads();
  // One warp per row, lanes over columns: a fixed summation order.
  const int lane = tid & 31, warp = tid / 32;
  for (int r = warp; r < a.m; r += kThreads / 32) {
    float ss = 0.f;
    for (int c = lane; c < vecs; c += 32) {
      const uint4 s = *reinterpret_cast<const uint4*>(h + r * pitch + c * 8);
      const uint32_t* sp = &s.x;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 v = bf16x2_float(sp[j]);
        ss += v.x * v.x + v.y * v.y;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) inv_rms[r] = rsqrtf(ss / float(a.k) + a.eps);
  }
  __syncthreads();
  for (int i = tid; i < a.m * vecs; i += kThreads) {
    const int r = i / vecs, c = (i - r * vecs) * 8;
    uint4* p = reinterpret_cast<uint4*>(h + r * pitch + c);
    uint4 s = *p;
    const uint4 wv = __ldg(reinterpret_cast<const uint4*>(a.norm_w + c));
    uint32_t* sp = &s.x;
    const uint32_t* wp = &wv.x;
    const float inv = inv_rms[r];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 x = bf16x2_float(sp[j]), g = bf16x2_float(wp[j]);
      sp[j] = bf16x2_bits(__floats2bfloat162_rn(x.x * inv * g.x, x.y * inv * g.y));
    }
    *p = s;
  }
  __syncthreads();
}

// kNT n8 tiles of x rows (m <= 8 kNT); kTiles 16-row tiles of w per block; kWarps warps over k,
// each taking kUnroll 32-column units per round (all their loads in flight at once); kFp8: w
// holds E4M3 codes and a.w_scale their rows' scales; kBlock (with kFp8): a.w_block_scale their
// blocks' scales instead.
template <int kNT, int kTiles, int kWarps, int kUnroll, Prologue P, class Out, bool kFp8,
          bool kBlock = false>
__global__ void __launch_bounds__(kWarps * 32)
    skinny_gemm_kernel(const __grid_constant__ Args a) {
  constexpr int kThreads = kWarps * 32, kRows = 16 * kTiles, kOut = kTiles * kNT * 4;
  __shared__ float partial[kWarps][kOut][32];  // each warp's accumulators, lane-minor
  extern __shared__ __align__(16) unsigned char dyn_smem[];  // kAddNorm: h [m][norm_pitch(k)]
  pdl_trigger();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid / 32, g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.x * kRows, k = a.k;
  constexpr int kWBytes = kFp8 ? 1 : 2;  // bytes per weight
  const unsigned char* wrow[kTiles][2];
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
      wrow[i][hf] = static_cast<const unsigned char*>(a.w) +
                    size_t(min(row0 + 16 * i + 8 * hf + g, a.n - 1)) * k * kWBytes;

  const int units = (k + 31) / 32;
  constexpr int kPerRound = kWarps * kUnroll;
  // The loads' registers: raw codes for FP8, widened to bf16 only where the mma takes them, so
  // that every load of a round is in flight before the first conversion waits for one.
  using WReg = std::conditional_t<kFp8, uint2, uint4>;
  WReg wv[kUnroll][kTiles][2];
  auto load_w = [&](int first_unit) {
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int col = (first_unit + warp * kUnroll + j) * 32 + 8 * t;
      const bool ok = col < k;
#pragma unroll
      for (int i = 0; i < kTiles; ++i)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const unsigned char* p = wrow[i][hf] + size_t(col) * kWBytes;
          if constexpr (kFp8)
            wv[j][i][hf] = ok ? load_stream8(p) : WReg{};
          else
            wv[j][i][hf] = ok ? load_stream(p) : WReg{};
        }
    }
  };
  load_w(0);  // independent of the previous kernel: in flight while we wait for it
  pdl_wait();

  const bf16* h = reinterpret_cast<const bf16*>(dyn_smem);
  if constexpr (P == Prologue::kAddNorm) add_norm_prologue<kThreads>(a, reinterpret_cast<bf16*>(dyn_smem));
  auto load_x = [&](int r, int col) -> uint4 {
    if constexpr (P == Prologue::kAddNorm)
      return *reinterpret_cast<const uint4*>(h + r * norm_pitch(k) + col);
    else
      return load_act(a.x + size_t(r) * k + col);
  };

  float acc[kTiles][kNT][4];
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) acc[i][nt][0] = acc[i][nt][1] = acc[i][nt][2] = acc[i][nt][3] = 0.f;

  for (int first = 0; first < units; first += kPerRound) {
    if (first > 0) load_w(first);
    uint4 xv[kUnroll][kNT];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int col = (first + warp * kUnroll + j) * 32 + 8 * t;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const int r = nt * 8 + g;
        xv[j][nt] = col < k && r < a.m ? load_x(r, col) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j)
#pragma unroll
      for (int i = 0; i < kTiles; ++i) {
        const uint4 w0 = widen(wv[j][i][0]);  // row g
        const uint4 w1 = widen(wv[j][i][1]);  // row g + 8
        const uint32_t a_lo[4] = {w0.x, w1.x, w0.y, w1.y}, a_hi[4] = {w0.z, w1.z, w0.w, w1.w};
        float scale = 1.f;  // kBlock: the unit's block (past k: any, its products are zeros)
        if constexpr (kBlock) {
          const int col = min((first + warp * kUnroll + j) * 32, k - 1);
          const int row = min(row0 + 16 * i, a.n - 1);
          scale = __ldg(a.w_block_scale + size_t(row / a.block_n) * a.block_scale_ld +
                        col / a.block_k);
        }
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          const uint4& xx = xv[j][nt];
          const uint32_t b_lo[2] = {xx.x, xx.y}, b_hi[2] = {xx.z, xx.w};
          if constexpr (kBlock) {
            float unit[4] = {0.f, 0.f, 0.f, 0.f};
            detail::mma_m16n8k16<bf16>(unit, a_lo, b_lo);
            detail::mma_m16n8k16<bf16>(unit, a_hi, b_hi);
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[i][nt][c] = fmaf(unit[c], scale, acc[i][nt][c]);
          } else {
            detail::mma_m16n8k16<bf16>(acc[i][nt], a_lo, b_lo);
            detail::mma_m16n8k16<bf16>(acc[i][nt], a_hi, b_hi);
          }
        }
      }
  }

#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) partial[warp][(i * kNT + nt) * 4 + c][lane] = acc[i][nt][c];
  __syncthreads();
  Out* out = static_cast<Out*>(a.out);
  for (int idx = tid; idx < kOut * 32; idx += kThreads) {
    const int e = idx / 32, l = idx % 32;
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += partial[w][e][l];
    // Accumulator c of tile (i, nt) in lane l: w row 16 i + l / 4 (+ 8 for c >= 2), x row
    // 8 nt + 2 (l % 4) (+ 1 for odd c): the m16n8 C fragment layout.
    const int c = e % 4, nt = (e / 4) % kNT, i = e / 4 / kNT;
    const int row = row0 + 16 * i + l / 4 + 8 * (c / 2), col = 8 * nt + 2 * (l % 4) + c % 2;
    if constexpr (kFp8 && !kBlock)
      if (row < a.n) s *= a.w_scale[row];
    if (row < a.n && col < a.m) store_out(out + size_t(col) * a.n + row, s);
  }
}

// ---- host side -------------------------------------------------------------------------------
// The block shape every launch uses: one 16-row tile of w per block, 8 warps over k, 4 units of
// 32 columns in flight per warp (docs/DECODE.md: the variants measured and why this one).
constexpr int kTiles = 1, kWarps = 8, kUnroll = 4;
// FP8 weights: a unit's load is 8 bytes instead of 16, so twice the units per round keep the same
// bytes in flight per thread (and the same registers for them: 8 x uint2 = 4 x uint4).
constexpr int kUnrollFp8 = 2 * kUnroll;
constexpr int kMaxRows = 16;  // m: two n8 tiles of x
// Shared memory the kAddNorm prologue may take for the normed rows (m * norm_pitch(k) bf16):
// up to two blocks per SM; larger m * k goes the unfused way.
constexpr size_t kMaxNormSmem = 110 * 1024;

// Args of out[m, n] = x[m, k] · w[n, k]ᵀ; the prologue's own fields stay null.
inline Args make_args(void* out, const void* x, const void* w, int m, int n, int k) {
  Args a{};
  a.out = out;
  a.x = static_cast<const bf16*>(x);
  a.w = w;
  a.m = m;
  a.n = n;
  a.k = k;
  return a;
}

inline size_t dynamic_smem(Prologue p, int m, int k) {
  return p == Prologue::kAddNorm ? size_t(m) * norm_pitch(k) * sizeof(bf16) : 0;
}

// Launches the kernel for a.m rows (1..kMaxRows) with programmatic dependent launch; the
// caller has checked shapes and alignment (kFp8: w 8-byte aligned, k a multiple of 8; kBlock:
// the block shape).
template <Prologue P, class Out, bool kFp8 = false, bool kBlock = false>
void launch(const Args& a, cudaStream_t stream) {
  constexpr int kU = kFp8 ? kUnrollFp8 : kUnroll;
  auto kernel = a.m <= 8 ? skinny_gemm_kernel<1, kTiles, kWarps, kU, P, Out, kFp8, kBlock>
                         : skinny_gemm_kernel<2, kTiles, kWarps, kU, P, Out, kFp8, kBlock>;
  const size_t smem = dynamic_smem(P, a.m, a.k);
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid((a.n + 16 * kTiles - 1) / (16 * kTiles)), block(kWarps * 32);
  launch_pdl(kernel, grid, block, smem, stream, a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda::skinny

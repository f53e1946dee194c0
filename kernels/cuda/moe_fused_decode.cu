// The fused small-batch MoE kernels (kernels/moe.h, docs/MOE_KERNELS.md). At decode a step has a
// few tokens and each picks top_k experts, so the layer is a pass over the selected experts'
// weights: every weight byte should be read once and used by every token that chose its expert.
// Block (slot, chunk) takes the slot-th selected expert (the grid has min(num_experts, n * top_k)
// slots, the most experts a routing can select; slots past the routing's return at once) and a
// chunk of output rows, two rows a warp (gate/up: row i of gate and row i of up, so SwiGLU
// happens in registers; down: two neighbouring rows). Each block finds its expert and that
// expert's (token, choice) pairs from the ids itself, so no permutation kernel runs before these
// two, and the activations stay in pair order (row q = t * top_k + j), which moe_combine reads
// directly.
// A lane streams 8 weights a step (16 bytes of bf16, 8 of FP8, 4 of int4), several steps in
// flight, widens them to f32 and takes them against each of the expert's rows of x (R, a
// compile-time bound on the rows an expert has at this n, so the accumulators stay in
// registers); x comes from L1/L2. This is the warp-per-row scheme of kernels/cuda/gemv.cu with
// the expert chosen on the device. Both kernels are launched with programmatic dependent launch
// (kernels/cuda/pdl.cuh) to overlap their launch with the previous kernel's tail.
//
// Formats (MoeFormat): bf16; FP8 with row scales (the row's scale times the f32 dot product, as
// gemv_fp8); block-wise FP8 (each 8 codes times their block's scale: blocks are >= 8 columns); int4
// in the layout of kernels/int4_gemv.h, where one 32-bit word is 8 consecutive packed columns
// (value (code - zero) * scale of their group; act-order reads x at perm[column]).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/skinny_gemm.cuh"
#include "kernels/int4_gemv.h"
#include "kernels/moe.h"

namespace flashserve::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 8;  // output rows per block

// Reading 8 consecutive weights of one row, per format: load() issues the memory access (so a
// lane can have several in flight; weights are read once, so they bypass L1, which keeps x),
// decode() widens them with whatever scale varies within the row; row_scale() is what multiplies
// the whole row's dot product.
template <MoeFormat F>
struct Fmt;

template <>
struct Fmt<MoeFormat::kBf16> {
  using Raw = uint4;
  static constexpr int kUnroll = 4;
  __device__ static Raw load(const MoeExpertPtrs& e, const MoeProjection& w, int row, int c) {
    return skinny::load_stream(static_cast<const bf16*>(e.w) + int64_t(row) * w.cols + c);
  }
  __device__ static void decode(float (&v)[8], const Raw& r, const MoeExpertPtrs&,
                                const MoeProjection&, int, int) {
    const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&r);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(p[i]);
      v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
  }
  __device__ static float row_scale(const MoeExpertPtrs&, int) { return 1.f; }
};

__device__ inline void fp8x8_to_float(float (&v)[8], uint2 r) {
  const uint32_t q[2] = {r.x, r.y};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = fp8x2_to_float2(uint16_t(q[i / 2] >> (16 * (i % 2))));
    v[2 * i] = f.x, v[2 * i + 1] = f.y;
  }
}

template <>
struct Fmt<MoeFormat::kFp8Rows> {
  using Raw = uint2;
  static constexpr int kUnroll = 4;
  __device__ static Raw load(const MoeExpertPtrs& e, const MoeProjection& w, int row, int c) {
    return skinny::load_stream8(static_cast<const uint8_t*>(e.w) + int64_t(row) * w.cols + c);
  }
  __device__ static void decode(float (&v)[8], const Raw& r, const MoeExpertPtrs&,
                                const MoeProjection&, int, int) {
    fp8x8_to_float(v, r);
  }
  __device__ static float row_scale(const MoeExpertPtrs& e, int row) { return e.scale[row]; }
};

template <>
struct Fmt<MoeFormat::kBlockFp8> {
  using Raw = uint2;
  static constexpr int kUnroll = 4;
  __device__ static Raw load(const MoeExpertPtrs& e, const MoeProjection& w, int row, int c) {
    return Fmt<MoeFormat::kFp8Rows>::load(e, w, row, c);
  }
  __device__ static void decode(float (&v)[8], const Raw& r, const MoeExpertPtrs& e,
                                const MoeProjection& w, int row, int c) {
    fp8x8_to_float(v, r);
    const float s = e.scale[int64_t(row / w.block_n) * w.scale_ld + c / w.block_k];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] *= s;
  }
  __device__ static float row_scale(const MoeExpertPtrs&, int) { return 1.f; }
};

template <>
struct Fmt<MoeFormat::kInt4> {
  using Raw = uint32_t;
  static constexpr int kUnroll = 8;
  // Packed columns c..c+7 (c a multiple of 8) are one word: byte 64 u + 16 t + 4 w of the row
  // with c = 128 u + 32 w + 8 t (kernels/int4_gemv.h).
  __device__ static Raw load(const MoeExpertPtrs& e, const MoeProjection& w, int row, int c) {
    const int row_bytes = (w.cols + 127) / 128 * 64;
    const int at = c / 128 * 64 + (c % 32) / 8 * 16 + (c % 128) / 32 * 4;
    uint32_t v;
    asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];\n"
        : "=r"(v)
        : "l"(static_cast<const uint8_t*>(e.w) + int64_t(row) * row_bytes + at));
    return v;
  }
  __device__ static void decode(float (&v)[8], const Raw& r, const MoeExpertPtrs& e,
                                const MoeProjection& w, int row, int c) {
    const int64_t g = int64_t(c / w.group_size) * w.rows + row;
    const float s = e.scale[g];
    const float z = float(e.zeros[g]);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      v[2 * q] = (float((r >> (4 * q)) & 0xFu) - z) * s;
      v[2 * q + 1] = (float((r >> (16 + 4 * q)) & 0xFu) - z) * s;
    }
  }
  __device__ static float row_scale(const MoeExpertPtrs&, int) { return 1.f; }
};

// x's 8 values at columns c..c+7 of one row (bf16 activations or the f32 SwiGLU output), or at
// columns perm[c..c+7] under act-order.
__device__ inline void load_x(float (&v)[8], const bf16* row, int c, const int32_t* perm) {
  if (perm) {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __bfloat162float(row[perm[c + i]]);
    return;
  }
  const uint4 r = *reinterpret_cast<const uint4*>(row + c);
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&r);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(p[i]);
    v[2 * i] = f.x, v[2 * i + 1] = f.y;
  }
}
__device__ inline void load_x(float (&v)[8], const float* row, int c, const int32_t* perm) {
  if (perm) {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = row[perm[c + i]];
    return;
  }
  const float4 a = *reinterpret_cast<const float4*>(row + c);
  const float4 b = *reinterpret_cast<const float4*>(row + c + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// acc[k][r] = row wrow[k] of the expert's projection · x row xrow[r] (r < rows), for kRowsW
// weight rows at once, summed over the warp: every lane holds the full sums on return.
template <MoeFormat F, int R, int kRowsW, class X>
__device__ inline void warp_dots(float (&acc)[kRowsW][R], const MoeExpertPtrs& e,
                                 const MoeProjection& w, const int (&wrow)[kRowsW], const X* x,
                                 int x_ld, const int (&xrow)[R], int rows) {
  using Fm = Fmt<F>;
  constexpr int kU = Fm::kUnroll;
  const int lane = threadIdx.x % 32;
  const int32_t* perm = F == MoeFormat::kInt4 ? e.perm : nullptr;
#pragma unroll
  for (int k = 0; k < kRowsW; ++k)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[k][r] = 0.f;
  for (int c0 = lane * 8; c0 < w.cols; c0 += 32 * 8 * kU) {
    typename Fm::Raw raw[kRowsW][kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int c = c0 + u * 256;
#pragma unroll
      for (int k = 0; k < kRowsW; ++k)
        if (c < w.cols) raw[k][u] = Fm::load(e, w, wrow[k], c);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int c = c0 + u * 256;
      if (c >= w.cols) break;
      float wv[kRowsW][8];
#pragma unroll
      for (int k = 0; k < kRowsW; ++k) Fm::decode(wv[k], raw[k][u], e, w, wrow[k], c);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r >= rows) break;
        float xv[8];
        load_x(xv, x + int64_t(xrow[r]) * x_ld, c, perm);
#pragma unroll
        for (int k = 0; k < kRowsW; ++k)
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[k][r] = fmaf(wv[k][i], xv[i], acc[k][r]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kRowsW; ++k) {
    const float s = Fm::row_scale(e, wrow[k]);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float v = acc[k][r];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      acc[k][r] = v * s;
    }
  }
}

// The expert of block slot `slot` (the slot-th lowest expert id that some pair selects; -1 when
// fewer are selected) and its pairs q = t * top_k + j, ascending, into pairs[]. Every thread of
// the block must call it. A 256-bit mask of the selected experts (shared-memory atomics), warp 0
// finds the slot-th set bit and collects the expert's pairs with ballots, 32 ids at a time.
struct ExpertPairs {
  int expert, count;
};
__device__ ExpertPairs block_expert(int slot, const int32_t* __restrict__ ids, int total,
                                    int num_experts, int* pairs) {
  __shared__ unsigned mask[kMoeMaxExperts / 32];
  __shared__ ExpertPairs found;
  const int lane = threadIdx.x % 32;
  if (threadIdx.x < kMoeMaxExperts / 32) mask[threadIdx.x] = 0;
  __syncthreads();
  for (int q = threadIdx.x; q < total; q += blockDim.x) {
    const int e = ids[q];
    if (e >= 0 && e < num_experts) atomicOr(&mask[e / 32], 1u << (e % 32));
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    unsigned word = lane < kMoeMaxExperts / 32 ? mask[lane] : 0u;
    const int bits = __popc(word);
    int below = bits;  // inclusive prefix of the set bits over the lanes
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, below, o);
      if (lane >= o) below += v;
    }
    below -= bits;
    const bool mine = slot >= below && slot < below + bits;
    int e = -1;
    if (mine) {
      for (int k = below; k < slot; ++k) word &= word - 1;  // drop the lower set bits
      e = 32 * lane + __ffs(int(word)) - 1;
    }
    const unsigned owner = __ballot_sync(0xffffffffu, mine);
    e = owner ? __shfl_sync(0xffffffffu, e, __ffs(int(owner)) - 1) : -1;
    int count = 0;
    if (e >= 0)
      for (int base = 0; base < total; base += 32) {
        const int q = base + lane;
        const bool match = q < total && ids[q] == e;
        const unsigned m = __ballot_sync(0xffffffffu, match);
        if (match) pairs[count + __popc(m & ((1u << lane) - 1u))] = q;
        count += __popc(m);
      }
    if (lane == 0) found = {e, count};
  }
  __syncthreads();
  return found;
}

// act[q, i] = silu(gate_i · x[t]) * (up_i · x[t]) for the pairs q = t * top_k + j of the block's
// expert, i = this warp's row.
template <MoeFormat F, int R>
__global__ void __launch_bounds__(kWarps * 32)
    moe_gate_up_kernel(float* __restrict__ act, const bf16* __restrict__ x,
                       const int32_t* __restrict__ ids, MoeProjection w, int total, int top_k,
                       int num_experts) {
  __shared__ int pairs[kMoeFusedMaxPairs];
  pdl_wait();  // ids, x: the previous kernels' outputs; act: maybe still read by one
  pdl_trigger();
  const ExpertPairs ep = block_expert(blockIdx.x, ids, total, num_experts, pairs);
  const int inter = w.rows / 2, hidden = w.cols;
  const int i = blockIdx.y * kWarps + threadIdx.x / 32;
  if (ep.expert < 0 || i >= inter) return;
  const MoeExpertPtrs ptrs = w.experts[ep.expert];
  const int wrow[2] = {i, inter + i};
  // moe_route gives an expert at most one pair per token, so R (>= n) covers them in one pass;
  // more would be correct too, R at a time.
  for (int r0 = 0; r0 < ep.count; r0 += R) {
    const int rows = min(R, ep.count - r0);
    int xrow[R];
#pragma unroll
    for (int r = 0; r < R; ++r) xrow[r] = r < rows ? pairs[r0 + r] / top_k : 0;
    float acc[2][R];
    warp_dots<F, R, 2>(acc, ptrs, w, wrow, x, hidden, xrow, rows);
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (r == lane && r < rows) {
        const float g = acc[0][r], u = acc[1][r];
        act[int64_t(pairs[r0 + r]) * inter + i] = g / (1.f + expf(-g)) * u;
      }
  }
}

// y[q, h] = down_h · act[q] for the pairs q of the block's expert, h = this warp's two rows (two
// rows a warp: down's rows are short at Qwen3's 768 columns, and two keep more loads in flight
// per lane and halve the blocks that each find their expert).
template <MoeFormat F, int R>
__global__ void __launch_bounds__(kWarps * 32)
    moe_down_kernel(float* __restrict__ y, const float* __restrict__ act,
                    const int32_t* __restrict__ ids, MoeProjection w, int total, int num_experts) {
  __shared__ int pairs[kMoeFusedMaxPairs];
  pdl_wait();
  pdl_trigger();
  const ExpertPairs ep = block_expert(blockIdx.x, ids, total, num_experts, pairs);
  const int hidden = w.rows, inter = w.cols;
  const int h = 2 * (blockIdx.y * kWarps + threadIdx.x / 32);
  if (ep.expert < 0 || h >= hidden) return;
  const MoeExpertPtrs ptrs = w.experts[ep.expert];
  const bool second = h + 1 < hidden;
  const int wrow[2] = {h, second ? h + 1 : h};
  for (int r0 = 0; r0 < ep.count; r0 += R) {
    const int rows = min(R, ep.count - r0);
    int xrow[R];
#pragma unroll
    for (int r = 0; r < R; ++r) xrow[r] = r < rows ? pairs[r0 + r] : 0;
    float acc[2][R];
    warp_dots<F, R, 2>(acc, ptrs, w, wrow, act, inter, xrow, rows);
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (r == lane && r < rows) {
        float* out = y + int64_t(pairs[r0 + r]) * hidden + h;
        out[0] = acc[0][r];
        if (second) out[1] = acc[1][r];
      }
  }
}

// The rows bound R for a step of n tokens: an expert gets at most one row per token.
template <template <MoeFormat, int> class Launch, MoeFormat F, class... A>
void by_rows(int n, A&&... args) {
  if (n <= 1) Launch<F, 1>::run(args...);
  else if (n <= 2) Launch<F, 2>::run(args...);
  else if (n <= 4) Launch<F, 4>::run(args...);
  else if (n <= 8) Launch<F, 8>::run(args...);
  else Launch<F, 16>::run(args...);
}

template <template <MoeFormat, int> class Launch, class... A>
void by_format(MoeFormat f, int n, A&&... args) {
  switch (f) {
    case MoeFormat::kBf16: return by_rows<Launch, MoeFormat::kBf16>(n, args...);
    case MoeFormat::kFp8Rows: return by_rows<Launch, MoeFormat::kFp8Rows>(n, args...);
    case MoeFormat::kBlockFp8: return by_rows<Launch, MoeFormat::kBlockFp8>(n, args...);
    case MoeFormat::kInt4: return by_rows<Launch, MoeFormat::kInt4>(n, args...);
  }
  FS_THROW("moe: unknown expert format ", int(f));
}

template <MoeFormat F, int R>
struct GateUp {
  static void run(float* act, const bf16* x, const int32_t* ids, const MoeProjection& w,
                  dim3 grid, int total, int top_k, int num_experts, cudaStream_t stream) {
    launch_pdl(moe_gate_up_kernel<F, R>, grid, dim3(kWarps * 32), 0, stream, act, x, ids, w, total,
               top_k, num_experts);
  }
};

template <MoeFormat F, int R>
struct Down {
  static void run(float* y, const float* act, const int32_t* ids, const MoeProjection& w,
                  dim3 grid, int total, int num_experts, cudaStream_t stream) {
    launch_pdl(moe_down_kernel<F, R>, grid, dim3(kWarps * 32), 0, stream, y, act, ids, w, total,
               num_experts);
  }
};

void check_fused(const MoeProjection& w, int n, int top_k, int num_experts, const char* what) {
  FS_CHECK(n >= 0 && int64_t(n) * top_k <= kMoeFusedMaxPairs, what, ": ", n, " tokens of ", top_k,
           " experts each (the fused kernels take up to ", kMoeFusedMaxPairs, " pairs)");
  FS_CHECK(num_experts <= kMoeMaxExperts, what, ": ", num_experts, " experts");
  FS_CHECK(top_k >= 1 && num_experts >= 1 && w.experts, what, ": top_k ", top_k, " of ",
           num_experts, " experts");
  FS_CHECK(moe_projection_supported(w), what, ": unsupported projection [", w.rows, ", ", w.cols,
           "] in format ", int(w.format));
}

}  // namespace

bool moe_projection_supported(const MoeProjection& w) {
  if (w.rows < 1 || w.cols < 8 || w.cols % 8 != 0) return false;
  switch (w.format) {
    case MoeFormat::kBf16:
    case MoeFormat::kFp8Rows: return true;
    case MoeFormat::kBlockFp8: return w.block_n > 0 && w.block_k > 0 && w.block_k % 8 == 0;
    case MoeFormat::kInt4: return w.group_size > 0 && w.group_size % 8 == 0;
  }
  return false;
}

void moe_fused_gate_up(float* act, const void* x, const int32_t* ids,
                       const MoeProjection& gate_up, int n, int top_k, int num_experts,
                       cudaStream_t stream) {
  check_fused(gate_up, n, top_k, num_experts, "moe_fused_gate_up");
  FS_CHECK(gate_up.rows % 2 == 0, "moe_fused_gate_up: ", gate_up.rows, " gate/up rows");
  if (n == 0) return;
  const dim3 grid(std::min(num_experts, n * top_k), (gate_up.rows / 2 + kWarps - 1) / kWarps);
  by_format<GateUp>(gate_up.format, n, act, static_cast<const bf16*>(x), ids, gate_up, grid,
                    n * top_k, top_k, num_experts, stream);
  CUDA_CHECK_LAUNCH();
}

void moe_fused_down(float* y, const float* act, const int32_t* ids, const MoeProjection& down,
                    int n, int top_k, int num_experts, cudaStream_t stream) {
  check_fused(down, n, top_k, num_experts, "moe_fused_down");
  if (n == 0) return;
  const dim3 grid(std::min(num_experts, n * top_k), (down.rows + 2 * kWarps - 1) / (2 * kWarps));
  by_format<Down>(down.format, n, y, act, ids, down, grid, n * top_k, num_experts, stream);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda

// The decode megakernel's ops on one CTA: a GEMV tile's page (bf16 weights from the shared
// ring times f32 activations read at L2), the per-row RMSNorm scale, the tile's epilogue per op,
// the embedding gather and one attention split (q/k norm, RoPE, KV write, online softmax, and the
// merge by the group's last split). Math as in megakernel/interpreter.cpp.
#pragma once

#include "kernels/cuda/megakernel_sync.cuh"

namespace flashserve::cuda::detail {

// Adds elements [e0, e0 + n) of a segment (bf16 in `page`, rows of length k, k not a multiple of
// 8: small models) times the input rows to acc[(row0 + row) * batch + b], element by element;
// each input element scaled by g[col] when given.
__device__ __forceinline__ void gemv_page_any(const uint16_t* page, int64_t e0, int n, int64_t k,
                                              int64_t row0,
                                              const float* in,    // [batch, k] global
                                              const uint16_t* g,  // [k] or null
                                              int batch, float* acc) {
  for (int c = threadIdx.x; c < n; c += kMkThreads) {
    const int64_t e = e0 + c, row = e / k, col = e - row * k;
    const float w = __uint_as_float(uint32_t(page[c]) << 16) * (g ? bf16_at(g, col) : 1.f);
    for (int b = 0; b < batch; ++b)
      atomicAdd(&acc[(row0 + row) * batch + b], w * __ldcg(in + b * k + col));
  }
}

// Copies the input rows into shared memory, each element scaled by g[col] when given (the
// RMSNorm weight), so that the page loop reads them at shared-memory latency instead of once per
// weight chunk from L2; for a normed input (g given) it also sets rstd[b] = 1 / sqrt(mean(x[b]^2)
// + eps) from the same reads (the epilogue applies it). k is a multiple of 8.
template <int B>
__device__ __forceinline__ void stage_input(const float* in,    // [B, k] global
                                            const uint16_t* g,  // [k] or null
                                            int k, float eps,
                                            float* xs,     // [B, k] shared
                                            float* rstd,   // [B] shared
                                            float* red) {  // [kMkWarps * B] shared
  float ss[B];
#pragma unroll
  for (int b = 0; b < B; ++b) ss[b] = 0.f;
  for (int i = threadIdx.x * 4; i < k; i += kMkThreads * 4) {
    float gf[4] = {1.f, 1.f, 1.f, 1.f};
    if (g) {
      const uint2 gv = __ldg(reinterpret_cast<const uint2*>(g + i));
      gf[0] = bf16_lo(gv.x), gf[1] = bf16_hi(gv.x), gf[2] = bf16_lo(gv.y), gf[3] = bf16_hi(gv.y);
    }
#pragma unroll
    for (int b = 0; b < B; ++b) {
      float4 v = __ldcg(reinterpret_cast<const float4*>(in + int64_t(b) * k + i));
      ss[b] += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
      v.x *= gf[0], v.y *= gf[1], v.z *= gf[2], v.w *= gf[3];
      *reinterpret_cast<float4*>(xs + b * k + i) = v;
    }
  }
  if (g) {
    const int warp = threadIdx.x >> 5;
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const float v = warp_sum(ss[b]);
      if ((threadIdx.x & 31) == 0) red[warp * B + b] = v;
    }
    __syncthreads();
    if (threadIdx.x < B) {
      float t = 0.f;
      for (int w = 0; w < kMkWarps; ++w) t += red[w * B + threadIdx.x];
      rstd[threadIdx.x] = rsqrtf(t / float(k) + eps);
    }
  }
  __syncthreads();
}

// The dot products of one 8-element chunk of weights (bf16 in `wv`, scaled by g[col..] when given)
// with the B input rows at column col.
template <int B, bool kStaged>
__device__ __forceinline__ void chunk_dots(uint4 wv, const float* x, const uint16_t* g, int k,
                                           int col, float (&dot)[B]) {
  float w[8] = {bf16_lo(wv.x), bf16_hi(wv.x), bf16_lo(wv.y), bf16_hi(wv.y),
                bf16_lo(wv.z), bf16_hi(wv.z), bf16_lo(wv.w), bf16_hi(wv.w)};
  if (!kStaged && g) {
    const uint4 gv = __ldg(reinterpret_cast<const uint4*>(g + col));
    w[0] *= bf16_lo(gv.x), w[1] *= bf16_hi(gv.x), w[2] *= bf16_lo(gv.y), w[3] *= bf16_hi(gv.y);
    w[4] *= bf16_lo(gv.z), w[5] *= bf16_hi(gv.z), w[6] *= bf16_lo(gv.w), w[7] *= bf16_hi(gv.w);
  }
#pragma unroll
  for (int b = 0; b < B; ++b) {
    const float4* xb = reinterpret_cast<const float4*>(x + b * k + col);
    const float4 x0 = kStaged ? xb[0] : __ldcg(xb), x1 = kStaged ? xb[1] : __ldcg(xb + 1);
    dot[b] = w[0] * x0.x + w[1] * x0.y + w[2] * x0.z + w[3] * x0.w + w[4] * x1.x + w[5] * x1.y +
             w[6] * x1.z + w[7] * x1.w;
  }
}

// Adds elements [e0, e0 + n) of a segment (bf16 in `page`, rows of length k, k and n multiples
// of 8) times the input rows to acc[(row0 + row) * B + b], each thread reading only the chunks
// it copied (owned_chunk). With k >= 1024 a warp's 1024 elements span at most two rows, R and
// R + 1: a lane sums each in registers and the warp adds them to acc with one warp sum each.
// Shorter rows (small models) take a division and an atomic per chunk. `x` is the staged copy
// (g folded in) or the global rows (g applied to the weights).
template <int B, bool kStaged>
__device__ __forceinline__ void gemv_page(const uint16_t* page, int e0, int n, int k, int row0,
                                          const float* x,     // [B, k] shared or global
                                          const uint16_t* g,  // [k] or null
                                          float* acc) {       // [rows, B] shared
  const int c0 = owned_chunk(0) - (threadIdx.x & 31);  // the warp's first chunk
  if (c0 * 8 >= n) return;  // warp-uniform: the idle warps of a short last page
  float dot[B];
  if (k < 1024) {
#pragma unroll
    for (int j = 0; j < kMkChunksPerLane; ++j) {
      const int c = owned_chunk(j);
      if (c * 8 >= n) continue;
      const int e = e0 + c * 8, row = e / k, col = e - row * k;
      chunk_dots<B, kStaged>(*reinterpret_cast<const uint4*>(page + c * 8), x, g, k, col, dot);
#pragma unroll
      for (int b = 0; b < B; ++b) atomicAdd(&acc[(row0 + row) * B + b], dot[b]);
    }
    return;
  }
  const int ew = e0 + c0 * 8, R = ew / k;
  int col = ew - R * k + (threadIdx.x & 31) * 8, next = 0;  // next: this chunk is in row R + 1
  if (col >= k) col -= k, next = 1;
  float p0[B], p1[B];
#pragma unroll
  for (int b = 0; b < B; ++b) p0[b] = 0.f, p1[b] = 0.f;
#pragma unroll
  for (int j = 0; j < kMkChunksPerLane; ++j) {
    const int c = owned_chunk(j);
    if (c * 8 < n) {
      chunk_dots<B, kStaged>(*reinterpret_cast<const uint4*>(page + c * 8), x, g, k, col, dot);
#pragma unroll
      for (int b = 0; b < B; ++b) {
        p0[b] += next ? 0.f : dot[b];
        p1[b] += next ? dot[b] : 0.f;
      }
    }
    col += 256;
    if (col >= k) col -= k, next = 1;
  }
  const int e_last = ew + min(n - c0 * 8, 32 * kMkChunksPerLane * 8) - 1;
  const bool two_rows = e_last / k > R;  // warp-uniform
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int b = 0; b < B; ++b) {
    const float v0 = warp_sum(p0[b]);
    if (lane == 0) atomicAdd(&acc[(row0 + R) * B + b], v0);
    if (two_rows) {
      const float v1 = warp_sum(p1[b]);
      if (lane == 0) atomicAdd(&acc[(row0 + R + 1) * B + b], v1);
    }
  }
}

// rstd[b] = 1 / sqrt(mean(x[b]^2) + eps) for every sequence (red: [kMkWarps] scratch).
__device__ __forceinline__ void row_rstd(const float* x,  // [batch, hidden]
                                         int hidden, int batch, float eps, float* rstd,
                                         float* red) {
  for (int b = 0; b < batch; ++b) {
    float s = 0.f;
    for (int i = threadIdx.x; i < hidden; i += kMkThreads) {
      const float v = __ldcg(x + int64_t(b) * hidden + i);
      s += v * v;
    }
    s = warp_sum(s);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
      float t = 0.f;
      for (int w = 0; w < kMkWarps; ++w) t += red[w];
      rstd[b] = rsqrtf(t / float(hidden) + eps);
    }
    __syncthreads();
  }
}

// Writes a finished tile (acc [rows, batch], kGateUp: [2 rows, batch]) where its op puts it.
__device__ __forceinline__ void gemv_epilogue(const MegaKernelArgs& a, const MegaInstr& in,
                                              const float* acc, const float* rstd) {
  const MegaDims& d = a.dims;
  const int batch = d.batch, rows = in.end - in.begin;
  const MegaLayerPtrs& L = a.layers[in.layer];
  const int64_t qkv_rows = int64_t(d.num_q_heads + 2 * d.num_kv_heads) * d.head_dim;
  for (int i = threadIdx.x; i < rows * batch; i += kMkThreads) {
    const int r = i / batch, b = i % batch, row = in.begin + r;
    const float v = acc[i];
    switch (MegaOp(in.op)) {
      case MegaOp::kQkv:
        __stcg(a.qkv + b * qkv_rows + row, v * rstd[b] + (d.qkv_bias ? bf16_at(L.bqkv, row) : 0.f));
        break;
      case MegaOp::kOProj:
      case MegaOp::kDown: {
        float* x = a.x + int64_t(b) * d.hidden + row;
        __stcg(x, __ldcg(x) + v);
        break;
      }
      case MegaOp::kGateUp: {
        const float gate = v * rstd[b], up = acc[(rows + r) * batch + b] * rstd[b];
        __stcg(a.act + int64_t(b) * d.intermediate + row, gate / (1.f + __expf(-gate)) * up);
        break;
      }
      case MegaOp::kLmHead: __stcg(a.logits + int64_t(b) * d.vocab + row, v * rstd[b]); break;
      default: break;
    }
  }
}

__device__ __forceinline__ void embed_rows(const MegaKernelArgs& a, const MegaInstr& in) {
  const int h = a.dims.hidden;
  for (int b = in.begin; b < in.end; ++b) {
    const int64_t tok = a.tokens[b];
    for (int i = threadIdx.x; i < h; i += kMkThreads)
      __stcg(a.x + int64_t(b) * h + i, bf16_at(a.embed, tok * h + i));
  }
}

}  // namespace flashserve::cuda::detail

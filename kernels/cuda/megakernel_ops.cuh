// The decode megakernel's ops on one CTA: a GEMV tile's page (bf16 weights from the shared
// ring times the staged or L2-read activations: f32 on the CUDA cores, or rounded to bf16 on
// the tensor cores in steps of 2 to 8 sequences), the per-row RMSNorm scale, the tile's
// epilogue per op, the embedding gather and one attention split (q/k norm, RoPE, KV write,
// online softmax, and the merge by the group's last split). Math as in
// megakernel/interpreter.cpp.
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

// Row stride (elements) of the inputs staged as bf16: k rounded up to 64, plus 32, so that the
// rows of sequences g and g + 1 start four 16-byte units apart (distinct banks, gemv_page_mma).
__device__ __forceinline__ int staged_stride(int k) { return (k + 63) / 64 * 64 + 32; }

// Copies the input rows into shared memory (f32 rows of k, or kBf16: bf16 rows of
// staged_stride(k)), each element scaled by g[col] when given (the RMSNorm weight), so that the
// page loop reads them at shared-memory latency instead of once per weight chunk from L2; for a
// normed input (g given) it also sets rstd[b] = 1 / sqrt(mean(x[b]^2) + eps) from the same f32
// reads (the epilogue applies it). k is a multiple of 8.
template <int B, bool kBf16>
__device__ __forceinline__ void stage_input(const float* in,    // [B, k] global
                                            const uint16_t* g,  // [k] or null
                                            int k, float eps,
                                            void* xs,      // [B, k] f32 or [B, stride] bf16 shared
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
      if (kBf16)
        *reinterpret_cast<uint2*>(static_cast<uint16_t*>(xs) + b * staged_stride(k) + i) =
            make_uint2(pack2<__nv_bfloat16>(v.x, v.y), pack2<__nv_bfloat16>(v.z, v.w));
      else
        *reinterpret_cast<float4*>(static_cast<float*>(xs) + b * k + i) = v;
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

// Eight inputs of sequence b at columns col..col + 7 as bf16 (pairs low to high), read from the
// global f32 rows and scaled by g when given: mma steps' inputs that do not fit the staging area.
__device__ __forceinline__ uint4 input_chunk(const float* x,     // [batch, k] global
                                             const uint16_t* g,  // [k] or null
                                             int k, int b, int col) {
  const float4* xb = reinterpret_cast<const float4*>(x + int64_t(b) * k + col);
  const float4 x0 = __ldcg(xb), x1 = __ldcg(xb + 1);
  float f[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
  if (g) {
    const uint4 gv = __ldg(reinterpret_cast<const uint4*>(g + col));
    const uint32_t gw[4] = {gv.x, gv.y, gv.z, gv.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) f[2 * i] *= bf16_lo(gw[i]), f[2 * i + 1] *= bf16_hi(gw[i]);
  }
  return make_uint4(pack2<__nv_bfloat16>(f[0], f[1]), pack2<__nv_bfloat16>(f[2], f[3]),
                    pack2<__nv_bfloat16>(f[4], f[5]), pack2<__nv_bfloat16>(f[6], f[7]));
}

// Adds one mma page (rows r0..r0 + 7 of a segment of `rows`, columns c0..c0 + 1023, mma_chunk
// units) times the B input rows to acc[(row0 + row) * B + b]. Per warp, m16n8k16 mmas with the
// inputs as A (sequence g in row g; rows 8..15 zero) and the page's rows as B (weight row g in
// column g): lane (g, t) holds 8 consecutive columns of weight row g and reads the same 8
// columns of input row g; a dot product does not care in which order its terms come, so each
// mma takes four of them as k = 2t, 2t + 1, 2t + 8, 2t + 9. Columns past k are zero on both
// sides. The warp's 8 x B sums go to acc with one shared atomic per lane and row.
template <int B, bool kStaged>
__device__ __forceinline__ void gemv_page_mma(const uint8_t* page, int r0, int c0, int rows, int k,
                                              int row0,
                                              const void* x,  // staged [B, stride] bf16 or global [B, k] f32
                                              const uint16_t* g,  // [k] or null (unstaged only)
                                              float* acc) {       // [tile rows, B] shared
  const int lane = threadIdx.x & 31, gl = lane >> 2, t = lane & 3;
  const int warp_col = c0 + 128 * int(threadIdx.x >> 5);
  if (warp_col >= k) return;  // warp-uniform: no column of this warp is in the matrix
  float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int j = 0; j < kMkChunksPerLane; ++j) {
    if (warp_col + 32 * j >= k) break;  // warp-uniform
    const MmaChunk m = mma_chunk(j);
    const int col = c0 + m.col;
    const bool in_k = col < k;
    const uint4 w =
        in_k ? *reinterpret_cast<const uint4*>(page + m.unit * 16) : make_uint4(0, 0, 0, 0);
    uint4 xv = make_uint4(0, 0, 0, 0);
    if (gl < B && in_k) {
      if (kStaged)
        xv = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(x) +
                                             gl * staged_stride(k) + col);
      else
        xv = input_chunk(static_cast<const float*>(x), g, k, gl, col);
    }
    const uint32_t a0[4] = {xv.x, 0u, xv.y, 0u}, b0[2] = {w.x, w.y};
    const uint32_t a1[4] = {xv.z, 0u, xv.w, 0u}, b1[2] = {w.z, w.w};
    mma_m16n8k16<__nv_bfloat16>(c, a0, b0);
    mma_m16n8k16<__nv_bfloat16>(c, a1, b1);
  }
  // c[0], c[1]: sequence gl, weight rows 2t and 2t + 1 of the page (c[2], c[3]: zero rows).
  if (gl < B) {
    const int row = r0 + 2 * t;
    if (row < rows) atomicAdd(&acc[(row0 + row) * B + gl], c[0]);
    if (row + 1 < rows) atomicAdd(&acc[(row0 + row + 1) * B + gl], c[1]);
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

// The decode megakernel's ops on one CTA: a GEMV tile's page (bf16 weights from the shared
// ring times f32 activations read at L2), the per-row RMSNorm scale, the tile's epilogue per op,
// the embedding gather and one attention split (q/k norm, RoPE, KV write, online softmax, and the
// merge by the group's last split). Math as in megakernel/interpreter.cpp.
#pragma once

#include "kernels/cuda/megakernel_sync.cuh"

namespace flashserve::cuda::detail {

// Adds elements [e0, e0 + n) of a segment (bf16 in `page`, rows of length k) times the input
// rows to acc[(row0 + row) * batch + b]; each input element scaled by g[col] when given.
__device__ __forceinline__ void gemv_page(const uint16_t* page, int64_t e0, int n, int64_t k,
                                          int64_t row0,
                                          const float* in,    // [batch, k]
                                          const uint16_t* g,  // [k] or null
                                          int batch, float* acc) {
  const int chunks = (n + 7) / 8, lane = threadIdx.x & 31;
  if ((k & 7) != 0) {  // rows not a multiple of 8 elements: element by element (small models)
    for (int c = threadIdx.x; c < chunks * 8; c += kMkThreads) {
      if (c >= n) continue;
      const int64_t e = e0 + c, row = e / k, col = e - row * k;
      const float w = __uint_as_float(uint32_t(page[c]) << 16) * (g ? bf16_at(g, col) : 1.f);
      for (int b = 0; b < batch; ++b) atomicAdd(&acc[(row0 + row) * batch + b], w * __ldcg(in + b * k + col));
    }
    return;
  }
  for (int base = 0; base < chunks; base += kMkThreads) {  // uniform trip count: shuffles below
    const int c = base + int(threadIdx.x);
    float p[kMegaMaxBatch];
#pragma unroll
    for (int b = 0; b < kMegaMaxBatch; ++b) p[b] = 0.f;
    int row = -1;
    if (c < chunks) {
      const int64_t e = e0 + int64_t(c) * 8;
      row = int(e / k);
      const int64_t col = e - int64_t(row) * k;
      const uint4 wv = *reinterpret_cast<const uint4*>(page + c * 8);
      float w[8] = {bf16_lo(wv.x), bf16_hi(wv.x), bf16_lo(wv.y), bf16_hi(wv.y),
                    bf16_lo(wv.z), bf16_hi(wv.z), bf16_lo(wv.w), bf16_hi(wv.w)};
      if (g) {
        const uint4 gv = __ldg(reinterpret_cast<const uint4*>(g + col));
        const float gf[8] = {bf16_lo(gv.x), bf16_hi(gv.x), bf16_lo(gv.y), bf16_hi(gv.y),
                             bf16_lo(gv.z), bf16_hi(gv.z), bf16_lo(gv.w), bf16_hi(gv.w)};
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i] *= gf[i];
      }
#pragma unroll
      for (int b = 0; b < kMegaMaxBatch; ++b) {
        if (b >= batch) break;
        const float4* xb = reinterpret_cast<const float4*>(in + b * k + col);
        const float4 x0 = __ldcg(xb), x1 = __ldcg(xb + 1);
        p[b] = w[0] * x0.x + w[1] * x0.y + w[2] * x0.z + w[3] * x0.w + w[4] * x1.x +
               w[5] * x1.y + w[6] * x1.z + w[7] * x1.w;
      }
    }
    // Lane 0 holds the warp's first chunk; when every live lane shares its row, one warp sum
    // and one shared atomic per sequence, else one atomic per lane.
    const int r0 = __shfl_sync(kFull, row, 0);
    if (__all_sync(kFull, row == r0 || row < 0)) {
      if (r0 < 0) continue;
      for (int b = 0; b < batch; ++b) {
        const float v = warp_sum(p[b]);
        if (lane == 0) atomicAdd(&acc[(row0 + r0) * batch + b], v);
      }
    } else if (row >= 0) {
      for (int b = 0; b < batch; ++b) atomicAdd(&acc[(row0 + row) * batch + b], p[b]);
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

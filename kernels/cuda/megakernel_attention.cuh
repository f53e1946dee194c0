// One attention instruction of the decode megakernel: sequence b, kv head g, split s of its keys
// (mega_active_splits of them hold keys; the others only arrive). The group's q heads and the
// new k/v come from the qkv buffer; q/k norm (Qwen 3), RoPE and bf16 rounding of k/v happen
// here; the split holding the new position writes it to the paged cache and reads it from shared
// memory. The split's cached keys and values are staged in shared memory (rows padded so that
// lanes reading different keys hit different banks); each q head's keys are shared among
// kMkWarps / group warps, each running an online softmax with one key per lane, and the warps'
// partial results are merged in shared memory. The group's last split to arrive merges the
// splits into the attention output.
#pragma once

#include "kernels/cuda/megakernel_sync.cuh"

namespace flashserve::cuda::detail {

// A staged key or value row: head_dim bf16 and 16 bytes of padding.
__device__ __forceinline__ int kv_row_bytes(int hd) { return hd * 2 + 16; }

// Stages the cached K and V rows of keys [k0, k1) (position `pos` excepted: it is not cached
// yet) into kv ([k1 - k0] K rows, then as many V rows).
__device__ __forceinline__ void stage_kv(const MegaKernelArgs& a, const MegaLayerPtrs& L, int b,
                                         int g, int k0, int k1, int pos, uint8_t* kv) {
  const int hd = a.dims.head_dim, hkv = a.dims.num_kv_heads, cpr = hd / 8, n = k1 - k0;
  const int32_t* table = a.block_table + int64_t(b) * a.max_blocks_per_seq;
  for (int i = threadIdx.x; i < 2 * n * cpr; i += kMkThreads) {
    const int row = i / cpr, c = i - row * cpr, j = k0 + (row < n ? row : row - n);
    if (j == pos) continue;
    const int64_t blk = table[j / a.block_size];
    const int64_t at = ((blk * a.block_size + j % a.block_size) * hkv + g) * hd + c * 8;
    const uint16_t* src = (row < n ? L.k_cache : L.v_cache) + at;
    *reinterpret_cast<uint4*>(kv + row * kv_row_bytes(hd) + c * 16) =
        __ldcg(reinterpret_cast<const uint4*>(src));
  }
}

// One warp's online softmax over its keys of a staged pass: of [k0, k1), the rounds of 32 keys
// part, part + parts, ..., one key per lane (consecutive rows: no bank conflicts). q: [hd] shared; kn, vn: the new key and value (at pos).
__device__ __forceinline__ void softmax_pass(const uint8_t* kv, int k0, int k1, int part,
                                             int parts, int pos, int hd, float scale,
                                             const float* q, const float* kn, const float* vn,
                                             float& m, float& l, float (&o)[kMegaMaxHeadDim / 32]) {
  const int lane = threadIdx.x & 31, n = k1 - k0, rb = kv_row_bytes(hd);
  for (int base = part * 32; base < n; base += 32 * parts) {
    const int t = base + lane;  // this lane's key, relative to k0
    float s = -INFINITY;
    if (t < n) {
      float dot = 0.f;
      if (k0 + t == pos) {
        for (int e = 0; e < hd; ++e) dot += q[e] * kn[e];
      } else {
        const uint8_t* kr = kv + t * rb;
        for (int e = 0; e < hd; e += 8) {
          const uint4 kw = *reinterpret_cast<const uint4*>(kr + e * 2);
          dot += q[e] * bf16_lo(kw.x) + q[e + 1] * bf16_hi(kw.x) + q[e + 2] * bf16_lo(kw.y) +
                 q[e + 3] * bf16_hi(kw.y) + q[e + 4] * bf16_lo(kw.z) + q[e + 5] * bf16_hi(kw.z) +
                 q[e + 6] * bf16_lo(kw.w) + q[e + 7] * bf16_hi(kw.w);
        }
      }
      s = dot * scale;
    }
    const float m_new = fmaxf(m, warp_max(s));
    const float corr = m == -INFINITY ? 0.f : __expf(m - m_new);
    const float p = t < n ? __expf(s - m_new) : 0.f;
    l = l * corr + warp_sum(p);
#pragma unroll
    for (int i = 0; i < kMegaMaxHeadDim / 32; ++i) o[i] *= corr;
    const int keys = min(32, n - base);
    for (int jj = 0; jj < keys; ++jj) {
      const float pj = __shfl_sync(kFull, p, jj);
      const int tj = base + jj;
      const uint16_t* vr = reinterpret_cast<const uint16_t*>(kv + (n + tj) * rb);
#pragma unroll
      for (int i = 0; i < kMegaMaxHeadDim / 32; ++i) {
        const int e = lane + 32 * i;
        if (e < hd) o[i] += pj * (k0 + tj == pos ? vn[e] : bf16_at(vr, e));
      }
    }
    m = m_new;
  }
}

// Returns whether this split merged (and so bumps the instruction's counter).
__device__ __forceinline__ bool attention_split(const MegaKernelArgs& a, const MegaInstr& in,
                                                float* scratch,  // [group + 2, head_dim]
                                                float* work,     // [kMkAccFloats]
                                                uint8_t* kv,     // [kMkStageFloats * 4] bytes
                                                int* flag) {
  const MegaDims& d = a.dims;
  const int hd = d.head_dim, hq = d.num_q_heads, hkv = d.num_kv_heads, S = d.num_splits;
  const int group = hq / hkv, b = in.seq, g = in.kv_head, half = hd / 2;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int pos = a.positions[b], kv_len = a.kv_lens[b];
  const int active = mega_active_splits(S, kv_len);
  if (in.split < active) {
    const int chunk = (kv_len + active - 1) / active, lo = in.split * chunk,
              hi = min(kv_len, lo + chunk);
    const MegaLayerPtrs& L = a.layers[in.layer];
    float* kn = scratch + group * hd;  // q heads, then k, then v: [group + 2, head_dim]
    float* vn = kn + hd;
    const float* row = a.qkv + int64_t(b) * (hq + 2 * hkv) * hd;
    for (int i = threadIdx.x; i < (group + 2) * hd; i += kMkThreads) {
      const int v = i / hd, e = i % hd;
      const int src = v < group ? (g * group + v) : v == group ? hq + g : hq + hkv + g;
      scratch[i] = __ldcg(row + src * hd + e);
    }
    __syncthreads();
    if (d.qk_norm)
      for (int v = warp; v <= group; v += kMkWarps) {
        float* x = scratch + v * hd;
        const uint16_t* w = v < group ? L.q_norm : L.k_norm;
        float ss = 0.f;
        for (int e = lane; e < hd; e += 32) ss += x[e] * x[e];
        const float inv = rsqrtf(warp_sum(ss) / float(hd) + d.eps);
        for (int e = lane; e < hd; e += 32) x[e] = x[e] * inv * bf16_at(w, e);
      }
    __syncthreads();
    for (int i = threadIdx.x; i < (group + 1) * half; i += kMkThreads) {
      float* x = scratch + (i / half) * hd;
      const int e = i % half;
      double sn, cs;  // the angle in double: large positions keep their precision
      sincos(double(pos) * double(a.inv_freq[e]), &sn, &cs);
      const float x1 = x[e], x2 = x[e + half], c = float(cs), s = float(sn);
      x[e] = x1 * c - x2 * s;
      x[e + half] = x2 * c + x1 * s;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < 2 * hd; e += kMkThreads)  // the cache holds bf16: use what it holds
      kn[e] = __uint_as_float(uint32_t(to_bf16(kn[e])) << 16);
    __syncthreads();
    const int slot = a.slots[b];
    if (lo <= pos && pos < hi && slot >= 0)
      for (int e = threadIdx.x; e < hd; e += kMkThreads) {
        L.k_cache[(int64_t(slot) * hkv + g) * hd + e] = to_bf16(kn[e]);
        L.v_cache[(int64_t(slot) * hkv + g) * hd + e] = to_bf16(vn[e]);
      }
    // Warps per q head (heads beyond kMkWarps: one warp each, in turns).
    const int parts = group < kMkWarps ? kMkWarps / group : 1;
    const int pass_keys = kMkStageFloats * 4 / (2 * kv_row_bytes(hd)) / 32 * 32;
    for (int h0 = 0; h0 < group; h0 += kMkWarps) {
      const int h = h0 + (parts > 1 ? warp % group : warp), part = parts > 1 ? warp / group : 0;
      const bool live = h < group && (parts == 1 || warp < group * parts);
      float m = -INFINITY, l = 0.f, o[kMegaMaxHeadDim / 32] = {};
      for (int k0 = lo; k0 < hi; k0 += pass_keys) {
        const int k1 = min(hi, k0 + pass_keys);
        __syncthreads();  // the previous pass is read
        stage_kv(a, L, b, g, k0, k1, pos, kv);
        __syncthreads();
        if (live)
          softmax_pass(kv, k0, k1, part, parts, pos, hd, d.attention_scale, scratch + h * hd,
                       kn, vn, m, l, o);
      }
      // Each warp's (m, l, o) to work[warp]; then the parts of each head merge into its split
      // partial.
      float* mine = work + warp * (kMegaMaxHeadDim + 2);
      if (live) {
#pragma unroll
        for (int i = 0; i < kMegaMaxHeadDim / 32; ++i)
          if (lane + 32 * i < hd) mine[lane + 32 * i] = o[i];
        if (lane == 0) mine[kMegaMaxHeadDim] = m, mine[kMegaMaxHeadDim + 1] = l;
      }
      __syncthreads();
      const int heads = min(kMkWarps, group - h0);
      for (int i = threadIdx.x; i < heads * hd; i += kMkThreads) {
        const int hh = i / hd, e = i - hh * hd;  // head h0 + hh: warps hh + t group, t < parts
        float top = -INFINITY;
        for (int t = 0; t < parts; ++t)
          top = fmaxf(top, work[(hh + t * group) * (kMegaMaxHeadDim + 2) + kMegaMaxHeadDim]);
        float num = 0.f, den = 0.f;
        for (int t = 0; t < parts; ++t) {
          const float* pw = work + (hh + t * group) * (kMegaMaxHeadDim + 2);
          if (pw[kMegaMaxHeadDim] == -INFINITY) continue;
          const float c = __expf(pw[kMegaMaxHeadDim] - top);
          num += c * pw[e], den += c * pw[kMegaMaxHeadDim + 1];
        }
        float* out = a.partial + ((int64_t(b) * hq + g * group + h0 + hh) * S + in.split) * (hd + 1);
        __stcg(out + e, den > 0.f ? num / den : 0.f);
        if (e == 0) __stcg(out + hd, den > 0.f ? top + __logf(den) : -INFINITY);
      }
    }
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) *flag = atomicAdd(a.counters + in.arrive_counter, 1) == in.arrive_count - 1;
  __syncthreads();
  if (!*flag) return false;
  __threadfence();
  // The merge: every split's LSE of the group's heads into shared memory first (loads in
  // parallel), then each output element sums its splits.
  float* lse = work;  // [group, active]
  for (int i = threadIdx.x; i < group * active; i += kMkThreads) {
    const int h = g * group + i / active, s = i % active;
    lse[i] = __ldcg(a.partial + ((int64_t(b) * hq + h) * S + s) * (hd + 1) + hd);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < group * hd; i += kMkThreads) {
    const int hh = i / hd, h = g * group + hh, e = i % hd;
    const float* part = a.partial + (int64_t(b) * hq + h) * S * (hd + 1);
    const float* ls = lse + hh * active;
    float top = -INFINITY;
    for (int s = 0; s < active; ++s) top = fmaxf(top, ls[s]);
    float num = 0.f, den = 0.f;
    for (int s = 0; s < active; ++s) {
      if (ls[s] == -INFINITY) continue;
      const float w = __expf(ls[s] - top);
      den += w;
      num += w * __ldcg(part + s * (hd + 1) + e);
    }
    __stcg(a.attn + (int64_t(b) * hq + h) * hd + e, den > 0.f ? num / den : 0.f);
  }
  return true;
}

}  // namespace flashserve::cuda::detail

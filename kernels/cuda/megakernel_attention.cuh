// One attention instruction of the decode megakernel: sequence b, kv head g, split s of its keys.
// The group's q heads and the new k/v come from the qkv buffer; q/k norm (Qwen 3), RoPE and bf16
// rounding of k/v happen here; the split holding the new position writes it to the paged cache
// and reads it from shared memory. Each warp runs one q head's online softmax over the split's
// keys; the group's last split to arrive merges the splits into the attention output.
#pragma once

#include "kernels/cuda/megakernel_sync.cuh"

namespace flashserve::cuda::detail {

// Returns whether this split merged (and so bumps the instruction's counter).
__device__ __forceinline__ bool attention_split(const MegaKernelArgs& a, const MegaInstr& in,
                                                float* scratch,  // [group + 2, head_dim]
                                                int* flag) {
  const MegaDims& d = a.dims;
  const int hd = d.head_dim, hq = d.num_q_heads, hkv = d.num_kv_heads, S = d.num_splits;
  const int group = hq / hkv, b = in.seq, g = in.kv_head, half = hd / 2;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int pos = a.positions[b], kv_len = a.kv_lens[b];
  const int chunk = (kv_len + S - 1) / S, lo = in.split * chunk, hi = min(kv_len, lo + chunk);
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
  const int32_t* table = a.block_table + int64_t(b) * a.max_blocks_per_seq;
  auto cached = [&](const uint16_t* cache, int j) {
    const int64_t blk = table[j / a.block_size];
    return cache + ((blk * a.block_size + j % a.block_size) * hkv + g) * hd;
  };
  for (int h = warp; h < group; h += kMkWarps) {
    const float* q = scratch + h * hd;
    float m = -INFINITY, l = 0.f, o[kMegaMaxHeadDim / 32] = {};
    for (int base = lo; base < hi; base += 32) {
      const int j = base + lane;
      float s = -INFINITY;
      if (j < hi) {
        float dot = 0.f;
        if (j == pos) {
          for (int e = 0; e < hd; ++e) dot += q[e] * kn[e];
        } else {
          const uint16_t* kp = cached(L.k_cache, j);
          for (int e = 0; e < hd; e += 8) {
            const uint4 kv = *reinterpret_cast<const uint4*>(kp + e);
            dot += q[e] * bf16_lo(kv.x) + q[e + 1] * bf16_hi(kv.x) + q[e + 2] * bf16_lo(kv.y) +
                   q[e + 3] * bf16_hi(kv.y) + q[e + 4] * bf16_lo(kv.z) + q[e + 5] * bf16_hi(kv.z) +
                   q[e + 6] * bf16_lo(kv.w) + q[e + 7] * bf16_hi(kv.w);
          }
        }
        s = dot * d.attention_scale;
      }
      const float m_new = fmaxf(m, warp_max(s));
      const float corr = m == -INFINITY ? 0.f : __expf(m - m_new);
      const float p = j < hi ? __expf(s - m_new) : 0.f;
      l = l * corr + warp_sum(p);
#pragma unroll
      for (int t = 0; t < kMegaMaxHeadDim / 32; ++t) o[t] *= corr;
      const int n = min(32, hi - base);
      for (int jj = 0; jj < n; ++jj) {
        const float pj = __shfl_sync(kFull, p, jj);
        const int jp = base + jj;
        const uint16_t* vp = jp == pos ? nullptr : cached(L.v_cache, jp);
#pragma unroll
        for (int t = 0; t < kMegaMaxHeadDim / 32; ++t) {
          const int e = lane + 32 * t;
          if (e < hd) o[t] += pj * (vp ? bf16_at(vp, e) : vn[e]);
        }
      }
      m = m_new;
    }
    float* part = a.partial + ((int64_t(b) * hq + g * group + h) * S + in.split) * (hd + 1);
#pragma unroll
    for (int t = 0; t < kMegaMaxHeadDim / 32; ++t) {
      const int e = lane + 32 * t;
      if (e < hd) __stcg(part + e, l > 0.f ? o[t] / l : 0.f);
    }
    if (lane == 0) __stcg(part + hd, l > 0.f ? m + __logf(l) : -INFINITY);
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) *flag = atomicAdd(a.counters + in.arrive_counter, 1) == in.arrive_count - 1;
  __syncthreads();
  if (!*flag) return false;
  __threadfence();
  for (int i = threadIdx.x; i < group * hd; i += kMkThreads) {
    const int h = g * group + i / hd, e = i % hd;
    const float* part = a.partial + (int64_t(b) * hq + h) * S * (hd + 1);
    float top = -INFINITY;
    for (int s = 0; s < S; ++s) top = fmaxf(top, __ldcg(part + s * (hd + 1) + hd));
    float num = 0.f, den = 0.f;
    for (int s = 0; s < S; ++s) {
      const float lse = __ldcg(part + s * (hd + 1) + hd);
      if (lse == -INFINITY) continue;
      const float w = __expf(lse - top);
      den += w;
      num += w * __ldcg(part + s * (hd + 1) + e);
    }
    __stcg(a.attn + (int64_t(b) * hq + h) * hd + e, den > 0.f ? num / den : 0.f);
  }
  return true;
}

}  // namespace flashserve::cuda::detail

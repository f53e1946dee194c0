// The CUDA backend's simple ops: bf16 storage, fp32 math, one thread per element (or one block
// per row where a row reduction is needed). Memory-bound and deliberately plain; the GEMMs
// (cuBLASLt) and the fast attention kernels carry the time.
#include <cuda_bf16.h>

#include <cfloat>
#include <climits>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"
#include "backends/cuda/ops.h"

namespace flashserve::cuda {
namespace {

using bf16 = __nv_bfloat16;

inline int blocks_for(int64_t n, int threads) { return int((n + threads - 1) / threads); }

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ float block_sum(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float s = 0.f;
  for (int i = 0; i < int(blockDim.x / 32); ++i) s += part[i];
  return s;
}

__device__ float block_max(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float m = -FLT_MAX;
  for (int i = 0; i < int(blockDim.x / 32); ++i) m = fmaxf(m, part[i]);
  return m;
}

__global__ void embedding_kernel(bf16* out, const int32_t* ids, const bf16* table, int n,
                                 int hidden, int vocab) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * hidden) return;
  const int t = int(i / hidden), c = int(i % hidden);
  const int id = ids[t];
  // Token ids are validated on the host (ModelRunner); a bad one here is a bug: write zeros.
  out[i] = (id >= 0 && id < vocab) ? table[int64_t(id) * hidden + c] : __float2bfloat16(0.f);
}

__global__ void rms_norm_kernel(bf16* out, const bf16* x, const bf16* w, int hidden, float eps) {
  const bf16* xr = x + int64_t(blockIdx.x) * hidden;
  bf16* orow = out + int64_t(blockIdx.x) * hidden;
  float ss = 0.f;
  for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
    const float v = __bfloat162float(xr[c]);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss) / float(hidden) + eps);
  for (int c = threadIdx.x; c < hidden; c += blockDim.x)
    orow[c] = __float2bfloat16(__bfloat162float(xr[c]) * inv * __bfloat162float(w[c]));
}

// One thread per (token, head, pair i) over q heads then k heads.
__global__ void rope_kernel(bf16* q, bf16* k, const int32_t* positions, const float* inv_freq,
                            int n, int hq, int hkv, int d) {
  const int half = d / 2;
  const int64_t per_tok = int64_t(hq + hkv) * half;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * per_tok) return;
  const int t = int(i / per_tok);
  const int r = int(i % per_tok);
  const int head = r / half, p = r % half;
  bf16* base = head < hq ? q + (int64_t(t) * hq + head) * d : k + (int64_t(t) * hkv + head - hq) * d;
  float s, c;
  sincosf(float(positions[t]) * inv_freq[p], &s, &c);
  const float a = __bfloat162float(base[p]), b = __bfloat162float(base[p + half]);
  base[p] = __float2bfloat16(a * c - b * s);
  base[p + half] = __float2bfloat16(b * c + a * s);
}

__global__ void swiglu_kernel(bf16* out, const bf16* gate, const bf16* up, int64_t numel) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= numel) return;
  const float g = __bfloat162float(gate[i]);
  out[i] = __float2bfloat16(g / (1.f + __expf(-g)) * __bfloat162float(up[i]));
}

__global__ void add_kernel(bf16* out, const bf16* a, const bf16* b, int64_t numel) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= numel) return;
  out[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}

// x[r, c] += bias[c], one thread per element.
__global__ void add_bias_kernel(bf16* x, const bf16* bias, int64_t numel, int width) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= numel) return;
  x[i] = __float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(bias[i % width]));
}

// Per-head RMSNorm of the q and k heads of qkv rows [q heads | k heads | v heads], in place:
// one warp per (token, normed head); the whole warp leaves together past the last one.
__global__ void qk_norm_kernel(bf16* qkv, const bf16* q_w, const bf16* k_w, int n, int hq, int hkv,
                               int d, float eps) {
  const int normed = hq + hkv;
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= int64_t(n) * normed) return;
  const int t = int(warp / normed), h = int(warp % normed);
  bf16* v = qkv + (int64_t(t) * (hq + 2 * hkv) + h) * d;
  const bf16* w = h < hq ? q_w : k_w;
  float ss = 0.f;
  for (int i = lane; i < d; i += 32) {
    const float x = __bfloat162float(v[i]);
    ss += x * x;
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float inv = rsqrtf(ss / float(d) + eps);
  for (int i = lane; i < d; i += 32)
    v[i] = __float2bfloat16(__bfloat162float(v[i]) * inv * __bfloat162float(w[i]));
}

__global__ void gather_rows_kernel(char* out, const char* x, const int32_t* row_ids, int rows,
                                   int row_bytes) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(rows) * row_bytes) return;
  const int r = int(i / row_bytes), c = int(i % row_bytes);
  out[i] = x[int64_t(row_ids[r]) * row_bytes + c];
}

__global__ void write_kv_kernel(bf16* kc, bf16* vc, const bf16* k, const bf16* v,
                                const int32_t* slots, int n, int row) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * row) return;
  const int t = int(i / row), c = int(i % row);
  const int64_t slot = slots[t];
  if (slot < 0) return;
  kc[slot * row + c] = k[i];
  vc[slot * row + c] = v[i];
}

// x_out may be x_in (the residual updated in place) or another buffer (LlamaModel's fused
// decode path keeps the residual in two buffers; this is its unfused fallback).
__global__ void add_rms_norm_kernel(bf16* out, bf16* x_out, const bf16* x_in, const bf16* delta,
                                    const bf16* w, int hidden, float eps) {
  pdl_trigger();  // launched with launch_pdl (kernels/cuda/pdl.cuh)
  pdl_wait();
  const bf16* xi = x_in + int64_t(blockIdx.x) * hidden;
  bf16* xr = x_out + int64_t(blockIdx.x) * hidden;
  const bf16* dr = delta + int64_t(blockIdx.x) * hidden;
  bf16* orow = out + int64_t(blockIdx.x) * hidden;
  float ss = 0.f;
  // Each thread owns the same columns in both loops, so out may alias delta.
  for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
    const bf16 s = __float2bfloat16(__bfloat162float(xi[c]) + __bfloat162float(dr[c]));
    xr[c] = s;
    const float v = __bfloat162float(s);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss) / float(hidden) + eps);
  for (int c = threadIdx.x; c < hidden; c += blockDim.x)
    orow[c] = __float2bfloat16(__bfloat162float(xr[c]) * inv * __bfloat162float(w[c]));
}

// The same with the row held in registers: each thread loads its V 16-byte vectors of x and
// delta at once, then stores. The loop above stores x between loads, so the compiler (out and x
// may alias delta) cannot overlap them: one memory round trip per 256 columns, ~4 us a row at
// hidden 2048 on an H100, where a decode step runs two per layer. Needs hidden % 8 == 0 and
// hidden <= 8 * V * blockDim.x; every thread owns the same vectors in all three passes.
template <int V>
__global__ void add_rms_norm_vec_kernel(bf16* out, bf16* x_out, const bf16* x_in, const bf16* delta,
                                        const bf16* w, int hidden, float eps) {
  pdl_trigger();  // launched with launch_pdl (kernels/cuda/pdl.cuh)
  pdl_wait();
  const uint4* xi = reinterpret_cast<const uint4*>(x_in + int64_t(blockIdx.x) * hidden);
  uint4* xr = reinterpret_cast<uint4*>(x_out + int64_t(blockIdx.x) * hidden);
  const uint4* dr = reinterpret_cast<const uint4*>(delta + int64_t(blockIdx.x) * hidden);
  uint4* orow = reinterpret_cast<uint4*>(out + int64_t(blockIdx.x) * hidden);
  const uint4* wr = reinterpret_cast<const uint4*>(w);
  const int nvec = hidden / 8;
  uint4 a[V], b[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = threadIdx.x + i * blockDim.x;
    if (c < nvec) a[i] = xi[c], b[i] = dr[c];
  }
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = threadIdx.x + i * blockDim.x;
    if (c >= nvec) continue;
    __nv_bfloat162* pa = reinterpret_cast<__nv_bfloat162*>(&a[i]);
    const __nv_bfloat162* pb = reinterpret_cast<const __nv_bfloat162*>(&b[i]);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 fa = __bfloat1622float2(pa[j]), fb = __bfloat1622float2(pb[j]);
      pa[j] = __floats2bfloat162_rn(fa.x + fb.x, fa.y + fb.y);  // the residual, rounded to bf16
      const float2 s = __bfloat1622float2(pa[j]);
      ss += s.x * s.x + s.y * s.y;
    }
    xr[c] = a[i];
  }
  const float inv = rsqrtf(block_sum(ss) / float(hidden) + eps);
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = threadIdx.x + i * blockDim.x;
    if (c >= nvec) continue;
    uint4 wv = wr[c], o;
    const __nv_bfloat162* pa = reinterpret_cast<const __nv_bfloat162*>(&a[i]);
    const __nv_bfloat162* pw = reinterpret_cast<const __nv_bfloat162*>(&wv);
    __nv_bfloat162* po = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 s = __bfloat1622float2(pa[j]), ww = __bfloat1622float2(pw[j]);
      po[j] = __floats2bfloat162_rn(s.x * inv * ww.x, s.y * inv * ww.y);
    }
    orow[c] = o;
  }
}

// One thread per (token, head of q|k|v, pair i): q/k pairs are turned, v pairs copied. kKRows:
// the turned k also goes to k_rows (a template flag, so the usual instantiation is unchanged).
template <bool kKRows>
__global__ void qkv_rope_write_kv_kernel(bf16* q, bf16* kc, bf16* vc, const bf16* qkv,
                                         const int32_t* positions, const float* inv_freq,
                                         const int32_t* slots, int n, int hq, int hkv, int d,
                                         bf16* k_rows) {
  pdl_trigger();  // launched with launch_pdl (kernels/cuda/pdl.cuh)
  pdl_wait();
  const int half = d / 2, heads = hq + 2 * hkv;
  const int64_t per_tok = int64_t(heads) * half;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * per_tok) return;
  const int t = int(i / per_tok);
  const int r = int(i % per_tok);
  const int head = r / half, p = r % half;
  const bf16* src = qkv + int64_t(t) * heads * d + int64_t(head) * d;
  float a = __bfloat162float(src[p]), b = __bfloat162float(src[p + half]);
  if (head < hq + hkv) {
    float s, c;
    sincosf(float(positions[t]) * inv_freq[p], &s, &c);
    const float a2 = a * c - b * s, b2 = b * c + a * s;
    a = a2;
    b = b2;
  }
  bf16* dst;
  if (kKRows && head >= hq && head < hq + hkv) {
    bf16* row = k_rows + (int64_t(t) * hkv + head - hq) * d;
    row[p] = __float2bfloat16(a);
    row[p + half] = __float2bfloat16(b);
  }
  if (head < hq) {
    dst = q + (int64_t(t) * hq + head) * d;
  } else {
    const int64_t slot = slots[t];
    if (slot < 0) return;
    const int kvh = head < hq + hkv ? head - hq : head - hq - hkv;
    dst = (head < hq + hkv ? kc : vc) + (slot * hkv + kvh) * d;
  }
  dst[p] = __float2bfloat16(a);
  dst[p + half] = __float2bfloat16(b);
}

__global__ void swiglu_fused_kernel(bf16* out, const bf16* gate_up, int n, int inter) {
  pdl_trigger();  // launched with launch_pdl (kernels/cuda/pdl.cuh)
  pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * inter) return;
  const int64_t r = i / inter, c = i % inter;
  const float g = __bfloat162float(gate_up[r * 2 * inter + c]);
  const float u = __bfloat162float(gate_up[r * 2 * inter + inter + c]);
  out[i] = __float2bfloat16(g / (1.f + __expf(-g)) * u);
}

__global__ void f32_to_bf16_kernel(bf16* dst, const float* src, int64_t numel) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < numel) dst[i] = __float2bfloat16(src[i]);
}

// One block per (token, q head). Scores live in dynamic shared memory [kv_len]; out[j] is a
// plain loop over the kv positions per dim. Slow but obviously right for any head_dim.
__global__ void paged_attention_generic_kernel(PagedAttentionArgs a, const bf16* q,
                                               const bf16* kc, const bf16* vc, bf16* out) {
  extern __shared__ float smem[];  // [d] q, then [kv_len] scores
  const int t = blockIdx.x, h = blockIdx.y, d = a.head_dim;
  int s = 0;
  while (s + 1 < a.num_seqs && a.cu_q_lens[s + 1] <= t) ++s;
  const int q_len = a.cu_q_lens[s + 1] - a.cu_q_lens[s];
  const int kv_len = a.kv_lens[s];
  const int i = t - a.cu_q_lens[s];
  const int visible = a.causal ? kv_len - q_len + i + 1 : kv_len;
  const int kvh = h / (a.num_q_heads / a.num_kv_heads);
  const int32_t* table = a.block_table + int64_t(s) * a.max_blocks_per_seq;
  float* qs = smem;
  float* sc = smem + d;
  const bf16* qrow = q + (int64_t(t) * a.num_q_heads + h) * d;
  for (int j = threadIdx.x; j < d; j += blockDim.x) qs[j] = __bfloat162float(qrow[j]);
  __syncthreads();
  auto kv_off = [&](int pos) {
    const int64_t slot = int64_t(table[pos / a.block_size]) * a.block_size + pos % a.block_size;
    return (slot * a.num_kv_heads + kvh) * d;
  };
  float mx = -FLT_MAX;
  for (int p = threadIdx.x; p < visible; p += blockDim.x) {
    const bf16* kr = kc + kv_off(p);
    float dot = 0.f;
    for (int j = 0; j < d; ++j) dot += qs[j] * __bfloat162float(kr[j]);
    sc[p] = dot * a.scale;
    mx = fmaxf(mx, sc[p]);
  }
  mx = block_max(mx);
  float sum = 0.f;
  for (int p = threadIdx.x; p < visible; p += blockDim.x) {
    sc[p] = __expf(sc[p] - mx);
    sum += sc[p];
  }
  sum = block_sum(sum);  // its __syncthreads also publishes sc[]
  bf16* orow = out + (int64_t(t) * a.num_q_heads + h) * d;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    float acc = 0.f;
    for (int p = 0; p < visible; ++p) acc += sc[p] * __bfloat162float(vc[kv_off(p) + j]);
    orow[j] = __float2bfloat16(visible > 0 ? acc / sum : 0.f);
  }
}

// One block per row: each thread scans a strided slice keeping (value, index), then the block
// reduces; a larger value wins, equal values go to the lower index. Any NaN marks the row.
__global__ void argmax_rows_kernel(int32_t* ids, const float* logits, int cols) {
  const float* row = logits + int64_t(blockIdx.x) * cols;
  float best = -FLT_MAX;
  int idx = INT_MAX;
  bool nan = false;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = row[c];
    nan |= v != v;
    if (v > best || idx == INT_MAX) best = v, idx = c;  // c rises: ties keep the first
  }
  __shared__ float s_val[1024];
  __shared__ int s_idx[1024];
  __shared__ int s_nan;
  if (threadIdx.x == 0) s_nan = 0;
  __syncthreads();
  if (nan) s_nan = 1;
  s_val[threadIdx.x] = best;
  s_idx[threadIdx.x] = idx;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const float v = s_val[threadIdx.x + half];
      const int i = s_idx[threadIdx.x + half];
      if (v > s_val[threadIdx.x] || (v == s_val[threadIdx.x] && i < s_idx[threadIdx.x]))
        s_val[threadIdx.x] = v, s_idx[threadIdx.x] = i;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) ids[blockIdx.x] = s_nan || s_idx[0] == INT_MAX ? -1 : s_idx[0];
}

constexpr int kThreads = 256;

}  // namespace

void argmax_rows_f32(int32_t* ids, const float* logits, int rows, int cols, cudaStream_t stream) {
  if (rows == 0) return;
  FS_CHECK(cols > 0, "argmax_rows: no columns");
  argmax_rows_kernel<<<rows, 512, 0, stream>>>(ids, logits, cols);
  CUDA_CHECK_LAUNCH();
}

void embedding_bf16(void* out, const int32_t* ids, const void* table, int n, int hidden,
                    int vocab, cudaStream_t stream) {
  const int64_t total = int64_t(n) * hidden;
  if (total == 0) return;
  embedding_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
      static_cast<bf16*>(out), ids, static_cast<const bf16*>(table), n, hidden, vocab);
  CUDA_CHECK_LAUNCH();
}

void rms_norm_bf16(void* out, const void* x, const void* w, int n, int hidden, float eps,
                   cudaStream_t stream) {
  if (n == 0) return;
  rms_norm_kernel<<<n, kThreads, 0, stream>>>(static_cast<bf16*>(out),
                                              static_cast<const bf16*>(x),
                                              static_cast<const bf16*>(w), hidden, eps);
  CUDA_CHECK_LAUNCH();
}

void rope_bf16(void* q, void* k, const int32_t* positions, const float* inv_freq, int n, int hq,
               int hkv, int d, cudaStream_t stream) {
  const int64_t total = int64_t(n) * (hq + hkv) * (d / 2);
  if (total == 0) return;
  rope_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
      static_cast<bf16*>(q), static_cast<bf16*>(k), positions, inv_freq, n, hq, hkv, d);
  CUDA_CHECK_LAUNCH();
}

void swiglu_bf16(void* out, const void* gate, const void* up, int64_t numel, cudaStream_t stream) {
  if (numel == 0) return;
  swiglu_kernel<<<blocks_for(numel, kThreads), kThreads, 0, stream>>>(
      static_cast<bf16*>(out), static_cast<const bf16*>(gate), static_cast<const bf16*>(up),
      numel);
  CUDA_CHECK_LAUNCH();
}

void add_bf16(void* out, const void* a, const void* b, int64_t numel, cudaStream_t stream) {
  if (numel == 0) return;
  add_kernel<<<blocks_for(numel, kThreads), kThreads, 0, stream>>>(
      static_cast<bf16*>(out), static_cast<const bf16*>(a), static_cast<const bf16*>(b), numel);
  CUDA_CHECK_LAUNCH();
}

void add_bias_bf16(void* x, const void* bias, int n, int width, cudaStream_t stream) {
  const int64_t total = int64_t(n) * width;
  if (total == 0) return;
  add_bias_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
      static_cast<bf16*>(x), static_cast<const bf16*>(bias), total, width);
  CUDA_CHECK_LAUNCH();
}

void qk_norm_bf16(void* qkv, const void* q_w, const void* k_w, int n, int hq, int hkv, int d,
                  float eps, cudaStream_t stream) {
  const int64_t warps = int64_t(n) * (hq + hkv);
  if (warps == 0) return;
  constexpr int kWarpsPerBlock = 4;
  qk_norm_kernel<<<int((warps + kWarpsPerBlock - 1) / kWarpsPerBlock), 32 * kWarpsPerBlock, 0,
                   stream>>>(static_cast<bf16*>(qkv), static_cast<const bf16*>(q_w),
                             static_cast<const bf16*>(k_w), n, hq, hkv, d, eps);
  CUDA_CHECK_LAUNCH();
}

void gather_rows(void* out, const void* x, const int32_t* row_ids, int rows, int row_bytes,
                 cudaStream_t stream) {
  const int64_t total = int64_t(rows) * row_bytes;
  if (total == 0) return;
  gather_rows_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
      static_cast<char*>(out), static_cast<const char*>(x), row_ids, rows, row_bytes);
  CUDA_CHECK_LAUNCH();
}

void write_kv_bf16(void* k_cache, void* v_cache, const void* k, const void* v,
                   const int32_t* slot_mapping, int n, int hkv, int d, cudaStream_t stream) {
  const int64_t total = int64_t(n) * hkv * d;
  if (total == 0) return;
  write_kv_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
      static_cast<bf16*>(k_cache), static_cast<bf16*>(v_cache), static_cast<const bf16*>(k),
      static_cast<const bf16*>(v), slot_mapping, n, hkv * d);
  CUDA_CHECK_LAUNCH();
}

void add_rms_norm_bf16(void* out, void* x, const void* delta, const void* w, int n, int hidden,
                       float eps, cudaStream_t stream) {
  add_rms_norm_out_bf16(out, x, x, delta, w, n, hidden, eps, stream);
}

void add_rms_norm_out_bf16(void* out, void* x_out, const void* x_in, const void* delta,
                           const void* w, int n, int hidden, float eps, cudaStream_t stream) {
  if (n == 0) return;
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vec = hidden % 8 == 0 && hidden <= 8 * 4 * kThreads && aligned(out) &&
                   aligned(x_out) && aligned(x_in) && aligned(delta) && aligned(w);
  auto* o = static_cast<bf16*>(out);
  auto* xo = static_cast<bf16*>(x_out);
  const auto* xi = static_cast<const bf16*>(x_in);
  const auto* d = static_cast<const bf16*>(delta);
  const auto* wb = static_cast<const bf16*>(w);
  if (vec) {
    launch_pdl(add_rms_norm_vec_kernel<4>, n, kThreads, 0, stream, o, xo, xi, d, wb, hidden, eps);
  } else {
    launch_pdl(add_rms_norm_kernel, n, kThreads, 0, stream, o, xo, xi, d, wb, hidden, eps);
  }
  CUDA_CHECK_LAUNCH();
}

void qkv_rope_write_kv_bf16(void* q, void* k_cache, void* v_cache, const void* qkv,
                            const int32_t* positions, const float* inv_freq,
                            const int32_t* slot_mapping, int n, int hq, int hkv, int d,
                            cudaStream_t stream, void* k_rows) {
  const int64_t total = int64_t(n) * (hq + 2 * hkv) * (d / 2);
  if (total == 0) return;
  launch_pdl(k_rows != nullptr ? qkv_rope_write_kv_kernel<true> : qkv_rope_write_kv_kernel<false>,
             blocks_for(total, kThreads), kThreads, 0, stream, static_cast<bf16*>(q),
             static_cast<bf16*>(k_cache), static_cast<bf16*>(v_cache), static_cast<const bf16*>(qkv),
             positions, inv_freq, slot_mapping, n, hq, hkv, d, static_cast<bf16*>(k_rows));
  CUDA_CHECK_LAUNCH();
}

void swiglu_fused_bf16(void* out, const void* gate_up, int n, int inter, cudaStream_t stream) {
  const int64_t total = int64_t(n) * inter;
  if (total == 0) return;
  launch_pdl(swiglu_fused_kernel, blocks_for(total, kThreads), kThreads, 0, stream,
             static_cast<bf16*>(out), static_cast<const bf16*>(gate_up), n, inter);
  CUDA_CHECK_LAUNCH();
}

void f32_to_bf16(void* dst, const float* src, int64_t numel, cudaStream_t stream) {
  if (numel == 0) return;
  f32_to_bf16_kernel<<<blocks_for(numel, kThreads), kThreads, 0, stream>>>(
      static_cast<bf16*>(dst), src, numel);
  CUDA_CHECK_LAUNCH();
}

void paged_attention_generic_bf16(const PagedAttentionArgs& args, int num_tokens, const void* q,
                                  const void* k_cache, const void* v_cache, void* out,
                                  cudaStream_t stream, int max_kv_len) {
  if (num_tokens == 0) return;
  const size_t smem = size_t(args.head_dim + max_kv_len) * sizeof(float);
  FS_CHECK(smem <= 200 * 1024, "generic paged attention: kv_len ", max_kv_len,
           " too long for the fallback kernel (head_dim ", args.head_dim, ")");
  CUDA_CHECK(cudaFuncSetAttribute(paged_attention_generic_kernel,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  paged_attention_generic_kernel<<<dim3(num_tokens, args.num_q_heads), 128, smem, stream>>>(
      args, static_cast<const bf16*>(q), static_cast<const bf16*>(k_cache),
      static_cast<const bf16*>(v_cache), static_cast<bf16*>(out));
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda

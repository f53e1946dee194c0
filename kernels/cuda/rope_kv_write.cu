// RoPE and the KV-cache write (kernels/rope_kv_write.h): rotate-half RoPE in place, the K/V
// scatter into cache slots, and both fused with the split of the qkv projection. One thread
// per element or rotated pair; the CPU twins are kernels/cpu/rope_kv_write_ref.h.
#include <cuda_bf16.h>

#include "core/error.h"
#include "kernels/cuda/block_util.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/rope_kv_write.h"

namespace flashserve::cuda {
namespace {

using bf16 = __nv_bfloat16;
using detail::blocks_for;

constexpr int kThreads = 256;

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

}  // namespace

void rope_bf16(void* q, void* k, const int32_t* positions, const float* inv_freq, int n, int hq,
               int hkv, int d, cudaStream_t stream) {
  const int64_t total = int64_t(n) * (hq + hkv) * (d / 2);
  if (total == 0) return;
  rope_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
      static_cast<bf16*>(q), static_cast<bf16*>(k), positions, inv_freq, n, hq, hkv, d);
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

}  // namespace flashserve::cuda

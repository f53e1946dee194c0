// The generic paged attention kernel (kernels/attention_generic.h): fp32 math, one block per
// (token, q head), any head_dim; the fallback for head dims the fast kernels do not cover. Its
// CPU twin is ref::paged_attention (kernels/cpu/paged_attention_ref.h).
#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>

#include "core/error.h"
#include "kernels/cuda/block_util.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/attention_generic.h"

namespace flashserve::cuda {
namespace {

using bf16 = __nv_bfloat16;
using detail::block_sum;
using detail::block_max;

// One block per (token, q head). The row sees keys [first, visible) (causal, sliding window);
// their scores live in dynamic shared memory; out[j] is a plain loop over them per dim; a sink adds
// its term to the denominator only. Slow but obviously right for any head_dim.
__global__ void paged_attention_generic_kernel(PagedAttentionArgs a, const bf16* q,
                                               const bf16* kc, const bf16* vc, bf16* out) {
  extern __shared__ float smem[];  // [d] q, then [visible - first] scores
  const int t = blockIdx.x, h = blockIdx.y, d = a.head_dim;
  int s = 0;
  while (s + 1 < a.num_seqs && a.cu_q_lens[s + 1] <= t) ++s;
  const int q_len = a.cu_q_lens[s + 1] - a.cu_q_lens[s];
  const int kv_len = a.kv_lens[s];
  const int i = t - a.cu_q_lens[s];
  const int pos = kv_len - q_len + i;
  const int visible = a.causal ? pos + 1 : kv_len;
  const int first = a.window > 0 ? min(max(0, pos - a.window + 1), max(visible, 0)) : 0;
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
  for (int p = first + threadIdx.x; p < visible; p += blockDim.x) {
    const bf16* kr = kc + kv_off(p);
    float dot = 0.f;
    for (int j = 0; j < d; ++j) dot += qs[j] * __bfloat162float(kr[j]);
    const float score = a.softcap > 0.f ? a.softcap * tanhf(dot * a.scale / a.softcap) : dot * a.scale;
    sc[p - first] = score;
    mx = fmaxf(mx, score);
  }
  mx = block_max(mx);
  // The sink joins the max and, once, the denominator (kernels/paged_attention.h).
  if (a.sinks != nullptr) mx = fmaxf(mx, a.sinks[h]);
  float sum = 0.f;
  for (int p = threadIdx.x; p < visible - first; p += blockDim.x) {
    sc[p] = __expf(sc[p] - mx);
    sum += sc[p];
  }
  sum = block_sum(sum);  // its __syncthreads also publishes sc[]
  if (a.sinks != nullptr) sum += __expf(a.sinks[h] - mx);
  bf16* orow = out + (int64_t(t) * a.num_q_heads + h) * d;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    float acc = 0.f;
    for (int p = first; p < visible; ++p) acc += sc[p - first] * __bfloat162float(vc[kv_off(p) + j]);
    orow[j] = __float2bfloat16(visible > first ? acc / sum : 0.f);
  }
}

}  // namespace

void paged_attention_generic_bf16(const PagedAttentionArgs& args, int num_tokens, const void* q,
                                  const void* k_cache, const void* v_cache, void* out,
                                  cudaStream_t stream, int max_kv_len) {
  if (num_tokens == 0) return;
  // A row sees at most `window` keys: a windowed layer's scores fit its window.
  const int span = args.window > 0 ? std::min(max_kv_len, args.window) : max_kv_len;
  const size_t smem = size_t(args.head_dim + span) * sizeof(float);
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

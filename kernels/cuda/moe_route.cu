// MoE routing (kernels/moe.h, twin ref::moe_route): softmax, top-k and renormalisation of one row
// of router logits in one warp. A row is at most 256 logits, 8 per lane in registers; each of the
// top_k rounds is a warp argmax over the logits not yet taken (larger value first, then the lower
// expert id, as torch.topk on the CPU and the twin's stable sort order them), so the choices come
// out in descending order. The softmax needs only the row maximum and the sum of exponentials,
// which the same registers give. Launched with programmatic dependent launch, as the fused
// decode kernels after it.
#include <cfloat>
#include <climits>
#include <cmath>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/moe.h"

namespace flashserve::cuda {
namespace {

constexpr int kPerLane = kMoeMaxExperts / 32;  // logits per lane
constexpr int kWarps = 4;                      // rows per block

// The better of two candidates: the larger logit, then the lower expert id.
__device__ inline bool better(float v, int id, float bv, int bid) {
  return v > bv || (v == bv && id < bid);
}

__global__ void __launch_bounds__(kWarps * 32)
    moe_route_kernel(int32_t* __restrict__ ids, float* __restrict__ weights,
                     const float* __restrict__ logits, int n, int num_experts, int top_k,
                     bool renormalize) {
  pdl_wait();  // logits: the router matmul's output
  pdl_trigger();
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarps + threadIdx.x / 32;
  if (row >= n) return;
  const float* in = logits + int64_t(row) * num_experts;
  float v[kPerLane];
  float row_max = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    float x = e < num_experts ? in[e] : -INFINITY;
    if (isnan(x)) x = -INFINITY;
    v[i] = x;
    row_max = fmaxf(row_max, x);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, o));
  const float shift = row_max == -INFINITY ? 0.f : row_max;
  float denom = 0.f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    if (lane + 32 * i < num_experts) denom += expf(v[i] - shift);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) denom += __shfl_xor_sync(0xffffffffu, denom, o);

  unsigned taken = 0;    // bit i: this lane's logit i is chosen already
  int my_id = 0;         // lane j < top_k keeps choice j
  float my_logit = 0.f;
  for (int j = 0; j < top_k; ++j) {
    float bv = -INFINITY;
    int bid = INT_MAX;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + 32 * i;
      if (e < num_experts && !(taken >> i & 1u) && better(v[i], e, bv, bid)) bv = v[i], bid = e;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oid = __shfl_xor_sync(0xffffffffu, bid, o);
      if (better(ov, oid, bv, bid)) bv = ov, bid = oid;
    }
    if (bid % 32 == lane) taken |= 1u << (bid / 32);
    if (lane == j) my_id = bid, my_logit = bv;
  }
  const float p = lane < top_k ? expf(my_logit - shift) : 0.f;
  float picked = p;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) picked += __shfl_xor_sync(0xffffffffu, picked, o);
  if (lane < top_k) {
    ids[int64_t(row) * top_k + lane] = my_id;
    weights[int64_t(row) * top_k + lane] = p / (renormalize ? picked : denom);
  }
}

}  // namespace

void moe_route(int32_t* ids, float* weights, const float* logits, int n, int num_experts,
               int top_k, bool renormalize, cudaStream_t stream) {
  FS_CHECK(num_experts >= 1 && num_experts <= kMoeMaxExperts && top_k >= 1 &&
               top_k <= num_experts && top_k <= kMoeMaxTopK && n >= 0,
           "moe_route: top_k ", top_k, " of ", num_experts, " experts (at most ", kMoeMaxExperts,
           " experts and top_k ", kMoeMaxTopK, ")");
  if (n == 0) return;
  launch_pdl(moe_route_kernel, dim3((n + kWarps - 1) / kWarps), dim3(kWarps * 32), 0, stream, ids,
             weights, logits, n, num_experts, top_k, renormalize);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda

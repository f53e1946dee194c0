// Qwen2-MoE's gated shared expert (kernels/moe.h, twin ref::add_sigmoid_gated): the shared
// expert's output weighed by sigmoid of its gate's one logit per row, added to the routed sum.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/moe.h"

namespace flashserve::cuda {
namespace {

using bf16 = __nv_bfloat16;

template <class G>
__global__ void add_sigmoid_gated_kernel(bf16* __restrict__ out, const bf16* __restrict__ y,
                                         const G* __restrict__ gate_logit, int hidden) {
  const int r = blockIdx.x;
  const float g = 1.f / (1.f + expf(-float(gate_logit[r])));
  for (int h = threadIdx.x; h < hidden; h += blockDim.x) {
    const int64_t i = int64_t(r) * hidden + h;
    out[i] = __float2bfloat16(__bfloat162float(out[i]) + g * __bfloat162float(y[i]));
  }
}

}  // namespace

void add_sigmoid_gated_bf16(void* out, const void* y, const void* gate_logit, bool gate_bf16,
                            int n, int hidden, cudaStream_t stream) {
  if (n == 0) return;
  if (gate_bf16)
    add_sigmoid_gated_kernel<bf16><<<n, 256, 0, stream>>>(
        static_cast<bf16*>(out), static_cast<const bf16*>(y), static_cast<const bf16*>(gate_logit),
        hidden);
  else
    add_sigmoid_gated_kernel<float><<<n, 256, 0, stream>>>(
        static_cast<bf16*>(out), static_cast<const bf16*>(y),
        static_cast<const float*>(gate_logit), hidden);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda

// Instantiates the prefill attention kernel for head_dim 256, f16 (one compile unit per
// (head_dim, dtype) pair keeps each under a minute on a 2-core build).
#include "kernels/cuda/attention_prefill_kernel.cuh"

namespace flashserve::cuda::detail {

bool run_prefill_hdim256_f16(int variant, const PrefillParams& p, int num_tokens, cudaStream_t s) {
  return run_prefill<256, __half, /*kAllVariants=*/false>(variant, p, num_tokens, s);
}

}  // namespace flashserve::cuda::detail

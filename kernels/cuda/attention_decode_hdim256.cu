// Instantiates the split-K decode partial kernel for head_dim 256 (Gemma 2/3; bf16 and fp16):
// one kv head per block, Q in shared memory, one 4-warp block per SM (DecodeTraits says why).
#include "kernels/cuda/attention_decode_partial.cuh"

namespace flashserve::cuda::detail {

void launch_decode_partial_hdim256(const DecodeParams& params, bool bf16, int num_seqs, cudaStream_t stream) {
  bf16 ? launch_decode_partial<__nv_bfloat16, 256, 1>(params, num_seqs, stream)
       : launch_decode_partial<__half, 256, 1>(params, num_seqs, stream);
}

int decode_partial_ctas_per_sm_hdim256(bool bf16) {
  return bf16 ? decode_partial_ctas_per_sm<__nv_bfloat16, 256, 1>() : decode_partial_ctas_per_sm<__half, 256, 1>();
}

}  // namespace flashserve::cuda::detail

// Instantiates the split-K decode partial kernel for head_dim 128 (bf16 and fp16).
#include "kernels/cuda/attention_decode_partial.cuh"

namespace flashserve::cuda::detail {

void launch_decode_partial_hdim128(const DecodeParams& params, bool bf16, int num_seqs, cudaStream_t stream) {
  bf16 ? launch_decode_partial<__nv_bfloat16, 128, 1>(params, num_seqs, stream)
       : launch_decode_partial<__half, 128, 1>(params, num_seqs, stream);
}

int decode_partial_ctas_per_sm_hdim128(bool bf16) {
  return bf16 ? decode_partial_ctas_per_sm<__nv_bfloat16, 128, 1>() : decode_partial_ctas_per_sm<__half, 128, 1>();
}

}  // namespace flashserve::cuda::detail

// Instantiates the split-K decode partial kernel for head_dim 64 (bf16 and fp16), with one kv head
// per block and with two adjacent kv heads per block (contiguous 256-byte K/V rows).
#include "kernels/cuda/attention_decode_partial.cuh"

namespace flashserve::cuda::detail {

void launch_decode_partial_hdim64(const DecodeParams& params, bool bf16, int heads_per_block, int num_seqs,
                                  cudaStream_t stream) {
  if (heads_per_block == 2) {
    bf16 ? launch_decode_partial<__nv_bfloat16, 64, 2>(params, num_seqs, stream)
         : launch_decode_partial<__half, 64, 2>(params, num_seqs, stream);
  } else {
    bf16 ? launch_decode_partial<__nv_bfloat16, 64, 1>(params, num_seqs, stream)
         : launch_decode_partial<__half, 64, 1>(params, num_seqs, stream);
  }
}

int decode_partial_ctas_per_sm_hdim64(bool bf16, int heads_per_block) {
  if (heads_per_block == 2)
    return bf16 ? decode_partial_ctas_per_sm<__nv_bfloat16, 64, 2>() : decode_partial_ctas_per_sm<__half, 64, 2>();
  return bf16 ? decode_partial_ctas_per_sm<__nv_bfloat16, 64, 1>() : decode_partial_ctas_per_sm<__half, 64, 1>();
}

}  // namespace flashserve::cuda::detail

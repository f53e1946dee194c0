// Instantiates the Hopper prefill kernel for head_dim 64 (compiled for sm_90a only: see
// kernels/CMakeLists.txt) and its entry points declared in attention_prefill_sm90.h.
#include "kernels/cuda/sm90/attention_prefill_sm90.h"
#include "kernels/cuda/sm90/attention_prefill_sm90_variants.cuh"

namespace flashserve::cuda::detail {

int prefill_sm90_count_hdim64() { return sm90::Sm90Variants<64>::kCount; }
const char* prefill_sm90_name_hdim64(int variant) { return sm90::Sm90Variants<64>::kNames[variant]; }
bool run_prefill_sm90_hdim64(int variant, bool f16, const PrefillParams& p, int num_tokens,
                             bool skip_kv_loads, const FreshKv* fresh, cudaStream_t s) {
  return sm90::run_sm90<64>(variant, f16, p, num_tokens, skip_kv_loads, fresh, s);
}

}  // namespace flashserve::cuda::detail

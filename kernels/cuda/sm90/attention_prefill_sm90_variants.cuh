// The configurations of the Hopper prefill kernel compiled per head_dim (variant 0 is the default;
// the others exist to measure what each technique buys: docs/prefill_attention.md) and the typed
// launcher. Included by the two sm_90a translation units of this folder only.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/attention_prefill_traits.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/sm90/attention_prefill_sm90.cuh"

namespace flashserve::cuda::detail::sm90 {

// Sm90Traits<head_dim, consumer warpgroups, stages, softmax/GEMM overlap, setmaxnreg>.
template <int kHeadDim>
struct Sm90Variants;

template <>
struct Sm90Variants<128> {
  using List = TraitsList<Sm90Traits<128, 2, 2, true, true>, Sm90Traits<128, 2, 2, false, true>,
                          Sm90Traits<128, 2, 2, true, false>, Sm90Traits<128, 1, 2, true, false>>;
  static constexpr int kCount = List::kCount;
  static constexpr const char* kNames[kCount] = {"wg2_s2_overlap", "wg2_s2_serial", "wg2_s2_overlap_noreg",
                                                 "wg1_s2_overlap"};
};

template <>
struct Sm90Variants<64> {
  using List = TraitsList<Sm90Traits<64, 2, 3, true, true>, Sm90Traits<64, 2, 3, false, true>,
                          Sm90Traits<64, 2, 2, true, true>, Sm90Traits<64, 1, 3, true, false>>;
  static constexpr int kCount = List::kCount;
  static constexpr const char* kNames[kCount] = {"wg2_s3_overlap", "wg2_s3_serial", "wg2_s2_overlap",
                                                 "wg1_s3_overlap"};
};

template <class Tr, class T>
void launch_sm90(PrefillParams p, int num_tokens, cudaStream_t stream) {
  p.num_vtiles = num_tokens / Tr::kBlockM + p.num_seqs;
  const long long ctas = (long long)p.num_vtiles * p.num_q_heads;
  if (num_tokens == 0 || ctas == 0) return;
  FS_CHECK(ctas < (1ll << 31), "prefill grid too large: ", ctas, " CTAs");
  auto kernel = attention_prefill_sm90_kernel<Tr, T>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Tr::kSmemBytes)));
  kernel<<<unsigned(ctas), Tr::kThreads, Tr::kSmemBytes, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

// Runs variant `variant` for head_dim kHeadDim; false if it is not compiled (fp16: variant 0 only).
template <int kHeadDim>
bool run_sm90(int variant, bool f16, const PrefillParams& p, int num_tokens, cudaStream_t stream) {
  using L = typename Sm90Variants<kHeadDim>::List;
  if (f16) {
    if (variant != 0) return false;
    launch_sm90<decltype(first_traits(static_cast<L*>(nullptr))), __half>(p, num_tokens, stream);
    return true;
  }
  auto run = [&](auto traits) { launch_sm90<decltype(traits), __nv_bfloat16>(p, num_tokens, stream); };
  return variant >= 0 && dispatch_in(variant, run, static_cast<L*>(nullptr));
}

}  // namespace flashserve::cuda::detail::sm90

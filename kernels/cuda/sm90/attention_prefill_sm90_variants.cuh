// The configurations of the Hopper prefill kernel compiled per head_dim (variant 0 is the default;
// the others exist to measure what each technique buys: docs/PREFILL_ATTENTION.md) and the typed
// launcher. Included by the two sm_90a translation units of this folder only.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <tuple>
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda/attention_prefill_traits.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/sm90/attention_prefill_sm90.cuh"
#include "kernels/cuda/sm90/attention_prefill_sm90.h"
#include "kernels/cuda/sm90/tensor_map.cuh"

namespace flashserve::cuda::detail::sm90 {

// Sm90Traits<head_dim, consumer warpgroups, stages, softmax/GEMM overlap, setmaxnreg, TMA,
// ping-pong, contiguous>. Variant 0 is the default (cp.async + ping-pong: fastest on 5 of the 7
// benchmark shapes on the H100: docs/PREFILL_ATTENTION.md); the rest add or take away one technique
// at a time. The last ones are variant 0 plus the contiguous fresh-prompt path.
template <int kHeadDim>
struct Sm90Variants;

template <>
struct Sm90Variants<128> {
  using List = TraitsList<Sm90Traits<128, 2, 2, true, true, false, true>,
                          Sm90Traits<128, 2, 2, true, true, true, true>,
                          Sm90Traits<128, 2, 2, true, true, true, false>,
                          Sm90Traits<128, 2, 2, true, true, false, false>,
                          Sm90Traits<128, 2, 2, false, true, false, false>,
                          Sm90Traits<128, 2, 2, true, false, false, false>,
                          Sm90Traits<128, 1, 2, true, false, false, false>,
                          Sm90Traits<128, 2, 3, true, true, true, true>,
                          Sm90Traits<128, 2, 2, true, true, false, true, true>,
                          Sm90Traits<128, 2, 3, true, true, false, true, true>>;
  static constexpr int kCount = List::kCount;
  static constexpr const char* kNames[kCount] = {
      "wg2_s2_cpasync_pp",     "wg2_s2_tma_pp",        "wg2_s2_tma",     "wg2_s2_cpasync",
      "wg2_s2_cpasync_serial", "wg2_s2_cpasync_noreg", "wg1_s2_cpasync", "wg2_s3_tma_pp",
      "wg2_s2_contig_pp",      "wg2_s3_contig_pp"};
};

template <>
struct Sm90Variants<64> {
  using List = TraitsList<Sm90Traits<64, 2, 3, true, true, false, true>,
                          Sm90Traits<64, 2, 3, true, true, true, true>,
                          Sm90Traits<64, 2, 3, true, true, true, false>,
                          Sm90Traits<64, 2, 3, true, true, false, false>,
                          Sm90Traits<64, 2, 3, false, true, false, false>,
                          Sm90Traits<64, 1, 3, true, false, false, false>,
                          Sm90Traits<64, 2, 2, true, true, true, true>,
                          Sm90Traits<64, 2, 3, true, true, false, true, true>>;
  static constexpr int kCount = List::kCount;
  static constexpr const char* kNames[kCount] = {
      "wg2_s3_cpasync_pp",     "wg2_s3_tma_pp",  "wg2_s3_tma",    "wg2_s3_cpasync",
      "wg2_s3_cpasync_serial", "wg1_s3_cpasync", "wg2_s2_tma_pp", "wg2_s3_contig_pp"};
};

// The launcher's contiguous variants (attention_prefill_sm90.h) must be contiguous configurations.
template <int kVariant, class... Ts>
constexpr bool is_contig_variant(TraitsList<Ts...>*) {
  return std::tuple_element_t<kVariant, std::tuple<Ts...>>::kContig;
}
static_assert(is_contig_variant<kSm90ContigVariantHdim128>(static_cast<Sm90Variants<128>::List*>(nullptr)),
              "kSm90ContigVariantHdim128 must name a contiguous variant");
static_assert(is_contig_variant<kSm90ContigVariantHdim64>(static_cast<Sm90Variants<64>::List*>(nullptr)),
              "kSm90ContigVariantHdim64 must name a contiguous variant");

// One K or V cache: rows of num_kv_heads * head_dim elements (row = block * block_size + offset),
// 8-row boxes (a piece of a page when block_size % 8 == 0). The launcher does not know the number
// of blocks, so the row count is the largest the copy coordinates can address; only rows the
// block table names are read.
inline CUtensorMap make_kv_tensor_map(const void* cache, const PrefillParams& p, bool f16) {
  return make_tensor_map_2d(cache, p.kv_row_stride, INT32_MAX, p.kv_row_stride, 8, f16);
}

template <class Tr, class T>
void launch_sm90(const PrefillParams& params, int num_tokens, bool skip_kv_loads, const FreshKv* fresh,
                 cudaStream_t stream) {
  FS_CHECK(!skip_kv_loads || Tr::kTma, "skipping the K/V loads is a diagnostic of the TMA variants");
  Sm90Params sp{};
  sp.p = params;
  sp.skip_kv_loads = skip_kv_loads;
  sp.p.num_vtiles = num_tokens / Tr::kBlockM + params.num_seqs;
  const long long ctas = (long long)sp.p.num_vtiles * params.num_q_heads;
  if (num_tokens == 0 || ctas == 0) return;
  FS_CHECK(ctas < (1ll << 31), "prefill grid too large: ", ctas, " CTAs");
  constexpr bool kF16 = std::is_same_v<T, __half>;
  if constexpr (Tr::kTma) {
    sp.tmap_k = make_kv_tensor_map(params.k_cache, params, kF16);
    sp.tmap_v = make_kv_tensor_map(params.v_cache, params, kF16);
  }
  if constexpr (Tr::kContig) {
    // Bulk copies are issued for full 128-key tiles only (kv_len = q_len >= 128 rows of the step);
    // with fewer rows every tile is gathered from the pages and the maps are not needed.
    if (fresh != nullptr && num_tokens >= Tr::kBlockN) {  // checked by the launcher (check_fresh_kv)
      sp.have_fresh = true;
      sp.tmap_fresh_k =
          make_tensor_map_2d(fresh->k, params.kv_row_stride, num_tokens, fresh->k_row_stride, Tr::kBlockN, kF16);
      sp.tmap_fresh_v =
          make_tensor_map_2d(fresh->v, params.kv_row_stride, num_tokens, fresh->v_row_stride, Tr::kBlockN, kF16);
    }
  }
  auto kernel = attention_prefill_sm90_kernel<Tr, T>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Tr::kSmemBytes)));
  kernel<<<unsigned(ctas), Tr::kThreads, Tr::kSmemBytes, stream>>>(sp);
  CUDA_CHECK_LAUNCH();
}

// A TMA configuration copies 8-row pieces of pages, so it needs block_size % 8 == 0; otherwise
// the same configuration runs with cp.async.
template <class Tr, class T>
void launch_sm90_or_cp_async(const PrefillParams& p, int num_tokens, bool skip_kv_loads, const FreshKv* fresh,
                             cudaStream_t stream) {
  if constexpr (Tr::kTma) {
    if (p.block_size % 8 != 0 && !skip_kv_loads)
      return launch_sm90<typename Tr::CpAsync, T>(p, num_tokens, false, fresh, stream);
  }
  launch_sm90<Tr, T>(p, num_tokens, skip_kv_loads, fresh, stream);
}

// Runs variant `variant` for head_dim kHeadDim; false if it is not compiled (fp16: variant 0 only).
template <int kHeadDim>
bool run_sm90(int variant, bool f16, const PrefillParams& p, int num_tokens, bool skip_kv_loads,
              const FreshKv* fresh, cudaStream_t stream) {
  using L = typename Sm90Variants<kHeadDim>::List;
  if (f16) {
    if (variant != 0) return false;
    launch_sm90_or_cp_async<decltype(first_traits(static_cast<L*>(nullptr))), __half>(p, num_tokens, skip_kv_loads,
                                                                                     fresh, stream);
    return true;
  }
  auto run = [&](auto traits) {
    launch_sm90_or_cp_async<decltype(traits), __nv_bfloat16>(p, num_tokens, skip_kv_loads, fresh, stream);
  };
  return variant >= 0 && dispatch_in(variant, run, static_cast<L*>(nullptr));
}

}  // namespace flashserve::cuda::detail::sm90

// Host launcher of the prefill attention kernel: validates the arguments at the API edge,
// fills the parameter block and dispatches on (head_dim, dtype, variant). Today there is one
// path (mma.sync, sm80+); a Hopper wgmma/TMA path would be selected here by compute capability.
#include "kernels/attention_prefill.h"

#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/attention_prefill_traits.cuh"
#include "kernels/cuda/cuda_check.h"

namespace flashserve::cuda {
namespace detail {
namespace {

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

PrefillParams make_params(const PagedAttentionArgs& a, int num_tokens, const void* q,
                          const void* k_cache, const void* v_cache, void* out, float* lse) {
  FS_CHECK(a.num_seqs >= 0 && num_tokens >= 0, "negative num_seqs or num_tokens");
  FS_CHECK(a.head_dim == 64 || a.head_dim == 128, "prefill attention supports head_dim 64 and 128, got ",
           a.head_dim);
  FS_CHECK(a.num_q_heads > 0 && a.num_kv_heads > 0 && a.num_q_heads % a.num_kv_heads == 0,
           "num_kv_heads ", a.num_kv_heads, " must divide num_q_heads ", a.num_q_heads);
  FS_CHECK(a.block_size > 0 && a.max_blocks_per_seq >= 0, "bad block_size ", a.block_size,
           " or max_blocks_per_seq ", a.max_blocks_per_seq);
  FS_CHECK(a.scale > 0.f && std::isfinite(a.scale), "softmax scale must be positive, got ", a.scale);
  if (num_tokens > 0) {
    FS_CHECK(a.cu_q_lens && a.kv_lens && a.block_table, "null cu_q_lens/kv_lens/block_table");
    FS_CHECK(q && k_cache && v_cache && out, "null q/k_cache/v_cache/out");
    FS_CHECK(aligned16(q) && aligned16(k_cache) && aligned16(v_cache) && aligned16(out),
             "q, k_cache, v_cache and out must be 16-byte aligned");
  }
  PrefillParams p{};
  set_paged_tensors(p, a, q, k_cache, v_cache, out, lse);
  p.cu_q_lens = a.cu_q_lens;
  p.num_seqs = a.num_seqs;
  p.block_size = a.block_size;
  p.num_q_heads = a.num_q_heads;
  p.group_size = a.num_q_heads / a.num_kv_heads;
  p.q_row_stride = int64_t(a.num_q_heads) * a.head_dim;
  p.kv_row_stride = int64_t(a.num_kv_heads) * a.head_dim;
  p.kv_block_stride = int64_t(a.block_size) * p.kv_row_stride;
  p.scale_log2 = a.scale * 1.4426950408889634f;
  p.causal = a.causal;
  return p;
}

}  // namespace

// Default tile shape for bf16, from the H200 measurements in bench/results/NVIDIA_H200/
// prefill_v3.jsonl (docs/prefill_attention.md): 4-warp CTAs with 32 rows per warp (BLOCK_N 48
// for d128, 128 for d64) win when the grid holds at least two CTAs per SM; below that (one
// short chunk, e.g. 512 queries x 32 heads = 128 CTAs) too few warps run, and 8 warps of 16
// rows (d128) or 64-row CTAs (d64) are faster.
int prefill_default_variant(int head_dim, int num_tokens, int num_seqs, int num_q_heads) {
  int device = 0, num_sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  const long long ctas = (long long)(num_tokens / 128 + num_seqs) * num_q_heads;  // BLOCK_M 128
  const bool small_grid = ctas < 2ll * num_sms;
  if (head_dim == 64)
    return small_grid ? PrefillVariants<64>::kSmallGridVariant : PrefillVariants<64>::kLargeGridVariant;
  return small_grid ? PrefillVariants<128>::kSmallGridVariant : PrefillVariants<128>::kLargeGridVariant;
}

int prefill_num_variants(int head_dim) {
  if (head_dim == 64) return PrefillVariants<64>::kCount;
  if (head_dim == 128) return PrefillVariants<128>::kCount;
  return 0;
}

const char* prefill_variant_name(int head_dim, int variant) {
  FS_CHECK(variant >= 0 && variant < prefill_num_variants(head_dim), "no prefill variant ",
           variant, " for head_dim ", head_dim);
  return head_dim == 64 ? PrefillVariants<64>::kNames[variant] : PrefillVariants<128>::kNames[variant];
}

size_t prefill_variant_smem_bytes(int head_dim, int variant) {
  size_t bytes = 0;
  auto get = [&](auto traits) { bytes = decltype(traits)::kSmemBytes; };
  const bool known = head_dim == 64 ? dispatch_variant<64, true>(variant, get)
                                    : head_dim == 128 && dispatch_variant<128, true>(variant, get);
  FS_CHECK(known, "no prefill variant ", variant, " for head_dim ", head_dim);
  return bytes;
}

void attention_prefill_variant(int variant, const PagedAttentionArgs& args, int num_tokens,
                               const void* q, const void* k_cache, const void* v_cache, void* out,
                               float* lse, DType dtype, cudaStream_t stream) {
  const PrefillParams p = make_params(args, num_tokens, q, k_cache, v_cache, out, lse);
  if (num_tokens == 0 || args.num_seqs == 0) return;
  bool ran = false;
  if (dtype == DType::kBF16) {
    ran = args.head_dim == 64 ? run_prefill_hdim64_bf16(variant, p, num_tokens, stream)
                              : run_prefill_hdim128_bf16(variant, p, num_tokens, stream);
  } else if (dtype == DType::kF16) {
    ran = args.head_dim == 64 ? run_prefill_hdim64_f16(variant, p, num_tokens, stream)
                              : run_prefill_hdim128_f16(variant, p, num_tokens, stream);
  } else {
    FS_THROW("prefill attention supports dtypes bf16 and f16, got ", dtype_name(dtype));
  }
  FS_CHECK(ran, "prefill variant ", variant, " is not compiled for head_dim ", args.head_dim,
           " and ", dtype_name(dtype), " (fp16 has variant 0 only)");
}

}  // namespace detail

void attention_prefill(const PagedAttentionArgs& args, int num_tokens, const void* q,
                       const void* k_cache, const void* v_cache, void* out, float* lse,
                       DType dtype, cudaStream_t stream) {
  const int variant =
      dtype == DType::kBF16
          ? detail::prefill_default_variant(args.head_dim, num_tokens, args.num_seqs, args.num_q_heads)
          : 0;  // fp16 compiles only variant 0
  detail::attention_prefill_variant(variant, args, num_tokens, q, k_cache, v_cache, out, lse, dtype,
                                    stream);
}

}  // namespace flashserve::cuda

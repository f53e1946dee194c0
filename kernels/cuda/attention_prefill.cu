// Host launcher of the prefill attention kernels: validates the arguments at the API edge,
// fills the parameter block and dispatches on (kernel, head_dim, dtype, variant): the Hopper
// kernel (kernels/cuda/sm90/, compiled when the build has sm_90a) on compute capability 9.x,
// the mma.sync kernel elsewhere and for head_dim 256 (the Hopper kernel has 64 and 128 only); on
// the Hopper kernel, the contiguous fresh-prompt variant when the caller passes its K/V rows.
#include "kernels/attention_prefill.h"

#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/attention_prefill_traits.cuh"
#include "kernels/cuda/attention_prefill_variants.h"
#include "kernels/cuda/cuda_check.h"
#if FLASHSERVE_PREFILL_SM90
#include "kernels/cuda/sm90/attention_prefill_sm90.h"
#endif

namespace flashserve::cuda {
namespace detail {
namespace {

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

PrefillParams make_params(const PagedAttentionArgs& a, int num_tokens, const void* q,
                          const void* k_cache, const void* v_cache, void* out, float* lse) {
  FS_CHECK(a.num_seqs >= 0 && num_tokens >= 0, "negative num_seqs or num_tokens");
  FS_CHECK(a.head_dim == 64 || a.head_dim == 128 || a.head_dim == 256,
           "prefill attention supports head_dim 64, 128 and 256, got ", a.head_dim);
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
  FS_CHECK(a.window >= 0 && a.softcap >= 0.f && std::isfinite(a.softcap), "bad sliding window ",
           a.window, " or softcap ", a.softcap);
  p.window = a.window;
  p.softcap_in = a.softcap > 0.f ? a.scale / a.softcap : 0.f;
  p.softcap_out = a.softcap > 0.f ? a.softcap / a.scale : 0.f;
  p.sinks = a.sinks;
  return p;
}

}  // namespace

// Default tile shape for bf16, from the H200 measurements (docs/PREFILL_ATTENTION.md): 4-warp CTAs with 32 rows per warp (BLOCK_N 48
// for d128, 128 for d64) win when the grid holds at least two CTAs per SM; below that (one
// short chunk, e.g. 512 queries x 32 heads = 128 CTAs) too few warps run, and 8 warps of 16
// rows (d128) or 64-row CTAs (d64) are faster. d256 has one default shape (traits file).
int prefill_default_variant(int head_dim, int num_tokens, int num_seqs, int num_q_heads) {
  if (head_dim == 256) return PrefillVariants<256>::kLargeGridVariant;
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
  if (head_dim == 256) return PrefillVariants<256>::kCount;
  return 0;
}

const char* prefill_variant_name(int head_dim, int variant) {
  FS_CHECK(variant >= 0 && variant < prefill_num_variants(head_dim), "no prefill variant ",
           variant, " for head_dim ", head_dim);
  if (head_dim == 64) return PrefillVariants<64>::kNames[variant];
  return head_dim == 128 ? PrefillVariants<128>::kNames[variant] : PrefillVariants<256>::kNames[variant];
}

size_t prefill_variant_smem_bytes(int head_dim, int variant) {
  size_t bytes = 0;
  auto get = [&](auto traits) { bytes = decltype(traits)::kSmemBytes; };
  const bool known = head_dim == 64    ? dispatch_variant<64, true>(variant, get)
                     : head_dim == 128 ? dispatch_variant<128, true>(variant, get)
                                       : head_dim == 256 && dispatch_variant<256, true>(variant, get);
  FS_CHECK(known, "no prefill variant ", variant, " for head_dim ", head_dim);
  return bytes;
}

void attention_prefill_variant(int variant, const PagedAttentionArgs& args, int num_tokens,
                               const void* q, const void* k_cache, const void* v_cache, void* out,
                               float* lse, DType dtype, cudaStream_t stream) {
  const PrefillParams p = make_params(args, num_tokens, q, k_cache, v_cache, out, lse);
  if (num_tokens == 0 || args.num_seqs == 0) return;
  bool ran = false;
  const int d = args.head_dim;
  if (dtype == DType::kBF16) {
    ran = d == 64    ? run_prefill_hdim64_bf16(variant, p, num_tokens, stream)
          : d == 128 ? run_prefill_hdim128_bf16(variant, p, num_tokens, stream)
                     : run_prefill_hdim256_bf16(variant, p, num_tokens, stream);
  } else if (dtype == DType::kF16) {
    ran = d == 64    ? run_prefill_hdim64_f16(variant, p, num_tokens, stream)
          : d == 128 ? run_prefill_hdim128_f16(variant, p, num_tokens, stream)
                     : run_prefill_hdim256_f16(variant, p, num_tokens, stream);
  } else {
    FS_THROW("prefill attention supports dtypes bf16 and f16, got ", dtype_name(dtype));
  }
  FS_CHECK(ran, "prefill variant ", variant, " is not compiled for head_dim ", args.head_dim,
           " and ", dtype_name(dtype), " (fp16 has variant 0 only)");
}

void attention_prefill_fa2(const PagedAttentionArgs& args, int num_tokens, const void* q,
                           const void* k_cache, const void* v_cache, void* out, float* lse,
                           DType dtype, cudaStream_t stream) {
  const int variant =
      dtype == DType::kBF16
          ? prefill_default_variant(args.head_dim, num_tokens, args.num_seqs, args.num_q_heads)
          : 0;  // fp16 compiles only variant 0
  attention_prefill_variant(variant, args, num_tokens, q, k_cache, v_cache, out, lse, dtype, stream);
}

bool prefill_sm90_available() {
#if FLASHSERVE_PREFILL_SM90
  int device = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major == 9;  // the sm_90a code runs on compute capability 9.0 only
#else
  return false;
#endif
}

int prefill_sm90_num_variants(int head_dim) {
#if FLASHSERVE_PREFILL_SM90
  if (head_dim == 64) return prefill_sm90_count_hdim64();
  if (head_dim == 128) return prefill_sm90_count_hdim128();
#endif
  return 0;
}

const char* prefill_sm90_variant_name(int head_dim, int variant) {
  FS_CHECK(variant >= 0 && variant < prefill_sm90_num_variants(head_dim), "no Hopper prefill variant ",
           variant, " for head_dim ", head_dim);
#if FLASHSERVE_PREFILL_SM90
  return head_dim == 64 ? prefill_sm90_name_hdim64(variant) : prefill_sm90_name_hdim128(variant);
#else
  return "";
#endif
}

int prefill_sm90_contig_variant(int head_dim) {
#if FLASHSERVE_PREFILL_SM90
  if (head_dim == 64) return kSm90ContigVariantHdim64;
  if (head_dim == 128) return kSm90ContigVariantHdim128;
#endif
  (void)head_dim;
  return -1;
}

namespace {
// The bulk copies of the contiguous path read 16-byte aligned rows of whole kv heads.
void check_fresh_kv(const FreshKv& f, const PagedAttentionArgs& a) {
  FS_CHECK(f.k != nullptr && f.v != nullptr && aligned16(f.k) && aligned16(f.v),
           "fresh K/V must be non-null and 16-byte aligned");
  for (const int64_t stride : {f.k_row_stride, f.v_row_stride})
    FS_CHECK(stride >= int64_t(a.num_kv_heads) * a.head_dim && stride % 8 == 0, "fresh K/V row stride ", stride,
             " must be a multiple of 8 and >= num_kv_heads * head_dim");
}

void run_sm90(int variant, bool skip_kv_loads, const PagedAttentionArgs& args, int num_tokens,
              const void* q, const void* k_cache, const void* v_cache, void* out, float* lse,
              DType dtype, cudaStream_t stream, const FreshKv* fresh = nullptr) {
  const PrefillParams p = make_params(args, num_tokens, q, k_cache, v_cache, out, lse);
  FS_CHECK(args.head_dim == 64 || args.head_dim == 128, "the Hopper prefill kernel serves head_dim 64 and 128, got ",
           args.head_dim);
  FS_CHECK(dtype == DType::kBF16 || dtype == DType::kF16,
           "prefill attention supports dtypes bf16 and f16, got ", dtype_name(dtype));
  FS_CHECK(prefill_sm90_available(),
           "the Hopper prefill kernel needs a build with sm_90a and a compute capability 9.x GPU");
  if (num_tokens == 0 || args.num_seqs == 0) return;
  if (fresh != nullptr) check_fresh_kv(*fresh, args);
  bool ran = false;
#if FLASHSERVE_PREFILL_SM90
  const bool f16 = dtype == DType::kF16;
  ran = args.head_dim == 64
            ? run_prefill_sm90_hdim64(variant, f16, p, num_tokens, skip_kv_loads, fresh, stream)
            : run_prefill_sm90_hdim128(variant, f16, p, num_tokens, skip_kv_loads, fresh, stream);
#endif
  FS_CHECK(ran, "Hopper prefill variant ", variant, " is not compiled for head_dim ", args.head_dim,
           " and ", dtype_name(dtype), " (fp16 has variant 0 only)");
}
}  // namespace

void attention_prefill_sm90(int variant, const PagedAttentionArgs& args, int num_tokens,
                            const void* q, const void* k_cache, const void* v_cache, void* out,
                            float* lse, DType dtype, cudaStream_t stream, const FreshKv* fresh) {
  run_sm90(variant, false, args, num_tokens, q, k_cache, v_cache, out, lse, dtype, stream, fresh);
}

void attention_prefill_sm90_timing_only(int variant, const PagedAttentionArgs& args, int num_tokens,
                                        const void* q, const void* k_cache, const void* v_cache,
                                        void* out, float* lse, DType dtype, cudaStream_t stream) {
  run_sm90(variant, true, args, num_tokens, q, k_cache, v_cache, out, lse, dtype, stream);
}

const char* prefill_default_kernel() { return prefill_sm90_available() ? "sm90" : "fa2"; }

}  // namespace detail

namespace {
bool runs_sm90(int head_dim) { return detail::prefill_sm90_num_variants(head_dim) > 0 && detail::prefill_sm90_available(); }
}  // namespace

// The contiguous K/V path measured faster than the page gather for fresh prompts on the H100
// (docs/PREFILL_ATTENTION.md), so it runs wherever the Hopper kernel does.
bool attention_prefill_reads_fresh_kv(int head_dim) { return runs_sm90(head_dim); }

void attention_prefill(const PagedAttentionArgs& args, int num_tokens, const void* q,
                       const void* k_cache, const void* v_cache, void* out, float* lse,
                       DType dtype, cudaStream_t stream, const FreshKv* fresh) {
  if (runs_sm90(args.head_dim)) {
    // The contiguous variant is compiled for bf16 only; it gathers pages for chunked sequences.
    const bool contig = fresh != nullptr && dtype == DType::kBF16;
    const int variant = contig ? detail::prefill_sm90_contig_variant(args.head_dim) : 0;
    detail::attention_prefill_sm90(variant < 0 ? 0 : variant, args, num_tokens, q, k_cache, v_cache, out, lse,
                                   dtype, stream, contig ? fresh : nullptr);
  } else {
    detail::attention_prefill_fa2(args, num_tokens, q, k_cache, v_cache, out, lse, dtype, stream);
  }
}

}  // namespace flashserve::cuda

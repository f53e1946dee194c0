// The prefill attention kernels' tile variants, one by one, for tests and benchmarks (the
// product calls kernels/attention_prefill.h's launcher, which picks among them): the mma.sync
// kernel's variants and its own default choice, the Hopper kernel's variants, and a timing-only
// diagnostic. Internal to kernels/cuda, bench/ and tests/. Plain C++17.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/dtype.h"
#include "kernels/attention_prefill.h"
#include "kernels/paged_attention.h"

namespace flashserve::cuda {

namespace detail {
// Tile configurations compiled for a head_dim, for tests and benchmarks. Names read
// "m128n64w8s2q" (BLOCK_M, BLOCK_N, warps, pipeline stages, q: Q fragments kept in registers,
// _bN: N CTAs per SM requested). bf16 compiles every variant, fp16 only variant 0.
// attention_prefill picks prefill_default_variant (bf16) by grid size against the SM count.
int prefill_num_variants(int head_dim);
int prefill_default_variant(int head_dim, int num_tokens, int num_seqs, int num_q_heads);
const char* prefill_variant_name(int head_dim, int variant);
// Shared memory a variant's CTA needs: sm_86/sm_89 allow 99 KiB, sm_80 163, sm_90 227.
size_t prefill_variant_smem_bytes(int head_dim, int variant);
void attention_prefill_variant(int variant, const PagedAttentionArgs& args, int num_tokens,
                               const void* q, const void* k_cache, const void* v_cache, void* out,
                               float* lse, DType dtype, cudaStream_t stream);
// The mma.sync kernel with its own default tile choice (what attention_prefill runs off Hopper).
void attention_prefill_fa2(const PagedAttentionArgs& args, int num_tokens, const void* q,
                           const void* k_cache, const void* v_cache, void* out, float* lse,
                           DType dtype, cudaStream_t stream);

// The Hopper kernel (kernels/cuda/sm90/). Available when the build has sm_90a and the current
// device is compute capability 9.x. Variants (0 is the default) exist to measure each technique;
// fp16 compiles variant 0 only. attention_prefill_sm90 throws when it is not available.
bool prefill_sm90_available();
int prefill_sm90_num_variants(int head_dim);  // 0 when not compiled
const char* prefill_sm90_variant_name(int head_dim, int variant);
// `fresh`: read by the contiguous variants (prefill_sm90_contig_variant) only, for sequences with
// q_len == kv_len; every other variant, and those variants without it, gather the cache pages.
void attention_prefill_sm90(int variant, const PagedAttentionArgs& args, int num_tokens,
                            const void* q, const void* k_cache, const void* v_cache, void* out,
                            float* lse, DType dtype, cudaStream_t stream,
                            const FreshKv* fresh = nullptr);
// The contiguous-K/V variant the launcher runs on offered fresh rows (-1 when the Hopper kernel
// is not compiled).
int prefill_sm90_contig_variant(int head_dim);
// Timing diagnostic for benchmarks only: a TMA variant of the Hopper kernel with its K/V copies
// skipped (the consumers run on whatever shared memory holds), i.e. its speed with free loads.
// The output is NOT attention.
void attention_prefill_sm90_timing_only(int variant, const PagedAttentionArgs& args, int num_tokens,
                                        const void* q, const void* k_cache, const void* v_cache,
                                        void* out, float* lse, DType dtype, cudaStream_t stream);
// "sm90" or "fa2": the kernel attention_prefill runs on the current device.
const char* prefill_default_kernel();
}  // namespace detail

}  // namespace flashserve::cuda

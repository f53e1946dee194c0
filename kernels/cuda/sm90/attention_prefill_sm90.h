// Entry points of the Hopper prefill kernel's translation units (kernels/cuda/sm90/*.cu). They
// are built, and FLASHSERVE_PREFILL_SM90 is defined for the launcher, only when sm_90a is among
// the CUDA architectures; attention_prefill.cu calls them on compute capability 9.x only.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/attention_prefill.h"  // FreshKv

namespace flashserve::cuda::detail {

struct PrefillParams;

// The variants that read a fresh prompt's K/V from the step's own rows (FreshKv) instead of the
// cache pages; the launcher runs these on offered fresh rows (bf16).
// The variant tables (attention_prefill_sm90_variants.cuh) check that these indices name
// contiguous variants.
constexpr int kSm90ContigVariantHdim128 = 8;
constexpr int kSm90ContigVariantHdim64 = 7;

// Variants per head_dim (names for benchmarks and tests) and the launch of one of them; run_*
// returns false for a variant that is not compiled (fp16 compiles variant 0 only).
// skip_kv_loads: timing diagnostic of the TMA variants (no K/V copies; the output is not attention).
// fresh: the step's own K/V rows (nullptr: none), read by the contiguous variants only.
int prefill_sm90_count_hdim64();
int prefill_sm90_count_hdim128();
const char* prefill_sm90_name_hdim64(int variant);
const char* prefill_sm90_name_hdim128(int variant);
bool run_prefill_sm90_hdim64(int variant, bool f16, const PrefillParams& p, int num_tokens,
                             bool skip_kv_loads, const FreshKv* fresh, cudaStream_t s);
bool run_prefill_sm90_hdim128(int variant, bool f16, const PrefillParams& p, int num_tokens,
                              bool skip_kv_loads, const FreshKv* fresh, cudaStream_t s);

}  // namespace flashserve::cuda::detail

// The CUDA backend's attention (backends/cuda/cuda_backend.h): which kernel runs a step (split-K
// decode, prefill, or the generic kernel for other head dims), the decode plan, cached per step
// and sliding window, and its workspace.
#include "backends/backend.h"

#ifdef FLASHSERVE_HAS_CUDA

#include <algorithm>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "kernels/attention_decode.h"
#include "kernels/attention_generic.h"
#include "kernels/attention_prefill.h"
#include "kernels/prefill_plan.h"

namespace flashserve {
namespace {

// Split-K decode and the prefill launcher serve these (Gemma 2/3: 256); others run the generic kernel.
bool fast_attention_head_dim(int d) { return d == 64 || d == 128 || d == 256; }

}  // namespace

void CudaBackend::paged_attention(Tensor out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const StepArgs& b, const AttentionScoring& scoring) {
  expect_bf16(q, "attention q");
  FS_CHECK(q.ndim == 3 && k_cache.ndim == 4, "paged_attention: shapes");
  const PagedAttentionArgs a =
      paged_attention_args(b, int(q.dim(1)), int(k_cache.dim(2)), int(q.dim(2)), scoring);
  // The rows kept by the qkv_rope_write_kv of this step, if any (valid for this call only).
  const cuda::FreshKv fresh = std::exchange(fresh_, cuda::FreshKv{});
  // ...and only where they pay (kernels/prefill_plan.h): mostly fresh prompts of a tile or more.
  const bool have_fresh = fresh.k != nullptr && fresh_tokens_ == b.num_tokens &&
                          b.host_cu_q_lens != nullptr &&
                          prefill_fresh_kv_pays(b.host_cu_q_lens, b.host_kv_lens, b.num_seqs);
  switch (attention_path(b, a)) {
    case AttentionPath::kGeneric:
      cuda::paged_attention_generic_bf16(a, b.num_tokens, q.data, k_cache.data, v_cache.data,
                                         out.data, stream_, generic_kv_len(b.max_kv_len, a.head_dim));
      return;
    case AttentionPath::kDecode: {
      const DecodePlan& plan = decode_plan(b.host_kv_lens, a);
      ensure_decode_workspace(a, plan);
      cuda::attention_decode(a, q.data, k_cache.data, v_cache.data, out.data, nullptr,
                             DType::kBF16, plan, decode_ws_.get(), decode_ws_bytes_, stream_);
      return;
    }
    case AttentionPath::kPrefill:
      cuda::attention_prefill(a, b.num_tokens, q.data, k_cache.data, v_cache.data, out.data,
                              nullptr, DType::kBF16, stream_, have_fresh ? &fresh : nullptr);
      return;
  }
}

// head_dim 64/128/256 use the tuned kernels: split-K decode when every chunk is one token (GQA
// groups up to 16, power-of-two blocks of 8..256), the prefill kernel otherwise (it handles
// q_len 1 too, just less parallel). Other head dims: the generic kernel.
CudaBackend::AttentionPath CudaBackend::attention_path(const StepArgs& b, const PagedAttentionArgs& a) {
  if (!fast_attention_head_dim(a.head_dim)) return AttentionPath::kGeneric;
  const int group = a.num_q_heads / a.num_kv_heads, bsz = a.block_size;
  const bool decode_ok = group <= 16 && bsz >= 8 && bsz <= 256 && (bsz & (bsz - 1)) == 0;
  if (decode_ok && b.max_q_len == 1 && b.host_kv_lens != nullptr && b.num_tokens == b.num_seqs)
    return AttentionPath::kDecode;
  return AttentionPath::kPrefill;
}

// The generic kernel sizes its shared memory for the longest sequence; rounded up so that a
// recorded graph serves the next 256 positions too (never past what the kernel accepts).
int CudaBackend::generic_kv_len(int max_kv_len, int head_dim) {
  const int rounded = (std::max(max_kv_len, 1) + 255) / 256 * 256;
  return std::max(max_kv_len, std::min(rounded, 200 * 1024 / 4 - head_dim));
}

void CudaBackend::ensure_decode_workspace(const PagedAttentionArgs& a, const DecodePlan& plan) {
  const size_t ws =
      cuda::attention_decode_workspace_bytes(a.num_seqs, a.num_q_heads, a.head_dim, plan);
  if (ws <= decode_ws_bytes_) return;
  decode_ws_ = nullptr;
  decode_ws_ = allocate_bytes(ws + ws / 2);
  decode_ws_bytes_ = ws + ws / 2;
  // The split-K kernel's arrival counters start at zero (and every launch leaves them so).
  CUDA_CHECK(cudaMemsetAsync(decode_ws_.get(), 0, decode_ws_bytes_, stream_));
  ++epoch_;  // recorded graphs point at the old workspace
}

// Every layer of a step has the same kv_lens and shapes: plan once per step and sliding window
// (a windowed layer splits only its window's keys; models mix windowed and full layers).
const DecodePlan& CudaBackend::decode_plan(const int32_t* kv_lens, const PagedAttentionArgs& a) {
  const std::vector<int> key_shape = {a.num_seqs, a.num_q_heads, a.num_kv_heads, a.head_dim,
                                      a.block_size};
  if (key_shape != plan_shape_ ||
      !std::equal(kv_lens, kv_lens + a.num_seqs, plan_kv_lens_.begin(), plan_kv_lens_.end())) {
    plans_.clear();
    plan_shape_ = key_shape;
    plan_kv_lens_.assign(kv_lens, kv_lens + a.num_seqs);
  }
  auto it = plans_.find(a.window);
  if (it == plans_.end()) {
    const DecodePlan plan =
        cuda::plan_attention_decode(kv_lens, a.num_seqs, a.num_q_heads, a.num_kv_heads, a.head_dim,
                                    a.block_size, DType::kBF16, device_, DecodePlanConfig(), a.window);
    it = plans_.emplace(a.window, plan).first;
  }
  return it->second;
}

}  // namespace flashserve

#endif  // FLASHSERVE_HAS_CUDA

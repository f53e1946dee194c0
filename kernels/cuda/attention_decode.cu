// Host launcher of split-K decode attention: validates the arguments once, fills the kernel
// parameters, launches the partial kernel and, for more than one split, the merge kernel.
#include "kernels/attention_decode.h"

#include "kernels/cuda/attention_decode_partial.cuh"
#include "kernels/cuda/cuda_check.h"

namespace flashserve::cuda {
namespace {

constexpr size_t kWorkspaceAlign = 256;

size_t align_up(size_t x) { return (x + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

size_t o_part_bytes(int num_seqs, int num_q_heads, int head_dim, int num_splits) {
  return align_up(size_t(num_seqs) * num_q_heads * num_splits * head_dim * sizeof(float));
}

int log2_exact(int x) {
  int l = 0;
  while ((1 << l) < x) ++l;
  return (1 << l) == x ? l : -1;
}

}  // namespace

size_t attention_decode_workspace_bytes(int num_seqs, int num_q_heads, int head_dim,
                                        const DecodePlan& plan) {
  if (plan.num_splits <= 1) return 0;
  return o_part_bytes(num_seqs, num_q_heads, head_dim, plan.num_splits) +
         align_up(size_t(num_seqs) * num_q_heads * plan.num_splits * sizeof(float));
}

void attention_decode(const PagedAttentionArgs& a, const void* q, const void* k_cache,
                      const void* v_cache, void* out, float* lse, DType dtype,
                      const DecodePlan& plan, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream) {
  FS_CHECK(dtype == DType::kBF16 || dtype == DType::kF16, "attention_decode: dtype ",
           dtype_name(dtype), " not supported (bf16, f16)");
  FS_CHECK(a.head_dim == 64 || a.head_dim == 128 || a.head_dim == 256, "attention_decode: head_dim ",
           a.head_dim, " not supported (64, 128, 256)");
  FS_CHECK(a.num_kv_heads > 0 && a.num_q_heads % a.num_kv_heads == 0, "attention_decode: ",
           a.num_q_heads, " q heads over ", a.num_kv_heads, " kv heads");
  const int group = a.num_q_heads / a.num_kv_heads;
  FS_CHECK(group >= 1 && group <= 16, "attention_decode: group size ", group, " outside 1..16");
  const int bs_log2 = log2_exact(a.block_size);
  FS_CHECK(bs_log2 >= 3 && bs_log2 <= 8, "attention_decode: block_size ", a.block_size,
           " not a power of two in 8..256");
  FS_CHECK(a.num_seqs >= 0 && a.num_seqs <= 65535 && a.num_kv_heads <= 65535,
           "attention_decode: num_seqs ", a.num_seqs);
  FS_CHECK(plan.num_splits >= 1 && plan.num_splits <= 256, "attention_decode: num_splits ",
           plan.num_splits, " outside 1..256");
  FS_CHECK(plan.num_splits == 1 || plan.chunk_len > 0, "attention_decode: chunk_len ",
           plan.chunk_len);
  if (a.num_seqs == 0) return;
  FS_CHECK(q && k_cache && v_cache && out && a.kv_lens && a.block_table,
           "attention_decode: null pointer");

  detail::DecodeParams p{};
  detail::set_paged_tensors(p, a, q, k_cache, v_cache, out, lse);
  p.block_size_log2 = bs_log2;
  p.num_q_heads = a.num_q_heads;
  p.num_kv_heads = a.num_kv_heads;
  p.group_size = group;
  p.num_splits = plan.num_splits;
  p.chunk_len = plan.num_splits == 1 ? 0 : plan.chunk_len;
  p.scale_log2 = a.scale * 1.4426950408889634f;
  FS_CHECK(a.window >= 0 && a.softcap >= 0.f, "attention_decode: window ", a.window, " softcap ", a.softcap);
  p.window = a.window;
  p.softcap_in = a.softcap > 0.f ? a.scale / a.softcap : 0.f;
  p.softcap_out = a.softcap * 1.4426950408889634f;
  p.sinks = a.sinks;
  if (plan.num_splits > 1) {
    const size_t need = attention_decode_workspace_bytes(a.num_seqs, a.num_q_heads, a.head_dim, plan);
    FS_CHECK(workspace != nullptr && workspace_bytes >= need, "attention_decode: workspace of ",
             workspace_bytes, " bytes, ", need, " needed");
    FS_CHECK(reinterpret_cast<uintptr_t>(workspace) % kWorkspaceAlign == 0,
             "attention_decode: workspace not 256-byte aligned");
    p.o_part = static_cast<float*>(workspace);
    p.lse_part = reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                          o_part_bytes(a.num_seqs, a.num_q_heads, a.head_dim, plan.num_splits));
  }
  const int pairable = detail::decode_heads_per_block(a.head_dim, a.num_q_heads, a.num_kv_heads);
  const int heads_per_block = plan.kv_heads_per_block > 0 ? plan.kv_heads_per_block : pairable;
  FS_CHECK(heads_per_block == 1 || heads_per_block == pairable, "attention_decode: ",
           plan.kv_heads_per_block, " kv heads per block planned, but ", a.num_kv_heads,
           " kv heads of group ", group, " at head_dim ", a.head_dim, " do not pair");
  const bool bf16 = dtype == DType::kBF16;
  if (a.head_dim == 64)
    detail::launch_decode_partial_hdim64(p, bf16, heads_per_block, a.num_seqs, stream);
  else if (a.head_dim == 128)
    detail::launch_decode_partial_hdim128(p, bf16, a.num_seqs, stream);
  else
    detail::launch_decode_partial_hdim256(p, bf16, a.num_seqs, stream);
  if (plan.num_splits > 1)
    attention_decode_merge(p.o_part, p.lse_part, a.num_seqs * a.num_q_heads, plan.num_splits,
                           a.head_dim, out, lse, dtype, stream, a.sinks, a.num_q_heads);
}

DecodePlan plan_attention_decode(const int32_t* kv_lens, int num_seqs, int num_q_heads, int num_kv_heads,
                                 int head_dim, int block_size, DType dtype, int device,
                                 const DecodePlanConfig& tuning, int window) {
  FS_CHECK(head_dim == 64 || head_dim == 128 || head_dim == 256, "plan_attention_decode: head_dim ", head_dim);
  FS_CHECK(num_kv_heads > 0 && num_q_heads % num_kv_heads == 0, "plan_attention_decode: ", num_q_heads,
           " q heads over ", num_kv_heads, " kv heads");
  if (device < 0) CUDA_CHECK(cudaGetDevice(&device));
  const bool bf16 = dtype == DType::kBF16;
  FS_CHECK(tuning.kv_heads_per_block >= 0 && tuning.kv_heads_per_block <= 1,
           "plan_attention_decode: kv_heads_per_block ", tuning.kv_heads_per_block, " (0 or 1)");
  const int heads_per_block = tuning.kv_heads_per_block == 1
                                  ? 1
                                  : detail::decode_heads_per_block(head_dim, num_q_heads, num_kv_heads);
  DecodePlanConfig config = tuning;
  CUDA_CHECK(cudaDeviceGetAttribute(&config.num_sms, cudaDevAttrMultiProcessorCount, device));
  config.ctas_per_sm = head_dim == 64    ? detail::decode_partial_ctas_per_sm_hdim64(bf16, heads_per_block)
                       : head_dim == 128 ? detail::decode_partial_ctas_per_sm_hdim128(bf16)
                                         : detail::decode_partial_ctas_per_sm_hdim256(bf16);
  FS_CHECK(config.ctas_per_sm > 0, "plan_attention_decode: the partial kernel does not fit an SM");
  DecodePlan plan = plan_decode(kv_lens, num_seqs, num_kv_heads / heads_per_block, block_size, config, window);
  plan.kv_heads_per_block = heads_per_block;
  return plan;
}

}  // namespace flashserve::cuda

// LlamaModel's megakernel path: which models and steps take it, binding the weights and KV
// cache to the MegaDecoder, and one decode step as one launch (docs/MEGAKERNEL.md).
#include <cstdio>

#include "model/llama_model.h"

namespace flashserve {

void LlamaModel::set_megakernel(bool on) {
  mega_.reset();
  mega_cache_ = nullptr;
  if (!on) return;
  std::string why = shard_                      ? "tensor parallelism"
                    : config_.moe.num_experts > 0 ? "mixture-of-experts layers"
                                                  : megakernel_unsupported(config_, 1);
  if (why.empty() && (backend_.device() != Device::kCuda || backend_.compute_dtype() != DType::kBF16))
    why = "needs the CUDA backend with bf16 weights";
  for (const Layer& L : layers_)
    for (const Buffer* w : {&L.wqkv, &L.wo, &L.w_gate_up, &L.w_down})
      if (why.empty() && w->tensor.dtype != DType::kBF16)
        why = std::string(dtype_name(w->tensor.dtype)) + " weights (bf16 only)";
  if (!why.empty()) {
    std::fprintf(stderr, "flashserve: megakernel off: %s\n", why.c_str());
    return;
  }
  mega_ = std::make_unique<MegaDecoder>(backend_, config_);
}

bool LlamaModel::launch_megakernel(const StepPlan& s, KvCache& cache, bool argmax) {
  const int n = s.num_seqs;
  if (s.max_q_len != 1 || int(s.tokens.size()) != n || int(s.logit_rows.size()) != n) return false;
  for (int i = 0; i < n; ++i)
    if (s.logit_rows[size_t(i)] != i) return false;
  if (n > kMegaMaxBatch) {
    if (!mega_batch_logged_)
      std::fprintf(stderr, "flashserve: megakernel: decode steps of more than %d sequences run "
                   "the kernel-per-op path\n", kMegaMaxBatch);
    mega_batch_logged_ = true;
    return false;
  }
  if (mega_cache_ != cache.k(0).data) {
    std::vector<MegaLayerPtrs> ptrs;
    auto bf16 = [](const Buffer& b) {
      return b.storage ? static_cast<const uint16_t*>(b.tensor.data) : nullptr;
    };
    for (int l = 0; l < config_.num_layers; ++l) {
      const Layer& L = layers_[size_t(l)];
      MegaLayerPtrs p{};
      p.input_norm = bf16(L.input_norm), p.wqkv = bf16(L.wqkv), p.bqkv = bf16(L.bqkv);
      p.q_norm = bf16(L.q_norm), p.k_norm = bf16(L.k_norm), p.wo = bf16(L.wo);
      p.post_norm = bf16(L.post_norm), p.w_gate_up = bf16(L.w_gate_up), p.w_down = bf16(L.w_down);
      p.k_cache = static_cast<uint16_t*>(cache.k(l).data);
      p.v_cache = static_cast<uint16_t*>(cache.v(l).data);
      ptrs.push_back(p);
    }
    const Buffer& head = lm_head_.storage ? lm_head_ : embed_;
    mega_->bind(ptrs, bf16(embed_), bf16(final_norm_), bf16(head),
                static_cast<const float*>(inv_freq_.tensor.data));
    mega_cache_ = cache.k(0).data;
  }
  const StepArgs st = upload_step(s, cache);
  Tensor out = scratch(ws_.logits, DType::kF32, {n, int64_t(config_.vocab_size)});
  MegaStepArrays a;
  a.tokens = st.tokens.as<int32_t>(), a.positions = st.positions.as<int32_t>();
  a.slots = st.slot_mapping.as<int32_t>(), a.kv_lens = st.kv_lens.as<int32_t>();
  a.block_table = st.block_table.as<int32_t>();
  a.max_blocks_per_seq = st.max_blocks_per_seq, a.block_size = st.block_size;
  a.logits = out.as<float>();
  mega_->run(n, a);
  if (argmax) backend_.argmax_rows(scratch(ws_.argmax, DType::kI32, {n}), out);
  return true;
}

}  // namespace flashserve

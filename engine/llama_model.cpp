// Llama forward over Backend ops. Per layer (pre-norm residual blocks):
//   h = rms_norm(x); q,k,v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ; rope(q, k); write k,v to their slots;
//   x += paged_attention(q)·Woᵀ;  h = rms_norm(x); x += (silu(h·Wgᵀ) * h·Wuᵀ)·Wdᵀ
// then logits = rms_norm(x[wanted rows])·Wlmᵀ (Wlm = embedding table when tied).
#include "engine/llama_model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace flashserve {

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  FS_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0, "head_dim ", c.head_dim, " must be even");
  const int half = c.head_dim / 2;
  std::vector<float> out(half);
  const RopeScaling& s = c.rope_scaling;
  const bool llama3 = s.type == "llama3";
  FS_CHECK(llama3 || s.type == "none" || s.type.empty() || s.type == "default",
           "rope_scaling type '", s.type, "' is not supported (llama3 or none)");
  const double kPi = 3.14159265358979323846;
  for (int i = 0; i < half; ++i) {
    double f = std::pow(double(c.rope_theta), -2.0 * i / double(c.head_dim));
    if (llama3) {
      // Llama 3.1 scaling: high frequencies stay, low ones are divided by `factor`, and the
      // band between is interpolated smoothly in the wavelength's ratio to the old context.
      const double old_ctx = s.original_max_position_embeddings;
      const double low_wavelen = old_ctx / s.low_freq_factor;
      const double high_wavelen = old_ctx / s.high_freq_factor;
      const double wavelen = 2.0 * kPi / f;
      if (wavelen > low_wavelen) {
        f = f / s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth =
            (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    }
    out[i] = float(f);
  }
  return out;
}

LlamaModel::LlamaModel(Backend& backend, const LoadedModel& model)
    : backend_(backend), config_(model.config()) {
  const ModelConfig& c = config_;
  FS_CHECK(c.num_layers > 0 && c.hidden_size > 0 && c.num_q_heads > 0 && c.num_kv_heads > 0 &&
               c.num_q_heads % c.num_kv_heads == 0 && c.vocab_size > 0,
           "bad model config in ", model.path());
  auto w = [&](const std::string& name) { return backend_.load_weight(model.tensor(name)); };
  embed_ = w("model.embed_tokens.weight");
  final_norm_ = w("model.norm.weight");
  if (!c.tie_word_embeddings || model.has_tensor("lm_head.weight")) lm_head_ = w("lm_head.weight");
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    layers_.push_back(Layer{w(p + "input_layernorm.weight"), w(p + "self_attn.q_proj.weight"),
                            w(p + "self_attn.k_proj.weight"), w(p + "self_attn.v_proj.weight"),
                            w(p + "self_attn.o_proj.weight"),
                            w(p + "post_attention_layernorm.weight"), w(p + "mlp.gate_proj.weight"),
                            w(p + "mlp.up_proj.weight"), w(p + "mlp.down_proj.weight")});
  }
  std::vector<float> inv = rope_inv_freq(c);
  inv_freq_ = backend_.allocate(DType::kF32, {int64_t(inv.size())});
  backend_.copy_from_host(inv_freq_.tensor, inv.data());
}

Tensor LlamaModel::scratch(Buffer& buf, DType dtype, std::initializer_list<int64_t> shape) {
  Tensor t(nullptr, dtype, backend_.device(), shape);
  if (!buf.storage || buf.tensor.bytes() < t.bytes()) {
    // Grow by half again so that slowly growing batches do not reallocate every step.
    const int64_t numel = std::max<int64_t>(t.numel() + t.numel() / 2, 1);
    buf = backend_.allocate(dtype, {numel});
  }
  t.data = buf.storage.get();
  return t;
}

void LlamaModel::forward(const StepLayout& s, KvCache& cache, float* logits) {
  const ModelConfig& c = config_;
  const int64_t n = int64_t(s.tokens.size()), rows = int64_t(s.logit_rows.size());
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size, d = c.head_dim;
  const int64_t hq = c.num_q_heads, hkv = c.num_kv_heads;
  FS_CHECK(n > 0, "empty step");
  const DType i32 = DType::kI32, act = backend_.compute_dtype();

  // Step metadata to the device.
  auto upload = [&](Buffer& buf, const std::vector<int32_t>& v,
                    std::initializer_list<int64_t> shape) {
    Tensor t = scratch(buf, i32, shape);
    backend_.copy_from_host(t, v.data());
    return t;
  };
  AttentionBatch b;
  b.num_seqs = s.num_seqs;
  b.num_tokens = int(n);
  b.max_q_len = s.max_q_len;
  b.max_kv_len = s.max_kv_len;
  b.block_size = cache.config().block_size;
  b.max_blocks_per_seq = s.max_blocks_per_seq;
  Tensor tokens = upload(ws_.tokens, s.tokens, {n});
  b.positions = upload(ws_.positions, s.positions, {n});
  b.slot_mapping = upload(ws_.slots, s.slot_mapping, {n});
  b.cu_q_lens = upload(ws_.cu_q_lens, s.cu_q_lens, {s.num_seqs + 1});
  b.kv_lens = upload(ws_.kv_lens, s.kv_lens, {s.num_seqs});
  b.block_table = upload(ws_.block_table, s.block_table, {s.num_seqs, s.max_blocks_per_seq});

  Tensor x = scratch(ws_.x, act, {n, hidden});  // residual stream
  Tensor h = scratch(ws_.h, act, {n, hidden});  // normed input of a block / its output
  Tensor q = scratch(ws_.q, act, {n, hq, d});
  Tensor k = scratch(ws_.k, act, {n, hkv, d});
  Tensor v = scratch(ws_.v, act, {n, hkv, d});
  Tensor attn = scratch(ws_.attn, act, {n, hq, d});
  Tensor gate = scratch(ws_.gate, act, {n, inter});
  Tensor up = scratch(ws_.up, act, {n, inter});
  const float scale = float(1.0 / std::sqrt(double(d)));

  backend_.embedding(x, tokens, embed_.tensor);
  for (int l = 0; l < c.num_layers; ++l) {
    const Layer& L = layers_[l];
    backend_.rms_norm(h, x, L.input_norm.tensor, c.rms_norm_eps);
    backend_.matmul(q.view({n, hq * d}), h, L.wq.tensor);
    backend_.matmul(k.view({n, hkv * d}), h, L.wk.tensor);
    backend_.matmul(v.view({n, hkv * d}), h, L.wv.tensor);
    backend_.rope(q, k, b.positions, inv_freq_.tensor);
    backend_.write_kv(cache.k(l), cache.v(l), k, v, b.slot_mapping);
    backend_.paged_attention(attn, q, cache.k(l), cache.v(l), b, scale);
    backend_.matmul(h, attn.view({n, hq * d}), L.wo.tensor);
    backend_.add(x, x, h);
    backend_.rms_norm(h, x, L.post_norm.tensor, c.rms_norm_eps);
    backend_.matmul(gate, h, L.w_gate.tensor);
    backend_.matmul(up, h, L.w_up.tensor);
    backend_.swiglu(gate, gate, up);
    backend_.matmul(h, gate, L.w_down.tensor);
    backend_.add(x, x, h);
  }
  if (rows == 0) {
    backend_.synchronize();
    return;
  }
  Tensor row_ids = upload(ws_.logit_rows, s.logit_rows, {rows});
  Tensor sel = scratch(ws_.sel, act, {rows, hidden});
  backend_.gather_rows(sel, x, row_ids);
  backend_.rms_norm(sel, sel, final_norm_.tensor, c.rms_norm_eps);
  Tensor out = scratch(ws_.logits, DType::kF32, {rows, int64_t(c.vocab_size)});
  backend_.matmul(out, sel, lm_head_.storage ? lm_head_.tensor : embed_.tensor);
  backend_.copy_to_host(logits, out);
}

}  // namespace flashserve

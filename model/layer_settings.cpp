// Per-layer settings of the forward pass, fixed at load: the RoPE tables (the model's, Gemma 3's
// local one, zeros for NoPE layers), how each layer scores its keys (softmax scale, sliding
// window, Gemma 2's soft-cap), norm weights with Gemma's 1 + w folded in, and Gemma's embedding
// normalizer sqrt(hidden_size), rounded to the compute dtype as transformers rounds it to the
// model's dtype.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/llama_model.h"
#include "weights/fp8_weights.h"

namespace flashserve {

void LlamaModel::load_layer_settings() {
  const ModelConfig& c = config_;
  auto upload = [&](const std::vector<float>& v) {
    Buffer b = backend_.allocate(DType::kF32, {int64_t(v.size())});
    backend_.copy_from_host(b.tensor, v.data());
    return b;
  };
  const std::vector<float> inv = rope_inv_freq(c);
  inv_freq_ = upload(inv);
  auto has = [&](int kind) {
    return std::count(c.rope_layers.begin(), c.rope_layers.end(), kind) > 0;
  };
  if (has(0)) no_rope_ = upload(std::vector<float>(inv.size(), 0.f));  // cos 1, sin 0
  const double factor = rope_attention_factor(c);
  if (has(2)) {  // plain RoPE of the local base: the global scaling is not theirs
    FS_CHECK(factor == 1.0, c.architecture, ": local RoPE layers with a ", c.rope_scaling.type,
             " attention factor are not supported");
    ModelConfig local = c;
    local.rope_theta = c.rope_local_theta;
    local.rope_scaling = {};
    local_inv_freq_ = upload(rope_inv_freq(local));
  }
  // Granite's attention_multiplier, Gemma's query_pre_attn_scalar^-0.5, else 1/sqrt(head_dim).
  double base_scale = 1.0 / std::sqrt(double(c.head_dim));
  if (c.query_pre_attn_scalar > 0.f) base_scale = 1.0 / std::sqrt(double(c.query_pre_attn_scalar));
  if (c.attention_multiplier > 0.f) base_scale = c.attention_multiplier;
  attention_scale_ = float(rotary_dim(c) == c.head_dim ? base_scale * factor * factor : base_scale);
  windows_ = c.layer_windows;
  std::sort(windows_.begin(), windows_.end());
  windows_.erase(std::unique(windows_.begin(), windows_.end()), windows_.end());
  if (c.scale_embeddings)
    embed_scale_ = round_to(backend_.compute_dtype(), float(std::sqrt(double(c.hidden_size))));
}

const Tensor& LlamaModel::layer_inv_freq(int layer) const {
  const int kind = config_.rope_layers.empty() ? 1 : config_.rope_layers[size_t(layer)];
  return kind == 0 ? no_rope_.tensor : kind == 2 ? local_inv_freq_.tensor : inv_freq_.tensor;
}

AttentionScoring LlamaModel::layer_scoring(int layer) const {
  const std::vector<int>& w = config_.layer_windows;
  const Buffer& sinks = layers_[size_t(layer)].sinks;  // gpt-oss's (attention_sinks)
  return {.scale = attention_scale_,
          .window = w.empty() ? 0 : w[size_t(layer)],
          .softcap = config_.attn_logit_softcapping,
          .sinks = sinks.storage ? sinks.tensor.as<float>() : nullptr};
}

Buffer LlamaModel::load_norm(const LoadedModel& model, const std::string& name) {
  const TensorView& full = model.tensor(name);
  if (!config_.norm_weight_plus_one) return load_shard(full, name);
  std::vector<char> storage;
  std::vector<float> w = weight_values(shard_view(full, name, storage));
  for (float& v : w) v += 1.f;  // in f32, as transformers' Gemma norms compute 1 + w
  TensorView plus_one = full;
  plus_one.dtype = DType::kF32;
  plus_one.shape = {int64_t(w.size())};
  plus_one.data = w.data();
  return backend_.load_weight(plus_one);
}

}  // namespace flashserve

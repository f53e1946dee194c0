// Required tensor names and shapes of the Llama family (see weights/loaded_model.h for the list;
// the family flags add q/k/v biases, q/k norms, post-norms, Gemma's sandwich norms or fused
// projections), the fused projections' split, and config checks.
#include "weights/llama_tensors.h"

#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace flashserve {

TensorShapes llama_tensor_shapes(const ModelConfig& c) {
  const int64_t h = c.hidden_size, inter = c.intermediate_size, v = c.vocab_size;
  const int64_t q = int64_t(c.num_q_heads) * c.head_dim, kv = int64_t(c.num_kv_heads) * c.head_dim;
  TensorShapes out;
  out.push_back({"model.embed_tokens.weight", {v, h}});
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = str_cat("model.layers.", i, ".");
    if (!c.post_norms) out.push_back({p + "input_layernorm.weight", {h}});
    if (c.fused_projections) {
      out.push_back({p + "self_attn.qkv_proj.weight", {q + 2 * kv, h}});
    } else {
      out.push_back({p + "self_attn.q_proj.weight", {q, h}});
      out.push_back({p + "self_attn.k_proj.weight", {kv, h}});
      out.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    }
    if (c.qkv_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {q}});
      out.push_back({p + "self_attn.k_proj.bias", {kv}});
      out.push_back({p + "self_attn.v_proj.bias", {kv}});
    }
    if (c.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
      out.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
    }
    if (c.qk_norm_full) {
      out.push_back({p + "self_attn.q_norm.weight", {q}});
      out.push_back({p + "self_attn.k_norm.weight", {kv}});
    }
    out.push_back({p + "self_attn.o_proj.weight", {h, q}});
    if (c.o_bias) out.push_back({p + "self_attn.o_proj.bias", {h}});
    if (c.attention_sinks) out.push_back({p + "self_attn.sinks", {c.num_q_heads}});
    out.push_back({p + "post_attention_layernorm.weight", {h}});
    if (c.sandwich_norms) out.push_back({p + "pre_feedforward_layernorm.weight", {h}});
    if (c.post_norms || c.sandwich_norms)
      out.push_back({p + "post_feedforward_layernorm.weight", {h}});
    if (c.moe.sparse(i)) {
      const int64_t e_inter = c.moe.intermediate, s_inter = c.moe.shared_intermediate;
      const int64_t experts = c.moe.num_experts;
      out.push_back({moe_router_name(c, i), {experts, h}});
      if (mxfp4_experts(c)) {
        const std::string gu = moe_stacked_name(i, ExpertProj::kGate);
        const std::string down = moe_stacked_name(i, ExpertProj::kDown);
        out.push_back({moe_router_bias_name(i), {experts}});
        out.push_back({gu, {experts, 2 * e_inter, h}});
        out.push_back({gu + "_bias", {experts, 2 * e_inter}});
        out.push_back({down, {experts, h, e_inter}});
        out.push_back({down + "_bias", {experts, h}});
        continue;
      }
      for (int e = 0; e < c.moe.num_experts; ++e) {
        out.push_back({moe_expert_name(c, i, e, ExpertProj::kGate), {e_inter, h}});
        out.push_back({moe_expert_name(c, i, e, ExpertProj::kUp), {e_inter, h}});
        out.push_back({moe_expert_name(c, i, e, ExpertProj::kDown), {h, e_inter}});
      }
      if (s_inter > 0) {
        out.push_back({moe_shared_name(i, ExpertProj::kGate), {s_inter, h}});
        out.push_back({moe_shared_name(i, ExpertProj::kUp), {s_inter, h}});
        out.push_back({moe_shared_name(i, ExpertProj::kDown), {h, s_inter}});
        out.push_back({moe_shared_gate_name(i), {1, h}});
      }
      continue;
    }
    if (c.fused_projections) {
      out.push_back({p + "mlp.gate_up_proj.weight", {2 * inter, h}});
    } else {
      out.push_back({p + "mlp.gate_proj.weight", {inter, h}});
      out.push_back({p + "mlp.up_proj.weight", {inter, h}});
    }
    out.push_back({p + "mlp.down_proj.weight", {h, inter}});
  }
  out.push_back({"model.norm.weight", {h}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {v, h}});
  return out;
}

namespace {
bool mixtral_names(const ModelConfig& c) { return c.architecture == "MixtralForCausalLM"; }
const char* qwen_proj(ExpertProj w) {
  return w == ExpertProj::kGate ? "gate_proj" : w == ExpertProj::kUp ? "up_proj" : "down_proj";
}
}  // namespace

std::string moe_router_name(const ModelConfig& c, int layer) {
  if (mxfp4_experts(c)) return str_cat("model.layers.", layer, ".mlp.router.weight");
  return str_cat("model.layers.", layer, mixtral_names(c) ? ".block_sparse_moe" : ".mlp",
                 ".gate.weight");
}

std::string moe_router_bias_name(int layer) {
  return str_cat("model.layers.", layer, ".mlp.router.bias");
}

std::string moe_stacked_name(int layer, ExpertProj which) {
  FS_CHECK(which != ExpertProj::kUp, "gpt-oss's up rows are interleaved with gate's (kGate)");
  return str_cat("model.layers.", layer, ".mlp.experts.",
                 which == ExpertProj::kGate ? "gate_up_proj" : "down_proj");
}

bool mxfp4_experts(const ModelConfig& c) { return c.architecture == "GptOssForCausalLM"; }

std::string moe_expert_name(const ModelConfig& c, int layer, int expert, ExpertProj which) {
  if (mixtral_names(c)) {  // w1: gate, w3: up, w2: down
    const char* w = which == ExpertProj::kGate ? "w1" : which == ExpertProj::kUp ? "w3" : "w2";
    return str_cat("model.layers.", layer, ".block_sparse_moe.experts.", expert, ".", w, ".weight");
  }
  return str_cat("model.layers.", layer, ".mlp.experts.", expert, ".", qwen_proj(which), ".weight");
}

std::string moe_shared_name(int layer, ExpertProj which) {
  return str_cat("model.layers.", layer, ".mlp.shared_expert.", qwen_proj(which), ".weight");
}

std::string moe_shared_gate_name(int layer) {
  return str_cat("model.layers.", layer, ".mlp.shared_expert_gate.weight");
}

MoeTensor moe_tensor(const std::string& name) {
  if (name.rfind("model.layers.", 0) != 0) return {};
  const bool qwen = name.find(".mlp.experts.") != std::string::npos;
  const bool mixtral = name.find(".block_sparse_moe.experts.") != std::string::npos;
  const bool shared = name.find(".mlp.shared_expert.") != std::string::npos;
  for (ExpertProj w : {ExpertProj::kGate, ExpertProj::kUp, ExpertProj::kDown}) {
    if ((qwen || shared) && name.ends_with(str_cat(".", qwen_proj(w), ".weight")))
      return {shared ? MoeRole::kShared : MoeRole::kExpert, w};
    const char* m = w == ExpertProj::kGate ? ".w1.weight" : w == ExpertProj::kUp ? ".w3.weight"
                                                                                 : ".w2.weight";
    if (mixtral && name.ends_with(m)) return {MoeRole::kExpert, w};
  }
  return {};
}

void check_moe_names(const ModelConfig& c, const std::vector<std::string>& names,
                     const std::string& source) {
  if (c.moe.num_experts == 0 || mxfp4_experts(c)) return;  // gpt-oss's: their shapes say it all
  for (const std::string& name : names) {
    const size_t at = name.find("layers.");
    if (at == std::string::npos) continue;
    const char* p = name.c_str() + at + 7;
    char* end = nullptr;
    const long layer = std::strtol(p, &end, 10);
    if (end == p || *end != '.') continue;
    const std::string rest = end + 1;  // "mlp.experts.3.up_proj.weight"
    if (rest.ends_with("gate.e_score_correction_bias") || rest.ends_with("mlp.gate.bias") ||
        rest.ends_with("block_sparse_moe.gate.bias"))
      FS_THROW(source, ": tensor '", name, "': a router bias (expert score correction) is not "
               "supported; flashserve's experts route by softmax top-k of the router logits alone");
    const size_t e = rest.find("experts.");
    const bool moe_block = rest.rfind("mlp.", 0) == 0 || rest.rfind("block_sparse_moe.", 0) == 0;
    if (e == std::string::npos || !moe_block) continue;
    const char* q = rest.c_str() + e + 8;
    const long expert = std::strtol(q, &end, 10);
    if (end == q || *end != '.')
      FS_THROW(source, ": tensor '", name, "': experts stored fused (one tensor for every expert) "
               "are not supported; save the checkpoint with one tensor per expert "
               "(experts.{e}.gate_proj.weight, as transformers 4 does)");
    if (rest.ends_with(".bias"))
      FS_THROW(source, ": tensor '", name, "': expert biases are not supported");
    if (layer >= c.num_layers) continue;  // an extra layer: ignored as other extra tensors are
    if (!c.moe.sparse(int(layer)))
      FS_THROW(source, ": tensor '", name, "': layer ", layer, " holds experts but config.json "
               "makes it a dense MLP layer (mlp_only_layers, decoder_sparse_step)");
    if (expert >= c.moe.num_experts)
      FS_THROW(source, ": tensor '", name, "' is expert ", expert, " but config.json has ",
               c.moe.num_experts, " experts (", c.architecture == "MixtralForCausalLM"
               ? "num_local_experts" : "num_experts", ")");
  }
}

void split_fused_projections(const ModelConfig& c, std::map<std::string, TensorView>* tensors) {
  if (!c.fused_projections) return;
  const int64_t q = int64_t(c.num_q_heads) * c.head_dim, kv = int64_t(c.num_kv_heads) * c.head_dim;
  const int64_t inter = c.intermediate_size;
  // A row range of a [rows, cols] weight is a contiguous view (FP8: with its rows' scales).
  auto part = [&](const std::string& fused, const std::string& name, int64_t begin, int64_t rows) {
    const TensorView& f = tensors->at(fused);
    TensorView t = f;
    t.shape = {rows, f.shape[1]};
    t.data = static_cast<const char*>(f.data) + size_t(begin * f.shape[1]) * dtype_size(f.dtype);
    if (f.row_scale) t.row_scale = f.row_scale + begin;
    (*tensors)[name] = t;
  };
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = str_cat("model.layers.", i, ".");
    const std::string qkv = p + "self_attn.qkv_proj.weight", gu = p + "mlp.gate_up_proj.weight";
    part(qkv, p + "self_attn.q_proj.weight", 0, q);
    part(qkv, p + "self_attn.k_proj.weight", q, kv);
    part(qkv, p + "self_attn.v_proj.weight", q + kv, kv);
    part(gu, p + "mlp.gate_proj.weight", 0, inter);
    part(gu, p + "mlp.up_proj.weight", inter, inter);
  }
}

namespace {
void validate_moe(const ModelConfig& c, const std::string& source) {
  const MoeConfig& m = c.moe;
  if (m.num_experts == 0) {
    if (!m.sparse_layers.empty()) FS_THROW(source, ": sparse layers without experts");
    return;
  }
  // 4096 experts: far above any published model (Qwen3: 128, DeepSeek-V3: 256, Kimi K2: 384).
  if (m.num_experts < 0 || m.num_experts > 4096)
    FS_THROW(source, ": num_experts ", m.num_experts, " must be in 1..4096");
  if (m.top_k < 1 || m.top_k > m.num_experts)
    FS_THROW(source, ": num_experts_per_tok ", m.top_k, " must be in 1..num_experts (",
             m.num_experts, ")");
  if (m.intermediate <= 0 || m.intermediate > (1 << 22))
    FS_THROW(source, ": moe_intermediate_size ", m.intermediate, " must be in 1..", 1 << 22);
  if (m.shared_intermediate < 0 || m.shared_intermediate > (1 << 22))
    FS_THROW(source, ": shared_expert_intermediate_size ", m.shared_intermediate,
             " must be in 0..", 1 << 22);
  if (int(m.sparse_layers.size()) != c.num_layers)
    FS_THROW(source, ": ", m.sparse_layers.size(), " sparse-layer flags for ", c.num_layers,
             " layers");
  if (c.fused_projections || c.post_norms || c.sandwich_norms)
    FS_THROW(source, ": experts are not supported for ", c.architecture);
}
}  // namespace

void validate_config(const ModelConfig& c, const std::string& source) {
  auto positive = [&](int value, const char* name) {
    if (value <= 0) FS_THROW(source, ": ", name, " must be positive, got ", value);
  };
  positive(c.hidden_size, "hidden_size");
  positive(c.intermediate_size, "intermediate_size");
  positive(c.num_layers, "num_hidden_layers");
  positive(c.num_q_heads, "num_attention_heads");
  positive(c.num_kv_heads, "num_key_value_heads");
  positive(c.head_dim, "head_dim");
  positive(c.vocab_size, "vocab_size");
  positive(c.max_model_len, "max_position_embeddings");
  // Far above any real Llama (405B: hidden 16384, 126 layers), low enough that sizes never
  // overflow and a corrupt config cannot make the loader build billions of tensor names.
  auto at_most = [&](int value, int limit, const char* name) {
    if (value > limit) FS_THROW(source, ": ", name, " ", value, " is implausibly large (> ", limit, ")");
  };
  at_most(c.hidden_size, 1 << 20, "hidden_size");
  at_most(c.intermediate_size, 1 << 22, "intermediate_size");
  at_most(c.num_layers, 4096, "num_hidden_layers");
  at_most(c.num_q_heads, 4096, "num_attention_heads");
  at_most(c.head_dim, 4096, "head_dim");
  at_most(c.vocab_size, 1 << 24, "vocab_size");
  if (c.num_q_heads % c.num_kv_heads != 0)
    FS_THROW(source, ": num_attention_heads ", c.num_q_heads,
             " is not a multiple of num_key_value_heads ", c.num_kv_heads);
  if (c.head_dim % 2 != 0) FS_THROW(source, ": head_dim ", c.head_dim, " must be even for RoPE");
  if (!(c.rms_norm_eps > 0.f)) FS_THROW(source, ": rms_norm_eps must be positive");
  if (!(c.rope_theta > 0.f)) FS_THROW(source, ": rope_theta must be positive");
  if (c.eos_token_ids.empty()) FS_THROW(source, ": no eos_token_id");
  const int rotary = int(c.head_dim * double(c.partial_rotary_factor));
  if (!(c.partial_rotary_factor > 0.f && c.partial_rotary_factor <= 1.f) || rotary < 2 ||
      rotary % 2 != 0)
    FS_THROW(source, ": partial_rotary_factor ", c.partial_rotary_factor, " of head_dim ",
             c.head_dim, " does not give an even number of rotated dims");
  const RopeScaling& r = c.rope_scaling;
  if (r.type == "longrope" && (int(r.short_factor.size()) != rotary / 2 ||
                               int(r.long_factor.size()) != rotary / 2))
    FS_THROW(source, ": longrope short_factor and long_factor need ", rotary / 2,
             " entries each (rotated dims / 2), not ", r.short_factor.size(), " and ",
             r.long_factor.size());
  if (!c.rope_layers.empty() && int(c.rope_layers.size()) != c.num_layers)
    FS_THROW(source, ": no_rope_layers has ", c.rope_layers.size(), " entries for ", c.num_layers,
             " layers");
  for (int r : c.rope_layers)
    if (r < 0 || r > 2 || (r == 2 && !(c.rope_local_theta > 0.f)))
      FS_THROW(source, ": a layer's RoPE must be none, global or local (with a local base)");
  if (!c.layer_windows.empty() && int(c.layer_windows.size()) != c.num_layers)
    FS_THROW(source, ": ", c.layer_windows.size(), " sliding windows for ", c.num_layers, " layers");
  for (int w : c.layer_windows)
    if (w < 0) FS_THROW(source, ": sliding_window must be positive, got ", w);
  validate_moe(c, source);
  for (float v : {c.query_pre_attn_scalar, c.attn_logit_softcapping, c.final_logit_softcapping})
    if (!(v >= 0.f) || !std::isfinite(v))
      FS_THROW(source, ": query_pre_attn_scalar and the soft-caps must be positive numbers");
}

}  // namespace flashserve

// config.json parsing: the architecture (one of the Llama family's, table kFamilies), required
// sizes, optional fields with the HF config classes' defaults, RoPE scaling
// (weights/rope_config.h), the fields only some families have (read_family_fields), sliding
// windows and Gemma's attention settings (weights/attention_config.h), eos_token_id given as an
// int or a list, and clear errors for the settings the forward pass does not implement
// (check_unsupported).
#include "weights/hf_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "weights/attention_config.h"
#include "weights/llama_tensors.h"
#include "weights/rope_config.h"
#include "weights/quant_config.h"

namespace flashserve {

namespace {

using nlohmann::json;

int get_int(const json& j, const char* key, const std::string& path, const int* fallback) {
  if (!j.contains(key) || j[key].is_null()) {
    if (fallback) return *fallback;
    FS_THROW(path, ": missing \"", key, "\"");
  }
  const json& v = j[key];
  if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)
    FS_THROW(path, ": \"", key, "\" must be an integer");
  return v.get<int>();
}

float get_float(const json& j, const char* key, const std::string& path, float fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number()) FS_THROW(path, ": \"", key, "\" must be a number");
  return j[key].get<float>();
}

// The supported Hugging Face architectures: all Llama-shaped decoders (pre-norm, RoPE, GQA,
// SwiGLU); each row says how one differs. A new member of the family is a new row here plus,
// if it needs a new op, the forward pass in model/llama_model.cpp.
struct Family {
  const char* architecture;  // config.json "architectures" entry (the transformers class)
  const char* model_type;    // config.json "model_type", used when "architectures" is absent
  bool qkv_bias;             // q/k/v projections always carry a bias
  bool qk_norm;              // per-head RMSNorm of q and k before RoPE
  int default_head_dim;      // when config.json has no head_dim: 0 = hidden / heads
  bool qk_norm_full = false;  // RMSNorm over the whole q and k projections (Olmo2)
  bool post_norms = false;    // norms after the blocks' outputs instead of before (Olmo2)
  bool fused_projections = false;  // qkv_proj and gate_up_proj in the checkpoint (Phi3)
  bool gemma = false;  // sandwich norms, (1 + w) norms, GeGLU, scaled embeddings (Gemma 2/3)
  bool moe = false;    // mixture-of-experts layers (read_moe_config)
  // gpt-oss: q/k/v and o biases (attention_bias), attention sinks, MXFP4 experts with biases
  // and the clamped SwiGLU, sliding windows by layer_types.
  bool gpt_oss = false;
};
constexpr Family kFamilies[] = {
    {"LlamaForCausalLM", "llama", false, false, 0},
    {"MistralForCausalLM", "mistral", false, false, 0},
    {"Qwen2ForCausalLM", "qwen2", true, false, 0},
    {"Qwen3ForCausalLM", "qwen3", false, true, 128},
    {"Phi3ForCausalLM", "phi3", false, false, 0, false, false, true},
    {"GraniteForCausalLM", "granite", false, false, 0},
    {"Olmo2ForCausalLM", "olmo2", false, false, 0, true, true, false},
    {"SmolLM3ForCausalLM", "smollm3", false, false, 0},
    {"Gemma2ForCausalLM", "gemma2", false, false, 256, false, false, false, true},
    {"Gemma3ForCausalLM", "gemma3_text", false, true, 256, false, false, false, true},
    {"Qwen2MoeForCausalLM", "qwen2_moe", true, false, 0, false, false, false, false, true},
    {"Qwen3MoeForCausalLM", "qwen3_moe", false, true, 0, false, false, false, false, true},
    {"MixtralForCausalLM", "mixtral", false, false, 0, false, false, false, false, true},
    {"GptOssForCausalLM", "gpt_oss", true, false, 64, false, false, false, false, true, true},
};

// Architectures people ask for that need what the forward pass does not have: the start-up
// error says what.
constexpr std::pair<const char*, const char*> kUnsupportedMoe[] = {
    {"DeepseekV2ForCausalLM", "DeepSeek's grouped top-k routing (n_group, topk_group) and "
                              "multi-head latent attention (MLA, kv_lora_rank)"},
    {"DeepseekV3ForCausalLM", "DeepSeek's grouped top-k routing (n_group, topk_group), its "
                              "expert score-correction bias and multi-head latent attention "
                              "(MLA, kv_lora_rank)"},
    {"Glm4MoeForCausalLM", "routing with an expert score-correction bias (e_score_correction_bias)"},
    {"Qwen3NextForCausalLM", "linear-attention (Gated DeltaNet) layers"},
    {"Llama4ForCausalLM", "sigmoid top-1 routing and chunked attention"},
};

void set_family(ModelConfig& c, const Family& f) {
  c.architecture = f.architecture;
  c.qkv_bias = f.qkv_bias;
  c.qk_norm = f.qk_norm;
  c.qk_norm_full = f.qk_norm_full;
  c.post_norms = f.post_norms;
  c.fused_projections = f.fused_projections;
  c.sandwich_norms = c.norm_weight_plus_one = c.gelu_mlp = c.scale_embeddings = f.gemma;
  c.o_bias = c.attention_sinks = f.gpt_oss;
  if (f.gpt_oss) {  // its experts are MXFP4 (read_hf_config reads the config's own setting)
    c.quant.format = QuantFormat::kMxfp4;
    c.quant_method = c.quant.method = "mxfp4";
  }
}

// `name` is the family's causal-LM class or its bare backbone (Qwen3ForCausalLM: Qwen3Model), the
// class embedding checkpoints such as Qwen3-Embedding are saved from: the same layers, no lm_head.
bool names_family(const std::string& name, const Family& f) {
  const std::string causal = f.architecture, suffix = "ForCausalLM";
  return name == causal || name == causal.substr(0, causal.size() - suffix.size()) + "Model";
}

const Family& find_family(const json& j, const std::string& path) {
  if (j.contains("architectures") && !j["architectures"].is_null()) {
    const json& a = j["architectures"];
    if (a.is_array())
      for (const auto& name : a)
        for (const Family& f : kFamilies)
          if (name.is_string() && names_family(name.get<std::string>(), f)) return f;
    if (a.is_array())
      for (const auto& name : a)
        for (const auto& [arch, what] : kUnsupportedMoe)
          if (name == arch)
            FS_THROW(path, ": architecture ", arch, " is not supported: ", what, " (supported: ",
                     supported_architectures(), ")");
    FS_THROW(path, ": unsupported architecture ", a.dump(), " (supported: ",
             supported_architectures(), ")");
  }
  if (j.contains("model_type") && j["model_type"].is_string())
    for (const Family& f : kFamilies)
      if (j["model_type"].get<std::string>() == f.model_type) return f;
  FS_THROW(path, ": unknown architecture: no \"architectures\" and model_type ",
           j.contains("model_type") ? j["model_type"].dump() : "(missing)",
           " is none of the supported ones (", supported_architectures(), ")");
}

bool get_bool(const json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return false;
  if (!j[key].is_boolean()) FS_THROW(path, ": \"", key, "\" must be true or false");
  return j[key].get<bool>();
}

// Settings of these architectures that would change the forward pass in ways flashserve does
// not implement: each is a start-up error naming the setting, never silently wrong logits.
void check_unsupported(const json& j, const Family& f, const ModelConfig& c,
                       const std::string& path) {
  const std::string arch = f.architecture;
  const char* act = f.gemma ? "gelu_pytorch_tanh" : "silu";  // the one each family implements
  for (const char* key : {"hidden_act", "hidden_activation"})
    if (j.contains(key) && !j[key].is_null() && j[key] != act)
      FS_THROW(path, ": ", key, " ", j[key].dump(), " is not supported for ", arch, " (only \"",
               act, "\")");
  // Qwen2's q/k/v biases are part of the architecture; elsewhere attention_bias adds biases to
  // q/k/v and o, which are not implemented.
  if (!f.qkv_bias && get_bool(j, "attention_bias", path))  // (gpt-oss: read_gpt_oss)
    FS_THROW(path, ": attention_bias true (biases on the attention projections) is not supported "
                   "for ", arch);
  if (get_bool(j, "mlp_bias", path))
    FS_THROW(path, ": mlp_bias true (biases on the MLP projections) is not supported");
}

// quantization_config (weights/quant_config.h): the format the projections are stored in.
std::string read_quantization(const json& j, const std::string& path, QuantConfig* quant) {
  *quant = read_quant_config(j, path);
  return quant->method;
}

// eos_token_id as an int or a list of ints; nullopt when absent or null.
std::optional<std::vector<int>> read_eos_ids(const json& j, const std::string& path) {
  if (!j.contains("eos_token_id") || j["eos_token_id"].is_null()) return std::nullopt;
  const json& v = j["eos_token_id"];
  std::vector<int> ids;
  for (const auto& e : v.is_array() ? v : json::array({v})) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX)
      FS_THROW(path, ": \"eos_token_id\" entries must be non-negative integers");
    ids.push_back(e.get<int>());
  }
  return ids;
}

json read_json_file(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) FS_THROW(path, ": cannot open ", what);
  std::stringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::exception& e) {
    FS_THROW(path, ": not valid JSON: ", e.what());
  }
  if (!j.is_object()) FS_THROW(path, ": not a JSON object");
  return j;
}

}  // namespace

void read_generation_config(const std::string& path, ModelConfig* c) {
  const json j = read_json_file(path, "generation_config.json");
  if (auto eos = read_eos_ids(j, path); eos && !eos->empty()) {
    if (!c->eos_from_config) c->eos_token_ids.clear();  // the built-in default was nobody's choice
    for (int id : *eos)
      if (std::find(c->eos_token_ids.begin(), c->eos_token_ids.end(), id) == c->eos_token_ids.end())
        c->eos_token_ids.push_back(id);
    c->eos_from_config = true;
  }
  GenerationDefaults& g = c->generation;
  auto number = [&](const char* key, double lo, double hi, bool open_lo) -> std::optional<float> {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    const float x = get_float(j, key, path, 0.f);
    if (!(open_lo ? x > lo : x >= lo) || !(x <= hi))
      FS_THROW(path, ": \"", key, "\" is out of range: ", j[key].dump());
    return x;
  };
  g.temperature = number("temperature", 0, 100, false);
  g.top_p = number("top_p", 0, 1, true);
  g.repetition_penalty = number("repetition_penalty", 0, 100, true);
  if (j.contains("top_k") && !j["top_k"].is_null()) {
    const int zero = 0;
    g.top_k = get_int(j, "top_k", path, &zero);
    if (*g.top_k < 0) FS_THROW(path, ": \"top_k\" must be >= 0");
  }
}

namespace {

// The settings only some families read: Phi3's partial rotary factor, Granite's multipliers,
// SmolLM3's NoPE layers; and the context YaRN serves.
void read_family_fields(const json& j, const Family& f, ModelConfig& c, const std::string& path) {
  const std::string arch = f.architecture;
  c.partial_rotary_factor = get_float(j, "partial_rotary_factor", path, 1.f);
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object())  // transformers >= 5
    c.partial_rotary_factor = get_float(j["rope_parameters"], "partial_rotary_factor",
                                        path + " rope_parameters", c.partial_rotary_factor);
  if (c.partial_rotary_factor != 1.f && arch != "Phi3ForCausalLM")
    FS_THROW(path, ": partial_rotary_factor ", c.partial_rotary_factor, " is not supported for ",
             arch, " (only Phi3ForCausalLM rotates part of each head)");
  if (arch == "GraniteForCausalLM") {
    c.embedding_multiplier = get_float(j, "embedding_multiplier", path, 1.f);
    c.residual_multiplier = get_float(j, "residual_multiplier", path, 1.f);
    c.attention_multiplier = get_float(j, "attention_multiplier", path, 1.f);  // GraniteConfig's
    c.logits_scaling = get_float(j, "logits_scaling", path, 1.f);
    for (float v : {c.embedding_multiplier, c.residual_multiplier, c.attention_multiplier,
                    c.logits_scaling})
      if (!(v > 0.f) || !std::isfinite(v))
        FS_THROW(path, ": Granite's embedding_multiplier, residual_multiplier, "
                       "attention_multiplier and logits_scaling must be positive");
  }
  if (arch == "SmolLM3ForCausalLM") {
    // no_rope_layers[i] is 1 where layer i uses RoPE; by default every interval-th layer has none.
    const int every = 4;
    const int interval = get_int(j, "no_rope_layer_interval", path, &every);
    if (j.contains("no_rope_layers") && !j["no_rope_layers"].is_null()) {
      if (!j["no_rope_layers"].is_array()) FS_THROW(path, ": \"no_rope_layers\" must be a list");
      for (const json& v : j["no_rope_layers"]) {
        if (!v.is_number_integer() || (v != 0 && v != 1))
          FS_THROW(path, ": \"no_rope_layers\" entries must be 0 or 1");
        c.rope_layers.push_back(v.get<int>());
      }
    } else {
      if (interval <= 0) FS_THROW(path, ": \"no_rope_layer_interval\" must be positive");
      for (int i = 0; i < c.num_layers; ++i) c.rope_layers.push_back((i + 1) % interval != 0);
    }
  }
  const RopeScaling& r = c.rope_scaling;
  // YaRN stretches the pretrained context by `factor`: the served context is that long (a
  // config may keep max_position_embeddings at the pretrained value, as Qwen 2.5's does).
  if (r.type == "yarn") {
    const double stretched = r.original_max_position_embeddings * double(r.factor);
    c.max_model_len = int(std::max(double(c.max_model_len), std::min(double(INT32_MAX),
                                                                     std::round(stretched))));
  }
}

// A setting of a mixture-of-experts config that the routing here does not implement: an error
// naming it when the config sets it to anything but `off` (null counts as off).
void refuse_moe_setting(const json& j, const char* key, const json& off, const char* what,
                        const std::string& path) {
  if (!j.contains(key) || j[key].is_null() || j[key] == off) return;
  FS_THROW(path, ": ", key, " ", j[key].dump(), " is not supported (", what, "; flashserve's "
           "experts route by softmax top-k alone)");
}

// The experts of Qwen2-MoE, Qwen3-MoE and Mixtral with their config classes' defaults; which
// layers are sparse (Qwen: every decoder_sparse_step-th layer not in mlp_only_layers; Mixtral:
// all); and errors for routing settings of other MoE families.
void read_moe_config(const json& j, ModelConfig& c, const std::string& path) {
  const std::string arch = c.architecture;
  const bool mixtral = arch == "MixtralForCausalLM", qwen2 = arch == "Qwen2MoeForCausalLM";
  MoeConfig& m = c.moe;
  const int experts = mixtral ? 8 : qwen2 ? 60 : 128, top_k = mixtral ? 2 : qwen2 ? 4 : 8;
  const int inter = qwen2 ? 1408 : 768, shared = 5632, step = 1;
  m.num_experts = get_int(j, mixtral ? "num_local_experts" : "num_experts", path, &experts);
  m.top_k = get_int(j, "num_experts_per_tok", path, &top_k);
  m.intermediate = mixtral ? c.intermediate_size : get_int(j, "moe_intermediate_size", path, &inter);
  m.renormalize = mixtral || get_bool(j, "norm_topk_prob", path);
  const int zero = 0;
  m.shared_intermediate = qwen2 ? get_int(j, "shared_expert_intermediate_size", path, &shared) : 0;
  if (!qwen2 && get_int(j, "shared_expert_intermediate_size", path, &zero) > 0)
    FS_THROW(path, ": shared_expert_intermediate_size is not supported for ", arch,
             " (only Qwen2MoeForCausalLM has a shared expert)");
  refuse_moe_setting(j, "router_jitter_noise", 0, "router jitter", path);
  refuse_moe_setting(j, "n_group", 1, "DeepSeek's grouped routing", path);
  refuse_moe_setting(j, "topk_group", 1, "DeepSeek's grouped routing", path);
  refuse_moe_setting(j, "topk_method", "greedy", "routing other than greedy top-k", path);
  refuse_moe_setting(j, "scoring_func", "softmax", "router scores other than softmax", path);
  refuse_moe_setting(j, "routed_scaling_factor", 1, "a factor on the routed experts", path);
  refuse_moe_setting(j, "n_shared_experts", 0, "shared experts other than Qwen2-MoE's", path);
  refuse_moe_setting(j, "first_k_dense_replace", 0, "DeepSeek's dense first layers", path);
  refuse_moe_setting(j, "kv_lora_rank", 0, "multi-head latent attention (MLA)", path);
  refuse_moe_setting(j, "q_lora_rank", 0, "multi-head latent attention (MLA)", path);
  refuse_moe_setting(j, "router_bias", false, "a bias on the router", path);
  refuse_moe_setting(j, "moe_router_bias", false, "a bias on the router", path);
  if (m.num_experts == 0) return;  // transformers builds dense MLPs everywhere
  std::vector<int> dense;
  if (!mixtral && j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
    if (!j["mlp_only_layers"].is_array()) FS_THROW(path, ": \"mlp_only_layers\" must be a list");
    for (const json& v : j["mlp_only_layers"]) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c.num_layers)
        FS_THROW(path, ": \"mlp_only_layers\" entries must be layer numbers 0..",
                 c.num_layers - 1, ", got ", v.dump());
      dense.push_back(v.get<int>());
    }
  }
  const int every = mixtral ? 1 : get_int(j, "decoder_sparse_step", path, &step);
  if (every < 1) FS_THROW(path, ": \"decoder_sparse_step\" must be >= 1, got ", every);
  m.sparse_layers.assign(size_t(c.num_layers), 0);
  for (int i = 0; i < c.num_layers; ++i)
    m.sparse_layers[size_t(i)] =
        std::find(dense.begin(), dense.end(), i) == dense.end() && (i + 1) % every == 0;
}

// gpt-oss (GptOssConfig's defaults): q/k/v and o biases unless attention_bias is false; every
// layer's MLP is num_local_experts experts (of intermediate_size) with router and expert biases
// and the clamped SwiGLU; routing is softmax over the top num_experts_per_tok logits, which is
// the renormalised top-k of the softmax. The experts must be MXFP4 (quantization_config
// "mxfp4"), as the published checkpoints are.
void read_gpt_oss(const json& j, ModelConfig& c, const std::string& path) {
  c.qkv_bias = c.o_bias = !j.contains("attention_bias") || j["attention_bias"].is_null() ||
                          get_bool(j, "attention_bias", path);
  MoeConfig& m = c.moe;
  const int experts = 128, top_k = 4;
  m.num_experts = get_int(j, "num_local_experts", path, &experts);
  m.top_k = get_int(j, "num_experts_per_tok", path, &top_k);
  m.intermediate = c.intermediate_size;
  m.renormalize = true;
  m.swiglu_limit = get_float(j, "swiglu_limit", path, 7.f);
  if (!(m.swiglu_limit > 0.f) || !std::isfinite(m.swiglu_limit))
    FS_THROW(path, ": \"swiglu_limit\" must be a positive number");
  m.sparse_layers.assign(size_t(c.num_layers), 1);
  if (c.quant.format != QuantFormat::kMxfp4)
    FS_THROW(path, ": ", c.architecture, " needs its experts in MXFP4 (quantization_config "
             "{\"quant_method\": \"mxfp4\"}, as the published checkpoints are); ",
             c.quant_method.empty() ? "bf16 experts" : c.quant_method + " weights",
             " are not supported for it");
}

}  // namespace

ModelConfig read_hf_config(const std::string& path) {
  const json j = read_json_file(path, "config.json");
  const Family& family = find_family(j, path);

  ModelConfig c;
  set_family(c, family);
  c.hidden_size = get_int(j, "hidden_size", path, nullptr);
  c.intermediate_size = get_int(j, "intermediate_size", path, nullptr);
  c.num_layers = get_int(j, "num_hidden_layers", path, nullptr);
  c.num_q_heads = get_int(j, "num_attention_heads", path, nullptr);
  c.num_kv_heads = get_int(j, "num_key_value_heads", path, &c.num_q_heads);
  const int derived_head_dim = family.default_head_dim ? family.default_head_dim
                               : c.num_q_heads > 0     ? c.hidden_size / c.num_q_heads
                                                       : 0;
  c.head_dim = get_int(j, "head_dim", path, &derived_head_dim);
  c.vocab_size = get_int(j, "vocab_size", path, nullptr);
  const int default_max_model_len = 2048, default_bos = 1;
  c.max_model_len = get_int(j, "max_position_embeddings", path, &default_max_model_len);
  c.rms_norm_eps = get_float(j, "rms_norm_eps", path, 1e-6f);
  c.rope_theta = get_float(j, "rope_theta", path, 10000.f);
  c.rope_scaling = read_rope_scaling(j, path, "rope_scaling");
  // transformers >= 5 saves RoPE as "rope_parameters" {rope_theta, rope_type, factor, ...},
  // often without the top-level keys; when present it is the source of truth.
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    const json& rp = j["rope_parameters"];
    if (!rp.is_object()) FS_THROW(path, ": \"rope_parameters\" must be an object or null");
    c.rope_theta = get_float(rp, "rope_theta", path + " rope_parameters", c.rope_theta);
    c.rope_scaling = read_rope_scaling(j, path, "rope_parameters");
  }
  c.tie_word_embeddings = family.gemma;  // Gemma's config classes tie by default
  if (j.contains("tie_word_embeddings") && !j["tie_word_embeddings"].is_null()) {
    if (!j["tie_word_embeddings"].is_boolean())
      FS_THROW(path, ": \"tie_word_embeddings\" must be true or false");
    c.tie_word_embeddings = j["tie_word_embeddings"].get<bool>();
  }
  c.bos_token_id = get_int(j, "bos_token_id", path, &default_bos);
  if (auto eos = read_eos_ids(j, path)) {
    c.eos_token_ids = *eos;
    c.eos_from_config = true;
  }
  read_family_fields(j, family, c, path);
  validate_config(c, path);  // before the per-layer lists below, which are num_layers long
  read_attention_config(j, path, &c);
  validate_config(c, path);  // and those lists
  check_unsupported(j, family, c, path);
  c.quant_method = read_quantization(j, path, &c.quant);
  if (family.gpt_oss) read_gpt_oss(j, c, path);
  else if (family.moe) read_moe_config(j, c, path);
  if (c.quant.format == QuantFormat::kMxfp4 && !family.gpt_oss)
    FS_THROW(path, ": quantization_config quant_method \"mxfp4\" is supported for "
             "GptOssForCausalLM's experts only, not for ", c.architecture);
  validate_config(c, path);  // and the experts
  if (c.hidden_size % c.num_q_heads != 0 && !j.contains("head_dim") && !family.default_head_dim)
    FS_THROW(path, ": hidden_size ", c.hidden_size, " is not a multiple of num_attention_heads ",
             c.num_q_heads, " and no head_dim is given");
  return c;
}

std::string supported_architectures() {
  std::string out;
  for (const Family& f : kFamilies) out += std::string(out.empty() ? "" : ", ") + f.architecture;
  return out;
}

void set_architecture(ModelConfig& c, const std::string& architecture) {
  for (const Family& f : kFamilies)
    if (architecture == f.architecture) return set_family(c, f);
  FS_THROW("unsupported architecture '", architecture, "' (supported: ",
           supported_architectures(), ")");
}

namespace {
// ModelConfig::moe as its family's config.json keys (the sparse layers as mlp_only_layers).
void write_moe_config(const ModelConfig& c, json* out) {
  json& j = *out;
  const MoeConfig& m = c.moe;
  j["num_experts_per_tok"] = m.top_k;
  if (c.architecture == "GptOssForCausalLM") {  // MXFP4 experts, as the published checkpoints
    FS_CHECK(m.num_experts > 0 && m.intermediate == c.intermediate_size && m.renormalize &&
                 m.swiglu_limit > 0.f && m.swiglu_alpha == 1.702f && m.shared_intermediate == 0 &&
                 std::count(m.sparse_layers.begin(), m.sparse_layers.end(), 0) == 0,
             "gpt-oss's experts are every layer's MLP, of intermediate_size, clamped SwiGLU");
    j["num_local_experts"] = m.num_experts;
    j["experts_per_token"] = m.top_k;
    j["swiglu_limit"] = m.swiglu_limit;
    j["attention_bias"] = c.o_bias;
    j["quantization_config"] = {
        {"quant_method", "mxfp4"},
        {"modules_to_not_convert", {"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                    "model.embed_tokens", "lm_head"}}};
    return;
  }
  if (c.architecture == "MixtralForCausalLM") {
    FS_CHECK(m.num_experts > 0 && m.intermediate == c.intermediate_size && m.renormalize &&
                 m.shared_intermediate == 0 &&
                 std::count(m.sparse_layers.begin(), m.sparse_layers.end(), 0) == 0,
             "Mixtral's experts are every layer's MLP, of intermediate_size, renormalized");
    j["num_local_experts"] = m.num_experts;
    j["router_jitter_noise"] = 0.0;
    return;
  }
  j["num_experts"] = m.num_experts;
  j["moe_intermediate_size"] = m.intermediate;
  j["norm_topk_prob"] = m.renormalize;
  j["decoder_sparse_step"] = 1;
  std::vector<int> dense;
  for (int i = 0; i < c.num_layers; ++i)
    if (!m.sparse(i)) dense.push_back(i);
  j["mlp_only_layers"] = dense;
  if (c.architecture == "Qwen2MoeForCausalLM")
    j["shared_expert_intermediate_size"] = m.shared_intermediate;
}
}  // namespace

std::string hf_config_json(const ModelConfig& c) {
  const Family* family = nullptr;
  for (const Family& f : kFamilies)
    if (c.architecture == f.architecture) family = &f;
  ModelConfig flags;
  if (family) set_family(flags, *family);
  FS_CHECK(family && flags.qkv_bias == c.qkv_bias && flags.qk_norm == c.qk_norm &&
               flags.qk_norm_full == c.qk_norm_full && flags.post_norms == c.post_norms &&
               flags.fused_projections == c.fused_projections &&
               flags.sandwich_norms == c.sandwich_norms && flags.gelu_mlp == c.gelu_mlp &&
               flags.norm_weight_plus_one == c.norm_weight_plus_one &&
               flags.scale_embeddings == c.scale_embeddings,
           "no supported architecture '", c.architecture, "' with these family flags");
  FS_CHECK(family->moe || c.moe.num_experts == 0, c.architecture, " has no experts");
  json j = {{"architectures", {c.architecture}},
            {"model_type", family->model_type},
            {"hidden_act", c.gelu_mlp ? "gelu_pytorch_tanh" : "silu"},
            {"hidden_size", c.hidden_size},
            {"intermediate_size", c.intermediate_size},
            {"num_hidden_layers", c.num_layers},
            {"num_attention_heads", c.num_q_heads},
            {"num_key_value_heads", c.num_kv_heads},
            {"head_dim", c.head_dim},
            {"vocab_size", c.vocab_size},
            {"max_position_embeddings", c.max_model_len},
            {"rms_norm_eps", c.rms_norm_eps},
            {"rope_theta", c.rope_theta},
            {"tie_word_embeddings", c.tie_word_embeddings},
            {"bos_token_id", c.bos_token_id}};
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else j["eos_token_id"] = c.eos_token_ids;
  j["rope_scaling"] = rope_scaling_json(c);
  if (c.rope_scaling.type == "longrope")
    j["original_max_position_embeddings"] = c.rope_scaling.original_max_position_embeddings;
  if (c.partial_rotary_factor != 1.f) j["partial_rotary_factor"] = c.partial_rotary_factor;
  if (c.architecture == "GraniteForCausalLM") {
    j["embedding_multiplier"] = c.embedding_multiplier;
    j["residual_multiplier"] = c.residual_multiplier;
    j["attention_multiplier"] =
        c.attention_multiplier > 0.f ? c.attention_multiplier : 1.f / std::sqrt(float(c.head_dim));
    j["logits_scaling"] = c.logits_scaling;
  }
  if (c.architecture == "SmolLM3ForCausalLM") {
    std::vector<int> layers = c.rope_layers;
    if (layers.empty()) layers.assign(size_t(c.num_layers), 1);
    j["no_rope_layers"] = layers;
    j["use_sliding_window"] = false;
  }
  if (c.gelu_mlp) j["hidden_activation"] = "gelu_pytorch_tanh";
  if (family->moe) write_moe_config(c, &j);
  if (c.architecture != "LlamaForCausalLM") j["sliding_window"] = nullptr;  // full attention
  write_attention_config(c, &j);
  if (c.quant_method == "fp8")  // the projections in F8_E4M3 with a weight_scale each; lm_head not
    j["quantization_config"] = {{"quant_method", "fp8"},
                                {"activation_scheme", "dynamic"},
                                {"ignored_layers", {"lm_head"}}};
  return j.dump(2) + "\n";
}

}  // namespace flashserve

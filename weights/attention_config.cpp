// read_attention_config / write_attention_config: sliding-window layers, Gemma 3's local RoPE
// layers and Gemma's scale and soft-caps, with the defaults of transformers' config classes.
#include "weights/attention_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "weights/rope_config.h"

namespace flashserve {

namespace {

using nlohmann::json;

bool is_gemma(const std::string& arch) {
  return arch == "Gemma2ForCausalLM" || arch == "Gemma3ForCausalLM";
}

// Qwen's rule: a window only with use_sliding_window, on the layers from max_window_layers on.
bool qwen_rule(const std::string& arch) {
  return arch == "Qwen2ForCausalLM" || arch == "Qwen3ForCausalLM" || arch == "SmolLM3ForCausalLM" ||
         arch == "Qwen2MoeForCausalLM" || arch == "Qwen3MoeForCausalLM";
}

// An integer >= `least`; `absent` when the key is missing or null.
int integer(const json& j, const char* key, const std::string& path, int absent, int least) {
  if (!j.contains(key) || j[key].is_null()) return absent;
  const json& v = j[key];
  if (!v.is_number_integer() || v.get<int64_t>() < least || v.get<int64_t>() > INT32_MAX)
    FS_THROW(path, ": \"", key, "\" must be an integer >= ", least);
  return v.get<int>();
}

// A number >= 0; `absent` when the key is missing, 0 (off) when it is null.
float optional_number(const json& j, const char* key, const std::string& path, float absent) {
  if (!j.contains(key)) return absent;
  if (j[key].is_null()) return 0.f;
  if (!j[key].is_number() || !(j[key].get<double>() >= 0) || !std::isfinite(j[key].get<double>()))
    FS_THROW(path, ": \"", key, "\" must be a non-negative number or null");
  return j[key].get<float>();
}

// Which layers are "sliding_attention": config.json's layer_types, else the family's rule.
std::vector<bool> sliding_layers(const json& j, const ModelConfig& c, const std::string& path) {
  const std::string& a = c.architecture;
  const size_t n = size_t(c.num_layers);
  std::vector<bool> s(n, false);
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const json& t = j["layer_types"];
    if (!t.is_array() || t.size() != n)
      FS_THROW(path, ": \"layer_types\" must be a list of one entry per layer (", n, ")");
    for (size_t i = 0; i < n; ++i) {
      if (t[i] != "sliding_attention" && t[i] != "full_attention")
        FS_THROW(path, ": layer_types entry ", t[i].dump(), " is not supported (only "
                       "\"full_attention\" and \"sliding_attention\")");
      s[i] = t[i] == "sliding_attention";
    }
    return s;
  }
  const int pattern = integer(j, "sliding_window_pattern", path, 6, 1);  // Gemma 3
  const int first_windowed = integer(j, "max_window_layers", path, 28, 0);  // Qwen's default
  for (size_t i = 0; i < n; ++i) {
    if (a == "MistralForCausalLM" || a == "MixtralForCausalLM" || a == "Phi3ForCausalLM")
      s[i] = true;
    if (a == "Gemma2ForCausalLM" || a == "GptOssForCausalLM") s[i] = i % 2 == 0;
    if (a == "Gemma3ForCausalLM") s[i] = (i + 1) % size_t(pattern) != 0;
    if (qwen_rule(a)) s[i] = int(i) >= first_windowed;
  }
  return s;
}

// transformers 5 may save Gemma 3's RoPE per layer type: {"full_attention": {...},
// "sliding_attention": {...}}. The global one is c's table, the local one its base.
void read_rope_per_layer_type(const json& j, const std::string& path, ModelConfig* c) {
  if (!j.contains("rope_parameters") || !j["rope_parameters"].is_object()) return;
  const json& rp = j["rope_parameters"];
  if (rp.contains("full_attention") && rp["full_attention"].is_object()) {
    json global = j;
    global["rope_parameters"] = rp["full_attention"];
    c->rope_theta = optional_number(rp["full_attention"], "rope_theta", path, c->rope_theta);
    c->rope_scaling = read_rope_scaling(global, path, "rope_parameters");
  }
  if (rp.contains("sliding_attention") && rp["sliding_attention"].is_object()) {
    const json& local = rp["sliding_attention"];
    const std::string type = local.value("rope_type", "default");
    if (type != "default")
      FS_THROW(path, ": rope_parameters sliding_attention rope_type \"", type,
               "\" is not supported (only default)");
    c->rope_local_theta = optional_number(local, "rope_theta", path, c->rope_local_theta);
  }
}

}  // namespace

void read_attention_config(const json& j, const std::string& path, ModelConfig* c) {
  const std::string& arch = c->architecture;
  std::vector<bool> sliding = sliding_layers(j, *c, path);
  const bool any = std::find(sliding.begin(), sliding.end(), true) != sliding.end();
  const bool windowed_family = arch == "MistralForCausalLM" || arch == "MixtralForCausalLM" ||
                               arch == "Phi3ForCausalLM" || arch == "GptOssForCausalLM" ||
                               qwen_rule(arch) || is_gemma(arch);
  if (any && !windowed_family)
    FS_THROW(path, ": sliding-window layers (layer_types) are not supported for ", arch);
  if (qwen_rule(arch) && !(j.contains("use_sliding_window") && j["use_sliding_window"] == true))
    sliding.assign(sliding.size(), false);  // transformers drops the window without the switch
  if (arch == "Gemma3ForCausalLM") {
    c->rope_local_theta = optional_number(j, "rope_local_base_freq", path, 10000.f);
    read_rope_per_layer_type(j, path, c);
    if (!(c->rope_local_theta > 0.f)) FS_THROW(path, ": rope_local_base_freq must be positive");
    c->rope_layers.assign(sliding.size(), 1);
    for (size_t i = 0; i < sliding.size(); ++i)
      if (sliding[i]) c->rope_layers[i] = 2;
  }
  // The config classes' default window when the key is absent (Phi3's, Mixtral's: none); null:
  // none. With no sliding layer left the value is never used, so it is not read: transformers
  // saves Qwen configs without use_sliding_window with whatever window (null, 0) they carry.
  const bool no_default = arch == "Phi3ForCausalLM" || arch == "MixtralForCausalLM";
  const int default_window = no_default ? 0 : arch == "GptOssForCausalLM" ? 128 : 4096;
  const bool any_left = std::find(sliding.begin(), sliding.end(), true) != sliding.end();
  const int window = any_left ? integer(j, "sliding_window", path, default_window, 1) : 0;
  c->layer_windows.assign(sliding.size(), 0);
  bool windowed = false;
  for (size_t i = 0; i < sliding.size(); ++i)
    if (sliding[i] && window > 0 && window < c->max_model_len) {
      c->layer_windows[i] = window;
      windowed = true;
    }
  if (!windowed) c->layer_windows.clear();
  if (is_gemma(arch)) {
    const bool gemma2 = arch == "Gemma2ForCausalLM";
    c->query_pre_attn_scalar = optional_number(j, "query_pre_attn_scalar", path, 256.f);
    c->attn_logit_softcapping =
        optional_number(j, "attn_logit_softcapping", path, gemma2 ? 50.f : 0.f);
    c->final_logit_softcapping =
        optional_number(j, "final_logit_softcapping", path, gemma2 ? 30.f : 0.f);
    if (!(c->query_pre_attn_scalar > 0.f))
      FS_THROW(path, ": query_pre_attn_scalar must be positive");
    if (j.contains("use_bidirectional_attention") && j["use_bidirectional_attention"] == true)
      FS_THROW(path, ": use_bidirectional_attention true is not supported (causal attention only)");
  }
}

void write_attention_config(const ModelConfig& c, json* out) {
  json& j = *out;
  const size_t n = size_t(c.num_layers);
  std::vector<bool> sliding(n, false);
  int window = 0;
  for (size_t i = 0; i < n; ++i) {
    const int w = c.layer_windows.empty() ? 0 : c.layer_windows[i];
    sliding[i] = w > 0 || (!c.rope_layers.empty() && c.rope_layers[i] == 2);
    FS_CHECK(w == 0 || window == 0 || w == window,
             "config.json holds one sliding_window: the layers' windows differ");
    if (w > 0) window = w;
  }
  const bool gemma = is_gemma(c.architecture);
  const auto first = std::find(sliding.begin(), sliding.end(), true);
  if (first == sliding.end() && !gemma) return;
  std::vector<std::string> types;
  for (bool s : sliding) types.push_back(s ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;
  j["sliding_window"] = window > 0 ? window : c.max_model_len;  // the latter: full attention
  if (qwen_rule(c.architecture)) {
    j["use_sliding_window"] = true;
    j["max_window_layers"] = int(first - sliding.begin());  // exact when the tail is windowed
  }
  if (!gemma) return;
  auto cap = [](float v) { return v > 0.f ? json(v) : json(nullptr); };
  // 0 (not set) scales by 1/sqrt(head_dim), which is query_pre_attn_scalar head_dim.
  j["query_pre_attn_scalar"] = c.query_pre_attn_scalar > 0.f ? c.query_pre_attn_scalar
                                                             : float(c.head_dim);
  j["attn_logit_softcapping"] = cap(c.attn_logit_softcapping);
  j["final_logit_softcapping"] = cap(c.final_logit_softcapping);
  if (c.architecture != "Gemma3ForCausalLM") return;
  j["rope_local_base_freq"] = c.rope_local_theta > 0.f ? c.rope_local_theta : c.rope_theta;
  // Versions of transformers before layer_types read the pattern: written where one fits.
  const auto full = std::find(sliding.begin(), sliding.end(), false);
  const size_t every = size_t(full - sliding.begin()) + 1;
  bool fits = full != sliding.end();
  for (size_t i = 0; fits && i < n; ++i) fits = sliding[i] == ((i + 1) % every != 0);
  if (fits) j["sliding_window_pattern"] = int(every);
}

void set_sliding_layers(ModelConfig& c, int window, int every) {
  const size_t n = size_t(c.num_layers);
  c.layer_windows.assign(n, 0);
  if (c.rope_local_theta > 0.f) c.rope_layers.assign(n, 1);
  bool windowed = false;
  for (size_t i = 0; i < n; ++i) {
    if (every > 0 && (i + 1) % size_t(every) == 0) continue;
    if (c.rope_local_theta > 0.f) c.rope_layers[i] = 2;
    if (window < c.max_model_len) c.layer_windows[i] = window, windowed = true;
  }
  if (!windowed) c.layer_windows.clear();
}

}  // namespace flashserve

// config.json parsing: required sizes, optional fields with the HF LlamaConfig defaults, llama3
// rope_scaling (or transformers 5's rope_parameters), and eos_token_id given as an int or a list.
#include "weights/hf_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "weights/llama_tensors.h"

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

void check_architecture(const json& j, const std::string& path) {
  if (j.contains("architectures") && !j["architectures"].is_null()) {
    const json& a = j["architectures"];
    if (a.is_array())
      for (const auto& name : a)
        if (name.is_string() && name.get<std::string>() == "LlamaForCausalLM") return;
    FS_THROW(path, ": unknown architecture ", a.dump(), " (only LlamaForCausalLM is supported)");
  }
  if (j.contains("model_type") && j["model_type"] == "llama") return;
  FS_THROW(path, ": unknown architecture: no \"architectures\" and model_type is not \"llama\"");
}

// `key` names the object holding the scaling: "rope_scaling" (transformers < 5) or
// "rope_parameters" (transformers >= 5, which keeps rope_theta in it too).
RopeScaling read_rope_scaling(const json& j, const std::string& path, const char* key) {
  RopeScaling r;
  if (!j.contains(key) || j[key].is_null()) return r;
  const json& s = j[key];
  if (!s.is_object()) FS_THROW(path, ": \"", key, "\" must be an object or null");
  std::string type;
  for (const char* key : {"rope_type", "type"})
    if (s.contains(key) && s[key].is_string()) {
      type = s[key].get<std::string>();
      break;
    }
  if (type == "default" || type.empty()) return r;
  if (type != "llama3") FS_THROW(path, ": unsupported rope_scaling type \"", type, "\"");
  const std::string where = path + " " + key;
  r.type = "llama3";
  r.factor = get_float(s, "factor", where, r.factor);
  r.low_freq_factor = get_float(s, "low_freq_factor", where, r.low_freq_factor);
  r.high_freq_factor = get_float(s, "high_freq_factor", where, r.high_freq_factor);
  r.original_max_position_embeddings = get_int(s, "original_max_position_embeddings", where,
                                               &r.original_max_position_embeddings);
  if (!(r.factor > 0.f) || !(r.high_freq_factor > r.low_freq_factor) ||
      r.original_max_position_embeddings <= 0)
    FS_THROW(path, ": bad llama3 rope_scaling (need factor > 0, high_freq_factor > "
                   "low_freq_factor, original_max_position_embeddings > 0)");
  return r;
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

ModelConfig read_hf_config(const std::string& path) {
  const json j = read_json_file(path, "config.json");
  check_architecture(j, path);

  ModelConfig c;
  c.hidden_size = get_int(j, "hidden_size", path, nullptr);
  c.intermediate_size = get_int(j, "intermediate_size", path, nullptr);
  c.num_layers = get_int(j, "num_hidden_layers", path, nullptr);
  c.num_q_heads = get_int(j, "num_attention_heads", path, nullptr);
  c.num_kv_heads = get_int(j, "num_key_value_heads", path, &c.num_q_heads);
  const int derived_head_dim = c.num_q_heads > 0 ? c.hidden_size / c.num_q_heads : 0;
  c.head_dim = get_int(j, "head_dim", path, &derived_head_dim);
  c.vocab_size = get_int(j, "vocab_size", path, nullptr);
  const int default_max_pos = 2048, default_bos = 1;
  c.max_position_embeddings = get_int(j, "max_position_embeddings", path, &default_max_pos);
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
  validate_config(c, path);
  if (c.hidden_size % c.num_q_heads != 0 && !j.contains("head_dim"))
    FS_THROW(path, ": hidden_size ", c.hidden_size, " is not a multiple of num_attention_heads ",
             c.num_q_heads, " and no head_dim is given");
  return c;
}

std::string hf_config_json(const ModelConfig& c) {
  json j = {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"hidden_size", c.hidden_size},
            {"intermediate_size", c.intermediate_size},
            {"num_hidden_layers", c.num_layers},
            {"num_attention_heads", c.num_q_heads},
            {"num_key_value_heads", c.num_kv_heads},
            {"head_dim", c.head_dim},
            {"vocab_size", c.vocab_size},
            {"max_position_embeddings", c.max_position_embeddings},
            {"rms_norm_eps", c.rms_norm_eps},
            {"rope_theta", c.rope_theta},
            {"tie_word_embeddings", c.tie_word_embeddings},
            {"bos_token_id", c.bos_token_id}};
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else j["eos_token_id"] = c.eos_token_ids;
  if (c.rope_scaling.type == "llama3")
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings",
                          c.rope_scaling.original_max_position_embeddings}};
  else
    j["rope_scaling"] = nullptr;
  return j.dump(2) + "\n";
}

}  // namespace flashserve

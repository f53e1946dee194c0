// read_rope_scaling and rope_scaling_json: each RoPE scaling type's fields with the defaults of
// the published configs, and the checks that keep the inverse-frequency table finite.
#include "weights/rope_config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>

#include "core/error.h"

namespace flashserve {

namespace {

using nlohmann::json;

float number(const json& s, const char* key, const std::string& where, float fallback) {
  if (!s.contains(key) || s[key].is_null()) return fallback;
  if (!s[key].is_number() || !std::isfinite(s[key].get<float>()))
    FS_THROW(where, ": \"", key, "\" must be a (finite) number");
  return s[key].get<float>();
}

int integer(const json& s, const char* key, const std::string& where, int fallback) {
  if (!s.contains(key) || s[key].is_null()) return fallback;
  const json& v = s[key];
  if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > INT32_MAX)
    FS_THROW(where, ": \"", key, "\" must be a positive integer");
  return v.get<int>();
}

std::vector<float> factors(const json& s, const char* key, const std::string& where) {
  if (!s.contains(key) || !s[key].is_array() || s[key].empty())
    FS_THROW(where, ": longrope needs \"", key, "\" (a list of numbers)");
  std::vector<float> out;
  for (const json& v : s[key]) {
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
      FS_THROW(where, ": \"", key, "\" entries must be positive numbers");
    out.push_back(v.get<float>());
  }
  return out;
}

}  // namespace

RopeScaling read_rope_scaling(const json& j, const std::string& path, const char* key) {
  RopeScaling r;
  if (!j.contains(key) || j[key].is_null()) return r;
  const json& s = j[key];
  if (!s.is_object()) FS_THROW(path, ": \"", key, "\" must be an object or null");
  std::string type;
  for (const char* name : {"rope_type", "type"})
    if (s.contains(name) && s[name].is_string()) {
      type = s[name].get<std::string>();
      break;
    }
  if (type == "default" || type.empty()) return r;
  if (type == "su") type = "longrope";  // the name early Phi-3 configs use
  const std::string where = path + " " + key;
  const int max_pos = integer(j, "max_position_embeddings", path, 2048);
  r.type = type;
  r.factor = number(s, "factor", where, type == "longrope" ? 0.f : 1.f);
  if ((type == "linear" || type == "dynamic" || type == "yarn") && !s.contains("factor"))
    FS_THROW(where, ": ", type, " scaling needs \"factor\"");
  if (type == "llama3") {
    r.low_freq_factor = number(s, "low_freq_factor", where, r.low_freq_factor);
    r.high_freq_factor = number(s, "high_freq_factor", where, r.high_freq_factor);
    r.original_max_position_embeddings =
        integer(s, "original_max_position_embeddings", where, r.original_max_position_embeddings);
    if (!(r.factor > 0.f) || !(r.high_freq_factor > r.low_freq_factor))
      FS_THROW(path, ": bad llama3 rope_scaling (need factor > 0, high_freq_factor > "
                     "low_freq_factor, original_max_position_embeddings > 0)");
  } else if (type == "linear") {
    if (!(r.factor > 0.f)) FS_THROW(where, ": linear scaling needs factor > 0");
  } else if (type == "dynamic") {
    // Dynamic NTK changes the base only once a sequence outgrows the pretrained context, and
    // flashserve serves at most max_position_embeddings: within it the table is plain RoPE,
    // exactly. A smaller original context would change the base with the length: refused.
    r.original_max_position_embeddings =
        integer(s, "original_max_position_embeddings", where, max_pos);
    if (!(r.factor > 0.f)) FS_THROW(where, ": dynamic scaling needs factor > 0");
    if (r.original_max_position_embeddings < max_pos)
      FS_THROW(where, ": dynamic NTK scaling with original_max_position_embeddings ",
               r.original_max_position_embeddings, " below max_position_embeddings ", max_pos,
               " changes RoPE's base with the sequence length, which is not supported");
  } else if (type == "yarn") {
    r.original_max_position_embeddings =
        integer(s, "original_max_position_embeddings", where, max_pos);
    r.beta_fast = number(s, "beta_fast", where, r.beta_fast);
    r.beta_slow = number(s, "beta_slow", where, r.beta_slow);
    r.mscale = number(s, "mscale", where, 0.f);
    r.mscale_all_dim = number(s, "mscale_all_dim", where, 0.f);
    r.attention_factor = number(s, "attention_factor", where, 0.f);
    if (s.contains("truncate") && !s["truncate"].is_null()) {
      if (!s["truncate"].is_boolean()) FS_THROW(where, ": \"truncate\" must be true or false");
      r.truncate = s["truncate"].get<bool>();
    }
    if (!(r.factor > 0.f) || !(r.beta_fast > 0.f) || !(r.beta_slow > 0.f) ||
        r.attention_factor < 0.f)
      FS_THROW(where, ": bad yarn scaling (need factor, beta_fast, beta_slow > 0)");
  } else if (type == "longrope") {
    r.original_max_position_embeddings = integer(
        s, "original_max_position_embeddings", where,
        integer(j, "original_max_position_embeddings", path, max_pos));
    r.short_factor = factors(s, "short_factor", where);
    r.long_factor = factors(s, "long_factor", where);
    r.attention_factor = number(s, "attention_factor", where, 0.f);
    if (r.factor == 0.f) r.factor = float(max_pos) / float(r.original_max_position_embeddings);
    if (!(r.factor > 0.f) || r.attention_factor < 0.f)
      FS_THROW(where, ": bad longrope scaling (need factor > 0)");
  } else {
    FS_THROW(path, ": unsupported ", key, " type \"", type,
             "\" (supported: default, llama3, linear, dynamic, yarn, longrope)");
  }
  return r;
}

json rope_scaling_json(const ModelConfig& c) {
  const RopeScaling& r = c.rope_scaling;
  if (r.type == "none" || r.type.empty() || r.type == "default") return nullptr;
  if (r.type == "longrope")  // Phi3's form: the original context at the top of config.json
    return {{"type", "longrope"}, {"short_factor", r.short_factor}, {"long_factor", r.long_factor}};
  json s = {{"rope_type", r.type}, {"factor", r.factor}};
  if (r.type == "llama3") {
    s["low_freq_factor"] = r.low_freq_factor;
    s["high_freq_factor"] = r.high_freq_factor;
  }
  if (r.type == "llama3" || r.type == "yarn")
    s["original_max_position_embeddings"] = r.original_max_position_embeddings;
  if (r.type == "yarn") {
    s["beta_fast"] = r.beta_fast;
    s["beta_slow"] = r.beta_slow;
    if (r.mscale > 0.f) s["mscale"] = r.mscale;
    if (r.mscale_all_dim > 0.f) s["mscale_all_dim"] = r.mscale_all_dim;
    if (r.attention_factor > 0.f) s["attention_factor"] = r.attention_factor;
    if (!r.truncate) s["truncate"] = false;
  }
  return s;
}

}  // namespace flashserve

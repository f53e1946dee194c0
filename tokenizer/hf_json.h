// Reading tokenizer.json components (header-only): typed field access with defaults and the
// errors a user sees for a file this loader does not understand. Messages carry no source
// location; the loader prefixes them with the file's path.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace flashserve::hf {

using nlohmann::json;

[[noreturn]] inline void config_error(const std::string& message) { throw Error(message); }

[[noreturn]] inline void unsupported(const std::string& component, const std::string& type) {
  config_error(component + " type '" + type + "' is not supported");
}

// j["type"] of a component object such as {"type": "NFC"}.
inline std::string type_of(const json& j, const std::string& component) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    config_error(component + " has no \"type\"");
  return j["type"].get<std::string>();
}

// j[key] as T, or `fallback` when absent or null; a value of another JSON type is an error.
template <class T>
T field(const json& j, const char* key, const T& fallback, const std::string& component) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    config_error(component + ": field '" + key + "' has the wrong type");
  }
}

// j[key] that must be present.
inline const json& required(const json& j, const char* key, const std::string& component) {
  if (!j.is_object() || !j.contains(key)) config_error(component + ": missing field '" + key + "'");
  return j[key];
}

}  // namespace flashserve::hf

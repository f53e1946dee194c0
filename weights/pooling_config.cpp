// read_pooling_config: modules.json and the Pooling module's config.json of a sentence-transformers
// folder (weights/pooling_config.h).
#include "weights/pooling_config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace flashserve {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) FS_THROW(path.string(), ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    FS_THROW(path.string(), ": not valid JSON: ", e.what());
  }
}

// The module's kind from its type ("sentence_transformers.models.Pooling" -> "Pooling").
std::string module_kind(const json& m, const std::string& where) {
  if (!m.is_object() || !m.contains("type") || !m["type"].is_string())
    FS_THROW(where, ": every module needs a string \"type\"");
  const std::string type = m["type"].get<std::string>();
  const size_t dot = type.rfind('.');
  return dot == std::string::npos ? type : type.substr(dot + 1);
}

PoolingConfig read_pooling(const fs::path& path, int hidden_size) {
  const json j = read_json(path);
  if (!j.is_object()) FS_THROW(path.string(), ": not a JSON object");
  std::string others;
  for (const auto& [key, value] : j.items()) {
    if (key.rfind("pooling_mode_", 0) != 0 || key == "pooling_mode_lasttoken") continue;
    if (value.is_boolean() && value.get<bool>()) others += (others.empty() ? "" : ", ") + key;
  }
  const bool last = j.contains("pooling_mode_lasttoken") &&
                    j["pooling_mode_lasttoken"].is_boolean() &&
                    j["pooling_mode_lasttoken"].get<bool>();
  if (!last || !others.empty())
    FS_THROW(path.string(), ": pooling ",
             others.empty() ? "without pooling_mode_lasttoken" : others,
             " is not supported; flashserve serves last-token pooling only "
             "(pooling_mode_lasttoken true, every other pooling_mode_* false)");
  PoolingConfig p;
  if (!j.contains("word_embedding_dimension") || !j["word_embedding_dimension"].is_number_integer())
    FS_THROW(path.string(), ": missing integer \"word_embedding_dimension\"");
  p.dimension = j["word_embedding_dimension"].get<int>();
  if (p.dimension != hidden_size)
    FS_THROW(path.string(), ": word_embedding_dimension ", p.dimension,
             " differs from the model's hidden_size ", hidden_size);
  return p;
}

}  // namespace

std::optional<PoolingConfig> read_pooling_config(const std::string& model_path, int hidden_size) {
  const fs::path dir(model_path), modules = dir / "modules.json";
  if (!fs::is_directory(dir) || !fs::exists(modules)) return std::nullopt;
  const std::string where = modules.string();
  const json list = read_json(modules);
  if (!list.is_array()) FS_THROW(where, ": not a JSON list of modules");
  std::optional<PoolingConfig> pooling;
  bool normalize = false;
  for (const json& m : list) {
    const std::string kind = module_kind(m, where);
    if (kind == "Transformer") continue;
    if (kind == "Normalize") {
      normalize = true;
    } else if (kind == "Pooling") {
      const std::string sub = m.value("path", "");
      if (sub.empty() || fs::path(sub).is_absolute() || sub.find("..") != std::string::npos)
        FS_THROW(where, ": the Pooling module's \"path\" '", sub, "' is not a folder inside ",
                 model_path);
      pooling = read_pooling(dir / sub / "config.json", hidden_size);
    } else {
      FS_THROW(where, ": module type '", m["type"].get<std::string>(),
               "' is not supported (flashserve serves Transformer, Pooling with last-token "
               "pooling, and Normalize)");
    }
  }
  if (pooling) pooling->normalize = normalize;
  return pooling;
}

}  // namespace flashserve

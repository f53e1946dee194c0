// Hugging Face Llama folders: config.json, then model.safetensors or the shards that
// model.safetensors.index.json's weight_map names. Required tensors become views into the mapped
// shards; extra tensors (e.g. rotary_emb.inv_freq) are ignored. FP8 checkpoints (config.json's
// quantization_config) also give each F8_E4M3 projection its weight_scale (fp8_weights.h).
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "weights/fp8_weights.h"
#include "weights/hf_config.h"
#include "weights/llama_tensors.h"
#include "weights/loaded_model_impl.h"
#include "weights/safetensors.h"

namespace flashserve {
namespace fs = std::filesystem;

namespace {

// weight_map of model.safetensors.index.json: tensor name -> shard file name.
std::map<std::string, std::string> read_weight_map(const std::string& path) {
  std::ifstream in(path);
  if (!in) FS_THROW(path, ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    FS_THROW(path, ": not valid JSON: ", e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    FS_THROW(path, ": no \"weight_map\" object");
  std::map<std::string, std::string> out;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) FS_THROW(path, ": weight_map entry '", name, "' is not a file name");
    std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      FS_THROW(path, ": weight_map entry '", name, "' names a bad file '", f, "'");
    out[name] = f;
  }
  return out;
}

}  // namespace

std::unique_ptr<ModelImpl> load_hf(const std::string& dir) {
  auto model = std::make_unique<ModelImpl>(dir);
  const fs::path root(dir);
  model->config_ = read_hf_config((root / "config.json").string());
  if (fs::exists(root / "generation_config.json"))
    read_generation_config((root / "generation_config.json").string(), &model->config_);
  const ModelConfig& c = model->config_;

  // Which file holds each required tensor, and each projection's FP8 scale where there may be
  // one (a projection the checkpoint kept in bf16 has none: attach_fp8_scales asks only for
  // those of FP8 tensors).
  std::map<std::string, std::string> file_of;   // tensor -> shard file name
  std::map<std::string, std::string> scale_of;  // weight_scale tensor -> shard file name
  std::string source;                           // for messages about missing tensors
  const fs::path single = root / "model.safetensors", index = root / "model.safetensors.index.json";
  const auto required = llama_tensor_shapes(c);
  const bool fp8 = c.quant_method == "fp8";
  if (fs::exists(single)) {
    source = single.string();
    for (const auto& [name, shape] : required) {
      file_of[name] = "model.safetensors";
      if (fp8 && is_fp8_projection(name)) scale_of[fp8_scale_name(name)] = "model.safetensors";
    }
  } else if (fs::exists(index)) {
    source = index.string();
    const auto weight_map = read_weight_map(source);
    for (const auto& [name, shape] : required) {
      auto it = weight_map.find(name);
      if (it == weight_map.end()) FS_THROW(source, ": missing tensor '", name, "' in weight_map");
      file_of[name] = it->second;
      auto scale = weight_map.find(fp8_scale_name(name));
      if (fp8 && is_fp8_projection(name) && scale != weight_map.end())
        scale_of[scale->first] = scale->second;
    }
  } else {
    FS_THROW(dir, ": no model.safetensors and no model.safetensors.index.json");
  }

  // Map and validate each needed shard once, then take views of the required tensors.
  std::set<std::string> shard_names;
  for (const auto& [name, file] : file_of) shard_names.insert(file);
  for (const auto& [name, file] : scale_of) shard_names.insert(file);
  std::map<std::string, ModelImpl::ScaleEntry> scales;
  for (const std::string& shard : shard_names) {
    const std::string shard_path = (root / shard).string();
    model->files_.push_back(std::make_unique<MappedFile>(shard_path));
    const auto entries = parse_safetensors(*model->files_.back());
    for (const auto& [name, file] : file_of) {
      if (file != shard) continue;
      auto it = entries.find(name);
      if (it == entries.end()) FS_THROW(shard_path, ": missing tensor '", name, "'");
      model->tensors_[name] = safetensors_view(it->second, name, shard_path);
    }
    for (const auto& [name, file] : scale_of) {
      auto it = entries.find(name);
      if (file == shard && it != entries.end()) scales[name] = {it->second, shard_path};
    }
    model->check_required_tensors(shard_path, /*only_present=*/true);  // shapes vs config.json
  }
  model->check_required_tensors(source);
  model->attach_fp8_scales(scales, source);
  if (fs::exists(root / "tokenizer.model")) model->tokenizer_path_ = (root / "tokenizer.model").string();
  return model;
}

}  // namespace flashserve

// Hugging Face Llama folders: config.json, then model.safetensors or the shards that
// model.safetensors.index.json's weight_map names. Required tensors become views into the mapped
// shards; extra tensors (e.g. rotary_emb.inv_freq) are ignored. FP8 checkpoints (config.json's
// quantization_config) also give each F8_E4M3 projection its weight_scale (fp8_weights.h).
// Checkpoints of the bare backbone (names without "model.", often no lm_head) load too.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "weights/fp8_weights.h"
#include "weights/hf_config.h"
#include "weights/llama_tensors.h"
#include "weights/loaded_model_impl.h"
#include "weights/pooling_config.h"
#include "weights/quantized_projections.h"
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

// Where a checkpoint keeps one of our tensors: its name there and its shard file.
struct Stored {
  std::string name;
  std::string file;
};

// A causal-LM checkpoint keeps the backbone under "model." (model.layers.0.…); one saved as the
// bare backbone (Qwen3Model: the Qwen3-Embedding checkpoints) has the same names without it.
std::string stored_name(const std::string& name, bool bare) {
  const std::string prefix = "model.";
  return bare && name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

// An untied checkpoint without lm_head.weight: only embeddings can be served (they stop at the
// final norm), so for an embedding model the head is tied to the embeddings to fill its place.
void tie_missing_lm_head(ModelConfig* c, ModelTask task, const std::string& dir,
                         const std::string& source) {
  const bool pooling = task == ModelTask::kAuto && read_pooling_config(dir, c->hidden_size);
  const bool embed = task == ModelTask::kEmbed || pooling;
  if (!embed)
    FS_THROW(source, ": missing tensor 'lm_head.weight' (config.json has tie_word_embeddings "
             "false; generating text needs the head; an embedding model saved without it is "
             "served with flashserve --task embed)");
  c->tie_word_embeddings = true;
  std::fprintf(stderr, "flashserve: %s has no lm_head.weight: loaded for embeddings only, "
               "with the head tied to the embeddings\n", dir.c_str());
}

}  // namespace

std::unique_ptr<ModelImpl> load_hf(const std::string& dir, ModelTask task) {
  auto model = std::make_unique<ModelImpl>(dir);
  const fs::path root(dir);
  model->config_ = read_hf_config((root / "config.json").string());
  if (fs::exists(root / "generation_config.json"))
    read_generation_config((root / "generation_config.json").string(), &model->config_);
  const ModelConfig& c = model->config_;

  // Each shard is mapped and its header parsed once, on first use.
  std::map<std::string, std::map<std::string, SafetensorsEntry>> entries_of;  // shard -> tensors
  auto shard_entries = [&](const std::string& shard) -> const auto& {
    auto it = entries_of.find(shard);
    if (it != entries_of.end()) return it->second;
    model->files_.push_back(std::make_unique<MappedFile>((root / shard).string()));
    return entries_of[shard] = parse_safetensors(*model->files_.back());
  };

  // Every tensor the checkpoint holds -> its shard file.
  std::map<std::string, std::string> weight_map;
  std::string source;  // for messages about missing tensors
  const fs::path single = root / "model.safetensors", index = root / "model.safetensors.index.json";
  if (fs::exists(single)) {
    source = single.string();
    for (const auto& [name, entry] : shard_entries("model.safetensors"))
      weight_map[name] = "model.safetensors";
  } else if (fs::exists(index)) {
    source = index.string();
    weight_map = read_weight_map(source);
  } else {
    FS_THROW(dir, ": no model.safetensors and no model.safetensors.index.json");
  }
  const std::string where = fs::exists(single) ? "" : " in weight_map";
  const bool bare = !weight_map.count("model.embed_tokens.weight") &&
                    weight_map.count("embed_tokens.weight");
  if (c.moe.num_experts > 0) {
    std::vector<std::string> names;
    for (const auto& [name, file] : weight_map) names.push_back(name);
    check_moe_names(c, names, source);
  }
  if (!c.tie_word_embeddings && !weight_map.count("lm_head.weight"))
    tie_missing_lm_head(&model->config_, task, dir, source);

  // Where each required tensor is, and each projection's FP8 scale where there is one (a
  // projection the checkpoint kept in bf16 has none: attach_fp8_scales asks only for those of
  // FP8 tensors).
  // Int4 and block-wise FP8 projections come dequantized (weights/quantized_projections.h).
  load_quantized_projections(*model, [&](const std::string& name, std::string* file) {
    auto it = weight_map.find(stored_name(name, bare));
    if (it == weight_map.end()) return static_cast<const SafetensorsEntry*>(nullptr);
    *file = (root / it->second).string();
    const auto& entries = shard_entries(it->second);
    auto e = entries.find(it->first);
    return e == entries.end() ? nullptr : &e->second;
  }, source);
  std::map<std::string, Stored> tensor_at, scale_at;  // by our name
  const bool fp8 = c.quant_method == "fp8";
  for (const auto& [name, shape] : llama_tensor_shapes(c)) {
    if (model->tensors_.count(name)) continue;  // dequantized above
    const std::string stored = stored_name(name, bare);
    auto it = weight_map.find(stored);
    if (it == weight_map.end()) FS_THROW(source, ": missing tensor '", stored, "'", where);
    tensor_at[name] = {stored, it->second};
    auto scale = weight_map.find(fp8_scale_name(stored));
    if (fp8 && is_fp8_projection(name) && scale != weight_map.end())
      scale_at[fp8_scale_name(name)] = {scale->first, scale->second};
  }

  // Validate each needed shard, then take views of the required tensors.
  std::set<std::string> shard_names;
  for (const auto& [name, at] : tensor_at) shard_names.insert(at.file);
  for (const auto& [name, at] : scale_at) shard_names.insert(at.file);
  std::map<std::string, ModelImpl::ScaleEntry> scales;
  for (const std::string& shard : shard_names) {
    const std::string shard_path = (root / shard).string();
    const auto& entries = shard_entries(shard);
    for (const auto& [name, at] : tensor_at) {
      if (at.file != shard) continue;
      auto it = entries.find(at.name);
      if (it == entries.end()) FS_THROW(shard_path, ": missing tensor '", at.name, "'");
      model->tensors_[name] = safetensors_view(it->second, at.name, shard_path);
    }
    for (const auto& [name, at] : scale_at) {
      auto it = entries.find(at.name);
      if (at.file == shard && it != entries.end()) scales[name] = {it->second, shard_path};
    }
    model->check_required_tensors(shard_path, /*only_present=*/true);  // shapes vs config.json
  }
  model->check_required_tensors(source);
  model->attach_fp8_scales(scales, source);
  split_fused_projections(model->config_, &model->tensors_);
  if (fs::exists(root / "tokenizer.model")) model->tokenizer_path_ = (root / "tokenizer.model").string();
  return model;
}

}  // namespace flashserve

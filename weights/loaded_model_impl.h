// ModelImpl: the one LoadedModel implementation both loaders fill in. It owns the mapped files
// and any loader-owned buffers that tensor views point into. Internal to weights/.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "weights/mapped_file.h"
#include "weights/loaded_model.h"
#include "weights/safetensors.h"

namespace flashserve {

class ModelImpl final : public LoadedModel {
 public:
  explicit ModelImpl(std::string path) : path_(std::move(path)) {}
  const ModelConfig& config() const override { return config_; }
  const TensorView& tensor(const std::string& name) const override;
  bool has_tensor(const std::string& name) const override { return tensors_.count(name) > 0; }
  const std::string& path() const override { return path_; }
  const std::string& tokenizer_path() const override { return tokenizer_path_; }
  void use_tokenizer_eos(int eos_id) override {
    if (!config_.eos_from_config && eos_id >= 0) config_.eos_token_ids = {eos_id};
  }

  // Checks that every tensor the config needs is present, floating point, and shaped right;
  // errors name `source` (the file the tensors came from, or the model folder).
  // With only_present, tensors not loaded yet are skipped (checking one shard at a time).
  // FP8 tensors must be projections (weights/fp8_weights.h) of a model whose config says fp8.
  void check_required_tensors(const std::string& source, bool only_present = false) const;

  // FP8 checkpoints: gives every FP8 tensor its row scales from `scales` (weight_scale name ->
  // its safetensors entry and file); a missing or malformed scale is an error naming the file.
  struct ScaleEntry {
    SafetensorsEntry entry;
    std::string path;
  };
  void attach_fp8_scales(const std::map<std::string, ScaleEntry>& scales, const std::string& source);
  // --quantize fp8: the projections (is_fp8_projection) become FP8 with per-row scales, here
  // on every core, or (in_backend) as the backend loads them: marked TensorView::to_fp8.
  void quantize_fp8(bool in_backend);

  ModelConfig config_;
  std::map<std::string, TensorView> tensors_;
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<std::unique_ptr<float[]>> owned_;  // loader-owned buffers (llama2.c q/k permutation)
  std::vector<std::vector<uint8_t>> owned_fp8_;  // FP8 codes quantized at load
  std::vector<std::vector<float>> owned_scales_;  // FP8 row scales
  std::string path_;
  std::string tokenizer_path_;
};

std::unique_ptr<ModelImpl> load_llama2c(const std::string& bin_path);
std::unique_ptr<ModelImpl> load_hf(const std::string& dir, ModelTask task);

}  // namespace flashserve

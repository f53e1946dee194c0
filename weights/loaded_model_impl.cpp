// load_model(): picks the HF or llama2.c loader from what the path holds; ModelImpl's lookups and
// the shared "every required tensor is there with the right shape" check.
#include "weights/loaded_model_impl.h"

#include <filesystem>

#include "core/error.h"
#include "weights/fp8_weights.h"
#include "weights/llama_tensors.h"
#include "weights/every_core.h"

namespace flashserve {
namespace fs = std::filesystem;

const TensorView& ModelImpl::tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) FS_THROW(path_, ": no tensor named '", name, "'");
  return it->second;
}

void ModelImpl::check_required_tensors(const std::string& source, bool only_present) const {
  for (const auto& [name, shape] : llama_tensor_shapes(config_)) {
    auto it = tensors_.find(name);
    if (it == tensors_.end() && only_present) continue;
    if (it == tensors_.end()) FS_THROW(source, ": missing tensor '", name, "'");
    const TensorView& t = it->second;
    if (t.dtype == DType::kI32) FS_THROW(source, ": tensor '", name, "' is not floating point");
    if (t.dtype == DType::kF8E4M3 && !is_fp8_projection(name))
      FS_THROW(source, ": tensor '", name, "' is F8_E4M3: only the seven projections of each "
               "layer (q, k, v, o, gate, up, down) and the experts' may be FP8");
    if (t.dtype == DType::kF8E4M3 && config_.quant_method != "fp8")
      FS_THROW(source, ": tensor '", name, "' is F8_E4M3 but config.json has no "
               "quantization_config with quant_method \"fp8\"");
    if (t.shape != shape)
      FS_THROW(source, ": tensor '", name, "' has shape ", shape_str(t.shape),
               " but the config needs ", shape_str(shape));
  }
}

void ModelImpl::attach_fp8_scales(const std::map<std::string, ScaleEntry>& scales,
                                  const std::string& source) {
  for (auto& [name, t] : tensors_) {
    if (t.dtype != DType::kF8E4M3) continue;
    auto it = scales.find(fp8_scale_name(name));
    if (it == scales.end())
      FS_THROW(source, ": tensor '", name, "' is F8_E4M3 but its scale '", fp8_scale_name(name),
               "' is missing");
    owned_scales_.push_back(fp8_row_scales(it->second.entry, name, t.shape[0], it->second.path));
    t.row_scale = owned_scales_.back().data();
  }
}

void ModelImpl::quantize_fp8(bool in_backend) {
  if (!config_.quant_method.empty())
    FS_THROW(path_, ": --quantize fp8: the checkpoint is ", config_.quant_method == "fp8" ? "FP8" :
             config_.quant_method, " already (config.json quantization_config); load it "
             "without --quantize");
  config_.quant_method = "fp8";
  std::vector<std::pair<const std::string*, TensorView*>> todo;
  for (auto& [name, t] : tensors_)
    if (is_fp8_projection(name)) todo.push_back({&name, &t});
  if (in_backend) {  // check_required_tensors saw them: 2-d f32/f16/bf16
    for (auto& [name, t] : todo) t->to_fp8 = true;
    return;
  }
  // The tensors are independent: quantized on every core (a 7B model: 6.5e9 weights).
  std::vector<Fp8Rows> done(todo.size());
  for_each_on_every_core(todo.size(), [&](size_t i) {
    done[i] = quantize_fp8_rows(*todo[i].second, *todo[i].first);
  });
  for (size_t i = 0; i < todo.size(); ++i) {
    owned_fp8_.push_back(std::move(done[i].q));
    owned_scales_.push_back(std::move(done[i].scale));
    TensorView& t = *todo[i].second;
    t.dtype = DType::kF8E4M3;
    t.data = owned_fp8_.back().data();
    t.row_scale = owned_scales_.back().data();
  }
}

Quantize parse_quantize(const std::string& name) {
  if (name == "none" || name.empty()) return Quantize::kNone;
  if (name == "fp8") return Quantize::kFp8;
  FS_THROW("unknown quantization '", name, "' (none, fp8)");
}

ModelTask parse_model_task(const std::string& name) {
  if (name == "generate") return ModelTask::kGenerate;
  if (name == "auto") return ModelTask::kAuto;
  if (name == "embed") return ModelTask::kEmbed;
  FS_THROW("unknown task '", name, "' (auto, generate, embed)");
}

namespace {
std::unique_ptr<ModelImpl> load_unquantized(const std::string& path, ModelTask task) {
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) FS_THROW(path, ": model path does not exist");
  if (fs::is_regular_file(st)) {
    if (fs::path(path).extension() == ".bin") return load_llama2c(path);
    FS_THROW(path, ": not a model: give a folder (config.json + safetensors) or a llama2.c .bin");
  }
  if (!fs::is_directory(st)) FS_THROW(path, ": not a file or folder");
  if (fs::exists(fs::path(path) / "config.json")) return load_hf(path, task);
  std::vector<fs::path> bins;
  // tok*.bin (tokenizer.bin, tok512.bin) are llama2.c tokenizers, not checkpoints.
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.is_regular_file() && e.path().extension() == ".bin" &&
        e.path().filename().string().rfind("tok", 0) != 0)
      bins.push_back(e.path());
  if (bins.size() == 1) return load_llama2c(bins[0].string());
  if (bins.size() > 1) FS_THROW(path, ": more than one *.bin file; give the file itself");
  FS_THROW(path, ": no config.json (Hugging Face) and no *.bin (llama2.c) in this folder");
}
}  // namespace

std::unique_ptr<LoadedModel> load_model(const std::string& path, const LoadOptions& options) {
  std::unique_ptr<ModelImpl> model = load_unquantized(path, options.task);
  if (options.quantize == Quantize::kFp8) model->quantize_fp8(options.fp8_in_backend);
  return model;
}

}  // namespace flashserve

// load_model(): picks the HF or llama2.c loader from what the path holds; ModelImpl's lookups and
// the shared "every required tensor is there with the right shape" check.
#include "weights/model_impl.h"

#include <filesystem>

#include "core/error.h"
#include "weights/llama_tensors.h"

namespace flashserve {
namespace fs = std::filesystem;

namespace {
std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}
}  // namespace

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
    if (t.shape != shape)
      FS_THROW(source, ": tensor '", name, "' has shape ", shape_str(t.shape),
               " but the config needs ", shape_str(shape));
  }
}

std::unique_ptr<LoadedModel> load_model(const std::string& path) {
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) FS_THROW(path, ": model path does not exist");
  if (fs::is_regular_file(st)) {
    if (fs::path(path).extension() == ".bin") return load_llama2c(path);
    FS_THROW(path, ": not a model: give a folder (config.json + safetensors) or a llama2.c .bin");
  }
  if (!fs::is_directory(st)) FS_THROW(path, ": not a file or folder");
  if (fs::exists(fs::path(path) / "config.json")) return load_hf(path);
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

}  // namespace flashserve

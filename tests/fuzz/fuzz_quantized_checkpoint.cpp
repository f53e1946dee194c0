// Fuzzes the quantized-checkpoint readers (weights/int4_weights.cpp, block_fp8_weights.cpp,
// quantized_projections.cpp): the first byte picks one of the committed one-layer checkpoints'
// config.json (GPTQ act-order, AWQ, compressed-tensors, block-wise FP8; tests/weights/data/
// quantized/), the rest is its model.safetensors. Any input either loads, every int4 projection
// then packed with finite values, or throws flashserve::Error.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "core/error.h"
#include "tests/fuzz/fuzz_file.h"
#include "weights/llama_tensors.h"
#include "weights/loaded_model.h"
#include "weights/packed_views.h"
#include "weights/quant_config.h"

using namespace flashserve;

namespace {

const char* const kFolders[] = {"gptq_asym_actorder", "awq", "ct_group_asym", "block_fp8"};

// A scratch folder per format holding that format's config.json, made once.
std::string folder(size_t i) {
  namespace fs = std::filesystem;
  static std::string root;
  if (root.empty()) {
    const uint8_t none = 0;
    root = fuzz::write_scratch("quant", "_dir", &none, 0) + ".d";
    for (size_t f = 0; f < std::size(kFolders); ++f) {
      fs::create_directories(root + "/" + kFolders[f]);
      fs::copy_file(std::string(FS_SOURCE_DIR) + "/tests/weights/data/quantized/" + kFolders[f] +
                        "/config.json",
                    root + "/" + kFolders[f] + "/config.json", fs::copy_options::overwrite_existing);
    }
    std::atexit([] { fs::remove_all(root); });
  }
  return root + "/" + kFolders[i];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string dir = folder(data[0] % std::size(kFolders));
  {
    std::ofstream out(dir + "/model.safetensors", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data + 1), static_cast<std::streamsize>(size - 1));
  }
  try {
    auto model = load_model(dir);
    for (const auto& [name, shape] : llama_tensor_shapes(model->config())) {
      const TensorView& t = model->tensor(name);
      FUZZ_ASSERT(t.shape == shape, "shape");
      // Int4 projections are always packed, with finite values; others (and block-FP8
      // projections kept in bf16) are as stored, NaNs included.
      if (!model->config().quant.is_int4() || !stores_quantized(model->config().quant, name))
        continue;
      FUZZ_ASSERT(t.dtype == DType::kI4 && t.int4, "an int4 projection not packed");
      std::vector<float> values;
      const TensorView f = unpacked_view(t, &values);
      const float* v = static_cast<const float*>(f.data);
      for (int64_t i = 0; i < f.numel(); ++i) FUZZ_ASSERT(std::isfinite(v[i]), "non-finite weight");
    }
  } catch (const Error&) {
  }
  return 0;
}

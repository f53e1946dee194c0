// Fuzzes the llama2.c checkpoint loader (weights/llama2c_loader.cpp) through load_model on a .bin
// file: any bytes either load a model whose every required tensor lies inside the file (or the
// loader's own buffers) with the config's shape, or throw flashserve::Error.
#include <cstdint>

#include "core/error.h"
#include "tests/fuzz/fuzz_file.h"
#include "weights/llama_tensors.h"
#include "weights/loaded_model.h"

using namespace flashserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::write_scratch("l2c", ".bin", data, size);
  std::unique_ptr<LoadedModel> m;
  try {
    m = load_model(path);
  } catch (const Error&) {
    return 0;
  }
  for (const auto& [name, shape] : llama_tensor_shapes(m->config())) {
    const TensorView& t = m->tensor(name);
    FUZZ_ASSERT(t.shape == shape, "shape");
    // Read the first and last element of each tensor: ASan catches a view past the mapping.
    const auto* f = static_cast<const float*>(t.data);
    volatile float x = f[0] + f[t.numel() - 1];
    (void)x;
  }
  return 0;
}

// Fuzzes the safetensors parser (weights/safetensors.cpp) on whole files: any input either parses
// into entries that lie inside the file's data area, or throws flashserve::Error. Every byte of
// every entry is read, so an out-of-bounds view is caught by ASan.
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "tests/fuzz/fuzz_file.h"
#include "weights/mapped_file.h"
#include "weights/safetensors.h"

using namespace flashserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::write_scratch("st", ".safetensors", data, size);
  MappedFile file(path);
  try {
    const auto entries = parse_safetensors(file);
    const uint8_t* begin = file.data();
    const uint8_t* end = begin + file.size();
    for (const auto& [name, e] : entries) {
      if (e.nbytes > 0) {
        FUZZ_ASSERT(e.data >= begin + 8 && e.data + e.nbytes <= end, "entry outside the file");
        uint8_t x = 0;
        for (uint64_t i = 0; i < e.nbytes; ++i) x ^= e.data[i];
        (void)x;
      }
      try {
        TensorView v = safetensors_view(e, name, path);
        FUZZ_ASSERT(uint64_t(v.numel()) * dtype_size(v.dtype) == e.nbytes, "view size");
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
  }
  return 0;
}

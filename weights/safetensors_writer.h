// Writing safetensors files (for tests and benchmarks; the server never writes weights).
// Tensors are laid out by falling element size so every tensor is aligned to its element size,
// and the JSON header is padded with spaces to a multiple of 8 bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace flashserve {

struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  bool u8 = false;  // plain bytes, written as dtype U8 (MXFP4 blocks and scales); dtype unused
};

struct WriterTensor {
  TensorSpec spec;
  std::vector<uint8_t> bytes;  // numel * dtype_size(spec.dtype) bytes, little-endian
};

// f32 values as `dtype` bytes (f16/bf16 rounded to nearest even; i32 is not accepted).
std::vector<uint8_t> encode_values(const std::vector<float>& values, DType dtype);

// Writes the header for `specs`, then calls write_data(i, out) for each tensor in file order;
// it must write exactly that tensor's bytes (checked). Lets large models stream to disk.
void write_safetensors_streamed(const std::string& path, const std::vector<TensorSpec>& specs,
                                const std::function<void(size_t, std::ostream&)>& write_data);

void write_safetensors(const std::string& path, const std::vector<WriterTensor>& tensors);

}  // namespace flashserve

// safetensors writer: header JSON with data_offsets in file order, then the data back to back.
#include "weights/safetensors_writer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <numeric>

#include "core/error.h"

namespace flashserve {

namespace {
const char* st_dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI32: return "I32";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kI4: break;  // a device weight form, never written
  }
  return "?";
}

uint64_t spec_bytes(const TensorSpec& s) {
  uint64_t n = s.u8 ? 1 : dtype_size(s.dtype);
  for (int64_t d : s.shape) {
    FS_CHECK(d >= 0, "tensor ", s.name, " has a negative dimension");
    n *= uint64_t(d);
  }
  return n;
}
}  // namespace

std::vector<uint8_t> encode_values(const std::vector<float>& values, DType dtype) {
  FS_CHECK(dtype != DType::kI32, "encode_values takes floating-point dtypes");
  std::vector<uint8_t> out(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(&out[i * 4], &values[i], 4);
    } else {
      uint16_t h = dtype == DType::kF16 ? float_to_f16_bits(values[i]) : float_to_bf16_bits(values[i]);
      out[2 * i] = uint8_t(h & 0xff);
      out[2 * i + 1] = uint8_t(h >> 8);
    }
  }
  return out;
}

void write_safetensors_streamed(const std::string& path, const std::vector<TensorSpec>& specs,
                                const std::function<void(size_t, std::ostream&)>& write_data) {
  std::vector<size_t> order(specs.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto size = [&](size_t i) { return specs[i].u8 ? 1 : dtype_size(specs[i].dtype); };
    return size(a) > size(b);
  });
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  uint64_t offset = 0;
  for (size_t i : order) {
    const uint64_t n = spec_bytes(specs[i]);
    header[specs[i].name] = {{"dtype", specs[i].u8 ? "U8" : st_dtype_name(specs[i].dtype)},
                             {"shape", specs[i].shape},
                             {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  FS_CHECK(header.size() == specs.size() + 1, path, ": duplicate tensor names");
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) FS_THROW(path, ": cannot create");
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), std::streamsize(text.size()));
  for (size_t i : order) {
    const auto before = out.tellp();
    write_data(i, out);
    FS_CHECK(uint64_t(out.tellp() - before) == spec_bytes(specs[i]), path, ": tensor ",
             specs[i].name, " wrote the wrong number of bytes");
  }
  out.close();
  if (!out) FS_THROW(path, ": write failed");
}

void write_safetensors(const std::string& path, const std::vector<WriterTensor>& tensors) {
  std::vector<TensorSpec> specs;
  for (const auto& t : tensors) specs.push_back(t.spec);
  write_safetensors_streamed(path, specs, [&](size_t i, std::ostream& out) {
    out.write(reinterpret_cast<const char*>(tensors[i].bytes.data()),
              std::streamsize(tensors[i].bytes.size()));
  });
}

}  // namespace flashserve

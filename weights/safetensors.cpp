// safetensors parsing and validation; see safetensors.h for the layout.
#include "weights/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace flashserve {

namespace {

// Element size of every dtype the format defines (0 = unknown).
uint64_t st_dtype_size(const std::string& dtype) {
  static const std::map<std::string, uint64_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2},
      {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},    {"U32", 4},     {"F32", 4},
      {"F64", 8},  {"I64", 8}, {"U64", 8}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

uint64_t json_uint(const nlohmann::json& j, const std::string& path, const std::string& what) {
  if (!j.is_number_unsigned()) FS_THROW(path, ": ", what, " must be a non-negative integer");
  return j.get<uint64_t>();
}

}  // namespace

std::map<std::string, SafetensorsEntry> parse_safetensors(const MappedFile& file) {
  const std::string& path = file.path();
  if (file.size() < 8)
    FS_THROW(path, ": truncated safetensors file: ", file.size(), " bytes, no 8-byte header length");
  uint8_t len_bytes[8];
  std::memcpy(len_bytes, file.data(), 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];  // little-endian
  if (header_len > file.size() - 8)
    FS_THROW(path, ": safetensors header length ", header_len, " points outside the file (",
             file.size(), " bytes)");
  const char* header = reinterpret_cast<const char*>(file.data() + 8);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header, header + header_len);
  } catch (const nlohmann::json::exception& e) {
    FS_THROW(path, ": safetensors header is not valid JSON: ", e.what());
  }
  if (!j.is_object()) FS_THROW(path, ": safetensors header is not a JSON object");

  const uint8_t* data_area = file.data() + 8 + header_len;
  const uint64_t data_size = file.size() - 8 - header_len;
  std::map<std::string, SafetensorsEntry> out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end) of non-empty tensors
  for (const auto& [name, info] : j.items()) {
    if (name == "__metadata__") continue;
    const std::string what = "tensor '" + name + "'";
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") ||
        !info.contains("data_offsets"))
      FS_THROW(path, ": ", what, " needs dtype, shape and data_offsets");
    if (!info["dtype"].is_string()) FS_THROW(path, ": ", what, " dtype must be a string");
    SafetensorsEntry e;
    e.dtype = info["dtype"].get<std::string>();
    const uint64_t elem = st_dtype_size(e.dtype);
    if (elem == 0) FS_THROW(path, ": ", what, " has unknown dtype '", e.dtype, "'");
    if (!info["shape"].is_array()) FS_THROW(path, ": ", what, " shape must be an array");
    uint64_t numel = 1;
    for (const auto& d : info["shape"]) {
      uint64_t dim = json_uint(d, path, what + " shape entries");
      if (dim > uint64_t(INT64_MAX) || __builtin_mul_overflow(numel, dim, &numel))
        FS_THROW(path, ": ", what, " shape is too large");
      e.shape.push_back(int64_t(dim));
    }
    const auto& off = info["data_offsets"];
    if (!off.is_array() || off.size() != 2)
      FS_THROW(path, ": ", what, " data_offsets must be [begin, end]");
    const uint64_t begin = json_uint(off[0], path, what + " data_offsets");
    const uint64_t end = json_uint(off[1], path, what + " data_offsets");
    if (begin > end || end > data_size)
      FS_THROW(path, ": ", what, " data_offsets [", begin, ", ", end,
               "] point outside the data area of ", data_size, " bytes");
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, elem, &nbytes) || nbytes != end - begin)
      FS_THROW(path, ": ", what, " data_offsets span ", end - begin, " bytes but dtype ", e.dtype,
               " and its shape need ", numel, " x ", elem);
    e.data = data_area + begin;
    e.nbytes = nbytes;
    if (nbytes > 0) ranges.push_back({begin, end});
    out.emplace(name, std::move(e));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      FS_THROW(path, ": safetensors tensors overlap in the data area (bytes ", ranges[i].first,
               " to ", ranges[i - 1].second, ")");
  return out;
}

TensorView safetensors_view(const SafetensorsEntry& e, const std::string& name,
                            const std::string& path) {
  TensorView v;
  if (e.dtype == "F32") v.dtype = DType::kF32;
  else if (e.dtype == "F16") v.dtype = DType::kF16;
  else if (e.dtype == "BF16") v.dtype = DType::kBF16;
  else if (e.dtype == "F8_E4M3") v.dtype = DType::kF8E4M3;  // needs its scales (fp8_weights.h)
  else FS_THROW(path, ": tensor '", name, "' has dtype ", e.dtype,
                "; only F32, F16, BF16 and F8_E4M3 (FP8 checkpoints) are supported");
  if (reinterpret_cast<uintptr_t>(e.data) % dtype_size(v.dtype) != 0)
    FS_THROW(path, ": tensor '", name, "' data is not aligned to its ", dtype_size(v.dtype),
             "-byte elements");
  v.shape = e.shape;
  v.data = e.data;
  return v;
}

}  // namespace flashserve

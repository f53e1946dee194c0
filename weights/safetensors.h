// Reading the safetensors format: an 8-byte little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data area
// that the offsets index. Parsing validates the whole layout before any view is handed out.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "weights/mapped_file.h"
#include "weights/loaded_model.h"

namespace flashserve {

struct SafetensorsEntry {
  std::string dtype;            // as written: "F32", "BF16", "I64", ...
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // inside the mapped file
  uint64_t nbytes = 0;
};

// Parses and checks `file`: header length inside the file, valid JSON, known dtypes, offsets
// inside the data area, end - begin == numel * dtype size, no two tensors overlapping.
// Throws flashserve::Error "<path>: <problem>". Entries point into `file`, which must outlive them.
std::map<std::string, SafetensorsEntry> parse_safetensors(const MappedFile& file);

// The entry as a TensorView; throws "<path>: tensor 'x' has dtype I64 ..." unless F32/F16/BF16/
// F8_E4M3 (an FP8 view has no row_scale yet: the loader adds it from the scale tensor),
// and for data not aligned to its element size.
TensorView safetensors_view(const SafetensorsEntry& entry, const std::string& name,
                            const std::string& path);

}  // namespace flashserve

// The one internal int4 layout every int4 checkpoint format is converted to at load
// (docs/QUANTIZATION.md), and the converters from GPTQ, AWQ (gemm) and compressed-tensors
// pack-quantized tensors. Value of weight row r, packed column j:
//   (code[r, j] - zero[r, j / group_size]) * scale[r, j / group_size],
// and packed column j is input column perm[j] (act-order resolved once, here).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "weights/quant_config.h"
#include "weights/safetensors.h"

namespace flashserve {

struct Int4Weight {
  int64_t rows = 0, cols = 0;  // out_features, in_features
  int64_t group_size = 0;      // packed columns per scale; cols when one group spans a row
  std::vector<uint8_t> packed;  // [rows, cols / 2]: column 2i in the low nibble, 2i + 1 high
  std::vector<float> scales;    // [rows, groups]
  std::vector<uint8_t> zeros;   // [rows, groups]: 0..16 (GPTQ's classic files reach 16)
  std::vector<int32_t> perm;    // [cols], or empty for the identity: packed j = input perm[j]
  int64_t groups() const { return group_size ? cols / group_size : 0; }
  uint8_t code(int64_t r, int64_t j) const {  // packed column j of row r
    const uint8_t b = packed[size_t(r * (cols / 2) + j / 2)];
    return j % 2 ? b >> 4 : b & 0xF;
  }
};

// The weight as f32 [rows, cols] in input-column order (exact: a 4-bit difference times a
// 16-bit scale fits an f32 mantissa).
std::vector<float> dequantize_int4(const Int4Weight& w);

// Whether `parts` can be stacked into one weight (LlamaModel stacks q/k/v and gate/up): the same
// input columns, group size and permutation, so one pass of the activations serves them all.
bool int4_stackable(const std::vector<const Int4Weight*>& parts);
// The rows of every part, one after another (int4_stackable(parts) must hold).
Int4Weight stack_int4(const std::vector<const Int4Weight*>& parts);
// Row r of the result is row order[r] of `w` (order empty: row r) with its scales multiplied by
// factor[r] (factor empty: 1): model/weight_rows.h's load-time rewrites on the packed form.
Int4Weight rewrite_int4_rows(const Int4Weight& w, const std::vector<int>& order,
                             const std::vector<float>& factor);

// A checkpoint's tensors of one quantized projection: `find(suffix)` returns the entry named
// "<module>.<suffix>" ("qweight", "scales", ...) or nullptr when the checkpoint has none.
struct Int4Source {
  std::string module;  // "model.layers.0.mlp.up_proj" as the checkpoint names it, for messages
  std::string path;    // the file, for messages
  std::function<const SafetensorsEntry*(const std::string& suffix)> find;
};

// The projection [rows, cols] (out, in) that `src` holds in `q`'s format (q.is_int4()).
// Every missing tensor, wrong dtype or shape, non-finite or negative scale, out-of-range
// g_idx or zero point is a flashserve::Error naming the tensor and the file.
Int4Weight read_int4(const QuantConfig& q, const Int4Source& src, int64_t rows, int64_t cols);

}  // namespace flashserve

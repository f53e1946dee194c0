// Int4 weights (docs/QUANTIZATION.md): Int4Stored, a GPTQ, AWQ (gemm) or compressed-tensors
// pack-quantized projection as its checkpoint packs it, which the loader reads (codes left in
// place) and backends convert when they load it; and Int4Weight, the one internal layout of the
// CPU twins. Value of weight row r, packed column j:
//   (code[r, j] - zero[r, j / group_size]) * scale[r, j / group_size],
// and packed column j is input column perm[j] (act-order resolved once, at reading).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "weights/int4_packing.h"
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

// An int4 projection as its checkpoint stores it, what a loaded model's view carries
// (TensorView::int4): the codes still in the checkpoint's words (in the mapped file, or made at
// load for stacked and rewritten rows), the small parts decoded and checked. Code of input
// column i of row r: code(r, i); value (code - zero) * scale of the group of packed column j,
// where packed column j = input column perm[j] (perm empty: j), as in Int4Weight.
struct Int4Stored {
  Int4Packing packing = Int4Packing::kRows;
  int64_t rows = 0, cols = 0, group_size = 0;
  const uint8_t* words = nullptr;  // [rows * cols / 2] bytes of int32 words (any alignment)
  std::shared_ptr<const std::vector<uint8_t>> owned;  // holds `words` when made at load
  std::vector<float> scales;   // [groups, rows]: as GPTQ/AWQ store them and the GPU reads them
  std::vector<uint8_t> zeros;  // [groups, rows]: 0..16
  std::vector<int32_t> perm;   // [cols], or empty for the identity
  int64_t groups() const { return group_size ? cols / group_size : 0; }
  size_t word_bytes() const { return size_t(rows * cols / 2); }
  uint8_t code(int64_t r, int64_t i) const;  // input column i of row r
};

// The internal layout (columns in perm order, two codes a byte), bit for bit what read_int4 gives.
Int4Weight unpack_int4(const Int4Stored& w);
// The weight as f32 [rows, cols] in input-column order (exact: a 4-bit difference times a
// 16-bit scale fits an f32 mantissa).
std::vector<float> dequantize_int4(const Int4Weight& w);
std::vector<float> dequantize_int4(const Int4Stored& w);

// Whether `parts` can be stacked into one weight (LlamaModel stacks q/k/v and gate/up): the same
// input columns, group size and permutation, so one pass of the activations serves them all.
bool int4_stackable(const std::vector<const Int4Stored*>& parts);
// The rows of every part, one after another (int4_stackable(parts) must hold), in kRows words.
Int4Stored stack_int4(const std::vector<const Int4Stored*>& parts);
// Row r of the result is row order[r] of `w` (order empty: row r) with its scales multiplied by
// factor[r] (factor empty: 1): model/weight_rows.h's load-time rewrites, in kRows words.
Int4Stored rewrite_int4_rows(const Int4Stored& w, const std::vector<int>& order,
                             const std::vector<float>& factor);

// A checkpoint's tensors of one quantized projection: `find(suffix)` returns the entry named
// "<module>.<suffix>" ("qweight", "scales", ...) or nullptr when the checkpoint has none.
struct Int4Source {
  std::string module;  // "model.layers.0.mlp.up_proj" as the checkpoint names it, for messages
  std::string path;    // the file, for messages
  std::function<const SafetensorsEntry*(const std::string& suffix)> find;
};

// The projection [rows, cols] (out, in) that `src` holds in `q`'s format (q.is_int4()): its
// words stay where `src` keeps them (the mapped file), its scales, zero points and g_idx are read
// and checked. Every missing tensor, wrong dtype or shape, non-finite or negative scale,
// out-of-range g_idx or zero point is a flashserve::Error naming the tensor and the file.
Int4Stored read_int4_stored(const QuantConfig& q, const Int4Source& src, int64_t rows,
                            int64_t cols);
// The same projection in the internal layout: unpack_int4(read_int4_stored(...)).
Int4Weight read_int4(const QuantConfig& q, const Int4Source& src, int64_t rows, int64_t cols);

}  // namespace flashserve

// Block-wise FP8 weights (HF fine-grained FP8, DeepSeek-V3 and Qwen3-*-FP8; compressed-tensors'
// FP8 "block" strategy): F8_E4M3 codes [rows, cols] and one fp32 scale per block of
// block_rows x block_cols, the last blocks of a row or column possibly partial. Weight (r, c) is
// decode(code[r, c]) * scale[r / block_rows, c / block_cols] (the HF name weight_scale_inv
// notwithstanding, the scale multiplies). The loader leaves the codes in the mapped file, as
// int4's words (TensorView::block_fp8 carries them to the backend; docs/QUANTIZATION.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weights/safetensors.h"

namespace flashserve {

struct BlockFp8Weight {
  int64_t rows = 0, cols = 0;
  int64_t block_rows = 0, block_cols = 0;
  const uint8_t* codes = nullptr;  // [rows, cols] E4M3: in the mapped file, or in `owned`
  std::shared_ptr<const std::vector<uint8_t>> owned;  // holds `codes` when made, not mapped
  std::vector<float> scales;  // [scale_rows(), scale_cols()]
  int64_t scale_rows() const { return (rows + block_rows - 1) / block_rows; }
  int64_t scale_cols() const { return (cols + block_cols - 1) / block_cols; }
  // `bytes` ([rows, cols] E4M3) become the codes, held by the weight itself.
  void own_codes(std::vector<uint8_t> bytes) {
    owned = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
    codes = owned->data();
  }
};

// The projection `weight_name` [rows, cols] from its F8_E4M3 entry and its scale entry
// `scale_name`; the codes stay in `weight`'s memory (the mapped file). Errors name the tensor
// and `path` (dtype, shape, non-finite, negative or too large scales, NaN codes).
BlockFp8Weight read_block_fp8(const SafetensorsEntry& weight, const SafetensorsEntry& scale,
                              const std::string& weight_name, const std::string& scale_name,
                              int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols,
                              const std::string& path);

// The weight as f32 [rows, cols], rows spread over every core.
std::vector<float> dequantize_block_fp8(const BlockFp8Weight& w);

// Whether `parts` can be stacked into one weight (LlamaModel stacks q/k/v and gate/up): all
// present, the same columns and block shape, and every part but the last a whole number of row
// blocks, so that the stacked rows keep their blocks (the scale rows of the parts, one after
// another, are the stack's).
bool block_fp8_stackable(const std::vector<const BlockFp8Weight*>& parts);

}  // namespace flashserve

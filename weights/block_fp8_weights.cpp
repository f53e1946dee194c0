// Block-wise FP8 weights: reading and checking a checkpoint's codes and block scales, the
// dequantized weight, and stacking (block_fp8_weights.h).
#include "weights/block_fp8_weights.h"

#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/fp8.h"

namespace flashserve {

BlockFp8Weight read_block_fp8(const SafetensorsEntry& weight, const SafetensorsEntry& scale,
                              const std::string& weight_name, const std::string& scale_name,
                              int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols,
                              const std::string& path) {
  BlockFp8Weight w;
  w.rows = rows, w.cols = cols, w.block_rows = block_rows, w.block_cols = block_cols;
  if (weight.dtype != "F8_E4M3")
    FS_THROW(path, ": tensor '", weight_name, "' has dtype ", weight.dtype, "; a block-wise FP8 "
             "checkpoint stores the quantized projections as F8_E4M3");
  if (weight.shape != std::vector<int64_t>{rows, cols})
    FS_THROW(path, ": tensor '", weight_name, "' has the wrong shape (the config needs [", rows,
             ", ", cols, "])");
  const int64_t br = (rows + block_rows - 1) / block_rows, bc = (cols + block_cols - 1) / block_cols;
  if (scale.shape != std::vector<int64_t>{br, bc})
    FS_THROW(path, ": tensor '", scale_name, "' has the wrong shape: blocks of ", block_rows, "x",
             block_cols, " over [", rows, ", ", cols, "] need [", br, ", ", bc, "]");
  const size_t n = size_t(br * bc);
  w.scales.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (scale.dtype == "F32") {
      std::memcpy(&w.scales[i], scale.data + 4 * i, 4);
    } else if (scale.dtype == "BF16" || scale.dtype == "F16") {
      uint16_t h;
      std::memcpy(&h, scale.data + 2 * i, 2);
      w.scales[i] = scale.dtype == "F16" ? f16_bits_to_float(h) : bf16_bits_to_float(h);
    } else {
      FS_THROW(path, ": tensor '", scale_name, "' has dtype ", scale.dtype,
               "; block scales are F32, BF16 or F16");
    }
    if (!std::isfinite(w.scales[i]) || w.scales[i] < 0.f)
      FS_THROW(path, ": tensor '", scale_name, "' holds ", w.scales[i],
               "; scales must be finite and >= 0");
  }
  for (int64_t i = 0; i < rows * cols; ++i)
    if ((weight.data[i] & 0x7F) == 0x7F)  // E4M3 has no infinities: this is its NaN
      FS_THROW(path, ": tensor '", weight_name, "' holds a NaN code at element ", i);
  w.codes.assign(weight.data, weight.data + rows * cols);
  return w;
}

std::vector<float> dequantize_block_fp8(const BlockFp8Weight& w) {
  std::vector<float> out(size_t(w.rows * w.cols));
  const int64_t bc = w.scale_cols();
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t c = 0; c < w.cols; ++c)
      out[size_t(r * w.cols + c)] = fp8_e4m3_to_float(w.codes[r * w.cols + c]) *
                                    w.scales[size_t((r / w.block_rows) * bc + c / w.block_cols)];
  return out;
}

bool block_fp8_stackable(const std::vector<const BlockFp8Weight*>& parts) {
  if (parts.empty()) return false;
  for (size_t i = 0; i < parts.size(); ++i) {
    const BlockFp8Weight* p = parts[i];
    if (!p || p->cols != parts[0]->cols || p->block_rows != parts[0]->block_rows ||
        p->block_cols != parts[0]->block_cols)
      return false;
    if (i + 1 < parts.size() && p->rows % p->block_rows != 0) return false;
  }
  return true;
}

BlockFp8Weight stack_block_fp8(const std::vector<const BlockFp8Weight*>& parts) {
  FS_CHECK(block_fp8_stackable(parts), "block-wise FP8 weights that cannot be stacked");
  BlockFp8Weight s = *parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    s.rows += parts[i]->rows;
    s.codes.insert(s.codes.end(), parts[i]->codes.begin(), parts[i]->codes.end());
    s.scales.insert(s.scales.end(), parts[i]->scales.begin(), parts[i]->scales.end());
  }
  return s;
}

}  // namespace flashserve

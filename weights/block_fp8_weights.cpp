// Block-wise FP8 weights: reading and checking a checkpoint's codes (left where they are) and
// block scales, the dequantized weight, and whether parts stack (block_fp8_weights.h).
#include "weights/block_fp8_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/fp8.h"
#include "weights/every_core.h"

namespace flashserve {

namespace {

// The first of codes[0, n) that is E4M3's NaN (low seven bits set: E4M3 has no infinities), or
// n. Eight codes a word: adding 1 to a byte's low seven bits carries into its top bit only when
// they are all set, and never into the next byte, so the scan runs at memory speed.
int64_t first_nan_code(const uint8_t* codes, int64_t n) {
  constexpr uint64_t kLow7 = 0x7F7F7F7F7F7F7F7Full, kOne = 0x0101010101010101ull,
                     kTop = 0x8080808080808080ull;
  constexpr int64_t kChunk = 4096;
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t len = std::min(kChunk, n - at);
    uint64_t carries = 0;
    int64_t i = 0;
    for (; i + 8 <= len; i += 8) {
      uint64_t v;
      std::memcpy(&v, codes + at + i, 8);
      carries |= (v & kLow7) + kOne;
    }
    if ((carries & kTop) == 0 && i == len) continue;
    for (i = 0; i < len; ++i)
      if ((codes[at + i] & 0x7F) == 0x7F) return at + i;
  }
  return n;
}

}  // namespace

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
  const int64_t br = w.scale_rows(), bc = w.scale_cols();
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
    // 448 is E4M3's largest code: a larger scale would give infinite weights.
    if (!std::isfinite(w.scales[i] * 448.f) || w.scales[i] < 0.f)
      FS_THROW(path, ": tensor '", scale_name, "' holds ", w.scales[i],
               "; scales must be finite and >= 0, and 448 x scale a finite float");
  }
  const int64_t nan = first_nan_code(weight.data, rows * cols);
  if (nan < rows * cols)
    FS_THROW(path, ": tensor '", weight_name, "' holds a NaN code at element ", nan);
  w.codes = weight.data;
  return w;
}

std::vector<float> dequantize_block_fp8(const BlockFp8Weight& w) {
  std::vector<float> out(size_t(w.rows * w.cols));
  const int64_t bc = w.scale_cols();
  constexpr int64_t kRowsPerJob = 64;
  for_each_on_every_core(size_t((w.rows + kRowsPerJob - 1) / kRowsPerJob), [&](size_t job) {
    const int64_t end = std::min(w.rows, int64_t(job + 1) * kRowsPerJob);
    for (int64_t r = int64_t(job) * kRowsPerJob; r < end; ++r) {
      const float* scale = w.scales.data() + (r / w.block_rows) * bc;
      for (int64_t c = 0; c < w.cols; ++c)
        out[size_t(r * w.cols + c)] =
            fp8_e4m3_to_float(w.codes[r * w.cols + c]) * scale[c / w.block_cols];
    }
  });
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

}  // namespace flashserve

// How int4 checkpoints pack their codes into int32 words (docs/QUANTIZATION.md), shared by the
// loader's readers (weights/int4_weights.h) and the GPU layout kernel (kernels/int4_layout.h),
// which both read a stored word arrangement as is. C++17-clean: .cu files include it.
#pragma once

namespace flashserve {

// Word w of an int32 array holds 8 codes, code s in bits 4 s..4 s + 3 (little-endian words).
enum class Int4Packing {
  kRows = 0,  // [rows, cols / 8]: input column i of row r in word (r, i / 8), nibble i % 8
              // (compressed-tensors' weight_packed; stacked or rewritten rows made at load)
  kGptq = 1,  // [cols / 8, rows]: input column i of row r in word (i / 8, r), nibble i % 8
  kAwq = 2,   // [cols, rows / 8]: row 8 c + j of input column i in word (i, c), nibble
              // kAwqNibble[j] (AutoAWQ packs the rows in the order 0, 2, 4, 6, 1, 3, 5, 7)
};

constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

}  // namespace flashserve

// Load-time rewrites of a weight's rows on the host, before the backend uploads it: the rows
// reordered (partial rotary, model/rope_tables.h) and/or multiplied by per-row factors (Granite's
// multipliers, the attention factor of partial rotary). Folding these into the weights keeps the
// forward pass and its kernels unchanged.
#pragma once

#include <vector>

#include "weights/loaded_model.h"

namespace flashserve {

// Host memory a rewritten weight's view points into.
struct HostRows {
  std::vector<char> bytes;
  std::vector<float> row_scale;  // FP8 weights
};

// `w` ([rows, cols] or [rows]) with row r taken from row order[r] (order empty: as is) and then
// multiplied by factor[r] (factor empty: by 1). FP8 weights (and views marked to_fp8, quantized
// here first) keep their codes and scale the rows' scales; f16/bf16 weights that are scaled
// become f32 (one rounding at upload, as unscaled ones); a packed int4 weight (TensorView::int4)
// gets the same rows, its scales multiplied; a packed block-wise FP8 one (TensorView::block_fp8)
// becomes f32, its rows' blocks broken.
TensorView rewrite_rows(const TensorView& w, const std::vector<int>& order,
                        const std::vector<float>& factor, HostRows* storage);

}  // namespace flashserve

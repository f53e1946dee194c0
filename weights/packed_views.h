// Weights whose view carries a packed form instead of values (docs/QUANTIZATION.md): an int4
// projection's view (TensorView::int4, dtype kI4, no data) holds it as its checkpoint stores it,
// a block-wise FP8 one's (TensorView::block_fp8, no data) its codes and block scales, gpt-oss's
// MXFP4 experts (TensorView::mxfp4, no data) their blocks and scales; each
// backend converts them when it loads the weight. A consumer that needs the values (the CPU
// backend, a tensor-parallel slice, a stack with an unquantized part) asks for them here.
#pragma once

#include <vector>

#include "weights/loaded_model.h"

namespace flashserve {

// Whether `w` has a packed form (int4, block-wise FP8 or MXFP4) to be read instead of `data`.
bool is_packed(const TensorView& w);

// `w` itself, or, when it is packed, its values as an f32 view into *storage (its shape).
TensorView unpacked_view(const TensorView& w, std::vector<float>* storage);

}  // namespace flashserve

// The projections of int4 (GPTQ, AWQ, compressed-tensors) and block-wise FP8 checkpoints: read
// through their format's reader (int4_weights.h, block_fp8_weights.h). Their views hold the
// weight as stored (TensorView::int4 or block_fp8, no values: weights/packed_views.h;
// docs/QUANTIZATION.md). Internal to weights/.
#pragma once

#include <functional>
#include <string>

#include "weights/loaded_model_impl.h"

namespace flashserve {

// The checkpoint's entry for tensor `name` (our name; the loader maps it to the stored one) and
// the file holding it; nullptr when the checkpoint has no such tensor.
using EntryLookup =
    std::function<const SafetensorsEntry*(const std::string& name, std::string* file)>;

// Fills model.tensors_ with every projection the config stores quantized (stores_quantized),
// packed, or with gpt-oss's MXFP4 experts (weights/mxfp4_weights.h); does nothing for other
// checkpoints. Errors name the tensor and its file (`source`
// where the checkpoint lacks it).
void load_quantized_projections(ModelImpl& model, const EntryLookup& find, const std::string& source);

}  // namespace flashserve

// Cutting a packed weight (weights/packed_views.h: int4 as its checkpoint packs it, block-wise
// FP8) for a tensor-parallel rank without unpacking it, so that each rank's slice keeps the
// bandwidth of the packed form. A cut stays packed when it falls on the packing's units (an int4
// weight's groups and 8-code words, an FP8 weight's blocks); other cuts run on the f32 values
// (shard_plan.h: slice_weight), with one log line per reason. docs/QUANTIZATION.md has the rules.
#pragma once

#include <optional>
#include <string>

#include "parallel/shard_plan.h"

namespace flashserve {

// Why `split` (kRows or kColumns) cannot cut the packed weight `w` packed; "" when it can.
std::string packed_cut_refusal(const TensorView& w, const WeightSplit& split);

// `w` (packed) cut by `split`, still packed and owning its codes, scales and zero points (no
// pointer into `w` or the mapped file); nullopt, after logging packed_cut_refusal once per
// reason, where the cut cannot stay packed.
std::optional<TensorView> slice_packed(const TensorView& w, const WeightSplit& split);

}  // namespace flashserve

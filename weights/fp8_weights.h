// FP8 E4M3 weights (docs/FP8.md): which tensors may be FP8, quantizing a weight at load (one
// scale per output row: amax / 448), and reading a checkpoint's scales as Hugging Face stores
// them (`<name>.weight_scale` next to `<name>.weight`: per tensor [] / [1], or per output channel
// [rows] / [rows, 1]), expanded to one scale per row; and the host FP8 of a view marked to_fp8
// (quantized by the backend that loads it), for the backends and load-time rewrites that need it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weights/loaded_model.h"
#include "weights/safetensors.h"

namespace flashserve {

// The seven projections of a layer (q, k, v, o, gate, up, down: "model.layers.{i}.*_proj.weight"):
// and a mixture of experts' expert and shared-expert projections (not the router, not the shared
// expert's gate): the tensors --quantize fp8 converts and the only ones an FP8 checkpoint may
// store as FP8.
// Embeddings, norms, biases and lm_head stay as stored (docs/FP8.md says why).
bool is_fp8_projection(const std::string& name);

// "model.layers.0.mlp.up_proj.weight" -> "model.layers.0.mlp.up_proj.weight_scale".
std::string fp8_scale_name(const std::string& weight_name);

// A weight as FP8 codes and one fp32 scale per row.
struct Fp8Rows {
  std::vector<uint8_t> q;     // [rows, cols] E4M3 codes
  std::vector<float> scale;   // [rows]
};

// Per-row quantization of an f32/f16/bf16 matrix [rows, cols]: scale = amax(row) / 448 (1 for a
// row of zeros), q = encode(w / scale). per_tensor: one scale, amax of the whole matrix / 448,
// repeated for every row (how per-tensor checkpoints are written). Throws for a non-finite value
// (naming `name`).
Fp8Rows quantize_fp8_rows(const TensorView& w, const std::string& name, bool per_tensor = false);

// A view marked to_fp8 (TensorView) as the FP8 view it stands for: quantize_fp8_rows(w) held in
// *storage. Any other view is returned as it is.
TensorView fp8_view_on_host(const TensorView& w, Fp8Rows* storage);

// w's values as fp32 (f32, f16, bf16; FP8 with its row scales: decode(q) * scale, and so a view
// marked to_fp8; packed int4 and block-wise FP8 dequantized, weights/packed_views.h).
std::vector<float> weight_values(const TensorView& w);

// The scales of FP8 weight `weight_name` ([rows, cols]) from its weight_scale entry, one per row;
// errors name `path` and the tensor (wrong dtype or shape, non-finite or negative values).
std::vector<float> fp8_row_scales(const SafetensorsEntry& scale, const std::string& weight_name,
                                  int64_t rows, const std::string& path);

}  // namespace flashserve

// MXFP4 expert weights (gpt-oss; the format: core/fp4.h): a checkpoint's `<proj>_blocks`
// [E, rows, cols / 32, 16] and `<proj>_scales` [E, rows, cols / 32] (both U8) are one weight of
// E experts, each [rows, cols]. The loader leaves both in the mapped file (TensorView::mxfp4
// carries them to the backend, with no f32 or bf16 copy); whoever needs values asks
// dequantize_mxfp4.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weights/safetensors.h"

namespace flashserve {

struct Mxfp4Weight {
  int64_t experts = 0, rows = 0, cols = 0;  // every expert [rows, cols]
  const uint8_t* blocks = nullptr;  // [experts, rows, cols / 2]: two E2M1 codes a byte, low first
  const uint8_t* scales = nullptr;  // [experts, rows, cols / 32] E8M0
};

// The weight `name` ("model.layers.0.mlp.experts.gate_up_proj") of `experts` x [rows, cols] from
// its entries name_blocks and name_scales. Errors name the tensor and `path`: a dtype other than
// U8, a shape that disagrees with the config's sizes, cols not a multiple of 32, a NaN scale (255).
Mxfp4Weight read_mxfp4(const SafetensorsEntry& blocks, const SafetensorsEntry& scales,
                       const std::string& name, int64_t experts, int64_t rows, int64_t cols,
                       const std::string& path);

// The weight as f32 [experts, rows, cols].
std::vector<float> dequantize_mxfp4(const Mxfp4Weight& w);

}  // namespace flashserve

// Random-weight Llama models in the HF layout, for tests and benchmarks: config.json plus
// model.safetensors (or shards + model.safetensors.index.json). Deterministic: a tensor's values
// depend only on (seed, its name, its shape, scale), never on the shard layout or dtype.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "weights/loaded_model.h"

namespace flashserve {

// How a random model stores the layers' projections: as `dtype` like every other tensor, or as
// an FP8 checkpoint the way Hugging Face stores one (F8_E4M3 weight + F32 weight_scale of shape
// [rows, 1] per output channel or [] per tensor; config.json's quantization_config says fp8).
enum class Fp8Layout { kNone, kPerChannel, kPerTensor };

// Writes into `dir` (created if needed). Matrices are uniform with standard deviation `scale`;
// norm weights are 1 + uniform(-0.1, 0.1). Values are rounded to `dtype` (f32, f16 or bf16).
// With an FP8 layout the projections are those values quantized (weights/fp8_weights.h), so an
// f32 model of the same seed quantized at load holds the same codes and per-channel scales.
// Does not write a tokenizer; copy or link one in if the model needs it.
void write_random_hf_model(const std::string& dir, const ModelConfig& config, uint64_t seed,
                           DType dtype, int num_shards = 1, float scale = 0.02f,
                           Fp8Layout fp8 = Fp8Layout::kNone);

// The f32 values (before rounding to the file's dtype) that write_random_hf_model writes for
// tensor `name` of `shape`.
std::vector<float> random_tensor_values(const std::string& name, const std::vector<int64_t>& shape,
                                        uint64_t seed, float scale = 0.02f);

}  // namespace flashserve

// The tensors a Llama model needs, by Hugging Face name, with their shapes from a ModelConfig,
// and the config sanity checks shared by both loaders and the random-model writer.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "weights/loaded_model.h"

namespace flashserve {

using TensorShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// Every required tensor in a fixed order (embedding, layers 0..L-1 with the family's extra
// tensors, norm, lm_head unless tied).
TensorShapes llama_tensor_shapes(const ModelConfig& config);

// Throws flashserve::Error "<source>: <problem>" for non-positive sizes, num_q_heads not a
// multiple of num_kv_heads, an odd head_dim (RoPE pairs), or no eos id.
void validate_config(const ModelConfig& config, const std::string& source);

}  // namespace flashserve

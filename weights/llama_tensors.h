// The tensors a Llama model needs, by Hugging Face name, with their shapes from a ModelConfig,
// and the config sanity checks shared by both loaders and the random-model writer.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "weights/loaded_model.h"

namespace flashserve {

using TensorShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// Every required tensor, as the checkpoint names it, in a fixed order (embedding, layers 0..L-1
// with the family's extra tensors, norm, lm_head unless tied).
TensorShapes llama_tensor_shapes(const ModelConfig& config);

// Phi3's fused qkv_proj and gate_up_proj (fused_projections) as the q/k/v_proj and gate/up_proj
// views the forward pass reads: row ranges of the fused tensors, added to `tensors`.
void split_fused_projections(const ModelConfig& config, std::map<std::string, TensorView>* tensors);

// Throws flashserve::Error "<source>: <problem>" for non-positive sizes, num_q_heads not a
// multiple of num_kv_heads, an odd head_dim or number of rotated dims (RoPE pairs), LongRoPE
// factor lists of another length, a NoPE list not one entry per layer, or no eos id.
void validate_config(const ModelConfig& config, const std::string& source);

}  // namespace flashserve

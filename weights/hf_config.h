// Hugging Face config.json <-> ModelConfig for Llama models (LlamaForCausalLM / model_type llama).
#pragma once

#include <string>

#include "weights/model.h"

namespace flashserve {

// Reads and validates config.json; throws flashserve::Error "<path>: <problem>" for bad JSON,
// missing or mistyped fields, an unknown architecture or an unsupported rope_scaling type.
ModelConfig read_hf_config(const std::string& path);

// Merges generation_config.json into `config`: its eos_token_id entries (an int or a list) are
// added to config->eos_token_ids, and its temperature, top_p, top_k and repetition_penalty become
// config->generation. Throws flashserve::Error "<path>: <problem>" for bad JSON or values.
void read_generation_config(const std::string& path, ModelConfig* config);

// The config.json text for `config` (architectures LlamaForCausalLM); read_hf_config reads it back.
std::string hf_config_json(const ModelConfig& config);

}  // namespace flashserve

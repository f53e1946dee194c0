// config.json's RoPE scaling (rope_scaling, or transformers 5's rope_parameters) <-> RopeScaling:
// llama3, linear, dynamic NTK, YaRN and LongRoPE, each checked for the values the inverse-frequency
// table (model/rope_tables.h) needs. Shared by hf_config.cpp's reader and writer.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>

#include "weights/loaded_model.h"

namespace flashserve {

// The scaling in j[key] ("rope_scaling" or "rope_parameters"); `j` is the whole config, whose
// max_position_embeddings and original_max_position_embeddings (Phi3 keeps it at the top) fill
// what the object leaves out. Throws "<path>: <problem>" for an unsupported type or a bad value.
RopeScaling read_rope_scaling(const nlohmann::json& j, const std::string& path, const char* key);

// The rope_scaling object (null for plain RoPE) that read_rope_scaling reads back as `c`'s.
nlohmann::json rope_scaling_json(const ModelConfig& c);

}  // namespace flashserve

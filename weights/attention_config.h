// config.json's per-layer attention settings: which layers attend through a sliding window
// (layer_types where given, else each family's rule: Mistral and Phi3 every layer, Qwen2/Qwen3/
// SmolLM3 the layers from max_window_layers on with use_sliding_window, Gemma 2 the even layers,
// Gemma 3 all but every sliding_window_pattern-th), Gemma 3's local RoPE on those layers, and
// Gemma's softmax scale and soft-caps; read by hf_config.cpp and written back by hf_config_json.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>

#include "weights/loaded_model.h"

namespace flashserve {

// Fills c->layer_windows (empty when every layer sees the whole served context: a window at
// least max_position_embeddings long is full attention), Gemma 3's local RoPE layers
// (rope_layers 2, rope_local_theta; transformers 5's per-layer-type rope_parameters included)
// and Gemma's query_pre_attn_scalar and soft-caps, with transformers' defaults for absent keys.
// Throws "<path>: <problem>" for malformed values and windows the architecture does not have.
void read_attention_config(const nlohmann::json& j, const std::string& path, ModelConfig* c);

// The keys read_attention_config reads back as `c`'s settings, added to (or replacing in) *j.
void write_attention_config(const ModelConfig& c, nlohmann::json* j);

// Gemma's layer pattern for configs built in code (presets, tests): every `every`-th layer
// (1-based) attends fully, the others through `window` and, with rope_local_theta set, turn by
// the local RoPE table; every = 0 windows every layer (Mistral).
void set_sliding_layers(ModelConfig& c, int window, int every);

}  // namespace flashserve

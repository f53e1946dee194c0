// Hugging Face config.json <-> ModelConfig for the Llama family: LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, GraniteForCausalLM,
// Olmo2ForCausalLM, SmolLM3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM and the mixtures of
// experts Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, MixtralForCausalLM and GptOssForCausalLM
// (or their bare backbones, such as Qwen3Model, or their model_type). docs/MODELS.md says how each differs and how it is verified.
#pragma once

#include <string>

#include "weights/loaded_model.h"

namespace flashserve {

// Reads and validates config.json; throws flashserve::Error "<path>: <problem>" for bad JSON,
// missing or mistyped fields, an unsupported architecture (the message lists the supported ones)
// or a setting the forward pass does not implement (an unknown rope_scaling type, another
// activation, attention/MLP biases where the architecture has none, ...).
ModelConfig read_hf_config(const std::string& path);

// Merges generation_config.json into `config`: its eos_token_id entries (an int or a list) are
// added to config->eos_token_ids, and its temperature, top_p, top_k and repetition_penalty become
// config->generation. Throws flashserve::Error "<path>: <problem>" for bad JSON or values.
void read_generation_config(const std::string& path, ModelConfig* config);

// "LlamaForCausalLM, MistralForCausalLM, ..." for messages.
std::string supported_architectures();

// Sets c.architecture and its family flags (qkv_bias, qk_norm, ...) as config.json would; throws for
// an unsupported name. For configs built in code (tests, flashserve-random-model presets).
void set_architecture(ModelConfig& c, const std::string& architecture);

// The config.json text for `config` (its architecture); read_hf_config reads it back.
std::string hf_config_json(const ModelConfig& config);

}  // namespace flashserve

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

// The names of a mixture-of-experts layer's tensors (weights/loaded_model.h lists them).
enum class ExpertProj { kGate, kUp, kDown };
std::string moe_router_name(const ModelConfig& config, int layer);
std::string moe_expert_name(const ModelConfig& config, int layer, int expert, ExpertProj which);
std::string moe_shared_name(int layer, ExpertProj which);  // Qwen2-MoE's shared expert
// gpt-oss: the router's bias, and every expert's gate_up (kGate) or down (kDown) projection
// stacked in one MXFP4 weight ("model.layers.0.mlp.experts.gate_up_proj"; its bias: + "_bias").
std::string moe_router_bias_name(int layer);
std::string moe_stacked_name(int layer, ExpertProj which);
// Whether the config's experts are gpt-oss's: MXFP4, stacked, with biases (weights/mxfp4_weights.h).
bool mxfp4_experts(const ModelConfig& config);
std::string moe_shared_gate_name(int layer);
// How a tensor name takes part in a mixture-of-experts layer: a routed expert's projection (the
// expert intermediate dimension cut under tensor parallelism), the shared expert's, or neither.
enum class MoeRole { kNone, kExpert, kShared };
struct MoeTensor {
  MoeRole role = MoeRole::kNone;
  ExpertProj proj = ExpertProj::kGate;
};
MoeTensor moe_tensor(const std::string& name);

// A mixture-of-experts checkpoint's tensor names (`names`: all it holds) against its config:
// an expert numbered num_experts or more, experts in a layer the config makes dense, experts
// stored fused (one tensor for all experts) and router or expert biases are errors naming the
// tensor. Missing experts and wrong shapes are the required-tensor checks' errors.
void check_moe_names(const ModelConfig& config, const std::vector<std::string>& names,
                     const std::string& source);

// Phi3's fused qkv_proj and gate_up_proj (fused_projections) as the q/k/v_proj and gate/up_proj
// views the forward pass reads: row ranges of the fused tensors, added to `tensors`.
void split_fused_projections(const ModelConfig& config, std::map<std::string, TensorView>* tensors);

// Throws flashserve::Error "<source>: <problem>" for non-positive sizes, num_q_heads not a
// multiple of num_kv_heads, an odd head_dim or number of rotated dims (RoPE pairs), LongRoPE
// factor lists of another length, a NoPE list not one entry per layer, no eos id, or a
// mixture of experts whose top_k, expert sizes or sparse layer list do not fit together.
void validate_config(const ModelConfig& config, const std::string& source);

}  // namespace flashserve

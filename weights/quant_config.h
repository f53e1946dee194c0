// config.json's quantization_config as one struct (docs/QUANTIZATION.md): which format the
// projections are stored in (FP8 per tensor/channel, block-wise FP8, GPTQ, AWQ or
// compressed-tensors int4), its group size, symmetry and act-order, and which modules stay
// unquantized. Every setting the loaders do not implement is a start-up error naming it.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

namespace flashserve {

enum class QuantFormat {
  kNone,
  kFp8,         // F8_E4M3 projections with a per-tensor or per-row weight_scale (docs/FP8.md)
  kBlockFp8,    // F8_E4M3 projections with one scale per block of block_rows x block_cols
  kGptq,        // qweight [in/8, out], qzeros, scales, g_idx
  kAwq,         // qweight [in, out/8] in AWQ's nibble order, qzeros, scales
  kPackedInt4,  // compressed-tensors pack-quantized: weight_packed [out, in/8], weight_scale, ...
  kMxfp4,       // gpt-oss: the experts' *_blocks and *_scales (weights/mxfp4_weights.h)
};

struct QuantConfig {
  QuantFormat format = QuantFormat::kNone;
  // ModelConfig::quant_method: "" (none), "fp8" (FP8 of either kind), "gptq", "awq" or
  // "compressed-tensors" (its FP8 variant is "fp8": it loads as FP8 checkpoints do), "mxfp4".
  std::string method;
  int group_size = 0;      // int4: input columns per scale; -1 = one group per row
  bool desc_act = false;   // GPTQ act-order: g_idx assigns columns to groups in any order
  bool sym = true;         // int4: symmetric (zero point fixed at 8) or with stored zero points
  int gptq_zero_offset = 1;  // GPTQ files store zero - 1 (checkpoint_format "gptq"); v2: 0
  int block_rows = 0, block_cols = 0;  // block-wise FP8: weight_block_size
  std::string scale_suffix;  // block-wise FP8: "weight_scale_inv" (HF) or "weight_scale" (c-t)
  // Modules left unquantized: exact names ("model.layers.0.mlp.down_proj", "lm_head"),
  // "re:<regex>" (compressed-tensors' ignore) or, for AWQ's modules_to_not_convert, substrings.
  std::vector<std::string> ignore;
  bool ignore_substrings = false;
  // GPTQ modules_in_block_to_quantize, flattened ("self_attn.q_proj", ...); empty: all seven.
  std::vector<std::string> only_in_block;
  bool is_int4() const {
    return format == QuantFormat::kGptq || format == QuantFormat::kAwq ||
           format == QuantFormat::kPackedInt4;
  }
};

// Reads j["quantization_config"] of config.json `path` (absent or null: kNone).
QuantConfig read_quant_config(const nlohmann::json& config, const std::string& path);

// Whether projection `name` (our name, "model.layers.0.mlp.up_proj.weight") is stored in the
// quantized format of `q` rather than as a plain weight (ignore lists, modules_in_block...).
bool stores_quantized(const QuantConfig& q, const std::string& name);

// "gptq int4 weights (group 128, asymmetric, act-order)", "FP8 weights", ...: for logs.
std::string describe_quantization(const QuantConfig& q);

}  // namespace flashserve

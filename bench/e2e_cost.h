// The end-to-end benchmarks' ceilings, as plain arithmetic over a ModelConfig: how many bytes a
// forward step must move and how many FLOPs it must do, the batch-1 decode bandwidth roofline,
// and the ideal-schedule step-time lower bound of an offline batch. No device code; unit-tested
// in tests/tools/. Weights and KV are counted in the compute dtype (bf16: 2 bytes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weights/loaded_model.h"

namespace flashserve::bench {

// One sequence's part of a step: q_len new tokens after num_cached cached ones.
struct SeqWork {
  int q_len = 1;
  int num_cached = 0;
  bool wants_logits = true;  // the last position goes through lm_head
};

struct StepCost {
  double flops = 0;  // GEMMs (2 per multiply-add) + attention QK^T and PV
  double bytes = 0;  // weights + KV read and written + embedding rows + f32 logits out
};

// Parameters of the per-layer linear maps that one token multiplies, all layers: q, k, v, o,
// and the MLP (gate, up, down) or, in a mixture-of-experts layer, the router, top_k experts'
// gate, up and down and the shared expert with its gate.
int64_t layer_linear_params(const ModelConfig& c);
// Mixture of experts: how many of a sparse layer's experts a step of `tokens` tokens reads,
// expected under uniform routing (each token picks top_k distinct experts of num_experts):
// E (1 - (1 - k/E)^tokens). top_k for one token; every expert as tokens grow. 0 without experts.
double experts_read(const ModelConfig& c, int64_t tokens);
// The bytes one forward step of `tokens` tokens reads for weights: every layer's linear maps
// (of a sparse layer: its router, shared expert and experts_read(tokens) experts) and norms, the
// final norm and lm_head (the embedding table itself when tied: read once as the head). The
// embedding lookup's rows are per token and counted in step_cost. An FP8 model
// (config.quant_method "fp8") counts its projections at 1 byte per weight plus a 4-byte scale
// per output row; int4 at half a byte plus its group scales and zeros.
double weight_bytes(const ModelConfig& c, int elem_bytes = 2, int64_t tokens = 1);
// Every weight the model holds (all experts), as weight_bytes counts them.
double resident_weight_bytes(const ModelConfig& c, int elem_bytes = 2);
// The weight format a benchmark record names ("weights"): "fp8", "block-fp8", "int4-gptq",
// "int4-awq", "int4-compressed-tensors", "mxfp4" (gpt-oss's experts), or, unquantized, the
// compute dtype the weights run in ("bf16" on CUDA, "f32" on the CPU backend).
std::string weights_format(const ModelConfig& c, bool cuda);
// K and V of one token over all layers.
double kv_bytes_per_token(const ModelConfig& c, int elem_bytes = 2);

StepCost step_cost(const ModelConfig& c, const std::vector<SeqWork>& seqs, int elem_bytes = 2);
// max(FLOPs / flops_per_s, bytes / bytes_per_s): neither unit can go faster than its peak.
double step_time_lower_bound(const StepCost& s, double flops_per_s, double bytes_per_s);

// Batch-1 decode roofline in tokens/s: the decode steps that produce tokens 2..output_len after a
// prompt of prompt_len (the first comes from prefill), each bounded by its bytes / bandwidth.
double decode_roofline_tokens_per_s(const ModelConfig& c, int prompt_len, int output_len,
                                    double bytes_per_s, int elem_bytes = 2);

struct OfflineBound {
  double ideal_schedule_s = 0;  // one prefill step of every prompt, then output_len - 1 decode
                                // steps of all sequences; each step max(FLOPs, bytes) bound
  double flops_s = 0;           // all FLOPs of that schedule / flops_per_s
  double bytes_s = 0;           // all bytes of that schedule / bytes_per_s
  double decode_steps = 0;      // output_len - 1
};
// The offline batch's step-time lower bound (see docs/BENCHMARKS_E2E.md for why this schedule).
OfflineBound offline_lower_bound(const ModelConfig& c, int num_requests, int prompt_len,
                                 int output_len, double flops_per_s, double bytes_per_s,
                                 int elem_bytes = 2);

}  // namespace flashserve::bench

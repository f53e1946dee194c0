// Byte and FLOP counts of the Llama forward for the end-to-end benchmarks' ceilings.
#include "bench/e2e_cost.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace flashserve::bench {

namespace {

// One layer's linear maps, split into what every step reads whole (attention, a dense MLP, a
// router, a shared expert) and one routed expert. `rows`: their output rows (FP8 row scales).
struct LayerParams {
  double dense = 0, dense_rows = 0;
  double expert = 0, expert_rows = 0;  // one routed expert: gate, up, down
};

LayerParams layer_params(const ModelConfig& c, int layer) {
  const double h = c.hidden_size, q = double(c.num_q_heads) * c.head_dim,
               kv = double(c.num_kv_heads) * c.head_dim;
  LayerParams p;
  p.dense = h * q /*q*/ + 2 * h * kv /*k, v*/ + q * h /*o*/;
  p.dense_rows = q + 2 * kv + h;
  const MoeConfig& m = c.moe;
  if (!m.sparse(layer)) {
    const double i = c.intermediate_size;
    p.dense += 3 * h * i, p.dense_rows += 2 * i + h;  // gate, up, down
    return p;
  }
  p.dense += double(m.num_experts) * h, p.dense_rows += m.num_experts;  // router
  if (m.shared_intermediate > 0) {
    const double s = m.shared_intermediate;
    p.dense += 3 * h * s + h, p.dense_rows += 2 * s + h + 1;  // shared expert and its gate
  }
  p.expert = 3 * h * m.intermediate, p.expert_rows = 2.0 * m.intermediate + h;
  return p;
}

// Bytes of `params` weights with `rows` output rows in the model's projection format.
double projection_bytes(const ModelConfig& c, double params, double rows, int elem_bytes) {
  if (c.quant.is_int4()) {
    // Int4 projections as the CUDA backend holds them packed (docs/QUANTIZATION.md): half a byte
    // per weight, an f32 scale and a u8 zero point per group of each row.
    return params * (0.5 + (c.quant.group_size > 0 ? 5.0 / c.quant.group_size : 0.0));
  }
  if (c.quant_method == "fp8") return params + 4 * rows;  // a byte per weight, a scale per row
  return params * elem_bytes;
}

// Weight bytes with `experts` routed experts read in every sparse layer.
double bytes_with_experts(const ModelConfig& c, int elem_bytes, double experts) {
  const double norms = double(2 * c.num_layers + 1) * c.hidden_size;
  const double head = double(c.vocab_size) * c.hidden_size;
  double linear = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerParams p = layer_params(c, l);
    linear += projection_bytes(c, p.dense, p.dense_rows, elem_bytes) +
              experts * projection_bytes(c, p.expert, p.expert_rows, elem_bytes);
  }
  return linear + (norms + head) * elem_bytes;
}

}  // namespace

int64_t layer_linear_params(const ModelConfig& c) {
  double n = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerParams p = layer_params(c, l);
    n += p.dense + double(c.moe.top_k) * p.expert;  // p.expert is 0 in a dense layer
  }
  return int64_t(n);
}

double experts_read(const ModelConfig& c, int64_t tokens) {
  const MoeConfig& m = c.moe;
  if (m.num_experts <= 0 || tokens <= 0) return 0;
  const double e = m.num_experts, miss = 1.0 - double(m.top_k) / e;
  return e * (1.0 - std::pow(miss, double(tokens)));
}


double weight_bytes(const ModelConfig& c, int elem_bytes, int64_t tokens) {
  return bytes_with_experts(c, elem_bytes, experts_read(c, tokens));
}

std::string weights_format(const ModelConfig& c, bool cuda) {
  switch (c.quant.format) {
    case QuantFormat::kFp8: return "fp8";
    case QuantFormat::kBlockFp8: return "block-fp8";
    case QuantFormat::kGptq: return "int4-gptq";
    case QuantFormat::kAwq: return "int4-awq";
    case QuantFormat::kPackedInt4: return "int4-compressed-tensors";
    case QuantFormat::kMxfp4: return "mxfp4";
    case QuantFormat::kNone: break;
  }
  if (c.quant_method == "fp8") return "fp8";  // --quantize fp8 at load
  return cuda ? "bf16" : "f32";
}

double resident_weight_bytes(const ModelConfig& c, int elem_bytes) {
  return bytes_with_experts(c, elem_bytes, c.moe.num_experts);
}

double kv_bytes_per_token(const ModelConfig& c, int elem_bytes) {
  return 2.0 * c.num_layers * c.num_kv_heads * c.head_dim * elem_bytes;
}

StepCost step_cost(const ModelConfig& c, const std::vector<SeqWork>& seqs, int elem_bytes) {
  FS_CHECK(!seqs.empty(), "step_cost of an empty step");
  const double linear = double(layer_linear_params(c)), head = double(c.vocab_size) * c.hidden_size;
  const double kv_tok = kv_bytes_per_token(c, elem_bytes);
  int64_t tokens = 0;
  for (const SeqWork& w : seqs) tokens += w.q_len;
  StepCost s;
  s.bytes = weight_bytes(c, elem_bytes, tokens);
  for (const SeqWork& w : seqs) {
    FS_CHECK(w.q_len > 0 && w.num_cached >= 0, "bad SeqWork q_len ", w.q_len, " num_cached ",
             w.num_cached);
    const double q = w.q_len, kv_len = double(w.num_cached) + w.q_len;
    // Query i (0-based) attends to num_cached + i + 1 keys; QK^T and PV are 2 FLOPs per
    // multiply-add each over head_dim, for every q head of every layer.
    const double keys = q * w.num_cached + q * (q + 1) / 2;
    s.flops += 2 * linear * q + 4.0 * keys * c.num_q_heads * c.head_dim * c.num_layers;
    s.bytes += kv_len * kv_tok                    // every cached and new K/V read once by attention
               + q * kv_tok                       // the new K/V written
               + q * c.hidden_size * elem_bytes;  // embedding rows
    if (w.wants_logits) s.flops += 2 * head, s.bytes += 4.0 * c.vocab_size;  // f32 logits row
  }
  return s;
}

double step_time_lower_bound(const StepCost& s, double flops_per_s, double bytes_per_s) {
  FS_CHECK(flops_per_s > 0 && bytes_per_s > 0, "ceilings must be positive");
  return std::max(s.flops / flops_per_s, s.bytes / bytes_per_s);
}

double decode_roofline_tokens_per_s(const ModelConfig& c, int prompt_len, int output_len,
                                    double bytes_per_s, int elem_bytes) {
  FS_CHECK(prompt_len > 0 && output_len > 1 && bytes_per_s > 0, "bad decode roofline inputs");
  double seconds = 0;
  // The step producing generated token j (j >= 2) feeds token j-1 at position prompt_len + j - 2.
  for (int j = 2; j <= output_len; ++j)
    seconds += step_cost(c, {SeqWork{1, prompt_len + j - 2, true}}, elem_bytes).bytes / bytes_per_s;
  return double(output_len - 1) / seconds;
}

OfflineBound offline_lower_bound(const ModelConfig& c, int num_requests, int prompt_len,
                                 int output_len, double flops_per_s, double bytes_per_s,
                                 int elem_bytes) {
  FS_CHECK(num_requests > 0 && prompt_len > 0 && output_len > 0, "bad offline bound inputs");
  OfflineBound b;
  auto add = [&](const std::vector<SeqWork>& step) {
    const StepCost s = step_cost(c, step, elem_bytes);
    b.ideal_schedule_s += step_time_lower_bound(s, flops_per_s, bytes_per_s);
    b.flops_s += s.flops / flops_per_s;
    b.bytes_s += s.bytes / bytes_per_s;
  };
  add(std::vector<SeqWork>(size_t(num_requests), SeqWork{prompt_len, 0, true}));
  for (int j = 2; j <= output_len; ++j)
    add(std::vector<SeqWork>(size_t(num_requests), SeqWork{1, prompt_len + j - 2, true}));
  b.decode_steps = output_len - 1;
  return b;
}

}  // namespace flashserve::bench

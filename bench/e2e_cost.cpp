// Byte and FLOP counts of the Llama forward for the end-to-end benchmarks' ceilings.
#include "bench/e2e_cost.h"

#include <algorithm>

#include "core/error.h"

namespace flashserve::bench {

int64_t layer_linear_params(const ModelConfig& c) {
  const int64_t h = c.hidden_size, q = int64_t(c.num_q_heads) * c.head_dim,
                kv = int64_t(c.num_kv_heads) * c.head_dim, i = c.intermediate_size;
  const int64_t attn = h * q /*q*/ + 2 * h * kv /*k, v*/ + q * h /*o*/;
  const int64_t mlp = 3 * h * i;  // gate, up, down
  return int64_t(c.num_layers) * (attn + mlp);
}

double weight_bytes(const ModelConfig& c, int elem_bytes) {
  const double norms = double(2 * c.num_layers + 1) * c.hidden_size;
  const double head = double(c.vocab_size) * c.hidden_size;
  if (c.quant.is_int4()) {
    // Int4 projections as the CUDA backend holds them packed (docs/QUANTIZATION.md): half a byte
    // per weight, an f32 scale and a u8 zero point per group of each row.
    const double per_weight = 0.5 + (c.quant.group_size > 0 ? 5.0 / c.quant.group_size : 0.0);
    return double(layer_linear_params(c)) * per_weight + (norms + head) * elem_bytes;
  }
  if (c.quant_method != "fp8") return (double(layer_linear_params(c)) + norms + head) * elem_bytes;
  // FP8 projections: a byte per weight and an fp32 scale per output row.
  const double rows = double(c.num_layers) *
                      (double(c.num_q_heads + 2 * c.num_kv_heads) * c.head_dim /*q, k, v*/ +
                       2.0 * c.hidden_size /*o, down*/ + 2.0 * c.intermediate_size /*gate, up*/);
  return double(layer_linear_params(c)) + 4 * rows + (norms + head) * elem_bytes;
}

double kv_bytes_per_token(const ModelConfig& c, int elem_bytes) {
  return 2.0 * c.num_layers * c.num_kv_heads * c.head_dim * elem_bytes;
}

StepCost step_cost(const ModelConfig& c, const std::vector<SeqWork>& seqs, int elem_bytes) {
  FS_CHECK(!seqs.empty(), "step_cost of an empty step");
  const double linear = double(layer_linear_params(c)), head = double(c.vocab_size) * c.hidden_size;
  const double kv_tok = kv_bytes_per_token(c, elem_bytes);
  StepCost s;
  s.bytes = weight_bytes(c, elem_bytes);
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

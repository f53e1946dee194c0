// RoPE inverse frequencies per scaling type, the YaRN/LongRoPE attention factor and the partial
// rotary row order and factors (model/rope_tables.h). Computed in double, stored as float.
#include "model/rope_tables.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace flashserve {

namespace {

constexpr double kPi = 3.14159265358979323846;

// Llama 3.1 scaling: high frequencies stay, low ones are divided by `factor`, and the band
// between is interpolated smoothly in the wavelength's ratio to the old context.
double llama3(double f, const RopeScaling& s) {
  const double old_ctx = s.original_max_position_embeddings;
  const double low_wavelen = old_ctx / s.low_freq_factor;
  const double high_wavelen = old_ctx / s.high_freq_factor;
  const double wavelen = 2.0 * kPi / f;
  if (wavelen > low_wavelen) return f / s.factor;
  if (wavelen < high_wavelen) return f;
  const double smooth =
      (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * f / s.factor + smooth * f;
}

// YaRN: pairs that turn many times within the pretrained context keep their frequency, pairs
// that turn less than once are divided by `factor`, with a linear ramp over the pair index
// between (the ends found from beta_fast and beta_slow turns).
double yarn(double f, int i, int dim, double theta, const RopeScaling& s) {
  auto pair_of_turns = [&](double turns) {  // the (fractional) dim whose pair turns `turns` times
    return dim * std::log(s.original_max_position_embeddings / (turns * 2.0 * kPi)) /
           (2.0 * std::log(theta));
  };
  double low = pair_of_turns(s.beta_fast), high = pair_of_turns(s.beta_slow);
  if (s.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;
  const double scaled = std::clamp((i - low) / (high - low), 0.0, 1.0);
  return f / s.factor * scaled + f * (1.0 - scaled);
}

double mscale(double factor, double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; }

}  // namespace

int rotary_dim(const ModelConfig& c) { return int(c.head_dim * double(c.partial_rotary_factor)); }

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  FS_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0, "head_dim ", c.head_dim, " must be even");
  const int dim = rotary_dim(c);
  FS_CHECK(dim >= 2 && dim % 2 == 0 && dim <= c.head_dim, "rotary dims ", dim, " of head_dim ",
           c.head_dim, " must be even");
  const RopeScaling& s = c.rope_scaling;
  const std::string& type = s.type;
  FS_CHECK(type == "none" || type.empty() || type == "default" || type == "llama3" ||
               type == "linear" || type == "dynamic" || type == "yarn" || type == "longrope",
           "rope_scaling type '", type, "' is not supported");
  const bool long_context = c.max_model_len > s.original_max_position_embeddings;
  const std::vector<float>& ext = long_context ? s.long_factor : s.short_factor;
  FS_CHECK(type != "longrope" || int(ext.size()) == dim / 2, "longrope needs ", dim / 2,
           " factors, has ", ext.size());
  std::vector<float> out(size_t(c.head_dim / 2), 0.f);  // pairs past dim/2: not turned
  for (int i = 0; i < dim / 2; ++i) {
    double f = std::pow(double(c.rope_theta), -2.0 * i / double(dim));
    if (type == "llama3") f = llama3(f, s);
    if (type == "linear") f /= s.factor;
    if (type == "yarn") f = yarn(f, i, dim, c.rope_theta, s);
    if (type == "longrope") f /= ext[size_t(i)];
    out[size_t(i)] = float(f);
  }
  return out;
}

double rope_attention_factor(const ModelConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  if (s.attention_factor > 0.f && (s.type == "yarn" || s.type == "longrope"))
    return s.attention_factor;
  if (s.type == "yarn")
    return s.mscale > 0.f && s.mscale_all_dim > 0.f
               ? mscale(s.factor, s.mscale) / mscale(s.factor, s.mscale_all_dim)
               : mscale(s.factor, 1.0);
  if (s.type == "longrope" && s.factor > 1.f)
    return std::sqrt(1.0 + std::log(double(s.factor)) /
                               std::log(double(s.original_max_position_embeddings)));
  return 1.0;
}

std::vector<int> rotary_row_order(int head_dim, int rotary_dim) {
  const int half = head_dim / 2, rot_half = rotary_dim / 2, pass_half = (head_dim - rotary_dim) / 2;
  std::vector<int> order(static_cast<size_t>(head_dim));
  for (int j = 0; j < half; ++j) {
    const bool rotated = j < rot_half;
    order[size_t(j)] = rotated ? j : rotary_dim + (j - rot_half);
    order[size_t(half + j)] = rotated ? rot_half + j : rotary_dim + pass_half + (j - rot_half);
  }
  return order;
}

void partial_rotary_rows(const ModelConfig& c, int q_heads, int kv_heads, std::vector<int>* order,
                         std::vector<float>* factor) {
  const int d = c.head_dim, rot = rotary_dim(c);
  if (rot == d) return;
  FS_CHECK(!c.qk_norm && !c.qk_norm_full, c.architecture,
           ": partial rotary with q/k norms is not supported");
  const std::vector<int> head = rotary_row_order(d, rot);
  const int64_t qk_rows = int64_t(q_heads + kv_heads) * d, rows = qk_rows + int64_t(kv_heads) * d;
  for (int64_t r = 0; r < rows; ++r)
    order->push_back(r < qk_rows ? int(r - r % d + head[size_t(r % d)]) : int(r));
  const double af = rope_attention_factor(c);
  if (af == 1.0) return;
  factor->assign(size_t(rows), 1.f);
  for (int64_t r = 0; r < int64_t(q_heads) * d; ++r)
    if (r % d % (d / 2) < rot / 2) (*factor)[size_t(r)] = float(af * af);  // a rotated pair
}

}  // namespace flashserve

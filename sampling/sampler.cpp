// Host sampler: penalties and bias, temperature, top-k / top-p / min-p truncation and one Philox
// draw per token (order and conventions in sampling/sampler.h).
#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/philox.h"

namespace flashserve {

void validate_sampling(const SamplingParams& p, int vocab_size) {
  FS_CHECK(std::isfinite(p.temperature) && p.temperature >= 0.f, "temperature ", p.temperature,
           " must be finite and >= 0");
  FS_CHECK(p.top_p > 0.f && p.top_p <= 1.f, "top_p ", p.top_p, " must be in (0, 1]");
  FS_CHECK(p.min_p >= 0.f && p.min_p <= 1.f, "min_p ", p.min_p, " must be in [0, 1]");
  FS_CHECK(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.f, "repetition_penalty ",
           p.repetition_penalty, " must be > 0");
  FS_CHECK(std::isfinite(p.presence_penalty) && std::isfinite(p.frequency_penalty),
           "penalties must be finite");
  for (const auto& [token, bias] : p.logit_bias)
    FS_CHECK(token >= 0 && token < vocab_size, "logit_bias token ", token, " outside vocab of ",
             vocab_size);
}

SamplePath choose_sample_path(const SamplingParams& p, int vocab_size, bool device_allowed,
                              bool masked) {
  if (!device_allowed || p.logprobs >= 0) return SamplePath::kHost;
  try {
    validate_sampling(p, vocab_size);
  } catch (const Error&) {
    return SamplePath::kHost;
  }
  const bool plain_greedy = p.temperature == 0.f && p.presence_penalty == 0.f &&
                            p.frequency_penalty == 0.f && p.repetition_penalty == 1.f &&
                            p.logit_bias.empty();
  return plain_greedy && !masked ? SamplePath::kArgmax : SamplePath::kDevice;
}

namespace {

// Orders candidates by probability, highest first; equal ones by id so the order is total.
struct ByProbDesc {
  const std::vector<double>* prob;
  bool operator()(int32_t a, int32_t b) const {
    const double pa = (*prob)[a], pb = (*prob)[b];
    return pa != pb ? pa > pb : a < b;
  }
};

int32_t argmax(std::span<const float> x) {
  int32_t best = 0;  // strict > keeps the lowest id among ties
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[best]) best = int32_t(i);
  return best;
}

// Truncates the tempered distribution with top-k, top-p and min-p and draws once.
int32_t draw(std::span<const float> logits, const SamplingParams& p, uint64_t step) {
  const int vocab = int(logits.size());
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  // All -inf: nothing to weigh. A +inf logit: its probability is 1 against 0 for the rest
  // (exp of inf - inf would be NaN), so the first +inf wins.
  if (!std::isfinite(max_logit)) return argmax(logits);
  // Unnormalised probabilities; the most likely token has exactly 1.
  std::vector<double> prob(vocab);
  const double inv_t = 1.0 / double(p.temperature);
  std::vector<int32_t> cand;
  cand.reserve(vocab);
  for (int i = 0; i < vocab; ++i) {
    prob[i] = std::exp((double(logits[i]) - double(max_logit)) * inv_t);
    if (prob[i] > 0.0) cand.push_back(i);
  }
  if (p.top_k > 0 && size_t(p.top_k) < cand.size()) {
    std::nth_element(cand.begin(), cand.begin() + p.top_k, cand.end(), ByProbDesc{&prob});
    cand.resize(p.top_k);
  }
  if (p.top_p < 1.f) {  // smallest prefix (by probability) whose mass reaches top_p
    std::sort(cand.begin(), cand.end(), ByProbDesc{&prob});
    double total = 0.0;
    for (int32_t t : cand) total += prob[t];
    double cum = 0.0;
    size_t keep = 0;
    while (keep < cand.size() && cum < double(p.top_p) * total) cum += prob[cand[keep++]];
    cand.resize(std::max<size_t>(keep, 1));
  }
  if (p.min_p > 0.f) {  // relative to the top token, whose probability is 1 here
    cand.erase(std::remove_if(cand.begin(), cand.end(),
                              [&](int32_t t) { return prob[t] < double(p.min_p); }),
               cand.end());
  }
  // Inverse CDF over the survivors in id order: the draw is a function of (seed, step) only.
  std::sort(cand.begin(), cand.end());
  double total = 0.0;
  for (int32_t t : cand) total += prob[t];
  const Philox4x32 r = philox_draw(p.seed, step);
  const double target = philox_uniform53(r.v[0], r.v[1]) * total;
  double cum = 0.0;
  for (int32_t t : cand) {
    cum += prob[t];
    if (target < cum) return t;
  }
  return cand.back();  // rounding left target just above the last partial sum
}

}  // namespace

void apply_token_mask(std::span<float> logits, const uint32_t* allowed) {
  if (allowed == nullptr) return;
  for (size_t t = 0; t < logits.size(); ++t)
    if (!token_allowed(allowed, int32_t(t))) logits[t] = -std::numeric_limits<float>::infinity();
}

void apply_penalties(std::span<float> logits, std::span<const int32_t> prompt,
                     std::span<const int32_t> generated, const SamplingParams& p) {
  const int vocab = int(logits.size());
  for (const auto& [token, bias] : p.logit_bias) {
    FS_CHECK(token >= 0 && token < vocab, "logit_bias token ", token, " outside vocab");
    logits[token] += bias;
  }
  auto check_id = [&](int32_t t) {
    FS_CHECK(t >= 0 && t < vocab, "token id ", t, " outside vocab");
  };
  if (p.repetition_penalty != 1.f) {
    std::vector<char> seen(vocab, 0);
    for (int32_t t : prompt) check_id(t), seen[t] = 1;
    for (int32_t t : generated) check_id(t), seen[t] = 1;
    const float r = p.repetition_penalty;
    for (int i = 0; i < vocab; ++i)
      if (seen[i]) logits[i] = logits[i] > 0.f ? logits[i] / r : logits[i] * r;
  }
  if (p.presence_penalty != 0.f || p.frequency_penalty != 0.f) {
    std::vector<int> count(vocab, 0);
    for (int32_t t : generated) check_id(t), count[t]++;
    for (int i = 0; i < vocab; ++i)
      if (count[i] > 0) logits[i] -= p.frequency_penalty * float(count[i]) + p.presence_penalty;
  }
}

void log_softmax(std::span<const float> logits, std::span<float> out) {
  FS_CHECK(out.size() == logits.size(), "log_softmax size mismatch");
  const float m = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(double(l) - double(m));
  const double lse = double(m) + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = float(double(logits[i]) - lse);
}

SampledToken token_logprobs(std::span<const float> logits, int32_t token, int k) {
  FS_CHECK(token >= 0 && size_t(token) < logits.size(), "token ", token, " outside vocab");
  const float m = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(double(l) - double(m));
  const double lse = double(m) + std::log(sum);
  SampledToken out;
  out.token = token;
  out.logprob = float(double(logits[token]) - lse);
  k = std::min<int>(std::max(k, 0), int(logits.size()));
  if (k > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
    auto better = [&](int32_t a, int32_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    };
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), better);
    for (int i = 0; i < k; ++i)
      out.top_logprobs.emplace_back(ids[i], float(double(logits[ids[i]]) - lse));
  }
  return out;
}

SampledToken sample_token(std::span<const float> raw, const SampleRequest& in) {
  FS_CHECK(!raw.empty(), "sample_token: no logits");
  FS_CHECK(in.params != nullptr, "sample_token: no parameters");
  const SamplingParams& p = *in.params;
  validate_sampling(p, int(raw.size()));
  for (float l : raw) FS_CHECK(!std::isnan(l), "NaN logit reached the sampler");
  std::vector<float> work(raw.begin(), raw.end());
  apply_token_mask(work, in.allowed);
  apply_penalties(work, in.prompt, in.generated, p);
  const int32_t token = p.temperature == 0.f ? argmax(work) : draw(work, p, in.step);
  if (p.logprobs < 0) {  // not asked for: skip the log-sum-exp over the vocabulary
    SampledToken out;
    out.token = token;
    out.logprob = std::numeric_limits<float>::quiet_NaN();
    return out;
  }
  return token_logprobs(raw, token, p.logprobs);
}

}  // namespace flashserve

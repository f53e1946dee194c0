// The host sampler: greedy, seeded determinism, the sampled distribution against softmax,
// truncation (top-k / top-p / min-p), penalties and bias, logprobs, grammar masks, and
// parameter validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "core/error.h"
#include "sampling/sampler.h"

namespace flashserve {
namespace {

// Random logits not centred on zero, so sign-dependent code (repetition penalty) is exercised.
std::vector<float> random_logits(int vocab, uint32_t seed, float offset = 3.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(offset, 2.f);
  std::vector<float> v(vocab);
  for (float& x : v) x = n(rng);
  return v;
}

int32_t sample(const std::vector<float>& logits, const SamplingParams& p, uint64_t step = 0) {
  SampleRequest in;
  in.params = &p;
  in.step = step;
  return sample_token(logits, in).token;
}

// Logits whose softmax (temperature 1) is exactly `probs`.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(float(std::log(p) + 1.5));
  return l;
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  for (uint32_t s = 0; s < 20; ++s) {
    auto l = random_logits(1000, s);
    SamplingParams p;
    p.temperature = 0.f;
    int32_t want = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    EXPECT_EQ(sample(l, p), want);
  }
  std::vector<float> tie = {1.f, 5.f, 2.f, 5.f};
  SamplingParams p;
  p.temperature = 0.f;
  EXPECT_EQ(sample(tie, p), 1);
}

TEST(Sampler, TopKOneIsGreedy) {
  for (uint32_t s = 0; s < 50; ++s) {
    auto l = random_logits(300, s);
    SamplingParams p;
    p.temperature = 1.3f;
    p.top_k = 1;
    p.seed = s * 7919u;
    int32_t want = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    EXPECT_EQ(sample(l, p, s), want);
  }
}

// Non-finite maxima: all -inf gives the argmax (id 0); a +inf logit takes all the probability
// (the first +inf when there are several), for every truncation setting.
TEST(Sampler, NonFiniteMaxima) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> masked(50, -inf), plus = random_logits(50, 3);
  plus[17] = inf;
  plus[40] = inf;
  for (int top_k : {0, 3}) {
    for (float top_p : {1.f, 0.5f}) {
      SamplingParams p;
      p.temperature = 1.f;
      p.top_k = top_k;
      p.top_p = top_p;
      for (uint64_t step = 0; step < 10; ++step) {
        EXPECT_EQ(sample(masked, p, step), 0);
        EXPECT_EQ(sample(plus, p, step), 17);
      }
    }
  }
}

TEST(Sampler, SameSeedAndStepSameToken) {
  auto l = random_logits(500, 1, 0.f);
  SamplingParams p;
  p.temperature = 2.f;  // flat enough that different draws give different tokens
  std::set<int32_t> across_steps;
  for (uint64_t step = 0; step < 40; ++step) {
    p.seed = 1234;
    int32_t a = sample(l, p, step);
    EXPECT_EQ(a, sample(l, p, step));
    across_steps.insert(a);
  }
  EXPECT_GT(across_steps.size(), 10u);
}

TEST(Sampler, DistributionMatchesSoftmax) {
  // 8 tokens, temperature 0.7: chi-square over 40000 seeded draws against the expected counts.
  // The seeds are fixed so the test is deterministic; the bound 35 is p ~ 1e-5 for 7 dof.
  auto l = random_logits(8, 5, 1.f);
  const float temp = 0.7f;
  std::vector<double> expect(8);
  double z = 0;
  for (int i = 0; i < 8; ++i) z += expect[i] = std::exp(double(l[i]) / temp);
  const int n = 40000;
  std::vector<int> count(8, 0);
  SamplingParams p;
  p.temperature = temp;
  for (int s = 0; s < n; ++s) {
    p.seed = uint64_t(s) * 0x9E3779B97F4A7C15ull;
    count[sample(l, p, 3)]++;
  }
  double chi2 = 0;
  for (int i = 0; i < 8; ++i) {
    double e = n * expect[i] / z;
    chi2 += (count[i] - e) * (count[i] - e) / e;
  }
  EXPECT_LT(chi2, 35.0);
}

// Tokens drawn over many seeds from probs = {0.5, 0.3, 0.15, 0.05} under `p`.
std::set<int32_t> support(SamplingParams p) {
  auto l = logits_of({0.5, 0.3, 0.15, 0.05});
  std::set<int32_t> seen;
  for (int s = 0; s < 2000; ++s) {
    p.seed = uint64_t(s);
    seen.insert(sample(l, p, 0));
  }
  return seen;
}

TEST(Sampler, TruncationExcludesWhatItShould) {
  SamplingParams p;
  EXPECT_EQ(support(p), (std::set<int32_t>{0, 1, 2, 3}));
  p.top_k = 3;
  EXPECT_EQ(support(p), (std::set<int32_t>{0, 1, 2}));
  p = {};
  p.top_p = 0.75f;  // 0.5 < 0.75 <= 0.8
  EXPECT_EQ(support(p), (std::set<int32_t>{0, 1}));
  p.top_p = 0.85f;  // 0.8 < 0.85 <= 0.95
  EXPECT_EQ(support(p), (std::set<int32_t>{0, 1, 2}));
  p = {};
  p.min_p = 0.2f;  // keep prob >= 0.1
  EXPECT_EQ(support(p), (std::set<int32_t>{0, 1, 2}));
  p.min_p = 0.5f;  // keep prob >= 0.25
  EXPECT_EQ(support(p), (std::set<int32_t>{0, 1}));
  p = {};
  p.top_k = 3;
  p.top_p = 0.6f;  // over the top-3 renormalised: 0.5/0.95 = 0.526 < 0.6
  EXPECT_EQ(support(p), (std::set<int32_t>{0, 1}));
}

TEST(Sampler, PenaltiesAndBias) {
  std::vector<float> l = {2.f, -2.f, 3.f, -1.f, 0.5f, 4.f};
  std::vector<int32_t> prompt = {0, 1};
  std::vector<int32_t> gen = {2, 2, 3};
  SamplingParams p;
  p.repetition_penalty = 2.f;
  auto r = l;
  apply_penalties(r, prompt, gen, p);
  EXPECT_EQ(r, (std::vector<float>{1.f, -4.f, 1.5f, -2.f, 0.5f, 4.f}));

  p = {};
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  r = l;
  apply_penalties(r, prompt, gen, p);  // prompt tokens are not penalised here
  EXPECT_EQ(r, (std::vector<float>{2.f, -2.f, 3.f - 1.f - 0.25f, -1.f - 0.5f - 0.25f, 0.5f, 4.f}));

  p = {};
  p.logit_bias = {{4, 10.f}, {5, -100.f}};
  r = l;
  apply_penalties(r, prompt, gen, p);
  EXPECT_EQ(r, (std::vector<float>{2.f, -2.f, 3.f, -1.f, 10.5f, -96.f}));
  p.temperature = 0.f;  // the bias decides greedy, but logprobs stay those of the raw logits
  const SampleRequest in{&p, prompt, gen, 0};
  SampledToken t = sample_token(l, in);
  EXPECT_EQ(t.token, 4);
  EXPECT_TRUE(std::isnan(t.logprob));  // no logprobs asked for: none computed
  p.logprobs = 0;
  t = sample_token(l, in);
  EXPECT_EQ(t.token, 4);
  std::vector<float> ls(l.size());
  log_softmax(l, ls);
  EXPECT_FLOAT_EQ(t.logprob, ls[4]);
}

TEST(Sampler, Logprobs) {
  auto l = random_logits(2000, 9);
  SamplingParams p;
  p.temperature = 0.8f;
  p.seed = 42;
  p.logprobs = 5;
  const SampleRequest in{&p, {}, {}, 7};
  SampledToken t = sample_token(l, in);
  std::vector<float> ls(l.size());
  log_softmax(l, ls);
  double total = 0;
  for (float x : ls) total += std::exp(double(x));
  EXPECT_NEAR(total, 1.0, 1e-5);
  EXPECT_FLOAT_EQ(t.logprob, ls[t.token]);
  ASSERT_EQ(t.top_logprobs.size(), 5u);
  std::vector<float> sorted = ls;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  for (int i = 0; i < 5; ++i) {
    EXPECT_FLOAT_EQ(t.top_logprobs[i].second, sorted[i]);
    EXPECT_FLOAT_EQ(ls[t.top_logprobs[i].first], sorted[i]);
  }
  p.logprobs = 0;
  EXPECT_TRUE(sample_token(l, in).top_logprobs.empty());
}

TEST(Sampler, RejectsBadParameters) {
  std::vector<float> l = {0.f, 1.f};
  auto bad = [&](auto set) {
    SamplingParams p;
    set(p);
    EXPECT_THROW(sample_token(l, SampleRequest{&p, {}, {}, 0}), Error);
    EXPECT_EQ(choose_sample_path(p, 2, true), SamplePath::kHost);  // the host sampler fails it
  };
  bad([](SamplingParams& p) { p.temperature = -1.f; });
  bad([](SamplingParams& p) { p.top_p = 0.f; });
  bad([](SamplingParams& p) { p.min_p = 1.5f; });
  bad([](SamplingParams& p) { p.repetition_penalty = 0.f; });
  bad([](SamplingParams& p) { p.logit_bias = {{2, 1.f}}; });
  std::vector<float> nan = {0.f, NAN};
  const SamplingParams plain;
  EXPECT_THROW(sample_token(nan, SampleRequest{&plain, {}, {}, 0}), Error);
}

// A grammar mask forbids tokens before everything else: greedy and every draw stay inside it,
// a bias cannot bring a forbidden token back, and logprobs stay those of the raw logits.
TEST(Sampler, MaskForbidsBeforeEverythingElse) {
  const int vocab = 200;
  const std::vector<float> logits = random_logits(vocab, 7);
  std::vector<uint32_t> mask(mask_words(vocab), 0u);
  std::mt19937 rng(3);
  std::vector<int32_t> allowed;
  for (int t = 0; t < vocab; ++t)
    if (rng() % 7 == 0) mask[size_t(t) / 32] |= 1u << (t % 32), allowed.push_back(t);
  ASSERT_GT(allowed.size(), 5u);
  int32_t best = allowed[0];
  for (int32_t t : allowed)
    if (logits[size_t(t)] > logits[size_t(best)]) best = t;
  SamplingParams p;
  p.temperature = 0.f;
  int32_t forbidden = -1;  // the best forbidden token, biased far above every allowed one
  for (int32_t t = 0; t < vocab; ++t)
    if (!token_allowed(mask.data(), t) && (forbidden < 0 || logits[size_t(t)] > logits[size_t(forbidden)]))
      forbidden = t;
  p.logit_bias = {{forbidden, 50.f}};
  p.logprobs = 2;
  SampleRequest in{&p, {}, {}, 0, mask.data()};
  const SampledToken greedy = sample_token(logits, in);
  EXPECT_EQ(greedy.token, best);  // the masked argmax, whatever the bias says
  EXPECT_EQ(greedy.top_logprobs, sample_token(logits, SampleRequest{&p, {}, {}, 0}).top_logprobs);
  p.temperature = 1.5f;
  p.logprobs = -1;
  std::set<int32_t> seen;
  for (uint64_t step = 0; step < 300; ++step) {
    in.step = step;
    const int32_t t = sample_token(logits, in).token;
    EXPECT_TRUE(token_allowed(mask.data(), t)) << t;
    EXPECT_EQ(t, sample_token(logits, in).token);  // seeded: deterministic
    seen.insert(t);
  }
  EXPECT_GT(seen.size(), 3u);
}

}  // namespace
}  // namespace flashserve

// The one place that decides where a token is drawn.
TEST(Sampler, ChoosesWhereToSample) {
  using namespace flashserve;
  SamplingParams p;
  EXPECT_EQ(choose_sample_path(p, 10, true), SamplePath::kDevice);  // temperature 1
  EXPECT_EQ(choose_sample_path(p, 10, false), SamplePath::kHost);   // device not allowed
  p.temperature = 0.f;
  EXPECT_EQ(choose_sample_path(p, 10, true), SamplePath::kArgmax);
  p.repetition_penalty = 1.1f;  // greedy, but over the penalised row
  EXPECT_EQ(choose_sample_path(p, 10, true), SamplePath::kDevice);
  p.repetition_penalty = 1.f;
  p.logit_bias = {{3, 1.f}};
  EXPECT_EQ(choose_sample_path(p, 10, true), SamplePath::kDevice);
  p.logit_bias.clear();
  p.temperature = 0.f;  // a masked greedy row: the sampler's masked argmax, not the forward's
  EXPECT_EQ(choose_sample_path(p, 10, true, /*masked=*/true), SamplePath::kDevice);
  EXPECT_EQ(choose_sample_path(p, 10, false, /*masked=*/true), SamplePath::kHost);
  p.logprobs = 0;  // logprobs are computed on the host from the whole row
  EXPECT_EQ(choose_sample_path(p, 10, true), SamplePath::kHost);
}

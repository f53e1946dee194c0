// The GPU sampler (the CUDA backend's sample_rows, kernels/cuda/sampling.cu) against the host
// sampler (the CPU backend's sample_rows, which is sample_token) on the same f32 logits. Both
// are deterministic functions of (logits, parameters, seed, step), so every token must match:
// random rows and parameter mixes over several vocabulary sizes, plus ties, -inf, +inf, NaN,
// all -inf, top-k beyond the candidates, tiny and huge temperatures, repeated bias entries, and
// grammar masks (SampleRequest::allowed) from one allowed token to all, greedy ones included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "backends/backend.h"

namespace flashserve::test {
namespace {

struct Case {
  SamplingParams params;
  std::vector<int32_t> prompt, generated;
  uint64_t step = 0;
  std::vector<uint32_t> mask;  // empty: no grammar mask
};

class Sampling : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> cpu_ = make_cpu_backend(2);
  std::unique_ptr<Backend> gpu_ = make_cuda_backend(0);
  std::mt19937 rng_{2024};

  std::vector<int32_t> run(Backend& b, const std::vector<float>& logits, int64_t rows, int vocab,
                           const std::vector<int64_t>& which, const std::vector<Case>& cases) {
    Buffer t = b.allocate(DType::kF32, {rows, vocab});
    b.copy_from_host(t.tensor, logits.data());
    std::vector<SampleRequest> reqs;
    for (const Case& c : cases)
      reqs.push_back(SampleRequest{&c.params, c.prompt, c.generated, c.step,
                                   c.mask.empty() ? nullptr : c.mask.data()});
    std::vector<int32_t> ids(which.size(), -2);
    b.sample_rows(ids.data(), t.tensor, which, reqs);
    return ids;
  }

  // Row r of a random logits matrix; `kind` picks its shape (see below).
  void fill_row(float* row, int vocab, int kind) {
    std::normal_distribution<float> n(0.f, kind == 1 ? 8.f : 2.5f);
    for (int i = 0; i < vocab; ++i) row[i] = n(rng_);
    const float inf = std::numeric_limits<float>::infinity();
    switch (kind) {
      case 2:  // many exact ties
        for (int i = 0; i < vocab; ++i) row[i] = std::round(row[i] * 2.f) / 2.f;
        break;
      case 3:  // a masked vocabulary
        for (int i = 0; i < vocab; ++i)
          if (rng_() % 3 == 0) row[i] = -inf;
        break;
      case 4:  // nothing finite
        for (int i = 0; i < vocab; ++i) row[i] = -inf;
        break;
      case 5:  // one +inf (and a second one further on: the first wins)
        row[rng_() % vocab] = inf;
        row[vocab - 1] = inf;
        break;
      case 6:  // a NaN: both answer -1
        row[rng_() % vocab] = std::numeric_limits<float>::quiet_NaN();
        break;
      case 7:  // a flat row: every token equally likely
        for (int i = 0; i < vocab; ++i) row[i] = 0.5f;
        break;
      default:
        break;
    }
  }

  Case random_case(int vocab) {
    auto pick = [&](std::initializer_list<float> v) { return *(v.begin() + rng_() % v.size()); };
    Case c;
    SamplingParams& p = c.params;
    p.temperature = pick({0.f, 0.05f, 0.7f, 1.f, 1.f, 1.5f, 50.f});
    p.top_k = int(pick({0, 0, 1, 2, 10, 50, float(vocab), float(vocab + 5)}));
    p.top_p = pick({1.f, 1.f, 0.95f, 0.9f, 0.5f, 0.01f});
    p.min_p = pick({0.f, 0.f, 0.f, 0.05f, 0.5f, 1.f});
    p.seed = (uint64_t(rng_()) << 32) | rng_();
    c.step = rng_() % 1000;
    if (rng_() % 3 == 0) p.repetition_penalty = pick({0.8f, 1.1f, 1.5f});
    if (rng_() % 3 == 0) p.presence_penalty = pick({-0.5f, 0.3f, 1.f});
    if (rng_() % 3 == 0) p.frequency_penalty = pick({-0.2f, 0.25f, 0.9f});
    const int n_bias = rng_() % 4 == 0 ? int(rng_() % 6) : 0;
    for (int i = 0; i < n_bias; ++i) {
      const int32_t t = int32_t(rng_() % uint32_t(std::min(vocab, 8)));  // repeats likely
      p.logit_bias.emplace_back(t, pick({-100.f, -3.f, 0.5f, 5.f}));
    }
    const int np = int(rng_() % 40), ng = int(rng_() % 40);
    for (int i = 0; i < np; ++i) c.prompt.push_back(int32_t(rng_() % uint32_t(vocab)));
    for (int i = 0; i < ng; ++i)  // generated ids repeat, so counts exceed 1
      c.generated.push_back(int32_t(rng_() % uint32_t(std::min(vocab, 20))));
    if (rng_() % 2 == 0) {  // a grammar mask: one token, a few, half, or all but one allowed
      const uint32_t density = rng_() % 4;
      c.mask.assign(mask_words(vocab), 0u);
      for (int t = 0; t < vocab; ++t) {
        const bool on = density == 1 ? rng_() % 50 == 0 : density == 2 ? rng_() % 2 == 0 : density == 3;
        if (on) c.mask[size_t(t) / 32] |= 1u << (t % 32);
      }
      const int32_t t = int32_t(rng_() % uint32_t(vocab));  // density 0: just this one
      if (density == 3) c.mask[size_t(t) / 32] &= ~(1u << (t % 32));
      else c.mask[size_t(t) / 32] |= 1u << (t % 32);
    }
    return c;
  }

  void compare(int vocab, int rows, int row_kinds) {
    std::vector<float> logits(size_t(rows) * vocab);
    std::vector<int64_t> which;
    std::vector<Case> cases;
    int nan_rows = 0;
    for (int r = 0; r < rows; ++r) {
      const int kind = r < row_kinds ? r : int(rng_() % 3);
      fill_row(logits.data() + size_t(r) * vocab, vocab, kind);
      nan_rows += kind == 6;
      // Rows in a shuffled order, some twice with other parameters.
      which.push_back(int64_t((r * 7919) % rows));
      cases.push_back(random_case(vocab));
      if (r % 5 == 0) {
        which.push_back(r);
        cases.push_back(random_case(vocab));
      }
    }
    const std::vector<int32_t> want = run(*cpu_, logits, rows, vocab, which, cases);
    const std::vector<int32_t> got = run(*gpu_, logits, rows, vocab, which, cases);
    int mismatches = 0, negative = 0;
    for (size_t i = 0; i < which.size(); ++i) {
      negative += got[i] < 0;
      if (got[i] != want[i]) {
        ++mismatches;
        const SamplingParams& p = cases[i].params;
        ADD_FAILURE() << "vocab " << vocab << " sample " << i << " (row " << which[i]
                      << "): gpu " << got[i] << " host " << want[i] << "; T " << p.temperature
                      << " top_k " << p.top_k << " top_p " << p.top_p << " min_p " << p.min_p;
      }
    }
    std::printf("vocab %6d: %zu samples, %d mismatches, %d NaN answers\n", vocab, which.size(),
                mismatches, negative);
    EXPECT_EQ(negative > 0, nan_rows > 0);
  }
};

TEST_F(Sampling, MatchesTheHostSampler) {
  for (int vocab : {1, 2, 37, 512, 1000, 32000}) compare(vocab, 96, vocab >= 8 ? 8 : 0);
  compare(128256, 24, 8);
}

// The same (seed, step) gives the same token on every call; another seed, mostly another.
TEST_F(Sampling, SeededDrawsRepeat) {
  const int vocab = 32000, rows = 64;
  std::vector<float> logits(size_t(rows) * vocab);
  for (int r = 0; r < rows; ++r) fill_row(logits.data() + size_t(r) * vocab, vocab, 7);  // flat
  std::vector<int64_t> which;
  std::vector<Case> cases(rows);
  for (int r = 0; r < rows; ++r) {
    which.push_back(r);
    cases[r].params.seed = 99;
    cases[r].step = uint64_t(r);
  }
  const std::vector<int32_t> a = run(*gpu_, logits, rows, vocab, which, cases);
  EXPECT_EQ(a, run(*gpu_, logits, rows, vocab, which, cases));
  int distinct = 0;
  for (int r = 1; r < rows; ++r) distinct += a[r] != a[r - 1];
  EXPECT_GT(distinct, rows / 2) << "draws over a flat row barely change with the step";
}

TEST_F(Sampling, InvalidParametersThrow) {
  std::vector<float> logits(64, 0.f);
  std::vector<Case> cases(1);
  cases[0].params.top_p = 0.f;
  EXPECT_THROW(run(*gpu_, logits, 1, 64, {0}, cases), Error);
  cases[0].params.top_p = 1.f;
  cases[0].params.logit_bias = {{64, 1.f}};
  EXPECT_THROW(run(*gpu_, logits, 1, 64, {0}, cases), Error);
  cases[0].params.logit_bias.clear();
  EXPECT_THROW(run(*gpu_, logits, 1, 64, {1}, cases), Error);  // row outside the tensor
}

}  // namespace
}  // namespace flashserve::test

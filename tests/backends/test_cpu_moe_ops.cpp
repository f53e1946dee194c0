// The CPU backend's mixture-of-experts ops (moe_route, moe_experts, add_sigmoid_gated over
// experts laid out by the default load_moe_experts) against a plain double-precision
// computation written here: the top_k experts picked one at a time as the first largest logit
// left (so ties go to the lower expert id, as torch.topk's on the CPU), softmax probabilities,
// and each expert's SwiGLU MLP. Edge cases: every token to one expert, most experts with no
// tokens, batch 1 and 256, all-equal and partly equal logits, top_k equal to the number of
// experts; and bad input (top_k out of range, an expert id out of range, sizes that disagree)
// is an error, never a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/backend.h"
#include "core/error.h"
#include "weights/loaded_model.h"

namespace flashserve {
namespace {

// Experts' weights as the loader would give them: f32 views over host memory.
struct Experts {
  int num, hidden, inter;
  std::vector<std::vector<float>> gate, up, down;  // [num] each [inter, hidden] / [hidden, inter]
  Experts(int n, int h, int i, uint32_t seed) : num(n), hidden(h), inter(i) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-0.3f, 0.3f);
    auto fill = [&](size_t count) {
      std::vector<float> v(count);
      for (float& x : v) x = u(rng);
      return v;
    };
    for (int e = 0; e < n; ++e) {
      gate.push_back(fill(size_t(i) * h));
      up.push_back(fill(size_t(i) * h));
      down.push_back(fill(size_t(h) * i));
    }
  }
  std::shared_ptr<MoeExperts> load(Backend& b) const {
    std::vector<TensorView> g, u, d;
    for (int e = 0; e < num; ++e) {
      g.push_back(TensorView{DType::kF32, {inter, hidden}, gate[e].data()});
      u.push_back(TensorView{DType::kF32, {inter, hidden}, up[e].data()});
      d.push_back(TensorView{DType::kF32, {hidden, inter}, down[e].data()});
    }
    return b.load_moe_experts(g, u, d);
  }
  // Expert e's MLP on x, in double.
  std::vector<double> apply(int e, const float* x) const {
    std::vector<double> act(static_cast<size_t>(inter)), y(static_cast<size_t>(hidden), 0.0);
    for (int i = 0; i < inter; ++i) {
      double g = 0, v = 0;
      for (int c = 0; c < hidden; ++c) {
        g += double(gate[e][size_t(i) * hidden + c]) * x[c];
        v += double(up[e][size_t(i) * hidden + c]) * x[c];
      }
      act[size_t(i)] = g / (1 + std::exp(-g)) * v;
    }
    for (int h = 0; h < hidden; ++h)
      for (int i = 0; i < inter; ++i)
        y[size_t(h)] += double(down[e][size_t(h) * inter + i]) * act[size_t(i)];
    return y;
  }
};

// Per row: the top_k expert ids, picked one at a time (first largest remaining logit), and
// their softmax probabilities, renormalised to sum 1 when asked.
void expected_route(const std::vector<float>& logits, int n, int experts, int top_k, bool renorm,
                    std::vector<int>* ids, std::vector<double>* weights) {
  for (int t = 0; t < n; ++t) {
    const float* row = logits.data() + size_t(t) * experts;
    double max = row[0], sum = 0, picked = 0;
    for (int e = 0; e < experts; ++e) max = std::max(max, double(row[e]));
    for (int e = 0; e < experts; ++e) sum += std::exp(row[e] - max);
    std::vector<bool> used(size_t(experts), false);
    std::vector<int> mine;
    for (int j = 0; j < top_k; ++j) {
      int best = -1;
      for (int e = 0; e < experts; ++e)
        if (!used[size_t(e)] && (best < 0 || row[e] > row[best])) best = e;
      used[size_t(best)] = true;
      mine.push_back(best);
      picked += std::exp(row[best] - max);
    }
    for (int e : mine) {
      ids->push_back(e);
      weights->push_back(std::exp(row[e] - max) / (renorm ? picked : sum));
    }
  }
}

class CpuMoeOps : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> b = make_cpu_backend(3);
  Buffer upload(DType dtype, std::initializer_list<int64_t> shape, const void* data) {
    Buffer buf = b->allocate(dtype, shape);
    b->copy_from_host(buf.tensor, data);
    return buf;
  }
  // Routes `logits` and runs the experts on x; checks both against the plain computation.
  void check(const Experts& ex, const std::vector<float>& x, const std::vector<float>& logits,
             int n, int top_k, bool renorm) {
    SCOPED_TRACE(testing::Message() << "n " << n << " experts " << ex.num << " top_k " << top_k
                                    << (renorm ? " renormalised" : ""));
    Buffer lg = upload(DType::kF32, {n, ex.num}, logits.data());
    Buffer ids = b->allocate(DType::kI32, {n, top_k}), w = b->allocate(DType::kF32, {n, top_k});
    b->moe_route(ids.tensor, w.tensor, lg.tensor, top_k, renorm);
    std::vector<int32_t> got_ids(size_t(n) * top_k);
    std::vector<float> got_w(size_t(n) * top_k);
    b->copy_to_host(got_ids.data(), ids.tensor);
    b->copy_to_host(got_w.data(), w.tensor);
    std::vector<int> want_ids;
    std::vector<double> want_w;
    expected_route(logits, n, ex.num, top_k, renorm, &want_ids, &want_w);
    ASSERT_EQ(std::vector<int>(got_ids.begin(), got_ids.end()), want_ids);
    for (size_t i = 0; i < want_w.size(); ++i) EXPECT_NEAR(got_w[i], want_w[i], 1e-6) << i;

    auto experts = ex.load(*b);
    Buffer xb = upload(DType::kF32, {n, ex.hidden}, x.data());
    Buffer out = b->allocate(DType::kF32, {n, ex.hidden});
    b->moe_experts(out.tensor, xb.tensor, ids.tensor, w.tensor, *experts);
    std::vector<float> got(size_t(n) * ex.hidden);
    b->copy_to_host(got.data(), out.tensor);
    double err = 0, scale = 0;
    for (int t = 0; t < n; ++t) {
      std::vector<double> want(size_t(ex.hidden), 0.0);
      for (int j = 0; j < top_k; ++j) {
        const size_t k = size_t(t) * top_k + j;
        const std::vector<double> y = ex.apply(want_ids[k], x.data() + size_t(t) * ex.hidden);
        for (int h = 0; h < ex.hidden; ++h) want[size_t(h)] += want_w[k] * y[size_t(h)];
      }
      for (int h = 0; h < ex.hidden; ++h) {
        err = std::max(err, std::abs(got[size_t(t) * ex.hidden + h] - want[size_t(h)]));
        scale = std::max(scale, std::abs(want[size_t(h)]));
      }
    }
    EXPECT_LT(err, 1e-5 * scale + 1e-7);  // fp32 sums of 32..64 terms
  }
};

std::vector<float> uniform(size_t n, uint32_t seed, float lo = -2.f, float hi = 2.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TEST_F(CpuMoeOps, RandomBatchesOfOneToTwoHundredFiftySix) {
  const Experts ex(8, 32, 48, 1);
  for (int n : {1, 3, 256})
    for (bool renorm : {false, true}) {
      check(ex, uniform(size_t(n) * 32, n), uniform(size_t(n) * 8, n + 100), n, 2, renorm);
      check(ex, uniform(size_t(n) * 32, n), uniform(size_t(n) * 8, n + 200), n, 3, renorm);
    }
}

TEST_F(CpuMoeOps, EveryTokenToOneExpertAndExpertsWithoutTokens) {
  const Experts ex(16, 32, 32, 2);
  const int n = 40;
  std::vector<float> logits = uniform(size_t(n) * 16, 3, -1.f, 1.f);
  for (int t = 0; t < n; ++t) logits[size_t(t) * 16 + 5] = 9.f;  // expert 5 first for every row
  check(ex, uniform(size_t(n) * 32, 4), logits, n, 1, true);      // weight 1 each
  check(ex, uniform(size_t(n) * 32, 4), logits, n, 1, false);     // weight p(5)
  check(ex, uniform(size_t(n) * 32, 4), logits, n, 2, false);     // 5 and one other
  // Two tokens over sixteen experts, top 2: at most four experts see a token.
  check(ex, uniform(2 * 32, 5), uniform(2 * 16, 6), 2, 2, true);
}

TEST_F(CpuMoeOps, TiesGoToTheLowerExpertId) {
  const Experts ex(6, 32, 32, 7);
  // All equal: experts 0, 1, 2 in order, each 1/6 (or 1/3 renormalised).
  std::vector<float> equal(6 * 4, 0.5f);
  check(ex, uniform(4 * 32, 8), equal, 4, 3, false);
  check(ex, uniform(4 * 32, 8), equal, 4, 3, true);
  // Partly equal: the larger logit first, then the tied pair lower id first.
  const std::vector<float> partly = {1.f, 3.f, 2.f, 3.f, 2.f, 0.f};
  check(ex, uniform(32, 9), partly, 1, 4, false);
  Buffer lg = upload(DType::kF32, {1, 6}, partly.data());
  Buffer ids = b->allocate(DType::kI32, {1, 4}), w = b->allocate(DType::kF32, {1, 4});
  b->moe_route(ids.tensor, w.tensor, lg.tensor, 4, false);
  std::vector<int32_t> got(4);
  b->copy_to_host(got.data(), ids.tensor);
  EXPECT_EQ(got, (std::vector<int32_t>{1, 3, 2, 4}));
}

TEST_F(CpuMoeOps, TopKOfEveryExpert) {
  const Experts ex(4, 32, 32, 10);
  // Every expert, in falling order of logit: weights are the whole softmax (sums to 1 either
  // way), so the output is the probability-weighted sum of all experts.
  check(ex, uniform(5 * 32, 11), uniform(5 * 4, 12), 5, 4, false);
  check(ex, uniform(5 * 32, 11), uniform(5 * 4, 12), 5, 4, true);
}

TEST_F(CpuMoeOps, SigmoidGatedAdd) {
  const int n = 3, hidden = 8;
  std::vector<float> out = uniform(n * hidden, 13), y = uniform(n * hidden, 14);
  const std::vector<float> gate = {-3.f, 0.f, 2.5f};
  Buffer ob = upload(DType::kF32, {n, hidden}, out.data());
  Buffer yb = upload(DType::kF32, {n, hidden}, y.data());
  Buffer gb = upload(DType::kF32, {n, 1}, gate.data());
  b->add_sigmoid_gated(ob.tensor, yb.tensor, gb.tensor);
  std::vector<float> got(n * hidden);
  b->copy_to_host(got.data(), ob.tensor);
  for (int r = 0; r < n; ++r)
    for (int h = 0; h < hidden; ++h) {
      const double s = 1 / (1 + std::exp(-double(gate[r])));
      EXPECT_NEAR(got[r * hidden + h], out[r * hidden + h] + s * y[r * hidden + h], 1e-6);
    }
}

TEST_F(CpuMoeOps, BadInputIsAnError) {
  const Experts ex(4, 32, 32, 15);
  const std::vector<float> logits = uniform(2 * 4, 16);
  Buffer lg = upload(DType::kF32, {2, 4}, logits.data());
  Buffer ids = b->allocate(DType::kI32, {2, 5}), w = b->allocate(DType::kF32, {2, 5});
  EXPECT_THROW(b->moe_route(ids.tensor, w.tensor, lg.tensor, 5, true), Error);  // top_k > experts
  Buffer ids0 = b->allocate(DType::kI32, {2, 1}), w0 = b->allocate(DType::kF32, {2, 1});
  EXPECT_THROW(b->moe_route(ids0.tensor, w0.tensor, lg.tensor, 0, true), Error);  // top_k 0
  EXPECT_THROW(b->moe_route(ids0.tensor, w0.tensor, lg.tensor, 2, true), Error);  // ids too small
  // An expert id out of range.
  auto experts = ex.load(*b);
  const std::vector<int32_t> bad_ids = {0, 4};
  const std::vector<float> ones = {1.f, 1.f};
  Buffer bi = upload(DType::kI32, {2, 1}, bad_ids.data());
  Buffer bw = upload(DType::kF32, {2, 1}, ones.data());
  const std::vector<float> x = uniform(2 * 32, 17);
  Buffer xb = upload(DType::kF32, {2, 32}, x.data());
  Buffer out = b->allocate(DType::kF32, {2, 32});
  EXPECT_THROW(b->moe_experts(out.tensor, xb.tensor, bi.tensor, bw.tensor, *experts), Error);
  // x of another width than the experts'.
  Buffer narrow = b->allocate(DType::kF32, {2, 16});
  EXPECT_THROW(b->moe_experts(out.tensor, narrow.tensor, bi.tensor, bw.tensor, *experts), Error);
  // Experts whose counts disagree.
  std::vector<TensorView> g = {TensorView{DType::kF32, {32, 32}, ex.gate[0].data()}};
  EXPECT_THROW(b->load_moe_experts(g, {}, {}), Error);
}

}  // namespace
}  // namespace flashserve

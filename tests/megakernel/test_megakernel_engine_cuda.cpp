// The engine on the CUDA backend (label gpu; skipped without one) with the decode megakernel on
// and off over the same workloads, on stories260K with blocks of 16 and 4 tokens. The workloads
// are the engine's hard cases for the kernel: concurrent requests whose pure decode steps shrink
// from 12 sequences (the kernel-per-op fallback) to 1; decode over prefix-cached blocks that
// eight sequences share; a KV cache so small that sequences are preempted, recomputed and
// resumed. The two paths round differently (the megakernel keeps f32 activations where the
// other path stores bf16), so greedy tokens may part where two tokens are nearly tied; the
// test compares each request's logprobs step by step up to the first such parting and checks
// that the parting is a near-tie. A wrong block, position or length in the megakernel's
// attention moves logprobs by far more than the bounds below. The CPU backend runs the same
// workload as the f32 reference: on average the megakernel must be no further from it than the
// other path is (or within 0.01 nats of it, where both are that close).
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <set>

#include "tests/engine/stories_engine.h"
#include "tests/engine/stream_util.h"

namespace flashserve {
namespace {

// Forwards to the real runner, holding steps while the gate is closed (so a batch of requests
// is queued before its second step whatever the thread timing, and the runs with and without
// the megakernel schedule the same steps), and records the size of every pure decode step (the
// steps the megakernel takes when they hold 1..8 sequences).
class GatedRunner : public ModelRunner {
 public:
  explicit GatedRunner(std::unique_ptr<ModelRunner> inner) : inner_(std::move(inner)) {}
  const ModelConfig& config() const override { return inner_->config(); }
  std::string backend_name() const override { return inner_->backend_name(); }
  int block_size() const override { return inner_->block_size(); }
  int num_kv_blocks() const override { return inner_->num_kv_blocks(); }
  uint64_t graphs_recorded() const override { return inner_->graphs_recorded(); }

  void step(StepPlan& plan, std::vector<float>* logits, std::vector<int32_t>* sampled_ids,
            std::vector<float>* hidden) override {
    launch(plan);
    finish(logits, sampled_ids, hidden);
  }
  void launch(StepPlan& plan) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      held_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return !closed_; });
      held_ = false;
      bool decode = true;
      for (const StepChunk& c : plan.chunks)
        decode = decode && c.num_tokens == 1 && c.logits == LogitsWanted::kLast;
      if (decode) decode_batches_.push_back(int(plan.chunks.size()));
    }
    inner_->launch(plan);
  }
  void finish(std::vector<float>* logits, std::vector<int32_t>* sampled_ids,
              std::vector<float>* hidden) override {
    inner_->finish(logits, sampled_ids, hidden);
  }

  // Test controls (any thread).
  void close_gate() { set_closed(true); }
  void open_gate() { set_closed(false); }
  void wait_until_held() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return held_; });
  }
  std::vector<int> decode_batches() const {
    std::lock_guard<std::mutex> lock(mu_);
    return decode_batches_;
  }

 private:
  void set_closed(bool closed) {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = closed;
    cv_.notify_all();
  }

  std::unique_ptr<ModelRunner> inner_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool closed_ = false, held_ = false;
  std::vector<int> decode_batches_;  // sequences of each pure decode step, in order
};

struct Workload {
  int64_t kv_tokens = 4096;
  int max_num_batched_tokens = 64;  // chunked prefill: prefill chunks share steps with decodes
  std::vector<GenerationRequest> primers;  // run one after another first (fill the prefix cache)
  std::vector<GenerationRequest> batch;    // then queued together
};

struct EngineRun {
  std::vector<Collected> outputs;  // primers, then the batch
  EngineMetrics metrics;
  std::vector<int> decode_batches;
  uint64_t graphs_recorded = 0;
};

EngineRun run_engine(const Workload& w, bool megakernel, int block_size,
                     const std::string& backend = "cuda") {
  ModelRunnerOptions ro;
  ro.backend = backend;
  ro.block_size = block_size;
  ro.kv_cache_tokens = w.kv_tokens;
  ro.megakernel = megakernel;
  EngineOptions eo;
  eo.max_num_batched_tokens = w.max_num_batched_tokens;  // prefix caching: on by default
  auto owned = std::make_unique<GatedRunner>(ModelRunner::create(stories_model(), ro));
  GatedRunner& runner = *owned;
  auto engine = Engine::create(std::move(owned), eo);
  EngineRun r;
  for (GenerationRequest q : w.primers) {
    q.sampling.logprobs = 3;  // the chosen token's logprob and the top 3: the comparisons below
    r.outputs.push_back(collect(*engine->submit(q)));
  }
  // The batch's first step holds its first request alone; all others join from the second.
  runner.close_gate();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (GenerationRequest q : w.batch) {
    q.sampling.logprobs = 3;
    streams.push_back(engine->submit(q));
    if (streams.size() == 1) runner.wait_until_held();
  }
  runner.open_gate();
  for (const auto& s : streams) {
    EXPECT_NE(s, nullptr);
    if (s) r.outputs.push_back(collect(*s));
  }
  r.metrics = engine->metrics();
  r.decode_batches = runner.decode_batches();
  r.graphs_recorded = runner.graphs_recorded();
  EXPECT_FALSE(engine->failed());
  return r;
}

// Bounds (nats) on logprobs of the same token after the same tokens. Per step: the kernel tests
// bound a logit's error by 5% of the row's largest (test_megakernel_cuda), about 0.5 on
// stories260K. On average over all steps: 0.05, a tenth of that (rounding differences average
// out; a systematic error does not).
constexpr double kStepTol = 0.5, kMeanTol = 0.05;

double logprob_of(const SampledToken& s, int32_t token) {
  for (const auto& [t, lp] : s.top_logprobs)
    if (t == token) return lp;
  return -INFINITY;
}

// Compares run `b` with run `a` request by request, step by step while their tokens agree:
// the chosen token's logprob within kStepTol; where they part, b's token must be a near-tie in
// a (within 2 kStepTol of a's choice). Returns the mean absolute logprob difference and counts
// the requests whose tokens agree throughout.
double compare_runs(const EngineRun& a, const EngineRun& b, const char* what, int* same) {
  double sum = 0;
  int steps = 0;
  *same = 0;
  for (size_t i = 0; i < std::min(a.outputs.size(), b.outputs.size()); ++i) {
    const Collected &x = a.outputs[i], &y = b.outputs[i];
    const size_t n = std::min(x.sampled.size(), y.sampled.size());
    size_t t = 0;
    for (; t < n && x.tokens[t] == y.tokens[t]; ++t) {
      const double d = std::abs(double(x.sampled[t].logprob) - y.sampled[t].logprob);
      EXPECT_LE(d, kStepTol) << what << ", request " << i << " token " << t;
      sum += d, ++steps;
    }
    if (t == n) {
      *same += x.tokens.size() == y.tokens.size();
      continue;
    }
    const double tie = x.sampled[t].logprob - logprob_of(x.sampled[t], y.tokens[t]);
    EXPECT_LE(tie, 2 * kStepTol) << what << ", request " << i << " parts at token " << t
                                 << ": " << y.tokens[t] << " instead of " << x.tokens[t];
  }
  return steps ? sum / steps : 0.0;
}

// Runs `w` with the megakernel off and on and on the CPU: the logprob comparisons above, the
// same steps, the megakernel took some decode steps, and sequences were preempted exactly when
// the test forces it. Returns the megakernel run.
EngineRun same_with_and_without_megakernel(const Workload& w, int block_size,
                                           bool expect_preemption) {
  const EngineRun off = run_engine(w, false, block_size), on = run_engine(w, true, block_size);
  const EngineRun cpu = run_engine(w, false, block_size, "cpu");
  const size_t num_requests = w.primers.size() + w.batch.size();
  EXPECT_EQ(off.outputs.size(), num_requests);
  EXPECT_EQ(on.outputs.size(), num_requests);
  for (size_t i = 0; i < std::min(on.outputs.size(), off.outputs.size()); ++i) {
    const Collected &a = off.outputs[i], &b = on.outputs[i];
    EXPECT_EQ(a.finish, FinishReason::kLength) << "request " << i << ": " << a.error;
    EXPECT_EQ(b.finish, FinishReason::kLength) << "request " << i << ": " << b.error;
    const std::set<int32_t> distinct(a.tokens.begin(), a.tokens.end());
    EXPECT_GT(distinct.size(), 2u) << "request " << i << ": degenerate output proves nothing";
  }
  int same_on_off = 0, same_off_cpu = 0, same_on_cpu = 0;
  const double on_off = compare_runs(off, on, "megakernel on vs off", &same_on_off);
  const double off_cpu = compare_runs(cpu, off, "kernel-per-op vs CPU", &same_off_cpu);
  const double on_cpu = compare_runs(cpu, on, "megakernel vs CPU", &same_on_cpu);
  std::printf("mean |logprob difference|: on vs off %.4f, off vs cpu %.4f, on vs cpu %.4f; "
              "requests with equal tokens of %zu: on/off %d, off/cpu %d, on/cpu %d\n",
              on_off, off_cpu, on_cpu, num_requests, same_on_off, same_off_cpu, same_on_cpu);
  EXPECT_LE(on_off, kMeanTol);
  EXPECT_LE(on_cpu, std::max(off_cpu, kMeanTol / 5)) << "the megakernel is further from the CPU";
  EXPECT_GE(2 * same_on_off, int(num_requests)) << "most requests should not meet a near-tie";
  EXPECT_EQ(on.decode_batches, off.decode_batches) << "the two runs scheduled different steps";
  // Decode steps of 1..8 sequences record CUDA graphs only where the megakernel does not run.
  EXPECT_LT(on.graphs_recorded, off.graphs_recorded) << "the megakernel took no decode step";
  expect_drained(off.metrics, num_requests, expect_preemption);
  expect_drained(on.metrics, num_requests, expect_preemption);
  return on;
}

std::vector<int32_t> random_tokens(int len, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (int32_t& t : p) t = 3 + int32_t(rng() % 500);  // stories260K: 512 tokens, EOS 2
  return p;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

bool has_decode_step(const EngineRun& r, int lo, int hi) {
  for (int n : r.decode_batches)
    if (n >= lo && n <= hi) return true;
  return false;
}

class MegakernelEngineCuda : public ::testing::TestWithParam<int> {};  // the KV block size

TEST_P(MegakernelEngineCuda, ConcurrentDecodeStepsOfTwelveDownToOne) {
  // 12 requests ending 4 tokens apart: once the prompts are in, decode steps of 12 sequences
  // (the fallback) shrink one sequence at a time to 1 (the megakernel).
  Workload w;
  std::mt19937 rng(3);
  for (int i = 0; i < 12; ++i) {
    const auto prompt = concat({1}, random_tokens(1 + int(rng() % 40), 10 + i));
    w.batch.push_back(make_request(prompt, 6 + 4 * i));
  }
  const EngineRun on = same_with_and_without_megakernel(w, GetParam(), false);
  for (int n = 1; n <= 8; ++n) EXPECT_TRUE(has_decode_step(on, n, n)) << "no decode step of " << n;
  EXPECT_TRUE(has_decode_step(on, 9, 12)) << "no decode step of more than 8 sequences";
}

TEST_P(MegakernelEngineCuda, DecodeOverSharedCachedPrefix) {
  // A 100-token prefix cached by a first request, then 8 requests extending it: their block
  // tables start with the same cached blocks, which every decode step reads.
  constexpr int kPrefix = 100;
  const std::vector<int32_t> prefix = concat({1}, random_tokens(kPrefix - 1, 20));
  Workload w;
  w.primers.push_back(make_request(prefix, 6));
  std::mt19937 rng(4);
  for (int i = 0; i < 8; ++i) {
    const auto prompt = concat(prefix, random_tokens(1 + int(rng() % 12), 30 + i));
    w.batch.push_back(make_request(prompt, 10 + 5 * i));
  }
  const EngineRun on = same_with_and_without_megakernel(w, GetParam(), false);
  const int cached = kPrefix / GetParam() * GetParam();  // the prefix's full blocks
  for (size_t i = 1; i < on.outputs.size(); ++i)
    EXPECT_GE(on.outputs[i].num_cached_tokens, cached) << "request " << i << " missed the cache";
  EXPECT_TRUE(has_decode_step(on, 2, 8)) << "cached sequences never decoded together";
}

TEST_P(MegakernelEngineCuda, PreemptedAndResumed) {
  // 16 requests over 4 shared prefixes in a cache of 160 tokens: sequences are preempted,
  // recomputed (re-adopting cached blocks) and decode again.
  Workload w;
  w.kv_tokens = 160;
  std::mt19937 rng(7);
  for (int i = 0; i < 16; ++i) {
    const auto shared = concat({1}, random_tokens(19 + 8 * (i % 4), 70 + i % 4));
    w.batch.push_back(make_request(concat(shared, random_tokens(2 + int(rng() % 20), 90 + i)),
                                   4 + int(rng() % 36)));
  }
  const EngineRun on = same_with_and_without_megakernel(w, GetParam(), true);
  EXPECT_GT(on.metrics.prefix_cache_hits_tokens_total, 0u);
  EXPECT_TRUE(has_decode_step(on, 1, 8));
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, MegakernelEngineCuda, ::testing::Values(16, 4));

}  // namespace
}  // namespace flashserve

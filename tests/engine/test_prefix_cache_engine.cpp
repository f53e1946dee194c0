// Automatic prefix caching through the engine API on stories260K: every scenario runs on an
// engine with caching and on one without, and the generated tokens must be identical (greedy,
// and on the CPU seeded temperature 1 too: see same_with_and_without) — the same prompt twice;
// a prompt extending a cached one by less than, exactly, and more than a block; two concurrent
// requests sharing a prefix; a cached prefix evicted between two requests; preemption;
// cancellation. After each scenario the block accounting holds (used + free + cached == total,
// nothing used). Also: salts isolate, prompt logprobs are those of a full prefill, and the
// metrics count queries, hits and evictions.
// The backend is the test parameter: cpu always; cuda too when a device is present.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "backends/backend.h"
#include "engine/engine.h"
#include "stream_util.h"
#include "tests/common/test_tensor_parallel.h"
#include "weights/loaded_model.h"

namespace flashserve {
namespace {

using namespace std::chrono_literals;

constexpr int kBlock = 16;

const LoadedModel& model() {
  static std::unique_ptr<LoadedModel> m = load_model(FS_MODELS_DIR "/stories260K/stories260K.bin");
  return *m;
}

std::vector<int32_t> random_prompt(int len, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p = {1};  // BOS
  while (int(p.size()) < len) p.push_back(3 + int32_t(rng() % 500));
  return p;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The same request greedy (even i) or seeded at temperature 1 (odd i).
GenerationRequest req(std::vector<int32_t> prompt, int i, int max_tokens = 24) {
  return make_request(std::move(prompt), max_tokens, i % 2 ? 1.f : 0.f, 1000 + i);
}

class PrefixCacheEngine : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Engine> make(bool caching, int64_t kv_tokens = 4096, int batched = 512) {
    ModelRunnerOptions ro;
    ro.backend = GetParam();
    ro.block_size = kBlock;
    ro.kv_cache_tokens = kv_tokens;
    ro.threads = 1;
    EngineOptions eo;
    eo.enable_prefix_caching = caching;
    eo.max_num_batched_tokens = batched;
    return Engine::create(ModelRunner::create(model(), test::with_test_tensor_parallel(ro)), eo);
  }

  // used + free + cached == total, nothing used, nothing cached without caching.
  static void check_accounting(const Engine& e, bool caching) {
    EngineMetrics m = e.metrics();
    EXPECT_EQ(m.kv_blocks_used + m.kv_blocks_free + m.kv_blocks_cached, m.kv_blocks_total);
    EXPECT_EQ(m.kv_blocks_used, 0);
    EXPECT_EQ(m.num_running + m.num_waiting, 0);
    if (!caching) EXPECT_EQ(m.kv_blocks_cached, 0);
    EXPECT_FALSE(e.failed());
  }

  // Runs `scenario` on an engine with caching and on one without; their tokens must be equal.
  // Returns the caching engine's results (and leaves its metrics in *m).
  template <typename F>
  std::vector<Collected> same_with_and_without(F scenario, EngineMetrics* m = nullptr,
                                               int64_t kv_tokens = 4096, int batched = 512) {
    std::vector<Collected> on, off;
    {
      auto e = make(true, kv_tokens, batched);
      on = scenario(*e);
      check_accounting(*e, true);
      if (m) *m = e->metrics();
    }
    {
      auto e = make(false, kv_tokens, batched);
      off = scenario(*e);
      check_accounting(*e, false);
      EXPECT_EQ(e->metrics().prefix_cache_hits_tokens_total, 0u);
    }
    EXPECT_EQ(on.size(), off.size());
    for (size_t i = 0; i < std::min(on.size(), off.size()); ++i) {
      EXPECT_FALSE(on[i].tokens.empty());
      // Caching changes which sequences share a step (cached prompts finish their prefill
      // sooner, and the scheduler's short lane admits them earlier), and on CUDA the bf16 kernels' rounding depends on the batch's shape (rows per
      // matmul pick the kernel; split-K plans follow the batch). A seeded temperature-1 draw
      // over a tiny model's flat distribution turns such last-bit differences into another
      // token, so there only greedy requests must match (their top-1 margins are far larger).
      // The CPU backend computes each row alone in fp32: everything must match there.
      const bool sampled = i % 2 == 1;
      if (sampled && GetParam() != "cpu") {
        if (on[i].tokens != off[i].tokens)
          std::printf("request %zu (seeded, temperature 1): tokens differ with and without the "
                      "cache on %s (batch-shape rounding, see above)\n", i, GetParam().c_str());
        continue;
      }
      EXPECT_EQ(on[i].finish, off[i].finish) << "request " << i << ": " << on[i].error;
      EXPECT_EQ(on[i].tokens, off[i].tokens)
          << "request " << i << (sampled ? " (seeded, temperature 1)" : " (greedy)");
    }
    return on;
  }
};

// One request after another, each to its end.
std::vector<Collected> one_by_one(Engine& e, const std::vector<GenerationRequest>& reqs) {
  std::vector<Collected> out;
  for (const auto& r : reqs) out.push_back(collect(*e.submit(r)));
  return out;
}

// Every request submitted first, then each collected: they run side by side.
std::vector<Collected> all_at_once(Engine& e, const std::vector<GenerationRequest>& reqs) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) streams.push_back(e.submit(r));
  std::vector<Collected> out;
  for (auto& s : streams) out.push_back(collect(*s));
  return out;
}

TEST_P(PrefixCacheEngine, SamePromptTwice) {
  for (int i : {0, 1}) {  // greedy, seeded
    const auto p = random_prompt(70, 1 + i);
    EngineMetrics m;
    auto out = same_with_and_without(
        [&](Engine& e) { return one_by_one(e, {req(p, i), req(p, i)}); }, &m);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].tokens, out[1].tokens);
    EXPECT_EQ(out[0].num_cached_tokens, 0);
    EXPECT_EQ(out[1].num_cached_tokens, 64) << "4 full blocks of a 70-token prompt";
    EXPECT_EQ(m.prefix_cache_queries_tokens_total, 140u);
    EXPECT_EQ(m.prefix_cache_hits_tokens_total, 64u);
  }
}

TEST_P(PrefixCacheEngine, ExtensionByLessThanExactlyAndMoreThanABlock) {
  const auto base = random_prompt(48, 3);  // 3 full blocks
  std::vector<GenerationRequest> reqs = {req(base, 0)};
  for (int extra : {5, kBlock, kBlock + 9}) {
    for (int i : {0, 1}) reqs.push_back(req(concat(base, random_prompt(extra + 1, 50 + extra)), i));
  }
  auto out = same_with_and_without([&](Engine& e) { return one_by_one(e, reqs); });
  ASSERT_EQ(out.size(), reqs.size());
  for (size_t i = 1; i < out.size(); ++i) EXPECT_GE(out[i].num_cached_tokens, 48) << i;
}

TEST_P(PrefixCacheEngine, ConcurrentRequestsShareAPrefix) {
  // A 32-token step budget chunks the shared 100-token prefix: the later requests are admitted
  // while the first still holds (and computes) the blocks they adopt.
  const auto prefix = random_prompt(100, 4);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 6; ++i) reqs.push_back(req(concat(prefix, random_prompt(3 + i, 60 + i)), i));
  EngineMetrics m;
  auto out = same_with_and_without(
      [&](Engine& e) { return all_at_once(e, reqs); },
      &m, 4096, /*batched=*/32);
  EXPECT_GT(m.prefix_cache_hits_tokens_total, 0u);
}

TEST_P(PrefixCacheEngine, CachedPrefixEvictedBetweenTwoRequests) {
  // 12 blocks. P's blocks are cached; a long unrelated request needs them and evicts them.
  const auto p = random_prompt(64, 5);
  const auto other = random_prompt(150, 6);
  EngineMetrics m;
  auto out = same_with_and_without(
      [&](Engine& e) {
        return one_by_one(e, {req(p, 0), req(other, 1, 30), req(p, 0), req(p, 1)});
      },
      &m, /*kv_tokens=*/12 * kBlock);
  EXPECT_GT(m.prefix_cache_evictions_total, 0u);
  EXPECT_EQ(out[0].tokens, out[2].tokens);
  EXPECT_LT(out[2].num_cached_tokens, 48) << "P's first blocks were evicted";
  EXPECT_EQ(out[3].num_cached_tokens, 48) << "and cached again by the third request";
}

TEST_P(PrefixCacheEngine, PreemptionInTheMiddle) {
  // 16 requests over 4 shared prefixes in a 10-block cache: preemptions, evictions, adoption of
  // blocks other running sequences hold, resumed sequences re-adopting their own blocks.
  std::vector<GenerationRequest> reqs;
  std::mt19937 rng(7);
  for (int i = 0; i < 16; ++i) {
    auto p = concat(random_prompt(20 + 8 * (i % 4), 70 + i % 4), random_prompt(2 + rng() % 20, 90 + i));
    reqs.push_back(req(p, i, 4 + int(rng() % 36)));
  }
  EngineMetrics m;
  same_with_and_without(
      [&](Engine& e) { return all_at_once(e, reqs); },
      &m, /*kv_tokens=*/10 * kBlock, /*batched=*/64);
  EXPECT_GT(m.num_preemptions, 0u);
  EXPECT_GT(m.prefix_cache_hits_tokens_total, 0u);
}

TEST_P(PrefixCacheEngine, Cancellation) {
  const auto p = random_prompt(60, 8);
  auto out = same_with_and_without([&](Engine& e) {
    std::vector<Collected> res;
    auto s = e.submit(req(p, 0, 400));
    EXPECT_TRUE(s->next(30s).has_value());
    s->cancel();
    Collected c = collect(*s);
    EXPECT_EQ(c.finish, FinishReason::kAbort);
    for (int i : {0, 1}) res.push_back(collect(*e.submit(req(p, i))));
    return res;
  });
  EXPECT_EQ(out[0].num_cached_tokens, 48) << "the cancelled request's blocks were kept";
}

TEST_P(PrefixCacheEngine, SaltsIsolate) {
  auto e = make(true);
  const auto p = random_prompt(50, 9);
  auto with_salt = [&](const std::string& salt) {
    GenerationRequest r = req(p, 0);
    r.cache_salt = salt;
    return collect(*e->submit(r));
  };
  Collected a = with_salt("tenant-a");
  Collected b = with_salt("tenant-b");
  Collected a2 = with_salt("tenant-a");
  Collected none = with_salt("");
  EXPECT_EQ(a.num_cached_tokens, 0);
  EXPECT_EQ(b.num_cached_tokens, 0) << "another salt never hits";
  EXPECT_EQ(a2.num_cached_tokens, 48) << "the same salt does";
  EXPECT_EQ(none.num_cached_tokens, 0);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.tokens, a2.tokens);
  check_accounting(*e, true);
}

TEST_P(PrefixCacheEngine, PromptLogprobsEqualAFullPrefill) {
  const auto p = random_prompt(60, 10);
  auto run = [&](Engine& e) {
    std::vector<Collected> res;
    res.push_back(collect(*e.submit(req(p, 0))));  // caches p's blocks
    GenerationRequest r = req(p, 0);
    r.prompt_logprobs = true;
    r.sampling.logprobs = 2;
    res.push_back(collect(*e.submit(r)));
    return res;
  };
  auto on_engine = make(true), off_engine = make(false);
  auto on = run(*on_engine), off = run(*off_engine);
  ASSERT_EQ(on[1].prompt_logprobs.size(), p.size());
  ASSERT_EQ(off[1].prompt_logprobs.size(), p.size());
  EXPECT_EQ(on[1].num_cached_tokens, 0) << "a prompt-logprobs request computes its whole prompt";
  for (size_t i = 1; i < p.size(); ++i) {
    EXPECT_EQ(on[1].prompt_logprobs[i].token, p[i]);
    EXPECT_EQ(on[1].prompt_logprobs[i].logprob, off[1].prompt_logprobs[i].logprob) << i;
  }
  EXPECT_EQ(on[1].tokens, off[1].tokens);
}

std::vector<std::string> backends() {
  std::vector<std::string> b = {"cpu"};
  if (cuda_backend_available()) b.push_back("cuda");
  return b;
}

INSTANTIATE_TEST_SUITE_P(Backends, PrefixCacheEngine, ::testing::ValuesIn(backends()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace flashserve

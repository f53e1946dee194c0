// The engine thread with the real ModelRunner (CPU backend) on stories260K: results do not
// depend on batch composition or preemption, cancel frees blocks, shutdown finishes streams.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "engine/engine.h"
#include "stories_engine.h"
#include "stream_util.h"

namespace flashserve {
namespace {

using namespace std::chrono_literals;

// 16 requests of different lengths: even ones greedy, odd ones seeded temperature 1.
std::vector<GenerationRequest> requests() {
  std::mt19937 rng(11);
  std::vector<GenerationRequest> out;
  for (int i = 0; i < 16; ++i) {
    std::vector<int32_t> prompt = {1};  // BOS
    int len = 1 + rng() % 60;
    for (int j = 0; j < len; ++j) prompt.push_back(3 + int32_t(rng() % 500));
    auto r = make_request(prompt, 4 + rng() % 40, i % 2 ? 1.f : 0.f, 77 + i);
    r.ignore_eos = true;
    out.push_back(r);
  }
  return out;
}

std::vector<std::vector<int32_t>> run_alone(const std::vector<GenerationRequest>& reqs) {
  auto engine = make_stories_engine(4096);
  std::vector<std::vector<int32_t>> out;
  for (const auto& r : reqs) {
    Collected c = collect(*engine->submit(r));
    EXPECT_EQ(c.finish, FinishReason::kLength) << c.error;
    EXPECT_EQ(int(c.tokens.size()), r.max_tokens);
    std::set<int32_t> distinct(c.tokens.begin(), c.tokens.end());
    EXPECT_GT(distinct.size(), 2u) << "degenerate output: the test would prove nothing";
    out.push_back(c.tokens);
  }
  return out;
}

void run_together(int64_t kv_tokens, bool expect_preemption) {
  const auto reqs = requests();
  const auto alone = run_alone(reqs);
  EngineOptions opts;
  opts.max_num_batched_tokens = 64;  // chunked prefill
  auto engine = make_stories_engine(kv_tokens, opts);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) streams.push_back(engine->submit(r));
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_NE(streams[i], nullptr);
    Collected c = collect(*streams[i]);
    EXPECT_EQ(c.finish, FinishReason::kLength) << c.error;
    EXPECT_EQ(c.tokens, alone[i]) << "request " << i
                                  << (i % 2 ? " (seeded, temperature 1)" : " (greedy)");
  }
  expect_drained(engine->metrics(), reqs.size(), expect_preemption);
  EXPECT_FALSE(engine->failed());
}

TEST(EngineModel, AloneEqualsAmongFifteenConcurrent) { run_together(4096, false); }

TEST(EngineModel, PreemptedOutputsEqualUnpreempted) { run_together(160, true); }  // 10 blocks

TEST(EngineModel, CancelFreesBlocks) {
  auto engine = make_stories_engine(1024);
  auto r = make_request({1, 400, 30}, 400);
  r.ignore_eos = true;
  auto s = engine->submit(r);
  auto first = s->next(30s);
  ASSERT_TRUE(first.has_value());
  EXPECT_GT(engine->metrics().kv_blocks_used, 0);
  s->cancel();
  Collected c = collect(*s);
  EXPECT_EQ(c.finish, FinishReason::kAbort);
  EXPECT_EQ(engine->metrics().kv_blocks_used, 0);
}

TEST(EngineModel, ShutdownFinishesEveryStream) {
  auto engine = make_stories_engine(1024);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 10; ++i) {
    auto r = make_request({1, 300 + i}, 500);
    r.ignore_eos = true;
    streams.push_back(engine->submit(r));
  }
  ASSERT_TRUE(streams[0]->next(30s).has_value());
  engine->shutdown();
  int aborted = 0;
  for (auto& s : streams) {
    FinishReason f = collect(*s, 10s).finish;
    EXPECT_TRUE(f == FinishReason::kAbort || f == FinishReason::kLength);
    aborted += f == FinishReason::kAbort;
  }
  EXPECT_GT(aborted, 0);
  EXPECT_EQ(engine->metrics().kv_blocks_used, 0);
}

}  // namespace
}  // namespace flashserve

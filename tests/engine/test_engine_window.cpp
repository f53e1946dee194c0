// The engine over a FakeRunner whose every layer has a sliding window: the window reaches the
// scheduler from the model config, requests longer than the whole KV cache run in their window's
// blocks and give the windowed model's greedy tokens, concurrent ones share the cache without
// preemption, and a resent prompt adopts the cached blocks of its window.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/engine.h"
#include "fake_runner.h"
#include "stream_util.h"

namespace flashserve {
namespace {

constexpr int kVocab = 64;

std::unique_ptr<Engine> windowed_engine(int num_blocks, int block_size,
                                        std::vector<int> windows, EngineOptions opts = {}) {
  auto r = std::make_unique<FakeRunner>(num_blocks, block_size, kVocab, 1024);
  r->set_layer_windows(std::move(windows));
  return Engine::create(std::move(r), opts);
}

// The fake model's greedy tokens when each position reads only its last `window` tokens.
std::vector<int32_t> windowed_greedy(std::vector<int32_t> all, int max_tokens, int window) {
  const size_t prompt = all.size();
  std::vector<float> row(kVocab);
  for (int i = 0; i < max_tokens; ++i) {
    const size_t first = all.size() > size_t(window) ? all.size() - size_t(window) : 0;
    FakeRunner::logits_after({all.begin() + ptrdiff_t(first), all.end()}, kVocab, row.data());
    all.push_back(int32_t(std::max_element(row.begin(), row.end()) - row.begin()));
  }
  return {all.begin() + ptrdiff_t(prompt), all.end()};
}

std::vector<int32_t> prompt_of(int n, int32_t base) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(3 + (base + i * 7) % 60);  // never EOS (2)
  return p;
}

TEST(EngineWindow, ARequestLongerThanTheCacheRunsInItsWindow) {
  // 4 blocks of 4 tokens hold 16; the request has 310, each position reads its last 8.
  auto engine = windowed_engine(4, 4, {8, 8, 8});
  const auto prompt = prompt_of(10, 1);
  Collected c = collect(*engine->submit(make_request(prompt, 300)));
  ASSERT_EQ(c.finish, FinishReason::kLength) << c.error;
  EXPECT_EQ(c.tokens, windowed_greedy(prompt, 300, 8));
  expect_drained(engine->metrics(), 1, false);
}

TEST(EngineWindow, AGlobalLayerKeepsEveryBlock) {
  // One full-attention layer: nothing can be released, so the request never fits.
  auto engine = windowed_engine(4, 4, {8, 0, 8});
  Collected c = collect(*engine->submit(make_request(prompt_of(10, 1), 300)));
  EXPECT_EQ(c.finish, FinishReason::kError);
  EXPECT_NE(c.error.find("KV cache"), std::string::npos) << c.error;
}

TEST(EngineWindow, ConcurrentRequestsShareTheCacheWithoutPreemption) {
  // Each sequence holds at most 3 blocks (window 8 over blocks of 4): 4 of them fit 12.
  auto engine = windowed_engine(12, 4, {8});
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) streams.push_back(engine->submit(make_request(prompt_of(5, i), 120)));
  for (int i = 0; i < 4; ++i) {
    Collected c = collect(*streams[size_t(i)]);
    EXPECT_EQ(c.finish, FinishReason::kLength) << c.error;
    EXPECT_EQ(c.tokens, windowed_greedy(prompt_of(5, i), 120, 8)) << "request " << i;
  }
  expect_drained(engine->metrics(), 4, false);
}

TEST(EngineWindow, AResentPromptAdoptsItsWindowsCachedBlocks) {
  auto engine = windowed_engine(16, 4, {8});
  const auto prompt = prompt_of(40, 9);
  Collected first = collect(*engine->submit(make_request(prompt, 20)));
  Collected again = collect(*engine->submit(make_request(prompt, 20)));
  EXPECT_EQ(first.num_cached_tokens, 0);
  EXPECT_EQ(again.num_cached_tokens, 36) << "blocks 7 and 8 (the window of position 36) adopted";
  EXPECT_EQ(first.tokens, windowed_greedy(prompt, 20, 8));
  EXPECT_EQ(again.tokens, first.tokens);
  expect_drained(engine->metrics(), 2, false);
}

}  // namespace
}  // namespace flashserve

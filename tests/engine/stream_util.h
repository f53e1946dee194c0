// Reads a RequestStream to its end for the engine-loop tests.
#pragma once

#include <gtest/gtest.h>

#include "engine/engine.h"

namespace flashserve {

struct Collected {
  std::vector<int32_t> tokens;
  std::vector<SampledToken> sampled;
  std::vector<SampledToken> prompt_logprobs;
  int num_prompt_logprob_events = 0;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  std::vector<float> embedding;  // kEmbedding
  int num_cached_tokens = 0;  // from kFinished
  int num_draft_tokens = 0, num_accepted_tokens = 0;  // from kFinished
  bool timed_out = false;
};

inline Collected collect(RequestStream& s, std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  Collected c;
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    auto e = s.next(std::chrono::milliseconds(100));
    if (!e) continue;
    switch (e->kind) {
      case StreamEvent::Kind::kToken:
        c.tokens.push_back(e->token.token);
        c.sampled.push_back(e->token);
        break;
      case StreamEvent::Kind::kPromptLogprobs:
        c.prompt_logprobs = e->prompt_logprobs;
        ++c.num_prompt_logprob_events;
        break;
      case StreamEvent::Kind::kEmbedding:
        c.embedding = e->embedding;
        break;
      case StreamEvent::Kind::kFinished:
        c.finish = e->finish;
        c.error = e->error;
        c.num_cached_tokens = e->num_cached_tokens;
        c.num_draft_tokens = e->num_draft_tokens;
        c.num_accepted_tokens = e->num_accepted_tokens;
        EXPECT_FALSE(s.next(std::chrono::milliseconds(0)).has_value()) << "event after kFinished";
        return c;
    }
  }
  c.timed_out = true;
  ADD_FAILURE() << "stream " << s.id() << " did not finish";
  return c;
}

inline GenerationRequest make_request(std::vector<int32_t> prompt, int max_tokens,
                                      float temperature = 0.f, uint64_t seed = 0) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.has_seed = true;
  r.ignore_eos = true;  // tests that want EOS turn it back on
  return r;
}

// After a batch of `num_requests` has finished: the cache is empty again, every request was
// counted, and preemption happened exactly when the test forced it.
inline void expect_drained(const EngineMetrics& m, size_t num_requests, bool expect_preemption) {
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.requests_finished_total, num_requests);
  if (expect_preemption) {
    EXPECT_GT(m.num_preemptions, 0u);
  } else {
    EXPECT_EQ(m.num_preemptions, 0u);
  }
}

}  // namespace flashserve

// The engine thread against FakeRunner: batch invariance, preemption under a tiny cache, cancel,
// back-pressure, shutdown, backend faults, prompt logprobs, stop reasons and metrics.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "sampling/sampler.h"
#include "fake_runner.h"
#include "stream_util.h"

namespace flashserve {
namespace {

using namespace std::chrono_literals;

struct Harness {
  FakeRunner* runner = nullptr;  // owned by the engine
  std::unique_ptr<Engine> engine;
  Harness(int num_blocks, int block_size, EngineOptions opts = {}, int max_model_len = 256) {
    auto r = std::make_unique<FakeRunner>(num_blocks, block_size, 64, max_model_len);
    runner = r.get();
    engine = Engine::create(std::move(r), opts);
  }
};

std::vector<int32_t> random_prompt(std::mt19937& rng, int len) {
  std::vector<int32_t> p(len);
  for (int32_t& t : p) t = 3 + int32_t(rng() % 60);  // never EOS (2)
  return p;
}

// 16 requests of different lengths, greedy and seeded temperature 1, run alone and together.
void check_batch_invariance(int num_blocks, EngineOptions opts, bool expect_preemption) {
  std::mt19937 rng(7);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 16; ++i) {
    auto r = make_request(random_prompt(rng, 1 + rng() % 70), 5 + rng() % 40,
                          i % 2 ? 1.f : 0.f, 1000 + i);
    r.ignore_eos = true;
    reqs.push_back(r);
  }
  std::vector<std::vector<int32_t>> alone;
  {
    Harness h(200, 16);  // ample cache, one request at a time
    for (const auto& r : reqs) {
      auto s = h.engine->submit(r);
      Collected c = collect(*s);
      ASSERT_EQ(c.finish, FinishReason::kLength);
      ASSERT_EQ(int(c.tokens.size()), r.max_tokens);
      alone.push_back(c.tokens);
    }
    EXPECT_EQ(h.engine->metrics().num_preemptions, 0u);
  }
  Harness h(num_blocks, 16, opts);
  std::vector<std::shared_ptr<RequestStream>> streams;
  // Submitted behind a closed gate, so every request waits before the second step whatever the
  // thread timing: the cache pressure (and so the preemption) does not depend on the scheduler's luck.
  h.runner->close_gate();
  for (const auto& r : reqs) streams.push_back(h.engine->submit(r));
  h.runner->open_gate();
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_NE(streams[i], nullptr);
    Collected c = collect(*streams[i]);
    EXPECT_EQ(c.finish, FinishReason::kLength) << c.error;
    EXPECT_EQ(c.tokens, alone[i]) << "request " << i << " changed with batch composition";
  }
  EngineMetrics m = h.engine->metrics();
  EXPECT_GT(h.runner->greedy_rows(), 0) << "greedy requests did not take the argmax path";
  EXPECT_GT(h.runner->max_batch(), expect_preemption ? 1 : 4) << "requests did not share steps";
  EXPECT_EQ(m.num_running, 0);
  EXPECT_EQ(m.num_waiting, 0);
  expect_drained(m, reqs.size(), expect_preemption);
}

// One request run alone twice: [0] without logprobs (the runner returns its tokens), [1] with
// logprobs (its rows come back to the host sampler); with the fake runner's counters.
struct BothPaths {
  std::vector<int32_t> tokens[2];
  int greedy_rows[2] = {0, 0}, drawn_rows[2] = {0, 0};
};
BothPaths run_both_paths(GenerationRequest r) {
  BothPaths b;
  for (int with_logprobs = 0; with_logprobs < 2; ++with_logprobs) {
    r.sampling.logprobs = with_logprobs ? 0 : -1;
    Harness h(64, 16);
    Collected c = collect(*h.engine->submit(r));
    EXPECT_EQ(c.finish, FinishReason::kLength) << c.error;
    b.tokens[with_logprobs] = c.tokens;
    b.greedy_rows[with_logprobs] = h.runner->greedy_rows();
    b.drawn_rows[with_logprobs] = h.runner->drawn_rows();
  }
  return b;
}

// A greedy request without logprobs is answered by the runner's argmax, one with logprobs by the
// host sampler over the whole row: the same tokens either way.
TEST(EngineFake, ArgmaxPathEqualsHostGreedy) {
  std::mt19937 rng(3);
  for (int i = 0; i < 4; ++i) {
    auto r = make_request(random_prompt(rng, 3 + i * 17), 30, 0.f, 1);
    r.ignore_eos = true;
    const BothPaths b = run_both_paths(r);
    EXPECT_GT(b.greedy_rows[0], 0);
    EXPECT_EQ(b.greedy_rows[1], 0);
    EXPECT_EQ(b.tokens[0], b.tokens[1]) << "prompt " << i;
  }
}

// A sampled request without logprobs has its token drawn by the runner (the device sampler's
// place); with logprobs, by the host sampler over the returned row. The SampleRequest the engine
// builds (history, step, parameters) must make the two agree token for token.
TEST(EngineFake, DeviceSamplingPathEqualsHostSampler) {
  std::mt19937 rng(5);
  for (int i = 0; i < 6; ++i) {
    auto r = make_request(random_prompt(rng, 2 + i * 13), 40, 0.7f + 0.2f * float(i), 77 + i);
    r.ignore_eos = true;
    r.sampling.top_k = i % 3 == 0 ? 0 : 5 + i;
    r.sampling.top_p = i % 2 ? 0.9f : 1.f;
    r.sampling.min_p = i == 4 ? 0.05f : 0.f;
    r.sampling.repetition_penalty = i >= 3 ? 1.3f : 1.f;
    r.sampling.frequency_penalty = i == 5 ? 0.4f : 0.f;
    r.sampling.presence_penalty = i == 2 ? 0.6f : 0.f;
    if (i == 1) r.sampling.logit_bias = {{3, 2.f}, {7, -100.f}};
    const BothPaths b = run_both_paths(r);
    EXPECT_GT(b.drawn_rows[0], 0);
    EXPECT_EQ(b.drawn_rows[1], 0);
    EXPECT_EQ(b.greedy_rows[0] + b.greedy_rows[1], 0);
    EXPECT_EQ(b.tokens[0], b.tokens[1]) << "request " << i;
  }
}

TEST(EngineFake, ConcurrentEqualsAlone) {
  EngineOptions opts;
  opts.max_num_batched_tokens = 48;  // forces chunked prefill
  check_batch_invariance(400, opts, false);
}

TEST(EngineFake, TinyCachePreemptsAndOutputsDoNotChange) {
  EngineOptions opts;
  opts.max_num_batched_tokens = 40;
  check_batch_invariance(9, opts, true);  // 144 tokens for 16 requests of up to 110
}

TEST(EngineFake, CancelFreesBlocksWithinOneStep) {
  Harness h(100, 16);
  h.runner->close_gate();
  auto s = h.engine->submit(make_request(std::vector<int32_t>(40, 5), 200));
  h.runner->wait_in_step();  // step 1 (the prefill) is inside the model
  EXPECT_GT(h.engine->metrics().kv_blocks_used, 0);
  s->cancel();
  h.runner->open_gate();
  Collected c = collect(*s);
  EXPECT_EQ(c.finish, FinishReason::kAbort);
  EXPECT_EQ(h.runner->steps(), 1) << "the cancelled request ran another step";
  EXPECT_EQ(h.engine->metrics().kv_blocks_used, 0);
  EXPECT_LE(c.tokens.size(), 1u);
  s->cancel();  // harmless after the end
}

TEST(EngineFake, CancelWhileWaitingAndIdleEngineDoesNotStep) {
  EngineOptions opts;
  opts.max_num_seqs = 1;
  Harness h(100, 16, opts);
  h.runner->close_gate();
  auto a = h.engine->submit(make_request({5, 6, 7}, 50));
  h.runner->wait_in_step();
  auto b = h.engine->submit(make_request({5, 6, 8}, 50));
  b->cancel();
  h.runner->open_gate();
  EXPECT_EQ(collect(*b).finish, FinishReason::kAbort);
  EXPECT_EQ(collect(*a).finish, FinishReason::kLength);
  const int steps = h.runner->steps();
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(h.runner->steps(), steps) << "the engine stepped without work";
}

TEST(EngineFake, QueueFullReturnsNullptr) {
  EngineOptions opts;
  opts.max_queue = 5;
  opts.max_num_seqs = 1;
  Harness h(100, 16, opts);
  h.runner->close_gate();
  auto first = h.engine->submit(make_request({5, 6}, 3));
  h.runner->wait_in_step();  // first is running, inside the model
  std::vector<std::shared_ptr<RequestStream>> queued;
  for (int i = 0; i < 5; ++i) {
    queued.push_back(h.engine->submit(make_request({5, 6, 7}, 3)));
    ASSERT_NE(queued.back(), nullptr) << i;
  }
  EXPECT_EQ(h.engine->submit(make_request({5}, 3)), nullptr);
  EXPECT_EQ(h.engine->metrics().num_waiting, 5);
  h.runner->open_gate();
  EXPECT_EQ(collect(*first).finish, FinishReason::kLength);
  for (auto& s : queued) EXPECT_EQ(collect(*s).finish, FinishReason::kLength);
  EXPECT_NE(h.engine->submit(make_request({5}, 3)), nullptr) << "queue drained";
}

TEST(EngineFake, ShutdownFinishesEveryStream) {
  EngineOptions opts;
  opts.max_num_seqs = 4;
  Harness h(7000, 16, opts, 100000);  // requests far too long to finish on their own
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 12; ++i) streams.push_back(h.engine->submit(make_request({5, 6, 7}, 90000)));
  ASSERT_TRUE(streams[0]->next(10s).has_value());
  h.engine->shutdown();
  for (auto& s : streams) EXPECT_EQ(collect(*s, 5s).finish, FinishReason::kAbort);
  auto late = h.engine->submit(make_request({5}, 3));
  ASSERT_NE(late, nullptr);
  EXPECT_EQ(collect(*late, 5s).finish, FinishReason::kAbort);
  EXPECT_FALSE(h.engine->failed());
  EXPECT_EQ(h.engine->metrics().kv_blocks_used, 0);
  h.engine->shutdown();  // twice is fine
}

TEST(EngineFake, BackendFaultFailsEverythingInFlight) {
  Harness h(100, 16);
  h.runner->throw_on_step(5);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) streams.push_back(h.engine->submit(make_request({5, 6, 7}, 1000)));
  for (auto& s : streams) {
    Collected c = collect(*s);
    EXPECT_EQ(c.finish, FinishReason::kError);
    EXPECT_NE(c.error.find("injected backend fault"), std::string::npos) << c.error;
  }
  EXPECT_TRUE(h.engine->failed());
  auto late = h.engine->submit(make_request({5}, 3));
  ASSERT_NE(late, nullptr);
  EXPECT_EQ(collect(*late).finish, FinishReason::kError);
}

TEST(EngineFake, RejectsRequestsThatCanNeverRun) {
  Harness h(4, 16, {}, 100);  // 64 cache tokens, context 100
  EXPECT_EQ(collect(*h.engine->submit(make_request({}, 3))).finish, FinishReason::kError);
  EXPECT_EQ(collect(*h.engine->submit(make_request({5, 99}, 3))).finish, FinishReason::kError);
  EXPECT_EQ(collect(*h.engine->submit(make_request({5, -1}, 3))).finish, FinishReason::kError);
  EXPECT_EQ(collect(*h.engine->submit(make_request({5}, -1))).finish, FinishReason::kError);
  Collected big = collect(*h.engine->submit(make_request(std::vector<int32_t>(60, 5), 10)));
  EXPECT_EQ(big.finish, FinishReason::kError);
  EXPECT_NE(big.error.find("KV cache"), std::string::npos) << big.error;
  EXPECT_EQ(collect(*h.engine->submit(make_request(std::vector<int32_t>(100, 5), 1))).finish,
            FinishReason::kError);
  EXPECT_EQ(collect(*h.engine->submit(make_request(std::vector<int32_t>(54, 5), 10))).finish,
            FinishReason::kLength);  // exactly 64 tokens: fits
  EXPECT_FALSE(h.engine->failed());
  EXPECT_EQ(h.engine->metrics().requests_finished_total, 7u);
}

TEST(EngineFake, StopReasons) {
  Harness h(100, 16, {}, 40);
  auto eos = make_request({5, 6}, 10);
  eos.ignore_eos = false;
  eos.sampling.logit_bias = {{2, 100.f}};  // EOS always wins
  Collected c = collect(*h.engine->submit(eos));
  EXPECT_EQ(c.finish, FinishReason::kStop);
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{2})) << "EOS is delivered as the last token";
  eos.ignore_eos = true;
  c = collect(*h.engine->submit(eos));
  EXPECT_EQ(c.finish, FinishReason::kLength);
  EXPECT_EQ(c.tokens.size(), 10u);
  // The context (40) caps generation: 30 prompt tokens leave 10.
  auto ctx = make_request(std::vector<int32_t>(30, 5), 1000);
  ctx.ignore_eos = true;
  c = collect(*h.engine->submit(ctx));
  EXPECT_EQ(c.finish, FinishReason::kLength);
  EXPECT_EQ(c.tokens.size(), 10u);
  c = collect(*h.engine->submit(make_request({5, 6}, 0)));
  EXPECT_EQ(c.finish, FinishReason::kLength);
  EXPECT_TRUE(c.tokens.empty());
}

TEST(EngineFake, UnseededRequestsDiffer) {
  Harness h(100, 16);
  auto r = make_request({5, 6, 7}, 30, 1.f);
  r.has_seed = false;
  Collected a = collect(*h.engine->submit(r));
  Collected b = collect(*h.engine->submit(r));
  EXPECT_NE(a.tokens, b.tokens) << "two unseeded requests drew the same 30 tokens";
  r.has_seed = true;
  EXPECT_EQ(collect(*h.engine->submit(r)).tokens, collect(*h.engine->submit(r)).tokens);
}

// Prompt logprobs once, one per prompt token, matching the fake model's log-softmax — also when
// the prompt is chunked and the request is preempted mid-prefill.
TEST(EngineFake, PromptLogprobsChunkedAndPreempted) {
  std::mt19937 rng(3);
  for (int num_blocks : {100, 7}) {
    EngineOptions opts;
    opts.max_num_batched_tokens = 24;
    Harness h(num_blocks, 8, opts);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::shared_ptr<RequestStream>> streams;
    h.runner->close_gate();  // all eight queued before the second step, as above
    for (int i = 0; i < 8; ++i) {
      prompts.push_back(random_prompt(rng, 2 + rng() % 45));
      auto r = make_request(prompts.back(), 3 + rng() % 6);
      r.prompt_logprobs = i % 2 == 0;
      r.sampling.logprobs = 2;
      r.ignore_eos = true;
      streams.push_back(h.engine->submit(r));
    }
    h.runner->open_gate();
    for (int i = 0; i < 8; ++i) {
      Collected c = collect(*streams[i]);
      ASSERT_EQ(c.finish, FinishReason::kLength);
      if (i % 2) {
        EXPECT_EQ(c.num_prompt_logprob_events, 0);
        continue;
      }
      ASSERT_EQ(c.num_prompt_logprob_events, 1);
      const auto& p = prompts[i];
      ASSERT_EQ(c.prompt_logprobs.size(), p.size());
      EXPECT_TRUE(std::isnan(c.prompt_logprobs[0].logprob));
      for (size_t j = 1; j < p.size(); ++j) {
        std::vector<float> row(64);
        FakeRunner::logits_after({p.begin(), p.begin() + j}, 64, row.data());
        SampledToken want = token_logprobs(row, p[j], 2);
        EXPECT_EQ(c.prompt_logprobs[j].token, p[j]);
        EXPECT_FLOAT_EQ(c.prompt_logprobs[j].logprob, want.logprob) << i << " " << j;
        EXPECT_EQ(c.prompt_logprobs[j].top_logprobs, want.top_logprobs);
      }
      EXPECT_EQ(c.sampled[0].top_logprobs.size(), 2u);
    }
    if (num_blocks == 7) {
      EXPECT_GT(h.engine->metrics().num_preemptions, 0u);
    }
  }
}

TEST(EngineFake, MetricsAreExact) {
  Harness h(100, 16);
  uint64_t prompt = 0, gen = 0;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 10; ++i) {
    auto r = make_request(std::vector<int32_t>(3 + i, 5), 4 + i);
    r.ignore_eos = true;
    prompt += r.prompt.size();
    gen += r.max_tokens;
    streams.push_back(h.engine->submit(r));
  }
  for (auto& s : streams) collect(*s);
  EngineMetrics m = h.engine->metrics();
  EXPECT_EQ(m.prompt_tokens_total, prompt);
  EXPECT_EQ(m.generation_tokens_total, gen);
  EXPECT_EQ(m.requests_finished_total, 10u);
  EXPECT_EQ(m.kv_blocks_total, 100);
  EXPECT_EQ(m.kv_blocks_used, 0);
}

// Many client threads submitting, reading and cancelling at random (a TSan target).
TEST(EngineFake, ConcurrentClientsWithRandomCancels) {
  EngineOptions opts;
  opts.max_num_seqs = 8;
  opts.max_num_batched_tokens = 32;
  opts.max_queue = 1000;
  Harness h(20, 8, opts);
  std::vector<std::thread> clients;
  std::atomic<int> finished{0};
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 6; ++i) {
        auto r = make_request(random_prompt(rng, 1 + rng() % 30), 1 + rng() % 30, 1.f, rng());
        auto s = h.engine->submit(r);
        if (!s) continue;
        int cancel_after = rng() % 3 == 0 ? int(rng() % 5) : -1;
        int n = 0;
        for (;;) {
          auto e = s->next(10s);
          if (!e) break;
          if (e->kind == StreamEvent::Kind::kFinished) {
            ++finished;
            break;
          }
          if (n++ == cancel_after) s->cancel();
        }
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(finished.load(), 48);
  EngineMetrics m = h.engine->metrics();
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.requests_finished_total, 48u);
}

}  // namespace
}  // namespace flashserve

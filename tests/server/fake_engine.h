// A scripted fake Engine for Completion tests (label unit): every submit() plays the same token
// script then a finish, and a ClientConnection that records what is written. Shared by the
// completion and chat-reasoning assembly tests.
#pragma once

#include <chrono>
#include <cmath>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/generation/completion.h"
#include "tests/common/http_client.h"
#include "tests/server/fake_tokenizer.h"

namespace flashserve::testing {

using json = nlohmann::json;

// The JSON payloads of an SSE stream, up to its [DONE].
inline std::vector<json> sse_chunks(const std::string& written) {
  std::vector<json> chunks;
  for (const std::string& d : http::sse_data(written)) {
    if (d == "[DONE]") break;
    chunks.push_back(json::parse(d));
  }
  return chunks;
}

class ScriptedStream : public RequestStream {
 public:
  explicit ScriptedStream(std::deque<StreamEvent> events) : events_(std::move(events)) {}
  uint64_t id() const override { return 1; }
  std::optional<StreamEvent> next(std::chrono::milliseconds) override {
    if (events_.empty()) return std::nullopt;
    StreamEvent e = events_.front();
    events_.pop_front();
    return e;
  }
  void cancel() override { cancelled = true; }
  bool cancelled = false;

 private:
  std::deque<StreamEvent> events_;
};

class FakeRunner : public ModelRunner {
 public:
  ModelConfig cfg;
  const ModelConfig& config() const override { return cfg; }
  std::string backend_name() const override { return "fake"; }
  int block_size() const override { return 16; }
  int num_kv_blocks() const override { return 64; }
  void step(StepPlan&, std::vector<float>*, std::vector<int32_t>*, std::vector<float>*) override {}
};

// Every submit() gets the same script: tokens then a finish (or nullptr when `full`).
class FakeEngine : public Engine {
 public:
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kLength;
  std::string error;
  bool full = false;
  int queue = 256;  // max_queue()
  std::vector<std::shared_ptr<ScriptedStream>> streams;
  std::vector<GenerationRequest> requests;
  FakeRunner runner_;

  const ModelConfig& config() const override { return runner_.cfg; }
  const ModelRunner& runner() const override { return runner_; }
  int max_queue() const override { return queue; }
  std::shared_ptr<RequestStream> submit(GenerationRequest r) override {
    if (full && !streams.empty()) return nullptr;
    requests.push_back(r);
    std::deque<StreamEvent> ev;
    if (r.prompt_logprobs) {
      StreamEvent p;
      p.kind = StreamEvent::Kind::kPromptLogprobs;
      for (size_t i = 0; i < r.prompt.size(); ++i) {
        SampledToken t;
        t.token = r.prompt[i];
        t.logprob = i == 0 ? std::nanf("") : -1.5f;
        p.prompt_logprobs.push_back(t);
      }
      ev.push_back(p);
    }
    for (int32_t t : tokens) {
      StreamEvent e;
      e.token.token = t;
      e.token.logprob = -0.5f;
      ev.push_back(e);
    }
    StreamEvent f;
    f.kind = StreamEvent::Kind::kFinished;
    f.finish = finish;
    f.error = error;
    ev.push_back(f);
    streams.push_back(std::make_shared<ScriptedStream>(ev));
    return streams.back();
  }
  EngineMetrics metrics() const override { return {}; }
  void shutdown() override {}
  bool failed() const override { return false; }
};

// A chat request that `engine` answers with `output`, one token per byte (3 + byte, the fake
// tokenizer's ids), then `finish`; the reasoning split is on.
inline CompletionRequest scripted_chat_request(FakeEngine& engine, const std::string& output,
                                               FinishReason finish) {
  engine.tokens.clear();
  for (unsigned char ch : output) engine.tokens.push_back(3 + ch);
  engine.finish = finish;
  CompletionRequest r;
  r.format = ResponseFormat::kChat;
  r.prompts = {{1, 259}};
  r.echo_texts = {""};
  r.max_tokens = 1000;
  r.reasoning = true;
  return r;
}

class RecordingConnection : public ClientConnection {
 public:
  bool is_gone = false;
  std::string written;
  bool gone() override { return is_gone; }
  bool write(const std::string& d) override {
    written += d;
    return !is_gone;
  }
};

// Runs `r` whole (not streamed) on `ctx`'s engine; a test failure unless it answers 200.
inline CompletionResult run_whole(const CompletionContext& ctx, const CompletionRequest& r) {
  Completion c(ctx, r);
  EXPECT_FALSE(c.start().has_value());
  RecordingConnection conn;
  CompletionResult res = c.run(conn);
  EXPECT_EQ(res.status, 200) << res.body.dump();
  return res;
}

// Runs `r` streamed on `ctx`'s engine and returns the SSE chunks it wrote.
inline std::vector<json> run_streamed(const CompletionContext& ctx, CompletionRequest r) {
  r.stream = true;
  Completion c(ctx, r);
  EXPECT_FALSE(c.start().has_value());
  RecordingConnection conn;
  EXPECT_TRUE(c.stream(conn));
  return sse_chunks(conn.written);
}

// A fixture with the fake tokenizer and engine, a 512-token "fake" model, and a completion
// context over them.
class FakeEngineTest : public ::testing::Test {
 protected:
  FakeTokenizer tok;
  FakeEngine engine;
  ServedModel model{"fake", 512, 262, 0};
  CompletionContext ctx{&engine, &tok, &model, nullptr, std::chrono::milliseconds(1)};
};

}  // namespace flashserve::testing

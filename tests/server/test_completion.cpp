// Completion (stream assembly) against a scripted fake engine and the byte-level fake tokenizer
// (label unit): for scripted token sequences (words, multi-byte characters split into byte
// pieces, invalid bytes), the concatenated SSE deltas equal the non-streamed text, which equals
// decode(tokens) cut at the earliest stop; plus queue-full, engine error, disconnect, logprobs,
// and chat tool calls behind a special-token marker (whole and streamed).
#include <gtest/gtest.h>

#include <cmath>

#include "server/generation/completion.h"
#include "tests/server/fake_engine.h"
#include "tests/server/fake_tokenizer.h"

namespace flashserve {
namespace {

using json = nlohmann::json;

using testing::FakeEngine;
using testing::RecordingConnection;
using testing::sse_chunks;

class CompletionTest : public testing::FakeEngineTest {
 protected:

  CompletionRequest request(std::vector<std::string> stop = {}) {
    CompletionRequest r;
    r.prompts = {{1, 259}};  // BOS "▁Once"
    r.echo_texts = {"Once"};
    r.max_tokens = 100;
    r.stop = std::move(stop);
    return r;
  }
  // The SSE bytes a streamed run of `r` writes to a client that stays.
  std::string streamed(CompletionRequest r) {
    r.stream = true;
    Completion c(ctx, r);
    EXPECT_FALSE(c.start().has_value());
    RecordingConnection conn;
    EXPECT_TRUE(c.stream(conn));
    return conn.written;
  }
  // Non-streamed text, and the streamed deltas concatenated (finish reasons too).
  std::pair<json, std::string> run_both(const CompletionRequest& r, std::string* stream_finish) {
    Completion plain(ctx, r);
    EXPECT_FALSE(plain.start().has_value());
    RecordingConnection c1;
    CompletionResult res = plain.run(c1);
    EXPECT_EQ(res.status, 200) << res.body.dump();
    const std::string sse = streamed(r);
    std::string text;
    for (const json& j : sse_chunks(sse)) {
      for (const auto& ch : j.at("choices")) {
        text += ch["text"].get<std::string>();
        if (!ch["finish_reason"].is_null()) *stream_finish = ch["finish_reason"];
      }
    }
    EXPECT_NE(sse.find("data: [DONE]\n\n"), std::string::npos);
    return {res.body, text};
  }
};

int32_t byte_id(unsigned char b) { return 3 + b; }

TEST_F(CompletionTest, StreamEqualsWholeOverScriptedSequences) {
  const int32_t once = 259, upon = 260, a = 261;
  const std::vector<std::vector<int32_t>> scripts = {
      {upon, a, once, upon},
      {upon, byte_id(0xE2), byte_id(0x82), byte_id(0xAC), a},                  // " upon€ a"
      {byte_id(0xF0), byte_id(0x9F), byte_id(0x98), byte_id(0x80), upon},      // emoji, 4 pieces
      {upon, byte_id(0xE2), byte_id(0x82), a, byte_id(0xC3), byte_id(0xA9)},   // invalid, then é
      {byte_id('x'), byte_id('\n'), byte_id('\n'), byte_id('y')},
  };
  const std::vector<std::vector<std::string>> stop_sets = {
      {}, {"pon a"}, {"\xE2\x82\xAC"}, {"n\xE2\x82\xAC a"}, {"\n\n"}, {"\xF0\x9F\x98\x80 u"},
      {"zz", "a"}};
  for (const auto& script : scripts) {
    for (const auto& stops : stop_sets) {
      engine.tokens = script;
      std::vector<int32_t> all = {1, 259};
      all.insert(all.end(), script.begin(), script.end());
      const std::string full = tok.decode(all).substr(std::string("Once").size());
      size_t cut = std::string::npos;
      for (const auto& s : stops) cut = std::min(cut, full.find(s));
      const std::string expected = full.substr(0, cut);
      std::string stream_finish;
      auto [whole, streamed] = run_both(request(stops), &stream_finish);
      const std::string text = whole["choices"][0]["text"];
      EXPECT_EQ(text, expected) << "stops " << json(stops).dump();
      EXPECT_EQ(streamed, expected) << "stops " << json(stops).dump();
      const std::string reason = cut == std::string::npos ? "length" : "stop";
      EXPECT_EQ(whole["choices"][0]["finish_reason"], reason);
      EXPECT_EQ(stream_finish, reason);
    }
  }
}

TEST_F(CompletionTest, StopCancelsTheEngineRequest) {
  engine.tokens = {260, 261, 259, 260};
  Completion c(ctx, request({" a"}));
  ASSERT_FALSE(c.start().has_value());
  RecordingConnection conn;
  CompletionResult r = c.run(conn);
  EXPECT_EQ(r.body["choices"][0]["text"], " upon");
  EXPECT_TRUE(engine.streams[0]->cancelled);
}

TEST_F(CompletionTest, QueueFullIs503AndCancelsSubmitted) {
  engine.full = true;
  CompletionRequest r = request();
  r.n = 3;
  Completion c(ctx, r);
  auto e = c.start();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status, 503);
  EXPECT_EQ(e->retry_after_s, 1);
  EXPECT_TRUE(engine.streams[0]->cancelled);
}

TEST_F(CompletionTest, MoreChoicesThanTheQueueHoldsIs400) {
  engine.queue = 3;
  CompletionRequest r = request();
  r.prompts = {{1, 259}, {1, 260}};
  r.echo_texts = {"Once", "upon"};
  r.n = 2;  // 4 choices: could never all wait in a queue of 3, so no 503 to retry
  Completion c(ctx, r);
  auto e = c.start();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->param, "n");
  EXPECT_EQ(e->retry_after_s, 0);
  EXPECT_NE(e->message.find("--max-queue"), std::string::npos) << e->message;
  EXPECT_TRUE(engine.requests.empty());
  // As many choices as the queue holds are fine; so are any number that need no engine.
  CompletionRequest three = request();
  three.n = 3;
  Completion c3(ctx, three);
  EXPECT_FALSE(c3.start().has_value());
  r.max_tokens = 0;
  Completion c0(ctx, r);
  EXPECT_FALSE(c0.start().has_value());
}

// usage.prompt_tokens counts each prompt once, not once per choice (OpenAI, vLLM).
TEST_F(CompletionTest, UsageCountsEachPromptOnce) {
  engine.tokens = {260, 261, 259};
  CompletionRequest r = request();
  r.prompts = {{1, 259}, {1, 260, 261}};
  r.echo_texts = {"Once", "upon a"};
  r.n = 2;
  Completion c(ctx, r);
  ASSERT_FALSE(c.start().has_value());
  RecordingConnection conn;
  json body = c.run(conn).body;
  ASSERT_EQ(body["choices"].size(), 4u);
  EXPECT_EQ(body["usage"]["prompt_tokens"], 5);       // 2 + 3, whatever n is
  EXPECT_EQ(body["usage"]["completion_tokens"], 12);  // 4 choices x 3 tokens
  EXPECT_EQ(body["usage"]["total_tokens"], 17);
  EXPECT_EQ(c.prompt_tokens(), 5);  // the request log line's count
  r.include_usage = true;
  const std::string sse = streamed(r);
  const size_t at = sse.find("\"usage\":");
  ASSERT_NE(at, std::string::npos) << sse;
  const size_t begin = sse.rfind("data: ", at) + 6;
  json last = json::parse(sse.substr(begin, sse.find("\n\n", at) - begin));
  EXPECT_EQ(last["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(last["usage"]["completion_tokens"], 12);
}

TEST_F(CompletionTest, EngineErrorIs500OrAnErrorEvent) {
  engine.tokens = {260};
  engine.finish = FinishReason::kError;
  engine.error = "device fault";
  Completion c(ctx, request());
  ASSERT_FALSE(c.start().has_value());
  RecordingConnection conn;
  CompletionResult r = c.run(conn);
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.body["error"]["type"], "server_error");
  const std::string sse = streamed(request());
  EXPECT_NE(sse.find("data: {\"error\":"), std::string::npos) << sse;
  EXPECT_NE(sse.find("data: [DONE]"), std::string::npos);
}

TEST_F(CompletionTest, DisconnectCancels) {
  engine.tokens = {260, 261};
  Completion c(ctx, request());
  ASSERT_FALSE(c.start().has_value());
  RecordingConnection conn;
  conn.is_gone = true;
  CompletionResult r = c.run(conn);
  EXPECT_TRUE(r.client_gone);
  EXPECT_TRUE(engine.streams[0]->cancelled);
}

TEST_F(CompletionTest, SeedsPerChoiceAndRequestFields) {
  engine.tokens = {260};
  CompletionRequest r = request();
  r.n = 3;
  r.has_seed = true;
  r.sampling.seed = 10;
  r.ignore_eos = true;
  Completion c(ctx, r);
  ASSERT_FALSE(c.start().has_value());
  ASSERT_EQ(engine.requests.size(), 3u);
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(engine.requests[j].sampling.seed, 10u + j);
    EXPECT_TRUE(engine.requests[j].has_seed);
    EXPECT_TRUE(engine.requests[j].ignore_eos);
    EXPECT_EQ(engine.requests[j].max_tokens, 100);
  }
}

TEST_F(CompletionTest, LogprobsOffsetsAndEcho) {
  engine.tokens = {260, byte_id(0xC3), byte_id(0xA9), 261};  // " upon", "é" in two, " a"
  CompletionRequest r = request();
  r.logprobs = 0;
  r.echo = true;
  Completion c(ctx, r);
  ASSERT_FALSE(c.start().has_value());
  RecordingConnection conn;
  json body = c.run(conn).body;
  const json& ch = body["choices"][0];
  EXPECT_EQ(ch["text"], "Once upon\xC3\xA9 a");
  EXPECT_EQ(ch["logprobs"]["tokens"],
            json::parse(R"(["","Once"," upon","bytes:\\xc3","bytes:\\xa9"," a"])"));
  // The echoed prompt's tokens spell its text exactly: BOS adds nothing (not "<s>", which the
  // text does not start with), and the first piece has no leading space.
  EXPECT_EQ(ch["logprobs"]["text_offset"], json::parse("[0,0,4,9,9,11]"));
  EXPECT_TRUE(ch["logprobs"]["token_logprobs"][0].is_null());
  EXPECT_DOUBLE_EQ(ch["logprobs"]["token_logprobs"][1].get<double>(), -1.5);
  // Echo without logprobs needs no prompt-logprobs event.
  CompletionRequest e = request();
  e.echo = true;
  Completion c2(ctx, e);
  ASSERT_FALSE(c2.start().has_value());
  EXPECT_EQ(c2.run(conn).body["choices"][0]["text"], "Once upon\xC3\xA9 a");
  EXPECT_EQ(body["usage"]["completion_tokens"], 4);
  EXPECT_EQ(body["usage"]["prompt_tokens"], 2);
}

// Chat format: the same pipeline, chat shapes. Streamed: each choice's first delta carries the
// role, then content deltas, then the finish reason in a delta of its own, usage, [DONE]; the
// concatenated deltas equal the non-streamed message; logprobs come as content[] entries.
TEST_F(CompletionTest, ChatFormatShapes) {
  engine.tokens = {260, 261, 259};  // " upon a Once"
  CompletionRequest r = request();
  r.format = ResponseFormat::kChat;
  r.n = 2;
  r.logprobs = 1;
  Completion plain(ctx, r);
  ASSERT_FALSE(plain.start().has_value());
  RecordingConnection c1;
  CompletionResult res = plain.run(c1);
  ASSERT_EQ(res.status, 200) << res.body.dump();
  EXPECT_EQ(res.body["object"], "chat.completion");
  EXPECT_EQ(res.body["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  ASSERT_EQ(res.body["choices"].size(), 2u);
  const json& choice = res.body["choices"][1];
  EXPECT_EQ(choice["index"], 1);
  EXPECT_EQ(choice["message"]["role"], "assistant");
  const std::string text = choice["message"]["content"];
  EXPECT_EQ(text, " upon a Once");
  EXPECT_EQ(choice["finish_reason"], "length");
  ASSERT_EQ(choice["logprobs"]["content"].size(), 3u);
  EXPECT_EQ(choice["logprobs"]["content"][0]["token"], " upon");

  r.include_usage = true;
  const std::string sse = streamed(r);
  const std::vector<json> chunks = sse_chunks(sse);
  ASSERT_GE(chunks.size(), 5u);
  std::vector<std::string> texts(2);
  std::vector<int> roles(2), finishes(2), lp(2);
  for (const json& c : chunks) {
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (c["choices"].empty()) continue;  // the usage chunk
    const json& ch = c["choices"][0];
    const int i = ch["index"];
    const json& delta = ch["delta"];
    if (delta.contains("role")) {
      EXPECT_EQ(texts[i], "") << "the role comes first";
      EXPECT_EQ(delta["role"], "assistant");
      ++roles[i];
    }
    if (delta.contains("content")) texts[i] += delta["content"].get<std::string>();
    if (!ch["finish_reason"].is_null()) {
      EXPECT_EQ(delta, json::object());
      EXPECT_EQ(ch["finish_reason"], "length");
      ++finishes[i];
    } else {
      EXPECT_EQ(finishes[i], 0) << "nothing after the finish reason";
    }
    if (ch["logprobs"].is_object()) lp[i] += int(ch["logprobs"]["content"].size());
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(roles[i], 1);
    EXPECT_EQ(finishes[i], 1);
    EXPECT_EQ(texts[i], text);
    EXPECT_EQ(lp[i], 3);
  }
  EXPECT_EQ(chunks.back()["choices"], json::array());
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], 6);
  EXPECT_NE(sse.find("data: [DONE]\n\n"), std::string::npos);
}

}  // namespace
}  // namespace flashserve

namespace flashserve {
namespace {

// Mistral's [TOOL_CALLS] is a special token that decodes to nothing: the choice keeps its text so
// the parser sees the call, and streamed tool_calls deltas join to the whole message.
class MarkerPieceTokenizer : public testing::FakeTokenizer {
 public:
  std::string piece(int32_t id) const override {
    return id == 1 ? "[TOOL_CALLS]" : FakeTokenizer::piece(id);
  }
};

TEST_F(CompletionTest, ChatToolCallsFromASilentMarkerToken) {
  MarkerPieceTokenizer marker_tok;
  CompletionContext tctx{&engine, &marker_tok, &model, nullptr, std::chrono::milliseconds(1)};
  engine.tokens = {byte_id('O'), byte_id('k'), 1};
  for (char c : std::string(R"([{"name":"f","arguments":{"a":1}}])")) engine.tokens.push_back(byte_id(c));
  engine.finish = FinishReason::kStop;
  CompletionRequest r = request();
  r.format = ResponseFormat::kChat;
  r.tool_call_format = output_parsers::ToolCallFormat::kMistral;
  r.marker_ids = {1};
  Completion plain(tctx, r);
  ASSERT_FALSE(plain.start().has_value());
  RecordingConnection c1;
  CompletionResult res = plain.run(c1);
  ASSERT_EQ(res.status, 200);
  const json& choice = res.body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << res.body.dump();
  EXPECT_EQ(choice["message"]["content"], "Ok");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << res.body.dump();
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["function"]["name"], "f");
  EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()), json({{"a", 1}}));

  r.stream = true;
  Completion streaming(tctx, r);
  ASSERT_FALSE(streaming.start().has_value());
  RecordingConnection c2;
  ASSERT_TRUE(streaming.stream(c2));
  std::string content, name, arguments, finish;
  for (const json& chunk : sse_chunks(c2.written)) {
    const json& ch = chunk["choices"][0];
    if (ch["delta"].contains("content")) content += ch["delta"]["content"].get<std::string>();
    for (const json& t : ch["delta"].value("tool_calls", json::array())) {
      EXPECT_EQ(t["index"], 0);
      if (t.contains("id")) name = t["function"]["name"];
      arguments += t["function"]["arguments"].get<std::string>();
    }
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
  }
  EXPECT_EQ(content, "Ok");
  EXPECT_EQ(name, "f");
  EXPECT_EQ(arguments, call["function"]["arguments"].get<std::string>());
  EXPECT_EQ(finish, "tool_calls");
}

}  // namespace
}  // namespace flashserve

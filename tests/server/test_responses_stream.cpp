// /v1/responses output on a scripted fake engine (label unit): the typed SSE events in their
// documented order (reasoning, text, function calls, and harmony's channels as those items;
// completed, incomplete and failed ends),
// `event:` lines matching each payload's type, sequence numbers 0, 1, 2..., the deltas joining to
// each .done text, and the streamed final response agreeing with the non-streamed one.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/endpoints/responses_output.h"
#include "server/endpoints/responses_store.h"
#include "server/endpoints/responses_stream.h"
#include "tests/server/fake_engine.h"
#include "tests/server/fake_tokenizer.h"

namespace flashserve {
namespace {

using json = nlohmann::json;

struct Event {
  std::string type;
  json data;
};

class ResponsesStreamTest : public testing::FakeEngineTest {
 protected:
  ResponsesTurn turn{"resp_test", 5, "fake", json{{"store", true}}, json::array(), true};

  // A chat request whose output is `output`, one byte per token.
  CompletionRequest request(const std::string& output, FinishReason finish) {
    CompletionRequest r = testing::scripted_chat_request(engine, output, finish);
    r.include_usage = true;
    return r;
  }
  json whole(const CompletionRequest& r) {
    return response_from_chat(turn, testing::run_whole(ctx, r).body, tok);
  }
  // The events written, checked for framing and numbering; *final: the last one's response.
  std::vector<Event> streamed(CompletionRequest r, json* final = nullptr) {
    r.stream = true;
    Completion c(ctx, r);
    EXPECT_FALSE(c.start().has_value());
    testing::RecordingConnection conn;
    ResponsesEventWriter writer(conn, turn, tok);
    EXPECT_TRUE(c.stream(writer));
    std::vector<Event> events;
    size_t pos = 0;
    while (pos < conn.written.size()) {
      const size_t end = conn.written.find("\n\n", pos);
      EXPECT_NE(end, std::string::npos);
      if (end == std::string::npos) break;
      const std::string block = conn.written.substr(pos, end - pos);
      pos = end + 2;
      const size_t nl = block.find('\n');
      EXPECT_EQ(block.rfind("event: ", 0), 0u) << block;
      EXPECT_EQ(block.compare(nl + 1, 6, "data: "), 0) << block;
      Event e{block.substr(7, nl - 7), json::parse(block.substr(nl + 7))};
      EXPECT_EQ(e.data["type"], e.type);
      EXPECT_EQ(e.data["sequence_number"], events.size());
      events.push_back(std::move(e));
    }
    EXPECT_FALSE(conn.written.find("[DONE]") != std::string::npos);  // Responses has no [DONE]
    if (final) *final = writer.response();
    return events;
  }
  // The event types with each run of one delta type written once.
  static std::vector<std::string> shape(const std::vector<Event>& events) {
    std::vector<std::string> out;
    for (const Event& e : events) {
      const bool delta = e.type.size() > 6 && e.type.compare(e.type.size() - 6, 6, ".delta") == 0;
      if (!(delta && !out.empty() && out.back() == e.type)) out.push_back(e.type);
    }
    return out;
  }
  // The joined deltas of `type` for item `item_id`.
  static std::string joined(const std::vector<Event>& events, const std::string& type,
                            const json& item_id) {
    std::string s;
    for (const Event& e : events) {
      if (e.type == type && e.data["item_id"] == item_id) s += e.data["delta"].get<std::string>();
    }
    return s;
  }
  // The output without its random ids, to compare a streamed and a whole response.
  static json without_ids(json output) {
    for (json& item : output) item.erase("id");
    return output;
  }
};

TEST_F(ResponsesStreamTest, ReasoningThenTextInTheDocumentedOrder) {
  const CompletionRequest r = request("<think>Why? Because.</think>The answer.", FinishReason::kStop);
  json final;
  const std::vector<Event> events = streamed(r, &final);
  const std::vector<std::string> expected = {
      "response.created", "response.in_progress",
      "response.output_item.added", "response.content_part.added",
      "response.reasoning_text.delta", "response.reasoning_text.done",
      "response.content_part.done", "response.output_item.done",
      "response.output_item.added", "response.content_part.added",
      "response.output_text.delta", "response.output_text.done",
      "response.content_part.done", "response.output_item.done",
      "response.completed"};
  EXPECT_EQ(shape(events), expected);
  EXPECT_EQ(events[0].data["response"]["status"], "in_progress");
  EXPECT_EQ(events[0].data["response"]["id"], "resp_test");
  EXPECT_EQ(events[0].data["response"]["output"], json::array());
  EXPECT_EQ(events[2].data["item"]["type"], "reasoning");
  EXPECT_EQ(events[2].data["output_index"], 0);
  const json rs_id = events[2].data["item"]["id"];
  EXPECT_EQ(joined(events, "response.reasoning_text.delta", rs_id), "Why? Because.");
  const Event* text_done = nullptr;
  for (const Event& e : events) {
    if (e.type == "response.output_text.done") text_done = &e;
  }
  ASSERT_NE(text_done, nullptr);
  EXPECT_EQ(text_done->data["output_index"], 1);
  EXPECT_EQ(joined(events, "response.output_text.delta", text_done->data["item_id"]),
            "The answer.");
  EXPECT_EQ(text_done->data["text"], "The answer.");
  // The last event's response is the whole response's, ids aside.
  EXPECT_EQ(events.back().data["response"], final);
  EXPECT_EQ(final["status"], "completed");
  const json plain = whole(r);
  EXPECT_EQ(without_ids(final["output"]), without_ids(plain["output"]));
  EXPECT_EQ(final["usage"], plain["usage"]);
  EXPECT_EQ(final["usage"]["input_tokens"], 2);
  EXPECT_EQ(final["usage"]["output_tokens"], int(engine.tokens.size()));
  EXPECT_EQ(final["usage"]["output_tokens_details"]["reasoning_tokens"], 13);  // byte tokens
  EXPECT_EQ(final["output"][1]["content"][0]["text"], "The answer.");
}

TEST_F(ResponsesStreamTest, HarmonyChannelsBecomeReasoningCallAndNoText) {
  // gpt-oss: its analysis channel is a reasoning item, its call a function_call item.
  CompletionRequest r = request(
      "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>"
      "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}",
      FinishReason::kStop);
  r.reasoning = false;
  r.harmony = true;
  r.harmony_functions = {"get_weather"};
  json final;
  const std::vector<Event> events = streamed(r, &final);
  const std::vector<std::string> expected = {
      "response.created", "response.in_progress",
      "response.output_item.added", "response.content_part.added",
      "response.reasoning_text.delta", "response.reasoning_text.done",
      "response.content_part.done", "response.output_item.done",
      "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.done", "response.output_item.done",
      "response.completed"};
  EXPECT_EQ(shape(events), expected);
  ASSERT_EQ(final["output"].size(), 2u) << final.dump();
  EXPECT_EQ(final["output"][0]["type"], "reasoning");
  EXPECT_EQ(final["output"][0]["content"][0]["text"], "Need the weather.");
  EXPECT_EQ(final["output"][1]["type"], "function_call");
  EXPECT_EQ(final["output"][1]["name"], "get_weather");
  EXPECT_EQ(final["output"][1]["arguments"], "{\"city\":\"Oslo\"}");
  json streamed_output = without_ids(final["output"]), whole_output = without_ids(whole(r)["output"]);
  streamed_output[1].erase("call_id");  // drawn per run
  whole_output[1].erase("call_id");
  EXPECT_EQ(streamed_output, whole_output);
}

TEST_F(ResponsesStreamTest, CutShortIsIncomplete) {
  const CompletionRequest r = request("Once upon", FinishReason::kLength);
  json final;
  const std::vector<Event> events = streamed(r, &final);
  EXPECT_EQ(events.back().type, "response.incomplete");
  EXPECT_EQ(final["status"], "incomplete");
  EXPECT_EQ(final["incomplete_details"], json::parse(R"({"reason":"max_output_tokens"})"));
  EXPECT_EQ(final["output"][0]["status"], "incomplete");
  EXPECT_EQ(without_ids(final["output"]), without_ids(whole(r)["output"]));
  EXPECT_EQ(whole(r)["status"], "incomplete");
}

TEST_F(ResponsesStreamTest, FunctionCallsHaveTheirOwnEvents) {
  CompletionRequest r = request(
      "<tool_call>{\"name\": \"weather\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>",
      FinishReason::kStop);
  r.tool_call_format = output_parsers::ToolCallFormat::kHermes;
  json final;
  const std::vector<Event> events = streamed(r, &final);
  const std::vector<std::string> expected = {
      "response.created", "response.in_progress", "response.output_item.added",
      "response.function_call_arguments.delta", "response.function_call_arguments.done",
      "response.output_item.done", "response.completed"};
  EXPECT_EQ(shape(events), expected);
  const json& added = events[2].data["item"];
  EXPECT_EQ(added["type"], "function_call");
  EXPECT_EQ(added["name"], "weather");
  EXPECT_EQ(added["status"], "in_progress");
  EXPECT_EQ(added["call_id"].get<std::string>().rfind("call_", 0), 0u);
  const std::string args = joined(events, "response.function_call_arguments.delta", added["id"]);
  EXPECT_EQ(json::parse(args), json::parse(R"({"city":"Oslo"})"));
  EXPECT_EQ(events[events.size() - 3].data["arguments"], args);
  EXPECT_EQ(events[events.size() - 3].data["name"], "weather");
  ASSERT_EQ(final["output"].size(), 1u);  // no empty message beside a call
  EXPECT_EQ(final["output"][0]["arguments"], args);
  EXPECT_EQ(final["output"][0]["status"], "completed");
  const json plain = whole(r);
  ASSERT_EQ(plain["output"].size(), 1u);
  EXPECT_EQ(plain["output"][0]["type"], "function_call");
  EXPECT_EQ(plain["output"][0]["name"], "weather");
  EXPECT_EQ(json::parse(plain["output"][0]["arguments"].get<std::string>()),
            json::parse(args));
  EXPECT_EQ(plain["output"][0]["id"].get<std::string>().rfind("fc_", 0), 0u);
}

// max_tokens cuts a call inside its end marker ("</to" of "</tool_call>", one token a byte):
// the partial marker is not content in the chat message, its stream, or a Responses item.
TEST_F(ResponsesStreamTest, CallCutInsideItsEndMarkerLeavesNoContent) {
  CompletionRequest r = request(
      "<tool_call>{\"name\": \"weather\", \"arguments\": {\"city\": \"Oslo\"}}</to",
      FinishReason::kLength);
  r.tool_call_format = output_parsers::ToolCallFormat::kHermes;
  const json chat = testing::run_whole(ctx, r).body;
  const json& message = chat["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null()) << message.dump();
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "weather");

  CompletionRequest s = r;
  s.stream = true;
  Completion c(ctx, s);
  ASSERT_FALSE(c.start().has_value());
  testing::RecordingConnection conn;
  EXPECT_TRUE(c.stream(conn));
  int call_chunks = 0;
  for (const json& chunk : testing::sse_chunks(conn.written)) {
    for (const json& choice : chunk.value("choices", json::array())) {
      const json& delta = choice["delta"];
      if (delta.contains("content")) EXPECT_EQ(delta["content"], "") << chunk.dump();
      call_chunks += delta.contains("tool_calls");
    }
  }
  EXPECT_GT(call_chunks, 0);

  json final;
  const std::vector<Event> events = streamed(r, &final);
  for (const json& output : {final["output"], whole(r)["output"]}) {
    ASSERT_EQ(output.size(), 1u) << output.dump();
    EXPECT_EQ(output[0]["type"], "function_call");
    EXPECT_EQ(json::parse(output[0]["arguments"].get<std::string>()),
              json::parse(R"({"city":"Oslo"})"));
  }
  for (const Event& e : events) EXPECT_NE(e.type, "response.output_text.delta");
}

TEST_F(ResponsesStreamTest, EmptyOutputIsAnEmptyMessage) {
  const CompletionRequest r = request("", FinishReason::kStop);
  json final;
  const std::vector<Event> events = streamed(r, &final);
  const std::vector<std::string> expected = {
      "response.created", "response.in_progress", "response.output_item.added",
      "response.content_part.added", "response.output_text.done", "response.content_part.done",
      "response.output_item.done", "response.completed"};
  EXPECT_EQ(shape(events), expected);
  EXPECT_EQ(without_ids(final["output"]), without_ids(whole(r)["output"]));
  EXPECT_EQ(final["output"][0]["content"][0]["text"], "");
}

TEST_F(ResponsesStreamTest, EngineFailureEndsWithResponseFailed) {
  CompletionRequest r = request("abc", FinishReason::kError);
  engine.error = "device lost";
  json final;
  const std::vector<Event> events = streamed(r, &final);
  EXPECT_EQ(events.back().type, "response.failed");
  EXPECT_EQ(final["status"], "failed");
  EXPECT_EQ(final["error"]["code"], "engine_error");
  EXPECT_NE(final["error"]["message"].get<std::string>().find("device lost"), std::string::npos);
  ResponsesStore store;
  keep_response(store, turn, final);  // a failed response is not kept
  EXPECT_EQ(store.size(), 0u);
  keep_response(store, turn, whole(request("ok", FinishReason::kStop)));
  EXPECT_TRUE(store.get("resp_test"));
  turn.store = false;
  ResponsesStore other;
  keep_response(other, turn, whole(request("ok", FinishReason::kStop)));
  EXPECT_EQ(other.size(), 0u);
}

TEST_F(ResponsesStreamTest, ResponseObjectShape) {
  turn.request_fields = {{"instructions", "i"}, {"store", true}};
  const json plain = whole(request("Hi", FinishReason::kStop));
  EXPECT_EQ(plain["object"], "response");
  EXPECT_EQ(plain["id"], "resp_test");
  EXPECT_EQ(plain["created_at"], 5);
  EXPECT_EQ(plain["model"], "fake");
  EXPECT_EQ(plain["error"], nullptr);
  EXPECT_EQ(plain["incomplete_details"], nullptr);
  EXPECT_EQ(plain["instructions"], "i");
  const json& m = plain["output"][0];
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["status"], "completed");
  EXPECT_EQ(m["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(m["content"], json::parse(
      R"([{"type":"output_text","text":"Hi","annotations":[],"logprobs":[]}])"));
  EXPECT_EQ(plain["usage"], json::parse(R"({"input_tokens":2,"input_tokens_details":
      {"cached_tokens":0},"output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},
      "total_tokens":4})"));
  EXPECT_EQ(deleted_response_json("resp_x"),
            json::parse(R"({"id":"resp_x","object":"response","deleted":true})"));
}

}  // namespace
}  // namespace flashserve

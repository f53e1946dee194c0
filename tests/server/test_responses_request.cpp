// /v1/responses request reading (label unit): input as a string and as items (message parts,
// function_call and function_call_output, reasoning dropped) into the chat prompt; the fields'
// translation (max_output_tokens, sampling, text.format, function tools, tool_choice,
// reasoning.effort); previous_response_id from the store; what is refused and the name each
// error gives; the echoed request fields; and the unknown-field policy on every endpoint.
// Fake byte-level tokenizer and the built-in ChatML template; no engine.
#include <gtest/gtest.h>

#include <memory>

#include "chat_template/chat_template.h"
#include "server/api/openai_api.h"
#include "server/endpoints/chat_request.h"
#include "server/endpoints/completions_request.h"
#include "server/endpoints/responses_request.h"
#include "server/endpoints/responses_store.h"
#include "tests/server/api_result.h"
#include "tests/server/fake_tokenizer.h"

namespace flashserve {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

class ResponsesRequestTest : public ::testing::Test {
 protected:
  testing::FakeTokenizer tok;
  ServedModel model = testing::chatml_test_model();
  ResponsesStore store;

  ResponsesRequest ok(const json& body) {
    auto r = parse_responses_request(body.dump(), model, tok, store);
    if (auto* e = std::get_if<ApiError>(&r)) {
      ADD_FAILURE() << body.dump() << " -> " << e->status << " " << e->message;
      return {};
    }
    return std::get<ResponsesRequest>(r);
  }
  ApiError err(const json& body) {
    auto r = parse_responses_request(body.dump(), model, tok, store);
    if (auto* e = std::get_if<ApiError>(&r)) return *e;
    ADD_FAILURE() << body.dump() << " was accepted";
    return {};
  }
  std::string prompt(const json& body) { return tok.decode(ok(body).chat.prompts.at(0)); }
  // The translation alone; from the body's text, so that its key order is kept.
  ojson chat_body(const std::string& text) {
    return responses_to_chat(ojson::parse(text), ojson::array(), model).chat_body;
  }
  ojson chat_body(const json& body) { return chat_body(body.dump()); }
};

TEST_F(ResponsesRequestTest, StringInputAndInstructions) {
  ResponsesRequest r = ok({{"input", "hi"}, {"instructions", "be brief"}, {"model", "stories"}});
  EXPECT_EQ(r.chat.format, ResponseFormat::kChat);
  EXPECT_FALSE(r.chat.stream);
  const std::string p = tok.decode(r.chat.prompts.at(0));
  EXPECT_NE(p.find("<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>"),
            std::string::npos) << p;
  EXPECT_EQ(r.chat.max_tokens, 512 - int(r.chat.prompts[0].size()));  // the rest of the context
  EXPECT_EQ(r.turn.id.rfind("resp_", 0), 0u);
  EXPECT_EQ(r.turn.id.size(), 5u + 32u);
  EXPECT_EQ(r.turn.model, "stories");
  EXPECT_GT(r.turn.created_at, 1700000000);
  EXPECT_TRUE(r.turn.store);
  // The input is kept as items (the instructions are not: they do not carry over).
  EXPECT_EQ(r.turn.input_items, json::parse(R"([{"role":"user","content":"hi"}])"));
}

TEST_F(ResponsesRequestTest, ItemsBecomeMessages) {
  const json input = json::parse(R"([
    {"type":"message","role":"developer","content":"rules"},
    {"role":"user","content":[{"type":"input_text","text":"one "},{"type":"input_text","text":"two"}]},
    {"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"hm"}]},
    {"type":"message","id":"msg_1","status":"completed","role":"assistant",
     "content":[{"type":"output_text","text":"calling","annotations":[],"logprobs":[]}]},
    {"type":"function_call","id":"fc_1","call_id":"call_1","name":"f","arguments":"{\"a\":1}","status":"completed"},
    {"type":"function_call","call_id":"call_2","name":"g","arguments":"{}"},
    {"type":"function_call_output","call_id":"call_1","output":"42"},
    {"type":"function_call_output","call_id":"call_2","output":[{"type":"input_text","text":"7"}]}
  ])");
  const ojson messages = chat_body({{"input", input}})["messages"];
  const ojson expected = ojson::parse(R"([
    {"role":"developer","content":"rules"},
    {"role":"user","content":"one two"},
    {"role":"assistant","reasoning_content":"hm","content":"calling","tool_calls":[
      {"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},
      {"id":"call_2","type":"function","function":{"name":"g","arguments":"{}"}}]},
    {"role":"tool","tool_call_id":"call_1","content":"42"},
    {"role":"tool","tool_call_id":"call_2","content":"7"}])");
  EXPECT_EQ(messages, expected) << messages.dump(1);
  const std::string p = prompt({{"input", input}});  // and the chat parser takes it
  EXPECT_NE(p.find("one two"), std::string::npos) << p;
  EXPECT_EQ(p.find("hm"), std::string::npos) << p;  // reasoning: this template drops it
  // A function call with no assistant text before it is an assistant turn of its own.
  const ojson alone = chat_body({{"input", json::parse(R"([{"role":"user","content":"x"},
      {"type":"function_call","call_id":"c","name":"f","arguments":"{}"}])")}})["messages"];
  EXPECT_EQ(alone[1], ojson::parse(R"({"role":"assistant","tool_calls":[
      {"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]})"));
}

TEST_F(ResponsesRequestTest, FieldsAreTranslated) {
  const std::string body = R"({"input":"x","max_output_tokens":9,"temperature":0.25,
      "top_p":0.5,"top_k":3,"seed":11,"stream":true,"user":"u","reasoning":{"effort":"low"},
      "text":{"format":{"type":"json_schema","name":"pet","schema":{"type":"object",
      "properties":{"z":{"type":"string"},"a":{"type":"number"}}},"strict":true}},
      "tools":[{"type":"function","name":"f","description":"d","parameters":{"type":"object"},
      "strict":false}],"tool_choice":{"type":"function","name":"f"},"parallel_tool_calls":false})";
  const ojson chat = chat_body(body);
  EXPECT_EQ(chat["max_completion_tokens"], 9);
  EXPECT_EQ(chat["temperature"], 0.25);
  EXPECT_EQ(chat["top_k"], 3);
  EXPECT_EQ(chat["seed"], 11);
  EXPECT_EQ(chat["stream"], true);
  EXPECT_EQ(chat["stream_options"], ojson::parse(R"({"include_usage":true})"));
  EXPECT_EQ(chat["reasoning_effort"], "low");
  const ojson& rf = chat["response_format"];
  EXPECT_EQ(rf["type"], "json_schema");
  EXPECT_EQ(rf["json_schema"]["name"], "pet");
  EXPECT_EQ(rf["json_schema"]["strict"], true);
  // Property order survives (a schema's order is the order the output writes them in).
  EXPECT_EQ(rf["json_schema"]["schema"]["properties"].begin().key(), "z");
  EXPECT_EQ(chat["tools"], ojson::parse(R"([{"type":"function","function":{"name":"f",
      "description":"d","parameters":{"type":"object"},"strict":false}}])"));
  EXPECT_EQ(chat["tool_choice"], ojson::parse(R"({"type":"function","function":{"name":"f"}})"));
  EXPECT_EQ(chat["parallel_tool_calls"], false);
  EXPECT_EQ(chat_body({{"input", "x"}, {"text", {{"format", {{"type", "json_object"}}}}}})
                ["response_format"], ojson::parse(R"({"type":"json_object"})"));

  // Through the chat parser (this model has no grammar compiler, so no schema or tools here).
  ResponsesRequest r = ok(json::parse(R"({"input":"x","max_output_tokens":9,"temperature":0.25,
      "top_p":0.5,"stream":true,"text":{"format":{"type":"text"}},"tool_choice":"none"})"));
  EXPECT_EQ(r.chat.max_tokens, 9);
  EXPECT_FLOAT_EQ(r.chat.sampling.temperature, 0.25f);
  EXPECT_FLOAT_EQ(r.chat.sampling.top_p, 0.5f);
  EXPECT_TRUE(r.chat.stream);
  EXPECT_TRUE(r.chat.include_usage);
  EXPECT_FALSE(r.chat.constraint.has_value());
}

TEST_F(ResponsesRequestTest, EchoedFields) {
  model.sampling_defaults.temperature = 0.7f;
  json f = ok({{"input", "x"}}).turn.request_fields;
  EXPECT_EQ(f["instructions"], nullptr);
  EXPECT_EQ(f["max_output_tokens"], nullptr);
  EXPECT_EQ(f["temperature"], 0.7);  // the default, as written rather than as a float
  EXPECT_EQ(f["tools"], json::array());
  EXPECT_EQ(f["tool_choice"], "auto");
  EXPECT_EQ(f["text"], json::parse(R"({"format":{"type":"text"}})"));
  EXPECT_EQ(f["parallel_tool_calls"], true);
  EXPECT_EQ(f["previous_response_id"], nullptr);
  EXPECT_EQ(f["metadata"], json::object());
  EXPECT_EQ(f["store"], true);
  f = ok(json::parse(R"({"input":"x","instructions":"i","max_output_tokens":5,"temperature":1,
      "metadata":{"k":"v"},"store":false,"reasoning":{"effort":"high"}})")).turn.request_fields;
  EXPECT_EQ(f["instructions"], "i");
  EXPECT_EQ(f["max_output_tokens"], 5);
  EXPECT_EQ(f["temperature"], 1);
  EXPECT_EQ(f["metadata"], json::parse(R"({"k":"v"})"));
  EXPECT_EQ(f["store"], false);
  EXPECT_EQ(f["reasoning"]["effort"], "high");
}

TEST_F(ResponsesRequestTest, PreviousResponseComesFirst) {
  const json output = json::parse(R"([{"type":"message","id":"msg_1","status":"completed",
      "role":"assistant","content":[{"type":"output_text","text":"Paris.","annotations":[],
      "logprobs":[]}]}])");
  store.put("resp_prev", {json{{"id", "resp_prev"}, {"output", output}},
                          json::parse(R"([{"role":"user","content":"Capital of France?"}])")});
  ResponsesRequest r = ok({{"input", "And Spain?"}, {"previous_response_id", "resp_prev"}});
  const std::string p = tok.decode(r.chat.prompts.at(0));
  const size_t q1 = p.find("Capital of France?"), a1 = p.find("Paris."), q2 = p.find("And Spain?");
  ASSERT_NE(q1, std::string::npos) << p;
  EXPECT_LT(q1, a1);
  EXPECT_LT(a1, q2);
  EXPECT_NE(q2, std::string::npos);
  // The stored conversation grows by the previous output and this input.
  ASSERT_EQ(r.turn.input_items.size(), 3u);
  EXPECT_EQ(r.turn.input_items[1], output[0]);
  EXPECT_EQ(r.turn.request_fields["previous_response_id"], "resp_prev");

  ApiError e = err({{"input", "x"}, {"previous_response_id", "resp_gone"}});
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "previous_response_id");
  EXPECT_EQ(e.code, "previous_response_not_found");
  EXPECT_NE(e.message.find("resp_gone"), std::string::npos);
  EXPECT_EQ(err({{"input", "x"}, {"previous_response_id", 3}}).param, "previous_response_id");
}

TEST_F(ResponsesRequestTest, UnsupportedItemsPartsAndToolsNameThemselves) {
  struct Case {
    json body;
    std::string param, code;
  };
  const json image = json::parse(R"({"type":"input_image","image_url":"http://x/y.png"})");
  const std::vector<Case> cases = {
      {{{"input", json::array({{{"role", "user"}, {"content", json::array({image})}}})}},
       "input[0].content[0]", "unsupported_content_type"},
      {{{"input", json::array({{{"type", "input_file"}, {"file_id", "f"}}})}}, "input[0]",
       "unsupported_item_type"},
      {{{"input", json::array({{{"type", "web_search_call"}, {"id", "ws"}}})}}, "input[0]",
       "unsupported_item_type"},
      {{{"input", json::array({{{"type", "computer_call"}, {"id", "c"}}})}}, "input[0]",
       "unsupported_item_type"},
      {{{"input", json::array({{{"type", "item_reference"}, {"id", "msg_1"}}})}}, "input[0]",
       "unsupported_item_type"},
      {{{"input", "x"}, {"tools", json::array({{{"type", "web_search"}}})}}, "tools[0]",
       "unsupported_tool_type"},
      {{{"input", "x"}, {"tools", json::array({{{"type", "file_search"}}})}}, "tools[0]",
       "unsupported_tool_type"},
      {{{"input", "x"}, {"tool_choice", {{"type", "web_search_preview"}}}}, "tool_choice",
       "unsupported_parameter"},
      {{{"input", "x"}, {"background", true}}, "background", "unsupported_parameter"},
      {{{"input", "x"}, {"truncation", "auto"}}, "truncation", "unsupported_parameter"},
      {{{"input", "x"}, {"include", {"message.output_text.logprobs"}}}, "include",
       "unsupported_parameter"},
      {{{"input", "x"}, {"max_tool_calls", 2}}, "max_tool_calls", "unsupported_parameter"},
      {{{"input", "x"}, {"top_logprobs", 2}}, "top_logprobs", "unsupported_parameter"},
      {{{"input", "x"}, {"conversation", "conv_1"}}, "conversation", "unsupported_parameter"},
      {{{"input", "x"}, {"text", {{"verbosity", "low"}}}}, "text.verbosity",
       "unsupported_parameter"},
      {{{"input", "x"}, {"frobnicate", 1}}, "frobnicate", "unknown_parameter"},
  };
  for (const auto& c : cases) {
    ApiError e = err(c.body);
    EXPECT_EQ(e.status, 400) << c.body.dump();
    EXPECT_EQ(e.param, c.param) << c.body.dump() << ": " << e.message;
    EXPECT_EQ(e.code, c.code) << c.body.dump() << ": " << e.message;
    EXPECT_FALSE(e.message.empty());
  }
  // The type named in the message, so the user knows what to take out.
  EXPECT_NE(err(cases[0].body).message.find("input_image"), std::string::npos);
  EXPECT_NE(err(cases[5].body).message.find("web_search"), std::string::npos);
}

TEST_F(ResponsesRequestTest, BadValuesNameTheResponsesField) {
  const std::vector<testing::BadBody> cases = {
      {json::object(), "input"},
      {{{"input", 3}}, "input"},
      {{{"input", json::array()}}, "input"},  // nothing to answer
      {{{"input", json::array({"hi"})}}, "input[0]"},
      {{{"input", json::array({{{"role", "tool"}, {"content", "x"}}})}}, "input[0].role"},
      {{{"input", json::array({{{"role", "user"}}})}}, "input[0].content"},
      {{{"input", json::array({{{"role", "user"}, {"content", "x"}, {"name", "n"}}})}},
       "input[0].name"},
      {{{"input", json::array({{{"type", "function_call"}, {"call_id", "c"}, {"name", "f"},
                                {"arguments", "{oops"}}})}}, "input[0].arguments"},
      {{{"input", json::array({{{"type", "function_call_output"}, {"output", "x"}}})}},
       "input[0].call_id"},
      {{{"input", "x"}, {"instructions", 1}}, "instructions"},
      {{{"input", "x"}, {"max_output_tokens", -1}}, "max_output_tokens"},
      {{{"input", "x"}, {"max_output_tokens", 600}}, "max_output_tokens"},  // past the context
      {{{"input", std::string(600, 'a')}}, "input"},
      {{{"input", "x"}, {"temperature", 3}}, "temperature"},
      {{{"input", "x"}, {"reasoning", {{"effort", "huge"}}}}, "reasoning.effort"},
      {{{"input", "x"}, {"reasoning", {{"budget", 1}}}}, "reasoning.budget"},
      {{{"input", "x"}, {"text", {{"format", {{"type", "xml"}}}}}}, "text.format.type"},
      {{{"input", "x"}, {"text", {{"format", {{"type", "json_object"}}}}}}, "text.format"},
      {{{"input", "x"}, {"tool_choice", "required"}}, "tool_choice"},  // no tools
      {{{"input", "x"}, {"store", "yes"}}, "store"},
      {{{"input", "x"}, {"metadata", "m"}}, "metadata"},
      {{{"input", "x"}, {"model", "gpt-4o"}}, "model"},
  };
  for (const auto& c : cases) {
    ApiError e = err(c.body);
    EXPECT_EQ(e.param, c.param) << c.body.dump() << ": " << e.message;
    EXPECT_EQ(e.message.find("messages"), std::string::npos) << e.message;
    EXPECT_EQ(e.message.find("response_format"), std::string::npos) << e.message;
    EXPECT_EQ(e.message.find("max_completion_tokens"), std::string::npos) << e.message;
  }
  EXPECT_EQ(err({{"input", "x"}, {"model", "gpt-4o"}}).status, 404);
}

// The policy for fields outside an endpoint's list, alike on every endpoint.
TEST_F(ResponsesRequestTest, UnknownFieldPolicyOnEveryEndpoint) {
  const json ignored = json::parse(R"({"store":true,"metadata":{"k":"v"},"service_tier":"auto",
      "prediction":{"type":"content","content":"x"},"safety_identifier":"s",
      "prompt_cache_key":"k","prompt_cache_retention":"24h","prompt_cache_options":{}})");
  auto chat = [&](json extra) {
    json b = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
    b.update(extra);
    return parse_chat_request(b.dump(), model, tok);
  };
  auto completion = [&](json extra) {
    json b = {{"prompt", "hi"}};
    b.update(extra);
    return parse_completion_request(b.dump(), model, tok);
  };
  auto responses = [&](json extra) {
    json b = {{"input", "hi"}};
    b.update(extra);
    auto r = parse_responses_request(b.dump(), model, tok, store);
    if (auto* e = std::get_if<ApiError>(&r)) return std::variant<int, ApiError>(*e);
    return std::variant<int, ApiError>(0);
  };
  EXPECT_FALSE(std::holds_alternative<ApiError>(chat(ignored)));
  EXPECT_FALSE(std::holds_alternative<ApiError>(completion(ignored)));
  EXPECT_FALSE(std::holds_alternative<ApiError>(responses(ignored)));
  EXPECT_FALSE(std::holds_alternative<ApiError>(responses(json::parse(
      R"({"user":"u","truncation":"disabled","background":false,"top_logprobs":0,
          "include":["reasoning.encrypted_content"],"stream_options":{"include_obfuscation":false},
          "reasoning":{"summary":"auto"}})"))));
  // Not an OpenAI field nor one of this server's: 400 naming it, on all three.
  for (const char* field : {"frobnicate", "temprature"}) {
    json extra = {{field, 1}};
    auto c = chat(extra), p = completion(extra);
    auto r = responses(extra);
    ASSERT_TRUE(std::holds_alternative<ApiError>(c));
    ASSERT_TRUE(std::holds_alternative<ApiError>(p));
    ASSERT_TRUE(std::holds_alternative<ApiError>(r));
    for (const ApiError& e : {std::get<ApiError>(c), std::get<ApiError>(p), std::get<ApiError>(r)}) {
      EXPECT_EQ(e.param, field);
      EXPECT_EQ(e.code, "unknown_parameter");
    }
  }
  // reasoning.effort past high (openai-node's xhigh and max) reads as high.
  for (const char* effort : {"xhigh", "max"}) {
    EXPECT_FALSE(std::holds_alternative<ApiError>(responses({{"reasoning", {{"effort", effort}}}})))
        << effort;
    EXPECT_FALSE(std::holds_alternative<ApiError>(chat({{"reasoning_effort", effort}}))) << effort;
  }
  EXPECT_TRUE(std::holds_alternative<ApiError>(responses({{"reasoning", {{"effort", "extreme"}}}})));
  // OpenAI fields that would change the chat output and cannot be honoured.
  for (const char* field : {"web_search_options", "verbosity", "audio"}) {
    auto c = chat({{field, "low"}});
    ASSERT_TRUE(std::holds_alternative<ApiError>(c)) << field;
    EXPECT_EQ(std::get<ApiError>(c).param, field);
    EXPECT_EQ(std::get<ApiError>(c).code, "unsupported_parameter");
  }
}

}  // namespace
}  // namespace flashserve

// /v1/chat/completions at the API edge (label unit): the request parser (every field, content
// parts, roles, what is refused and the param each error names, the missing-template how-to,
// generation_config defaults, max_tokens / max_completion_tokens) and the chat response builders
// (chat.completion, chunk deltas, logprobs content[] with bytes). Fake byte-level tokenizer and the
// built-in ChatML template; no engine.
#include <gtest/gtest.h>

#include <memory>

#include "chat_template/chat_template.h"
#include "server/api/openai_api.h"
#include "server/endpoints/chat_request.h"
#include "server/endpoints/completions_request.h"
#include "tests/server/api_result.h"
#include "tests/server/fake_tokenizer.h"
#include "tests/server/shared_request_fields.h"

namespace flashserve {
namespace {

using json = nlohmann::json;

class OpenAiChat : public ::testing::Test {
 protected:
  testing::FakeTokenizer tok;
  ServedModel model = testing::chatml_test_model();

  CompletionRequest ok(const json& body) {
    auto r = parse_chat_request(body.dump(), model, tok);
    if (auto* e = std::get_if<ApiError>(&r)) {
      ADD_FAILURE() << body.dump() << " -> " << e->status << " " << e->message;
      return {};
    }
    return std::get<CompletionRequest>(r);
  }
  ApiError err(const json& body) {
    auto r = parse_chat_request(body.dump(), model, tok);
    if (auto* e = std::get_if<ApiError>(&r)) return *e;
    ADD_FAILURE() << body.dump() << " was accepted";
    return {};
  }
  std::string prompt_text(const CompletionRequest& r) { return tok.decode(r.prompts.at(0)); }
  static json user(const json& content) {
    return json{{"messages", json::array({{{"role", "user"}, {"content", content}}})}};
  }
};

TEST_F(OpenAiChat, DefaultsRenderTheTemplateWithoutAddingBos) {
  CompletionRequest r = ok(user("hi"));
  EXPECT_EQ(r.format, ResponseFormat::kChat);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_NE(r.prompts[0].front(), tok.bos_id());  // ChatML writes no <s>; none is added
  const std::string p = prompt_text(r);
  EXPECT_NE(p.find("<|im_start|>user\nhi<|im_end|>"), std::string::npos) << p;
  EXPECT_EQ(p.substr(p.size() - std::string("<|im_start|>assistant\n").size()),
            "<|im_start|>assistant\n");
  // No max_tokens: the rest of the context.
  EXPECT_EQ(r.max_tokens, 512 - int(r.prompts[0].size()));
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_FALSE(r.echo);
}

TEST_F(OpenAiChat, EveryFieldIsRead) {
  json body = user("x");
  body.update(testing::shared_request_fields());
  body.update(json::parse(R"({"model":"stories","max_completion_tokens":5,"seed":3,
      "logit_bias":{"5":-100},"logprobs":true,"top_logprobs":20,"user":"u1",
      "response_format":{"type":"text"}})"));
  CompletionRequest r = ok(body);
  testing::expect_shared_request_fields(r);
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_TRUE(r.has_seed);
  EXPECT_EQ(r.sampling.seed, 3u);
  EXPECT_EQ(r.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(r.logprobs, 20);
  EXPECT_EQ(r.sampling.logprobs, 20);
  EXPECT_EQ(r.user, "u1");
  // max_tokens (the older name) works too; logprobs alone means the chosen token only.
  body = user("x");
  body["max_tokens"] = 7;
  body["logprobs"] = true;
  r = ok(body);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.logprobs, 0);
}

TEST_F(OpenAiChat, ContentPartsRolesAndNames) {
  json body = {{"messages", json::array({
                   {{"role", "developer"}, {"content", "be brief"}},
                   {{"role", "user"}, {"name", "ann"},
                    {"content", json::array({{{"type", "text"}, {"text", "one "}},
                                             {{"type", "text"}, {"text", "two"}}})}},
                   {{"role", "assistant"}, {"content", nullptr}},
                   {{"role", "user"}, {"content", "three"}}})}};
  const std::string p = prompt_text(ok(body));
  EXPECT_NE(p.find("<|im_start|>system\nbe brief"), std::string::npos) << p;  // developer
  EXPECT_NE(p.find("one two"), std::string::npos) << p;                        // parts joined
  EXPECT_NE(p.find("three"), std::string::npos) << p;
}

TEST_F(OpenAiChat, BadMessagesNameTheField) {
  const std::vector<testing::BadBody> cases = {
      {json::object(), "messages"},
      {json{{"messages", json::array()}}, "messages"},
      {json{{"messages", "hi"}}, "messages"},
      {json{{"messages", json::array({"hi"})}}, "messages[0]"},
      {json{{"messages", json::array({{{"content", "hi"}}})}}, "messages[0].role"},
      {json{{"messages", json::array({{{"role", "tool"}, {"content", "x"}}})}},
       "messages[0].tool_call_id"},
      {json{{"messages", json::array({{{"role", "wizard"}, {"content", "x"}}})}}, "messages[0].role"},
      {json{{"messages", json::array({{{"role", "user"}}})}}, "messages[0].content"},
      {user(42), "messages[0].content"},
      {user(json::array({{{"type", "image_url"}, {"image_url", {{"url", "http://x/y.png"}}}}})),
       "messages[0].content[0]"},
      {user(json::array({{{"type", "text"}}})), "messages[0].content[0].text"},
      {user(json::array({"plain"})), "messages[0].content[0]"},
      {json{{"messages", json::array({{{"role", "user"}, {"content", "x"}, {"tool_calls", json::array()}}})}},
       "messages[0].tool_calls"},
      {json{{"messages", json::array({{{"role", "user"}, {"content", "x"}, {"name", 3}}})}},
       "messages[0].name"},
  };
  for (const auto& c : cases) {
    ApiError e = err(c.body);
    EXPECT_EQ(e.status, 400) << c.body.dump();
    EXPECT_EQ(e.param, c.param) << c.body.dump() << ": " << e.message;
    EXPECT_FALSE(e.message.empty());
  }
}

TEST_F(OpenAiChat, UnimplementedFieldsAreRefusedNotIgnored) {
  for (const char* field : {"functions", "function_call", "audio", "modalities"}) {
    json body = user("x");
    body[field] = json::array({1});
    ApiError e = err(body);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, field);
    EXPECT_EQ(e.code, "unsupported_parameter");
  }
  json body = user("x");
  body["response_format"] = {{"type", "json_object"}};  // this model has no grammar compiler
  EXPECT_EQ(err(body).param, "response_format");
  body = user("x");
  body["frobnicate"] = true;  // any unknown field (OpenAI's output-neutral ones are accepted)
  EXPECT_EQ(err(body).param, "frobnicate");
  EXPECT_EQ(err(body).code, "unknown_parameter");
  body = user("x");
  body["echo"] = true;  // completions-only fields are unknown here
  EXPECT_EQ(err(body).param, "echo");
  body = user("x");
  body["top_logprobs"] = 2;  // without logprobs: true
  EXPECT_EQ(err(body).param, "top_logprobs");
  body["logprobs"] = true;
  body["top_logprobs"] = 21;
  EXPECT_EQ(err(body).param, "top_logprobs");
}

// null means the default for every optional field, and a value that changes nothing is that
// default: both are accepted and render the plain request's prompt. Other values stay refused.
TEST_F(OpenAiChat, NullAndNoOpValuesOfUnimplementedFieldsAreAccepted) {
  const CompletionRequest plain = ok(user("x"));
  const std::vector<std::pair<const char*, json>> no_ops = {
      {"audio", nullptr},
      {"functions", nullptr},
      {"function_call", nullptr},
      {"web_search_options", nullptr},
      {"modalities", nullptr},
      {"verbosity", nullptr},
      {"modalities", json::array({"text"})},
      {"verbosity", "medium"},
      {"functions", json::array()},
      {"function_call", "none"}};
  for (const auto& [field, value] : no_ops) {
    json body = user("x");
    body[field] = value;
    EXPECT_EQ(ok(body).prompts, plain.prompts) << body.dump();
  }
  const std::vector<std::pair<const char*, json>> refused = {
      {"modalities", json::array({"text", "audio"})},
      {"verbosity", "low"},
      {"function_call", "auto"},
      {"functions", json::array({{{"name", "f"}}})},
      {"web_search_options", json::object()},
      {"audio", {{"voice", "alloy"}}}};
  for (const auto& [field, value] : refused) {
    json body = user("x");
    body[field] = value;
    ApiError e = err(body);
    EXPECT_EQ(e.param, field) << body.dump();
    EXPECT_EQ(e.code, "unsupported_parameter") << body.dump();
  }
}

TEST_F(OpenAiChat, NoTemplateSaysHowToSetOne) {
  model.chat_template = nullptr;
  ApiError e = err(user("hi"));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "chat_template_missing");
  EXPECT_NE(e.message.find("--chat-template"), std::string::npos) << e.message;
}

TEST_F(OpenAiChat, ContextAndDefaults) {
  json body = user(std::string(600, 'a'));
  ApiError e = err(body);
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_EQ(e.param, "messages");
  body = user("hi");
  body["max_tokens"] = 600;
  EXPECT_EQ(err(body).param, "max_tokens");
  // A smaller KV cache bounds the default reply length too.
  model.kv_cache_tokens = 100;
  CompletionRequest r = ok(user("hi"));
  EXPECT_EQ(r.max_tokens, 100 - int(r.prompts[0].size()));
  // generation_config.json's defaults apply where the request is silent.
  model.sampling_defaults.temperature = 0.f;
  model.sampling_defaults.top_k = 5;
  r = ok(user("hi"));
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.f);
  EXPECT_EQ(r.sampling.top_k, 5);
  body = user("hi");
  body["temperature"] = 0.7;
  EXPECT_FLOAT_EQ(ok(body).sampling.temperature, 0.7f);
  // ... and for /v1/completions alike.
  auto c = parse_completion_request(R"({"prompt":"a"})", model, tok);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(c));
  EXPECT_EQ(std::get<CompletionRequest>(c).sampling.top_k, 5);
}

TEST_F(OpenAiChat, ResponseShapes) {
  json r = response_json(ResponseFormat::kChat, false, "chatcmpl-1", 5, "stories",
                         json::array({chat_choice_json(0, "hi", nullptr, "stop")}),
                         usage_json({3, 2}));
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"], json::parse(R"({"role":"assistant","content":"hi"})"));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["usage"]["total_tokens"], 5);
  json chunk = response_json(ResponseFormat::kChat, true, "chatcmpl-1", 5, "stories",
                             json::array({chat_delta_json(0, {{"content", "x"}}, nullptr, "")}),
                             nullptr);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["delta"]["content"], "x");
  EXPECT_EQ(chunk["choices"][0]["finish_reason"], nullptr);
  EXPECT_FALSE(chunk.contains("usage"));
  EXPECT_EQ(models_json(model)["data"][0]["chat_template"], true);
  model.chat_template = nullptr;
  EXPECT_EQ(models_json(model)["data"][0]["chat_template"], false);
}

TEST_F(OpenAiChat, LogprobsContentShape) {
  LogprobsAccumulator acc;
  acc.format = ResponseFormat::kChat;
  acc.add(tok, SampledToken{259, -0.5f, {{259, -0.5f}, {3 + 0xE2, -1.25f}}}, 0, true);
  acc.add(tok, SampledToken{3 + 'a', -2.f, {}}, 5, true);
  json j = acc.to_json();
  ASSERT_EQ(j["content"].size(), 2u);
  const json& e = j["content"][0];
  EXPECT_EQ(e["token"], " Once");
  EXPECT_DOUBLE_EQ(e["logprob"].get<double>(), -0.5);
  EXPECT_EQ(e["bytes"], json::parse("[32,79,110,99,101]"));
  ASSERT_EQ(e["top_logprobs"].size(), 2u);
  EXPECT_EQ(e["top_logprobs"][1]["bytes"], json::parse("[226]"));  // a lone UTF-8 lead byte
  EXPECT_EQ(e["top_logprobs"][1]["token"], "bytes:\\xe2");
  EXPECT_FALSE(e["top_logprobs"][0].contains("top_logprobs"));
  EXPECT_EQ(j["content"][1]["top_logprobs"], json::array());
  EXPECT_EQ(acc.part(1, 2)["content"].size(), 1u);  // a stream chunk's share
  EXPECT_EQ(acc.part(1, 2)["content"][0]["token"], "a");
}

}  // namespace
}  // namespace flashserve
